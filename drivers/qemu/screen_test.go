//go:build linux

package qemu

import (
	"encoding/json"
	"strings"
	"testing"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

func TestQcodeMapsNamedKeys(t *testing.T) {
	cases := map[string]string{
		"a": "a", "A": "a", "z": "z", "0": "0", "enter": "ret", "Return": "ret", "ctrl": "ctrl", "shift": "shift",
		"alt": "alt", "esc": "esc", "escape": "esc", "tab": "tab", "backspace": "backspace", "space": "spc",
		"f1": "f1", "F12": "f12", "up": "up", "down": "down", "left": "left", "right": "right",
		"pageup": "pgup", "delete": "delete", "super": "meta_l", "-": "minus", "/": "slash",
	}
	for name, want := range cases {
		if got, ok := qcode(name); !ok || got != want {
			t.Errorf("qcode(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, bad := range []string{"", "f0", "f13", "no-such-key", "ctrl+c", "é", "fn"} {
		if got, ok := qcode(bad); ok {
			t.Errorf("qcode(%q) = %q, want unknown", bad, got)
		}
	}
}

func TestTextTypesCapitalsAndSymbolsWithShift(t *testing.T) {
	batches, pointer, err := inputEvents([]*pb.InputAction{{Action: &pb.InputAction_Text{Text: "Hi!"}}})
	if err != nil || pointer {
		t.Fatalf("inputEvents = %v, pointer %v", err, pointer)
	}
	got := make([]string, len(batches))
	for i, b := range batches {
		data, _ := json.Marshal(b.events)
		got[i] = string(data)
	}
	want := []string{
		chordJSON("shift", "h"), chordJSON("i"), chordJSON("shift", "1"),
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("batches\n got %v\nwant %v", got, want)
		}
	}
}

func chordJSON(codes ...string) string {
	data, _ := json.Marshal(chord(codes))
	return string(data)
}

func TestChordPressesInOrderAndReleasesInReverse(t *testing.T) {
	ev := chord([]string{"ctrl", "alt", "delete"})
	var order []string
	for _, e := range ev {
		d := e["data"].(map[string]any)
		k := d["key"].(map[string]any)["data"].(string)
		if d["down"].(bool) {
			order = append(order, "+"+k)
		} else {
			order = append(order, "-"+k)
		}
	}
	if got := strings.Join(order, " "); got != "+ctrl +alt +delete -delete -alt -ctrl" {
		t.Errorf("chord order %s", got)
	}
}

func TestInputEventsRefuseUnknownNamesNamingThem(t *testing.T) {
	cases := []struct {
		action  *pb.InputAction
		mention string
	}{
		{&pb.InputAction{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: []string{"ctrl", "no-such-key"}}}}, `"no-such-key"`},
		{&pb.InputAction{Action: &pb.InputAction_Key{Key: &pb.KeyChord{}}}, "needs keys"},
		{&pb.InputAction{Action: &pb.InputAction_Click{Click: &pb.Click{Button: 4}}}, "4"},
		{&pb.InputAction{Action: &pb.InputAction_Text{Text: "naïve"}}, `'ï'`},
		{&pb.InputAction{}, "no action"},
	}
	for _, c := range cases {
		_, _, err := inputEvents([]*pb.InputAction{c.action})
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("inputEvents(%v) = %v, want an error mentioning %s", c.action, err, c.mention)
		}
	}
}

func TestPointerActionsScaleToTheAbsoluteAxis(t *testing.T) {
	batches, pointer, err := inputEvents([]*pb.InputAction{
		{Action: &pb.InputAction_Click{Click: &pb.Click{Button: pb.MouseButton_MOUSE_BUTTON_RIGHT, At: &pb.Point{X: 5, Y: 6}}}},
		{Action: &pb.InputAction_Scroll{Scroll: &pb.Scroll{Dy: -2}}},
	})
	if err != nil || !pointer {
		t.Fatalf("inputEvents = %v, pointer %v", err, pointer)
	}
	if len(batches) != 6 || batches[0].move == nil || *batches[0].move != [2]int{5, 6} {
		t.Fatalf("batches = %+v", batches)
	}
	if b := batches[2].events[0]["data"].(map[string]any); b["button"] != "wheel-up" || b["down"] != true {
		t.Errorf("scroll up event = %v", b)
	}
	for _, c := range []struct{ px, size, want int }{{0, 640, 0}, {639, 640, absMax}, {320, 641, absMax / 2}, {-3, 640, 0}, {900, 640, absMax}, {5, 0, 0}} {
		if got := scaleAbs(c.px, c.size); got != c.want {
			t.Errorf("scaleAbs(%d, %d) = %d, want %d", c.px, c.size, got, c.want)
		}
	}
}
