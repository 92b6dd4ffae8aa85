// Package jsonapi reads and writes the JSON bodies of FluxVM's HTTP APIs
// (the node API and central's fleet API): strict decoding whose errors name
// the field at fault and say what to send, and the {"error", "hint"} body of
// every refusal.
package jsonapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fluxvm/fluxvm/sdk"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

// MaxEcho is how many bytes of a caller's input a message repeats (Echo).
const MaxEcho = 64

// Echo returns a caller's input (a name, an id, a label, a path, a query
// parameter) for repeating in an error message or a log line: whole when it
// is at most MaxEcho bytes, else cut there with an ellipsis. Every message
// that repeats input goes through it, so that an answer stays short however
// long the input was (a name can be as long as the 1 MiB body).
func Echo(s string) string { return Clip(s, MaxEcho) }

// Clip returns s when it is at most n bytes, else its first n bytes, cut at
// a character boundary, followed by "…". Echo is Clip at MaxEcho.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	// Back up over a cut UTF-8 sequence (at most 3 continuation bytes), so a
	// message never ends in half a character; invalid input is cut where it is.
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			cut = i
			break
		}
	}
	return s[:cut] + "…"
}

// Write answers with v as JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers with an error body: what went wrong and what to do.
func WriteError(w http.ResponseWriter, status int, msg, hint string) {
	Write(w, status, sdk.ErrorBody{Error: msg, Hint: hint})
}

// Error is a request body the API refuses, with the status to answer.
type Error struct {
	Status    int
	Msg, Hint string
}

func (e *Error) Error() string { return e.Msg }

// ReadBody decodes the request body into dst (at most MaxBodyBytes of JSON,
// with a JSON Content-Type). A body is required only when required is set;
// an absent one leaves dst as it is. specHint says where the API is
// described, for hints.
func ReadBody(w http.ResponseWriter, r *http.Request, dst any, required bool, specHint string) *Error {
	var data []byte
	var err error
	if b, ok := r.Body.(*bufferedBody); ok {
		data, err = b.data, b.err
		// The body is consumed: let the buffer go once it is decoded.
		b.data = nil
		b.Reset(nil)
		if err == nil && len(data) > MaxBodyBytes {
			err = &http.MaxBytesError{Limit: MaxBodyBytes}
		}
	} else {
		data, err = readAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes), r.ContentLength)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &Error{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes),
				"send at most 1 MiB of JSON"}
		}
		return &Error{http.StatusBadRequest, "could not read the request body", "send the whole body, with a correct Content-Length"}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if required {
			return &Error{http.StatusBadRequest, "request body is required",
				"send a JSON object with Content-Type: application/json; " + specHint}
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		got := r.Header.Get("Content-Type")
		if got == "" {
			got = "none"
		}
		return &Error{http.StatusUnsupportedMediaType, fmt.Sprintf("request body must be JSON, not Content-Type %s", got),
			"send the header Content-Type: application/json"}
	}
	return Decode(data, dst, specHint)
}

// bufferedBody is a request body BufferBody has read; ReadBody takes its
// bytes as they are.
type bufferedBody struct {
	*bytes.Reader
	data []byte
	err  error // of the read
}

func (*bufferedBody) Close() error { return nil }

// BufferBody reads a request's body (at most MaxBodyBytes+1 bytes) for a look
// before the handler's, and puts it back so that ReadBody decodes the same
// bytes without reading or copying them again: a 1 MiB body is held once. A
// body that says it is larger than MaxBodyBytes is left for ReadBody to
// refuse, unread (nil).
func BufferBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.ContentLength == 0 || r.ContentLength > MaxBodyBytes {
		return nil, nil
	}
	if b, ok := r.Body.(*bufferedBody); ok {
		return b.data, b.err
	}
	data, err := readAll(io.LimitReader(r.Body, MaxBodyBytes+1), r.ContentLength)
	r.Body = &bufferedBody{Reader: bytes.NewReader(data), data: data, err: err}
	return data, err
}

// readAll reads src to its end into one buffer of the body's declared size
// (when it is known and within MaxBodyBytes), rather than one that doubles
// its way there: a 1 MiB body costs 1 MiB, not 2.
func readAll(src io.Reader, length int64) ([]byte, error) {
	var buf bytes.Buffer
	if length > 0 && length <= MaxBodyBytes {
		buf.Grow(int(length) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(src)
	return buf.Bytes(), err
}

// Decode decodes exactly one JSON value into dst, refusing unknown
// fields and trailing data. Its messages name the field at fault but never
// quote the body (it may hold a command or a secret).
//
// The strict checks (unknown fields, one value, types) are a json.Decoder's,
// which copies everything it reads into a buffer of its own, growing it by
// doubling: for a body of one long string that is three times the body in
// garbage. So the Decoder reads a skeleton of the body instead (see
// skeleton), into a scratch value of dst's type, and only then is the body
// itself decoded into dst, in place (json.Unmarshal): a long string is
// copied once, into dst.
func Decode(data []byte, dst any, specHint string) *Error {
	dec := json.NewDecoder(bytes.NewReader(skeleton(data)))
	dec.DisallowUnknownFields()
	err := dec.Decode(scratch(dst))
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return &Error{http.StatusBadRequest, "request body holds more than one JSON value",
				"send exactly one JSON object, with nothing after it"}
		}
		// What the skeleton cannot show (a bad escape late in a long
		// string) is still found here.
		if err = json.Unmarshal(data, dst); err == nil {
			return nil
		}
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		// The offset is the skeleton's; the body's own comes from a scan of
		// the body (json.Unmarshal checks the syntax before it decodes).
		var inBody *json.SyntaxError
		if errors.As(json.Unmarshal(data, &struct{}{}), &inBody) {
			err = inBody
		}
	}
	return decodeError(err, dst, specHint)
}

// decodeError says what is wrong with a body the decoder refused.
func decodeError(err error, dst any, specHint string) *Error {
	bad := func(msg, hint string) *Error { return &Error{http.StatusBadRequest, msg, hint} }
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return bad(fmt.Sprintf("request body is not valid JSON (at byte %d)", syntax.Offset), "check the JSON syntax; "+specHint)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad("request body ends in the middle of a JSON value", "send the whole JSON object")
	case errors.As(err, &typ):
		field := typ.Field
		// A type with its own UnmarshalJSON (sdk.Command) may name its
		// field itself, which the decoder then prefixes again.
		if head, tail, ok := strings.Cut(field, "."); ok && head == tail {
			field = head
		}
		if field == "" {
			return bad("request body must be a JSON object", "send {...}; "+specHint)
		}
		want := "another type"
		if typ.Type != nil {
			want = jsonKind(typ.Type)
		}
		if field == "command" {
			want = `a list of strings or a string`
		}
		return bad(fmt.Sprintf("field %q must be %s", Echo(field), want), specHint)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if u, uerr := strconv.Unquote(name); uerr == nil {
			name = strconv.Quote(Echo(u))
		} else {
			name = Echo(name)
		}
		return bad("unknown field "+name+" in the request body",
			"remove it; this request takes: "+strings.Join(jsonFields(dst), ", "))
	}
	// What is left came from a type's own UnmarshalJSON (an amount with
	// seven decimals, say), whose message says what is wrong with the value.
	return bad("request body: "+err.Error(), specHint)
}

// skeleton returns a JSON text with the structure, keys, types and syntax
// of data in a few bytes, however long data's strings are: every string
// (value or key) keeps its first MaxEcho+1 bytes of content (an escape
// sequence whole), and every run of whitespace outside strings one byte.
// No key a request takes is that long, so the same keys are known or
// unknown, and a long unknown key still reads as one (Echo cuts it).
func skeleton(data []byte) []byte {
	const keep = MaxEcho + 1
	out := make([]byte, 0, min(len(data), 4096))
	inString, escaped, keepEscape := false, false, false
	hexLeft, kept := 0, 0 // of a \uXXXX escape; content bytes of the string kept
	for i, c := range data {
		if hexLeft > 0 {
			if isHex(c) {
				hexLeft--
				if keepEscape {
					out = append(out, c)
				}
				continue
			}
			hexLeft = 0 // a broken escape: decoding the body itself says so
		}
		switch {
		case !inString:
			if isSpace(c) && i > 0 && isSpace(data[i-1]) {
				continue
			}
			out = append(out, c)
			inString, kept = c == '"', 0
		case escaped:
			escaped = false
			if c == 'u' {
				hexLeft = 4
			}
			if keepEscape {
				out = append(out, c)
			}
		case c == '\\':
			escaped, keepEscape = true, kept < keep
			if keepEscape {
				out = append(out, c)
				kept++
			}
		case c == '"':
			inString = false
			out = append(out, c)
		case kept < keep:
			out = append(out, c)
			kept++
		}
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// scratch is a new value of the type dst points to (dst itself when it is
// not a pointer: decoding reports that).
func scratch(dst any) any {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer {
		return dst
	}
	return reflect.New(t.Elem()).Interface()
}

// jsonKind names a Go type the way a JSON author thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

// jsonFields lists the JSON names of a struct's fields, for hints.
func jsonFields(dst any) []string {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// An embedded struct's fields are the request's own.
			if sub := jsonFields(reflect.New(f.Type).Interface()); sub[0] != "(no fields: send no body)" {
				out = append(out, sub...)
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return []string{"(no fields: send no body)"}
	}
	return out
}

// intParam reads an optional integer query parameter within [lo, hi]; def
// when it is absent. On a bad value it answers 400 and returns false.
func IntParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int) (int, bool) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, true
	}
	v, err := strconv.Atoi(q.Get(name))
	if err != nil || v < lo || v > hi || len(q[name]) > 1 {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s must be one whole number from %d to %d", name, lo, hi),
			fmt.Sprintf("for example ?%s=%d, or leave it out", name, max(def, lo)))
		return 0, false
	}
	return v, true
}

// FloatParam reads an optional decimal query parameter within [lo, hi]; def
// when it is absent. On a bad value (not a finite number, out of range,
// given twice) it answers 400 naming the parameter and returns false.
func FloatParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi float64) (float64, bool) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, true
	}
	v, err := strconv.ParseFloat(q.Get(name), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi || len(q[name]) > 1 {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s must be one number from %g to %g", name, lo, hi),
			fmt.Sprintf("for example ?%s=%g, or leave it out", name, def))
		return 0, false
	}
	return v, true
}
