package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

const specHint = "the node API is described in schemas/node-openapi.yaml"

func contextWith(r *http.Request, info *reqInfo) context.Context {
	return context.WithValue(r.Context(), ctxKey{}, info)
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	h := s.opts.Manager.Health()
	if h.Version == "" {
		h.Version = s.opts.Version
	}
	if h.Drivers == nil {
		h.Drivers = []sdk.DriverHealth{}
	}
	for i := range h.Drivers {
		if h.Drivers[i].Capabilities == nil {
			h.Drivers[i].Capabilities = []string{}
		}
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *server) listVMs(w http.ResponseWriter, r *http.Request) {
	vms, err := s.opts.Manager.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list := sdk.VMList{VMs: make([]sdk.VM, len(vms))}
	for i, v := range vms {
		list.VMs[i] = *v
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) createVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.CreateVMRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	vm, err := s.opts.Manager.Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	writeJSON(w, http.StatusCreated, vm)
}

func (s *server) getVM(w http.ResponseWriter, r *http.Request) {
	vm, err := s.opts.Manager.Get(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vm)
}

func (s *server) deleteVM(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Manager.Delete(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// lifecycle serves start, restart, pause and resume, which take no body.
func (s *server) lifecycle(op func(context.Context, string) (*sdk.VM, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.readJSON(w, r, &struct{}{}, false) {
			return
		}
		vm, err := op(r.Context(), mux.Vars(r)["id"])
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, vm)
	}
}

// maxStopSeconds bounds a graceful stop asked for through the API.
const maxStopSeconds = 3600

func (s *server) stopVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.StopRequest
	if !s.readJSON(w, r, &req, false) {
		return
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxStopSeconds {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout_seconds %d is out of range", req.TimeoutSeconds),
			fmt.Sprintf("timeout_seconds is 0 to %d; leave it out for the node's default", maxStopSeconds))
		return
	}
	vm, err := s.opts.Manager.Stop(r.Context(), mux.Vars(r)["id"], time.Duration(req.TimeoutSeconds)*time.Second)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, vm)
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	var req sdk.ExecRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	res, err := s.opts.Manager.Exec(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	lines, ok := intParam(w, r, "lines", 100, 1, 100000)
	if !ok {
		return
	}
	data, err := s.opts.Manager.Logs(r.Context(), mux.Vars(r)["id"], lines)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

func (s *server) screenshot(w http.ResponseWriter, r *http.Request) {
	maxWidth, ok := intParam(w, r, "max_width", 0, 1, 16384)
	if !ok {
		return
	}
	png, err := s.opts.Manager.Screenshot(r.Context(), mux.Vars(r)["id"], maxWidth)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(png)
}

func (s *server) input(w http.ResponseWriter, r *http.Request) {
	var req sdk.InputRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	if err := s.opts.Manager.Input(r.Context(), mux.Vars(r)["id"], req.Actions); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// intParam reads an optional integer query parameter within [lo, hi]; def
// when it is absent. On a bad value it answers 400 and returns false.
func intParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int) (int, bool) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, true
	}
	v, err := strconv.Atoi(q.Get(name))
	if err != nil || v < lo || v > hi || len(q[name]) > 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s must be one whole number from %d to %d", name, lo, hi),
			fmt.Sprintf("for example ?%s=%d, or leave it out", name, max(def, lo)))
		return 0, false
	}
	return v, true
}

// bodyError is a request body the API refuses, with the status to answer.
type bodyError struct {
	status    int
	msg, hint string
}

func (e *bodyError) Error() string { return e.msg }

// readJSON decodes the request body into dst, answering the error itself
// (and returning false) when the body is refused. A body is required only
// when required is set; an absent one leaves dst as it is.
func (s *server) readJSON(w http.ResponseWriter, r *http.Request, dst any, required bool) bool {
	if err := readBody(w, r, dst, required); err != nil {
		writeError(w, err.status, err.msg, err.hint)
		return false
	}
	return true
}

func readBody(w http.ResponseWriter, r *http.Request, dst any, required bool) *bodyError {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxBodyBytes),
				"send at most 1 MiB of JSON"}
		}
		return &bodyError{http.StatusBadRequest, "could not read the request body", "send the whole body, with a correct Content-Length"}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if required {
			return &bodyError{http.StatusBadRequest, "request body is required",
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
		return &bodyError{http.StatusUnsupportedMediaType, fmt.Sprintf("request body must be JSON, not Content-Type %s", got),
			"send the header Content-Type: application/json"}
	}
	return decodeJSON(data, dst)
}

// decodeJSON decodes exactly one JSON value into dst, refusing unknown
// fields and trailing data. Its messages name the field at fault but never
// quote the body (it may hold a command or a secret).
func decodeJSON(data []byte, dst any) *bodyError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return &bodyError{http.StatusBadRequest, "request body holds more than one JSON value",
				"send exactly one JSON object, with nothing after it"}
		}
		return nil
	}
	bad := func(msg, hint string) *bodyError { return &bodyError{http.StatusBadRequest, msg, hint} }
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
		return bad(fmt.Sprintf("field %q must be %s", field, want), specHint)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return bad("unknown field "+name+" in the request body",
			"remove it; this request takes: "+strings.Join(jsonFields(dst), ", "))
	}
	return bad("request body could not be decoded", specHint)
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
