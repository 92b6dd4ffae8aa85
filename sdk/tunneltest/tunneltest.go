// Package tunneltest serves central's tunnel routes (GET
// /fleet/vms/{node}/{id}/tunnel, GET /fleet/tunnels, DELETE
// /fleet/tunnels/{id}) for tests of their clients: the SDK and fluxctl. It
// speaks the documented wire protocol for real (a gorilla/websocket upgrade,
// binary messages, a TCP connection to the guest port, central's refusals
// as {"error","hint"}), and can pass every other route to a real central.
// It is a test server for clients, not a stand-in for central's relay,
// which central's own tests cover.
package tunneltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
)

// Target is where a tunnel goes: the guest port's address on this host and
// the VM's name for the list, or the refusal central would answer.
type Target struct {
	Addr    string
	VMName  string
	Refusal *sdk.APIError
}

// Options configure a Server.
type Options struct {
	// Token is the bearer token every request must carry (401 otherwise).
	Token string
	// Max is the most tunnels open at once (429 beyond); 0 means 20.
	Max int
	// Route decides where a tunnel to port of VM id on node goes.
	Route func(node, id string, port int) Target
	// Upstream, when set, is a real central's URL that every other route
	// is passed to (with the same token); else they are 404.
	Upstream string
}

// Server is a running test server; URL is its base URL.
type Server struct {
	URL  string
	opts Options

	mu     sync.Mutex
	open   map[string]*tunnel
	asked  []int
	nextID int
}

type tunnel struct {
	info sdk.Tunnel
	ws   *wsconn.Conn
}

// Start starts a Server for the test's lifetime.
func Start(t testing.TB, opts Options) *Server {
	if opts.Max == 0 {
		opts.Max = 20
	}
	s := &Server{opts: opts, open: map[string]*tunnel{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fleet/vms/{node}/{id}/tunnel", s.tunnel)
	mux.HandleFunc("GET /fleet/tunnels", s.list)
	mux.HandleFunc("DELETE /fleet/tunnels/{id}", s.close)
	if opts.Upstream != "" {
		u, err := url.Parse(opts.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("/", httputil.NewSingleHostReverseProxy(u))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+opts.Token {
			refuse(w, &sdk.APIError{Status: http.StatusUnauthorized, Message: "invalid token", Hint: "check FLUXVM_AGENT_TOKEN"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	s.URL = srv.URL
	t.Cleanup(func() {
		s.mu.Lock()
		for _, o := range s.open {
			o.ws.Close()
		}
		s.mu.Unlock()
		srv.Close()
	})
	return s
}

// Asked is the port of every tunnel asked for, refused or not, in order.
func (s *Server) Asked() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.asked...)
}

// Open is how many tunnels are open.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

func refuse(w http.ResponseWriter, e *sdk.APIError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": e.Message, "hint": e.Hint})
}

func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	port := sdk.DefaultTunnelPort
	if p := r.URL.Query().Get("port"); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			refuse(w, &sdk.APIError{Status: http.StatusBadRequest, Message: "port must be from 1 to 65535", Hint: "give ?port=N"})
			return
		}
	}
	s.mu.Lock()
	s.asked = append(s.asked, port)
	n := len(s.open)
	s.mu.Unlock()
	tg := s.opts.Route(r.PathValue("node"), r.PathValue("id"), port)
	switch {
	case tg.Refusal != nil:
		refuse(w, tg.Refusal)
		return
	case n >= s.opts.Max:
		refuse(w, &sdk.APIError{Status: http.StatusTooManyRequests, Message: fmt.Sprintf("%d tunnels are open, the most your tenant may have", n),
			Hint: "close one (DELETE /fleet/tunnels/{id})"})
		return
	}
	guest, err := net.Dial("tcp", tg.Addr)
	if err != nil {
		refuse(w, &sdk.APIError{Status: http.StatusBadGateway, Message: "the guest port does not answer", Hint: "is the service running in the VM?"})
		return
	}
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		guest.Close()
		return
	}
	c := wsconn.New(ws)
	now := time.Now()
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("tun_%012x", s.nextID)
	o := &tunnel{info: sdk.Tunnel{ID: id, Node: r.PathValue("node"), VM: r.PathValue("id"), VMName: tg.VMName, Kind: sdk.TunnelPort,
		Port: port, OpenedBy: "primary token", OpenedAt: now, LastActive: now}, ws: c}
	s.open[id] = o
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.open, id)
		s.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(&counter{s: s, n: &o.info.BytesToVM, t: &o.info, w: guest}, c)
		guest.Close()
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(&counter{s: s, n: &o.info.BytesFromVM, t: &o.info, w: c}, guest)
		_ = c.CloseWith(websocket.CloseNormalClosure, "the VM closed the connection")
		done <- struct{}{}
	}()
	<-done
	<-done
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := sdk.TunnelList{Tunnels: []sdk.Tunnel{}}
	for _, o := range s.open {
		out.Tunnels = append(out.Tunnels, o.info)
	}
	s.mu.Unlock()
	out.Limits = sdk.TunnelPolicy{Enabled: true, MaxPerTenant: s.opts.Max}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) close(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	o := s.open[r.PathValue("id")]
	s.mu.Unlock()
	if o == nil {
		refuse(w, &sdk.APIError{Status: http.StatusNotFound, Message: "no open tunnel " + r.PathValue("id"), Hint: "GET /fleet/tunnels lists the open ones"})
		return
	}
	_ = o.ws.CloseWith(sdk.TunnelEndedCode, "closed by the tenant")
	w.WriteHeader(http.StatusNoContent)
}

// counter counts the bytes written through it into *n and marks the
// tunnel active. It counts before writing, so that once the far side has
// answered what was written, the count already holds it.
type counter struct {
	s *Server
	n *int64
	t *sdk.Tunnel
	w io.Writer
}

func (c *counter) Write(p []byte) (int, error) {
	c.add(len(p))
	n, err := c.w.Write(p)
	if n < len(p) {
		c.add(n - len(p))
	}
	return n, err
}

func (c *counter) add(n int) {
	c.s.mu.Lock()
	*c.n += int64(n)
	c.t.LastActive = time.Now()
	c.s.mu.Unlock()
}
