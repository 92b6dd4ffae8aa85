//go:build linux

package qemu

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// displayMonitor returns the monitor of a running VM that has a display.
func (d *Driver) displayMonitor(ctx context.Context, id string) (*vm, *monitor, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	if !v.spec.GetDisplay() {
		return nil, nil, driver.Errorf(driver.ErrState, "vm %s was created without a display", id)
	}
	mon, err := v.monitor(ctx)
	if err != nil {
		return nil, nil, err
	}
	return v, mon, nil
}

// Screenshot dumps the display to a PNG through QMP (QEMU 7.1+ writes PNG).
func (d *Driver) Screenshot(ctx context.Context, id string) (*pb.ScreenshotResponse, error) {
	v, mon, err := d.displayMonitor(ctx, id)
	if err != nil {
		return nil, err
	}
	data, w, h, err := v.screendump(ctx, mon)
	if err != nil {
		return nil, err
	}
	return &pb.ScreenshotResponse{Png: data, Width: int32(w), Height: int32(h)}, nil
}

// screendump has QEMU write the screen as PNG into the workspace and reads it back.
func (v *vm) screendump(ctx context.Context, mon *monitor) ([]byte, int, int, error) {
	path := filepath.Join(v.ws, "screendump-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".png")
	defer os.Remove(path)
	args := map[string]any{"filename": path, "format": "png"}
	if err := mon.run(ctx, "screendump", args, nil); err != nil {
		return nil, 0, 0, fmt.Errorf("screenshot of vm %s: %w", v.id, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("screenshot of vm %s: %w", v.id, err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("screenshot of vm %s: qemu wrote no valid PNG: %w", v.id, err)
	}
	return data, cfg.Width, cfg.Height, nil
}

// absMax is the top of QEMU's absolute pointer axis range (INPUT_EVENT_ABS_MAX).
const absMax = 0x7fff

// SendInput plays keyboard and pointer actions through QMP input-send-event.
func (d *Driver) SendInput(ctx context.Context, id string, actions []*pb.InputAction) error {
	v, mon, err := d.displayMonitor(ctx, id)
	if err != nil {
		return err
	}
	batches, pointer, err := inputEvents(actions)
	if err != nil {
		return driver.Errorf(driver.ErrInvalid, "input for vm %s: %v", id, err)
	}
	w, h := 0, 0
	if pointer {
		// Absolute pointer positions are fractions of the current screen.
		if _, w, h, err = v.screendump(ctx, mon); err != nil {
			return err
		}
	}
	for _, b := range batches {
		events := b.events
		if b.move != nil {
			events = append([]map[string]any{
				absEvent("x", scaleAbs(b.move[0], w)),
				absEvent("y", scaleAbs(b.move[1], h)),
			}, events...)
		}
		if err := mon.run(ctx, "input-send-event", map[string]any{"events": events}, nil); err != nil {
			return fmt.Errorf("input for vm %s: %w", id, err)
		}
	}
	return nil
}

// inputBatch is one input-send-event command: an optional pointer move (in
// screen pixels, scaled when sent) and then events.
type inputBatch struct {
	move   *[2]int
	events []map[string]any
}

// inputEvents turns actions into QMP event batches; pointer says whether any
// batch moves the pointer. An unknown key or button, or an action with none
// set, is an error naming it.
func inputEvents(actions []*pb.InputAction) ([]inputBatch, bool, error) {
	var out []inputBatch
	pointer := false
	for i, a := range actions {
		switch act := a.GetAction().(type) {
		case *pb.InputAction_Key:
			keys := act.Key.GetKeys()
			if len(keys) == 0 {
				return nil, false, fmt.Errorf("action %d: a key action needs keys", i)
			}
			codes := make([]string, len(keys))
			for j, k := range keys {
				c, ok := qcode(k)
				if !ok {
					return nil, false, fmt.Errorf("action %d: unknown key %q", i, k)
				}
				codes[j] = c
			}
			out = append(out, inputBatch{events: chord(codes)})
		case *pb.InputAction_Text:
			for _, r := range act.Text {
				c, shift, ok := charKey(r)
				if !ok {
					return nil, false, fmt.Errorf("action %d: cannot type %q on a US keyboard", i, r)
				}
				codes := []string{c}
				if shift {
					codes = []string{"shift", c}
				}
				out = append(out, inputBatch{events: chord(codes)})
			}
		case *pb.InputAction_Move:
			pointer = true
			out = append(out, inputBatch{move: &[2]int{int(act.Move.GetX()), int(act.Move.GetY())}})
		case *pb.InputAction_Click:
			// QEMU's button names are the contract's: left, right, middle.
			b := act.Click.GetButton()
			if b == pb.MouseButton_MOUSE_BUTTON_UNSPECIFIED {
				b = pb.MouseButton_MOUSE_BUTTON_LEFT
			}
			button := base.EnumName(b)
			if button == "" {
				return nil, false, fmt.Errorf("action %d: unknown button %v (left, right, middle)", i, b)
			}
			at := act.Click.GetAt()
			pointer = true
			out = append(out,
				inputBatch{move: &[2]int{int(at.GetX()), int(at.GetY())}, events: []map[string]any{btnEvent(button, true)}},
				inputBatch{events: []map[string]any{btnEvent(button, false)}})
		case *pb.InputAction_Scroll:
			button, n := "wheel-down", int(act.Scroll.GetDy())
			if n < 0 {
				button, n = "wheel-up", -n
			}
			for range n {
				out = append(out,
					inputBatch{events: []map[string]any{btnEvent(button, true)}},
					inputBatch{events: []map[string]any{btnEvent(button, false)}})
			}
		default:
			return nil, false, fmt.Errorf("action %d: no action set (key, text, move, click or scroll)", i)
		}
	}
	return out, pointer, nil
}

// chord presses keys in order and releases them in reverse.
func chord(codes []string) []map[string]any {
	ev := make([]map[string]any, 0, 2*len(codes))
	for _, c := range codes {
		ev = append(ev, keyEvent(c, true))
	}
	for i := len(codes) - 1; i >= 0; i-- {
		ev = append(ev, keyEvent(codes[i], false))
	}
	return ev
}

func keyEvent(code string, down bool) map[string]any {
	return map[string]any{"type": "key", "data": map[string]any{
		"down": down, "key": map[string]any{"type": "qcode", "data": code}}}
}

func btnEvent(button string, down bool) map[string]any {
	return map[string]any{"type": "btn", "data": map[string]any{"down": down, "button": button}}
}

func absEvent(axis string, value int) map[string]any {
	return map[string]any{"type": "abs", "data": map[string]any{"axis": axis, "value": value}}
}

// scaleAbs maps a pixel coordinate on a screen of size pixels to QEMU's axis.
func scaleAbs(px, size int) int {
	if size <= 1 || px <= 0 {
		return 0
	}
	if px >= size-1 {
		return absMax
	}
	return px * absMax / (size - 1)
}

// keyAliases maps the key names callers use to QEMU qcodes.
var keyAliases = map[string]string{
	"enter": "ret", "return": "ret", "ret": "ret",
	"ctrl": "ctrl", "control": "ctrl", "ctrl_r": "ctrl_r",
	"shift": "shift", "shift_r": "shift_r",
	"alt": "alt", "alt_r": "alt_r", "altgr": "alt_r", "option": "alt",
	"meta": "meta_l", "super": "meta_l", "win": "meta_l", "cmd": "meta_l", "command": "meta_l",
	"esc": "esc", "escape": "esc",
	"tab": "tab", "backspace": "backspace", "space": "spc", "spc": "spc",
	"delete": "delete", "del": "delete", "insert": "insert", "ins": "insert",
	"home": "home", "end": "end",
	"pageup": "pgup", "pgup": "pgup", "pagedown": "pgdn", "pgdn": "pgdn",
	"up": "up", "down": "down", "left": "left", "right": "right",
	"capslock": "caps_lock", "caps_lock": "caps_lock", "numlock": "num_lock", "scrolllock": "scroll_lock",
	"print": "print", "printscreen": "print", "pause": "pause", "menu": "menu",
	"minus": "minus", "equal": "equal", "comma": "comma", "dot": "dot", "period": "dot",
	"slash": "slash", "backslash": "backslash", "semicolon": "semicolon", "apostrophe": "apostrophe",
	"grave": "grave_accent", "bracket_left": "bracket_left", "bracket_right": "bracket_right",
}

// qcode returns the qcode of a key name ("a", "enter", "ctrl", "f5", ...).
func qcode(name string) (string, bool) {
	n := strings.ToLower(name)
	if c, ok := keyAliases[n]; ok {
		return c, true
	}
	if len(n) >= 2 && n[0] == 'f' {
		if k, err := strconv.Atoi(n[1:]); err == nil && k >= 1 && k <= 12 {
			return n, true
		}
	}
	if r := []rune(name); len(r) == 1 {
		// A single character names its key ("A" and "a" are the same key).
		if c, _, ok := charKey([]rune(n)[0]); ok {
			return c, true
		}
	}
	return "", false
}

// usKey is the key that types a character, and whether it needs shift.
type usKey struct {
	code  string
	shift bool
}

// usKeys maps the characters a US keyboard types to (qcode, shift).
var usKeys = func() map[rune]usKey {
	m := map[rune]usKey{}
	for c := 'a'; c <= 'z'; c++ {
		m[c] = usKey{string(c), false}
		m[c-'a'+'A'] = usKey{string(c), true}
	}
	plain := map[rune]string{
		'0': "0", '1': "1", '2': "2", '3': "3", '4': "4", '5': "5", '6': "6", '7': "7", '8': "8", '9': "9",
		' ': "spc", '\n': "ret", '\t': "tab", '-': "minus", '=': "equal", '[': "bracket_left", ']': "bracket_right",
		';': "semicolon", '\'': "apostrophe", '`': "grave_accent", '\\': "backslash", ',': "comma", '.': "dot", '/': "slash",
	}
	shifted := map[rune]string{
		')': "0", '!': "1", '@': "2", '#': "3", '$': "4", '%': "5", '^': "6", '&': "7", '*': "8", '(': "9",
		'_': "minus", '+': "equal", '{': "bracket_left", '}': "bracket_right", ':': "semicolon", '"': "apostrophe",
		'~': "grave_accent", '|': "backslash", '<': "comma", '>': "dot", '?': "slash",
	}
	for r, c := range plain {
		m[r] = usKey{c, false}
	}
	for r, c := range shifted {
		m[r] = usKey{c, true}
	}
	return m
}()

// charKey returns the key that types r and whether it needs shift.
func charKey(r rune) (code string, shift bool, ok bool) {
	k, ok := usKeys[r]
	return k.code, k.shift, ok
}
