package jsonapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
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

// strictDecode is what Decode did before it read a skeleton: one strict
// json.Decoder over the body. Decode must answer every body as it did.
func strictDecode(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("more than one value")
		}
	}
	return err
}

type decodeTarget struct {
	Name   string            `json:"name"`
	VCPUs  int64             `json:"vcpus"`
	Labels map[string]string `json:"labels"`
	Nested *struct {
		Ports []string `json:"ports"`
	} `json:"nested"`
	Tags []string `json:"tags"`
}

func TestDecodeAnswersAsOneStrictDecoderWouldWithLongStringsToo(t *testing.T) {
	long := strings.Repeat("y", 10_000)
	bodies := []string{
		`{"name": "vm-1", "vcpus": 2, "labels": {"a": "b"}, "nested": {"ports": ["22"]}, "tags": ["x", "y"]}`,
		`{"name": "` + long + `", "labels": {"` + long + `": "` + long + `"}, "tags": ["` + long + `"]}`,
		`{"name": "` + long + `\n\"\u00e9\\"}`,
		`{"name": "` + long + `\q"}`,                        // a bad escape past what the skeleton keeps
		`{"name": "` + long + "\x01" + `"}`,                 // a control character there
		`{"name": "` + strings.Repeat("é", 40) + `\u00"}`,   // a cut escape
		`{"name": "` + long + `", "vcpus": "` + long + `"}`, // a type error after a long string
		`{"name": "` + long + `", "vcpus": 1.5}`,
		`{"name": "` + long + `", "nmae": 1}`,
		`{"` + long + `": 1}`,
		`{"NAME": "` + long + `"}`, // keys match without case, as encoding/json does
		`{"name": "` + long + `"} {"name": "x"}`,
		`{"name": "` + long + `"} x`,
		`{"name": "` + long + `",}`,
		`{"name": "` + long + `"` + strings.Repeat(" ", 5000) + `, "vcpus" 2}`,
		`{"name": "` + long + `"`,
		`[1, 2]`,
		`"` + long + `"`,
		`   `,
		`{"nested": {"ports": ["` + long + `", 7]}}`,
		`{"nested": {"pots": []}}`,
	}
	for i, body := range bodies {
		var want, got decodeTarget
		wantErr := strictDecode([]byte(body), &want)
		e := Decode([]byte(body), &got, "hint")
		if (wantErr == nil) != (e == nil) {
			t.Fatalf("body %d: strict decoder says %v, Decode %v", i, wantErr, e)
		}
		if e == nil {
			if got.Name != want.Name || got.VCPUs != want.VCPUs || len(got.Labels) != len(want.Labels) || len(got.Tags) != len(want.Tags) ||
				(want.Nested == nil) != (got.Nested == nil) {
				t.Fatalf("body %d decoded to %+.100v, want %+.100v", i, got, want)
			}
			for k, v := range want.Labels {
				if got.Labels[k] != v {
					t.Fatalf("body %d: label %.80q", i, k)
				}
			}
			continue
		}
		// The message Decode gave before, from the strict decoder's error.
		var old *Error
		if wantErr.Error() == "more than one value" {
			old = &Error{Msg: "request body holds more than one JSON value", Hint: "send exactly one JSON object, with nothing after it"}
		} else {
			old = decodeError(wantErr, &want, "hint")
		}
		if e.Msg != old.Msg || e.Hint != old.Hint {
			t.Fatalf("body %d: Decode says %q (%q), the strict decoder %q (%q)", i, e.Msg, e.Hint, old.Msg, old.Hint)
		}
	}
}

// TestDecodeCopiesALongStringOnce: a body that is one long string costs that
// string once (in dst), not the strict decoder's doubling buffer as well.
func TestDecodeCopiesALongStringOnce(t *testing.T) {
	body := []byte(`{"name": "` + strings.Repeat("n", MaxBodyBytes-64) + `", "vcpus": 2}`)
	var dst decodeTarget
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if e := Decode(body, &dst, ""); e != nil {
		t.Fatal(e)
	}
	runtime.ReadMemStats(&after)
	if len(dst.Name) != MaxBodyBytes-64 || dst.VCPUs != 2 {
		t.Fatalf("decoded %d bytes of name, vcpus %d", len(dst.Name), dst.VCPUs)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > MaxBodyBytes*5/4 {
		t.Fatalf("decoding a %d-byte body allocated %d bytes", len(body), n)
	}
}
