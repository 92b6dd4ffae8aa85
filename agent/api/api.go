// Package api serves the node agent's HTTP API (/v1/... and /metrics): it
// authenticates callers by bearer token, turns requests into VM manager calls
// and answers in JSON, with errors people can act on. The API is described in
// schemas/node-openapi.yaml and the tests hold the server to it.
package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/agent/images"
	"github.com/fluxvm/fluxvm/agent/vmm"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/gorilla/mux"
	"github.com/hashicorp/go-hclog"
)

// Options configure the node API.
type Options struct {
	// Manager runs the node's VMs.
	Manager *vmm.Manager
	// Images is the node's image directory (pull and push).
	Images *images.Store
	// AdminTokens may call every endpoint; ReadOnlyTokens only GET ones
	// (health, VMs, logs, screenshots, metrics). Only their SHA-256 digests
	// are kept.
	AdminTokens, ReadOnlyTokens []string
	// Logger gets one line per request (never a body or a token).
	Logger hclog.Logger
	// Version is the agent's version, reported by GET /v1/health when the
	// manager has none.
	Version string
	// Now is the clock of screen tickets' expiry (time.Now when nil).
	Now func() time.Time
}

// role is what a token may do.
type role int

const (
	roleNone role = iota
	roleReadOnly
	roleAdmin
)

type tokenDigest struct {
	sum  [sha256.Size]byte
	role role
}

type server struct {
	opts    Options
	log     hclog.Logger
	tokens  []tokenDigest
	router  *mux.Router
	metrics *metrics
	tickets *tickets
}

// New returns the node API handler.
func New(opts Options) http.Handler {
	s := newServer(opts)
	s.routes()
	return s.handler()
}

func newServer(opts Options) *server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &server{opts: opts, log: opts.Logger, router: mux.NewRouter(),
		tickets: &tickets{now: now, m: map[string]ticket{}}}
	for _, t := range opts.AdminTokens {
		s.tokens = append(s.tokens, tokenDigest{sha256.Sum256([]byte(t)), roleAdmin})
	}
	for _, t := range opts.ReadOnlyTokens {
		s.tokens = append(s.tokens, tokenDigest{sha256.Sum256([]byte(t)), roleReadOnly})
	}
	// Keep only the digests: the caller's slices may be reused, and the
	// tokens must not sit in this struct for a heap dump to show.
	s.opts.AdminTokens, s.opts.ReadOnlyTokens = nil, nil
	s.metrics = newMetrics(opts.Manager)
	s.router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonapi.WriteError(w, http.StatusNotFound, "no such endpoint: "+jsonapi.Echo(r.Method)+" "+jsonapi.Echo(r.URL.Path),
			"the node API lives under /v1 (see schemas/node-openapi.yaml); GET /v1/vms lists VMs")
	})
	s.router.MethodNotAllowedHandler = http.HandlerFunc(s.methodNotAllowed)
	s.router.Use(s.authenticate)
	return s
}

// routes registers every endpoint.
func (s *server) routes() {
	r := s.router
	r.HandleFunc("/v1/health", s.health).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms", s.listVMs).Methods(http.MethodGet)
	r.HandleFunc("/v1/workspaces", s.listWorkspaces).Methods(http.MethodGet)
	r.HandleFunc("/v1/workspaces/clean", s.cleanWorkspaces).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms", s.createVM).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}", s.getVM).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms/{id}", s.deleteVM).Methods(http.MethodDelete)
	r.HandleFunc("/v1/vms/{id}/start", s.lifecycle(s.opts.Manager.Start)).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/stop", s.stopVM).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/restart", s.lifecycle(s.opts.Manager.Restart)).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/pause", s.lifecycle(s.opts.Manager.Pause)).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/resume", s.lifecycle(s.opts.Manager.Resume)).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/exec", s.exec).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/logs", s.logs).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms/{id}/screenshot", s.screenshot).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms/{id}/input", s.input).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/snapshot", s.snapshotVM).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/snapshots", s.listSnapshots).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms/{id}/snapshots/{tag}", s.deleteSnapshot).Methods(http.MethodDelete)
	r.HandleFunc("/v1/vms/{id}/restore", s.restoreVM).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/clone", s.cloneVM).Methods(http.MethodPost)
	r.HandleFunc("/v1/images", s.withImages(s.listImages)).Methods(http.MethodGet)
	r.HandleFunc("/v1/images/pull", s.withImages(s.pullImage)).Methods(http.MethodPost)
	r.HandleFunc("/v1/images/push", s.withImages(s.pushImage)).Methods(http.MethodPost)
	r.HandleFunc("/v1/volumes", s.listVolumes).Methods(http.MethodGet)
	r.HandleFunc("/v1/volumes", s.createVolume).Methods(http.MethodPost)
	r.HandleFunc("/v1/volumes/{name}", s.getVolume).Methods(http.MethodGet)
	r.HandleFunc("/v1/volumes/{name}", s.deleteVolume).Methods(http.MethodDelete)
	r.HandleFunc("/v1/volumes/{name}/resize", s.resizeVolume).Methods(http.MethodPost)
	r.HandleFunc("/v1/overlays", s.listOverlays).Methods(http.MethodGet)
	r.HandleFunc("/v1/overlays/{network}", s.ensureOverlay).Methods(http.MethodPut)
	r.HandleFunc("/v1/overlays/{network}", s.deleteOverlay).Methods(http.MethodDelete)
	r.HandleFunc("/v1/overlays/{network}/key", s.overlayKey).Methods(http.MethodPost)
	r.HandleFunc("/v1/vms/{id}/tunnel", s.tunnel).Methods(http.MethodGet)
	r.HandleFunc("/v1/vms/{id}/ws-ticket", s.wsTicket).Methods(http.MethodPost)
	r.HandleFunc(ticketRoute, s.redeemTicket).Methods(http.MethodGet)
	r.Handle("/metrics", s.metrics.handler()).Methods(http.MethodGet)
}

// reqInfo carries what the router learnt about a request back out to the
// logging middleware.
type reqInfo struct{ route string }

type ctxKey struct{}

// handler wraps the router with logging, metrics and panic recovery, which
// see every request (also 404s and 405s, which skip mux middleware).
func (s *server) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{route: "unmatched"}
		rw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic in handler", "method", r.Method, "route", info.route, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if !rw.wrote {
					jsonapi.WriteError(rw, http.StatusInternalServerError, "internal error", "the node agent's log has the details")
				}
			}
			status := rw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.metrics.observe(r.Method+" "+info.route, status, d)
			s.log.Info("request", "method", r.Method, "route", info.route, "status", status, "duration", d)
		}()
		s.router.ServeHTTP(rw, r.WithContext(contextWith(r, info)))
	})
}

// authenticate runs on matched routes: it records the route template and
// checks the bearer token and its role.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tmpl, _ := mux.CurrentRoute(r).GetPathTemplate()
		if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok && tmpl != "" {
			info.route = tmpl
		}
		if tmpl == ticketRoute {
			// The one-use ticket in the path is the credential.
			next.ServeHTTP(w, r)
			return
		}
		role := s.roleOf(r.Header.Get("Authorization"))
		if r.Context().Value(channelKey{}) != nil {
			// Over the channel this enrolled node opened to its central with
			// its own credential: the caller is that central.
			role = roleAdmin
		}
		switch role {
		case roleNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="fluxvm-node"`)
			jsonapi.WriteError(w, http.StatusUnauthorized, "missing or invalid token",
				"send Authorization: Bearer <token>; tokens are set in the node's config (tokens { admin = [...] })")
			return
		case roleReadOnly:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				jsonapi.WriteError(w, http.StatusForbidden, "this token is read-only: it cannot "+jsonapi.Echo(r.Method)+" "+jsonapi.Echo(r.URL.Path),
					"use an admin token (tokens { admin = [...] } in the node's config) for changes; read-only tokens may only GET")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

type channelKey struct{}

// FromCentral serves h to the central an enrolled node dialled: every
// request arriving through the channel it opened with its own credential is
// central's, with the admin role, and needs no token (central holds none
// of this node's). Only the channel's server may wrap the API with it.
func FromCentral(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), channelKey{}, true)))
	})
}

// roleOf finds the role of an Authorization header's bearer token. Every
// digest is compared, in constant time, so timing says nothing about which
// token came close.
func (s *server) roleOf(header string) role {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return roleNone
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return roleNone
	}
	sum := sha256.Sum256([]byte(token))
	found := roleNone
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 && t.role > found {
			found = t.role
		}
	}
	return found
}

// methodNotAllowed answers 405 with the methods the path does take.
func (s *server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if s.router.Match(probe, &match) && match.MatchErr == nil {
			allow = append(allow, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	jsonapi.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", jsonapi.Echo(r.Method), jsonapi.Echo(r.URL.Path)),
		"this path takes: "+strings.Join(allow, ", "))
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Hijack hands the connection to a WebSocket upgrade, which answers 101.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot be hijacked")
	}
	if !w.wrote {
		w.status, w.wrote = http.StatusSwitchingProtocols, true
	}
	return h.Hijack()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusOf maps an error kind to an HTTP status; 0 means "not a kind we
// know", which is answered as an internal error.
func statusOf(err error) (status int, hint string) {
	for _, k := range kinds {
		if errors.Is(err, k.kind) {
			return k.status, k.hint
		}
	}
	return 0, ""
}

// kinds maps each error kind to its status, and to the hint given when the
// error carries none of its own.
var kinds = []struct {
	kind   error
	status int
	hint   string
}{
	{driver.ErrInvalid, http.StatusBadRequest, specHint},
	{vmm.ErrForbidden, http.StatusForbidden, "the node's policy refuses this; its config says what is allowed"},
	{driver.ErrNotFound, http.StatusNotFound, "GET /v1/vms lists the VMs on this node"},
	{driver.ErrExists, http.StatusConflict, "GET /v1/vms lists the VMs on this node"},
	{driver.ErrState, http.StatusConflict, "GET /v1/vms/{id} shows the VM's state and whether it has a display; change the state first, or create the VM with what it lacks"},
	{driver.ErrNoCapacity, http.StatusConflict, "GET /v1/health shows the node's free capacity; stop or delete VMs, or ask for less"},
	{driver.ErrUnsupported, http.StatusNotImplemented, "GET /v1/health lists each driver's capabilities"},
	{driver.ErrUnavailable, http.StatusServiceUnavailable, "the driver plugin or the guest agent does not answer; see GET /v1/health and retry"},
	{driver.ErrTimeout, http.StatusGatewayTimeout, "the driver did not finish in time; GET /v1/vms/{id} shows where the VM is, then retry"},
}

// fail answers an error from the manager. Errors of a known kind carry a
// message meant for people; anything else is logged and hidden, since it may
// name internals (paths, store errors).
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, defaultHint := statusOf(err)
	if status == 0 {
		route := "unmatched"
		if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
			route = info.route
		}
		s.log.Error("internal error", "method", r.Method, "route", route, "error", err)
		jsonapi.WriteError(w, http.StatusInternalServerError, "internal error", "the node agent's log has the details; retry, and report it if it persists")
		return
	}
	msg, hint := err.Error(), ""
	var e *vmm.Error
	if errors.As(err, &e) {
		msg, hint = e.Msg, e.Hint
	}
	if hint == "" {
		hint = defaultHint
	}
	jsonapi.WriteError(w, status, msg, hint)
}
