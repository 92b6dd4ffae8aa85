package schemas

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// The bounds check reads bodies of up to 1 MiB on every write, refused ones
// included, so it works on the body's own bytes: it validates once
// (json.Valid), then slices members and items out of it and counts a
// string's characters without unescaping it. A 1 MiB name costs no copy.

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value starting at b[i]
// (b is valid JSON, i at the value's first byte).
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // a number, true, false or null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// stringEnd returns the index just past the string literal starting at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// members splits a valid JSON object into its members' raw keys (with their
// quotes) and values, in order, duplicates kept.
func members(raw []byte, fn func(key, value []byte) bool) {
	i := skipSpace(raw, 0) + 1 // past '{'
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return
		}
		ke := stringEnd(raw, i)
		key := raw[i:ke]
		i = skipSpace(raw, ke) + 1 // past ':'
		i = skipSpace(raw, i)
		ve := valueEnd(raw, i)
		if !fn(key, raw[i:ve]) {
			return
		}
		i = skipSpace(raw, ve)
		if i < len(raw) && raw[i] == ',' {
			i++
		}
	}
}

// items splits a valid JSON array into its items.
func items(raw []byte, fn func(item []byte) bool) {
	i := skipSpace(raw, 0) + 1 // past '['
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return
		}
		e := valueEnd(raw, i)
		if !fn(raw[i:e]) {
			return
		}
		i = skipSpace(raw, e)
		if i < len(raw) && raw[i] == ',' {
			i++
		}
	}
}

// runeCount counts the characters of a valid JSON string literal as
// encoding/json would decode it, without decoding it: an escape is one
// character (a surrogate pair of \u escapes, one), invalid UTF-8 one per byte.
func runeCount(lit []byte) int {
	n := 0
	b := lit[1 : len(lit)-1]
	for i := 0; i < len(b); {
		switch {
		case b[i] == '\\' && i+1 < len(b) && b[i+1] == 'u':
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' && surrogate(b[i+2:i+6], "89abAB") && surrogate(b[i+8:i+12], "cdefCDEF") {
				i += 12 // a surrogate pair is one character
			} else {
				i += 6
			}
		case b[i] == '\\':
			i += 2
		default:
			_, size := utf8.DecodeRune(b[i:])
			i += size
		}
		n++
	}
	return n
}

// surrogate says whether four hex digits are a UTF-16 surrogate whose second
// digit is one of second (high: 8-b, low: c-f).
func surrogate(hex []byte, second string) bool {
	return (hex[0] == 'd' || hex[0] == 'D') && strings.IndexByte(second, hex[1]) >= 0
}

// keyText is an object key as encoding/json decodes it. Keys longer than
// any property name are not decoded (nothing could match them): ok is false.
func keyText(lit []byte) (string, bool) {
	if len(lit) > 256 {
		return "", false
	}
	var k string
	if json.Unmarshal(lit, &k) != nil {
		return "", false
	}
	return k, true
}
