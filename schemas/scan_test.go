package schemas

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzScanAgreesWithEncodingJSON: on any valid JSON, the zero-copy scanner
// splits objects and arrays into the members and items encoding/json sees,
// and counts a string's characters as encoding/json decodes them.
func FuzzScanAgreesWithEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"name": "web", "vcpus": 2, "labels": {"a": "b"}}`,
		`["a", 1, {"b": [2, 3]}, null, true]`,
		`"caf\u00e9 \ud83d\ude00 \ud800x \n\"q\""`,
		`{"a": {"b": {"c": "}]"}}, "d": "\\"}`,
		" \t[ 1 , 2 ]\n",
		`"héllo ` + "\xff" + `"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := bytes.TrimSpace(data)
		if !json.Valid(raw) {
			return
		}
		switch raw[0] {
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			if got, want := runeCount(raw), utf8.RuneCountInString(s); got != want {
				t.Fatalf("runeCount(%q) = %d, encoding/json decodes %d characters", raw, got, want)
			}
		case '{':
			var want []string
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.Token()
			for dec.More() {
				k, _ := dec.Token()
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					t.Fatal(err)
				}
				want = append(want, k.(string)+"="+string(v))
			}
			var got []string
			members(raw, func(key, value []byte) bool {
				var k string
				if err := json.Unmarshal(key, &k); err != nil {
					t.Fatalf("key %q: %v", key, err)
				}
				var v bytes.Buffer
				_ = json.Compact(&v, value)
				got = append(got, k+"="+v.String())
				return true
			})
			for i := range want {
				var v bytes.Buffer
				_, after, _ := bytes.Cut([]byte(want[i]), []byte("="))
				_ = json.Compact(&v, after)
				want[i] = want[i][:len(want[i])-len(after)] + v.String()
			}
			if len(got) != len(want) {
				t.Fatalf("members(%q) = %q, encoding/json sees %q", raw, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("members(%q) = %q, encoding/json sees %q", raw, got, want)
				}
			}
		case '[':
			var want []json.RawMessage
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			n := 0
			items(raw, func(it []byte) bool {
				var a, b bytes.Buffer
				_ = json.Compact(&a, it)
				_ = json.Compact(&b, want[n])
				if a.String() != b.String() {
					t.Fatalf("item %d of %q = %q, encoding/json sees %q", n, raw, it, want[n])
				}
				n++
				return true
			})
			if n != len(want) {
				t.Fatalf("items(%q) found %d, encoding/json %d", raw, n, len(want))
			}
		}
	})
}
