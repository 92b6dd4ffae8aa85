package jsonapi

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEchoKeepsShortInputAndCutsLongInputAtACharacter(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"a name", "debian-13", "debian-13"},
		{"exactly MaxEcho", strings.Repeat("a", MaxEcho), strings.Repeat("a", MaxEcho)},
		{"one byte more", strings.Repeat("a", MaxEcho+1), strings.Repeat("a", MaxEcho) + "…"},
		{"a megabyte", strings.Repeat("x", 1<<20), strings.Repeat("x", MaxEcho) + "…"},
		// "é" is two bytes: the cut falls inside the 33rd, which is dropped whole.
		{"multi-byte at the cut", "a" + strings.Repeat("é", 40), "a" + strings.Repeat("é", 31) + "…"},
		{"invalid UTF-8 is cut where it is", strings.Repeat("\xff", 100), strings.Repeat("\xff", MaxEcho) + "…"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Echo(c.in)
			if got != c.want {
				t.Fatalf("Echo = %q, want %q", got, c.want)
			}
			if len(got) > MaxEcho+len("…") {
				t.Fatalf("Echo gave %d bytes", len(got))
			}
			if utf8.ValidString(c.in) && !utf8.ValidString(got) {
				t.Fatalf("Echo of valid UTF-8 is not: %q", got)
			}
		})
	}
}

func TestDecodeNamesAnUnknownOrMistypedFieldWithoutRepeatingItAtLength(t *testing.T) {
	long := strings.Repeat("k", 100_000)
	var dst struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	for _, body := range []string{
		`{"` + long + `": 1}`,
		`{"labels": {"` + long + `": 1}}`,
		`{"name": "ok", "` + long + `": "x"}`,
	} {
		e := Decode([]byte(body), &dst, "see the spec")
		if e == nil || e.Status != 400 {
			t.Fatalf("Decode = %v, want a 400", e)
		}
		if len(e.Msg) > 200 || len(e.Hint) > 200 {
			t.Fatalf("the message repeats the field at length (%d and %d bytes): %.300s", len(e.Msg), len(e.Hint), e.Msg)
		}
	}
	e := Decode([]byte(`{"nmae": "x"}`), &dst, "")
	if e == nil || e.Msg != `unknown field "nmae" in the request body` {
		t.Fatalf("a short unknown field: %v", e)
	}
}
