// Package tunnels relays tenants' byte streams to their VMs through central:
// a TCP port of a guest, or a VM's screen (raw RFB). It admits a tunnel
// against the policy's tunnels block, keeps the open ones in this central's
// memory, relays both ways with backpressure, and ends each one with a
// reason that goes to the activity log.
//
// A tunnel is admitted once and then re-checked, not re-authorised per
// byte: a loop driven by the injected clock ends tunnels that go idle or
// outlive the policy's lifetime, and every RecheckEvery (30 s) reads the
// store again for the tenant, the API key, the member and the VM the tunnel
// was opened with. Tunnels live in memory only: a central that restarts
// ends its tunnels, and clients connect again.
package tunnels

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

// Errors Admit and Close return; the API maps them to statuses.
var (
	// ErrDisabled: the policy's tunnels.enabled is off (403).
	ErrDisabled = errors.New("tunnels are turned off")
	// ErrPort: the port is outside the policy's ports (403).
	ErrPort = errors.New("port not allowed")
	// ErrLimit: the tenant has max_per_tenant tunnels open (429).
	ErrLimit = errors.New("too many open tunnels")
	// ErrNotFound: no such open tunnel, or not the caller's (404).
	ErrNotFound = errors.New("no such tunnel")
	// ErrAccess: the opener's access is gone since it was checked (a
	// screen ticket redeemed after its tenant was disabled, say) (403).
	ErrAccess = errors.New("access gone")
)

// Defaults of Options.
const (
	DefaultRecheckEvery = 30 * time.Second
	DefaultPoll         = time.Second
	// bufSize is what each direction of a relay holds at most: it writes
	// what it read before it reads again.
	bufSize = wsconn.MaxMessage
)

// CloseEnded is the WebSocket close code of a tunnel central ended (idle,
// lifetime, closed by someone, access gone); the close message's text is
// the reason. A tunnel one side ended closes normally (1000), which reads
// as the end of the stream.
const CloseEnded = 4000

// Reasons a tunnel ends, as the activity log and the close message say them.
const (
	ReasonClient     = "the client closed the connection"
	ReasonVM         = "the VM closed the connection"
	ReasonNodeLost   = "the connection to the VM's node was lost"
	ReasonIdle       = "idle timeout"
	ReasonLifetime   = "maximum lifetime reached"
	ReasonByTenant   = "closed by the tenant"
	ReasonByOperator = "closed by the operator"
	ReasonShutdown   = "central is shutting down"
	ReasonTurnedOff  = "tunnels were turned off in the policy"
)

// Opener is who opens a tunnel, as authenticated when it was opened.
type Opener struct {
	// Operator is set for the operator; the Tenant fields are empty then.
	Operator   bool
	TenantID   string
	TenantName string
	// KeyID and KeyName name the tenant's API key the tunnel was opened
	// with ("": the primary token or a console session).
	KeyID, KeyName string
	// User is the email of the member whose console session opened it.
	User string
}

// who is the activity log's principal.
func (o Opener) who() string {
	if o.Operator {
		return "operator"
	}
	return "tenant:" + o.TenantID
}

// slot is whose max_per_tenant a tunnel counts against: the operator
// counts as one more tenant.
func (o Opener) slot() string {
	if o.Operator {
		return ""
	}
	return o.TenantID
}

// label says who opened it, for people.
func (o Opener) label() string {
	switch {
	case o.User != "":
		return o.User
	case o.Operator:
		return "operator"
	case o.KeyName != "":
		return "key " + o.KeyName
	}
	return "primary token"
}

// Request is a tunnel to admit.
type Request struct {
	Opener Opener
	Node   string
	VMID   string
	VMName string
	// Kind is sdk.TunnelPort or sdk.TunnelScreen; Port is 0 for a screen.
	Kind string
	Port int
	// Path is the route the client called, for the activity log (never a
	// ticket: the API passes the route's template for a screen).
	Path string
}

func (r Request) what() string {
	if r.Kind == sdk.TunnelScreen {
		return r.VMName + " screen"
	}
	return r.VMName + " port " + strconv.Itoa(r.Port)
}

// Store is what the tunnels read of central's store.
type Store interface {
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	GetTenant(ctx context.Context, id string) (*store.Tenant, error)
	GetKey(ctx context.Context, tenant, id string) (*store.APIKey, error)
	GetTeamMember(ctx context.Context, tenant, email string) (*store.TeamMember, error)
}

// Options configure a Manager.
type Options struct {
	Store Store
	// VMGone reports why a tunnel's VM can no longer be reached ("" while
	// it runs): asked at every re-check. Nil skips the VM.
	VMGone func(ctx context.Context, node, vmID string) (reason string, err error)
	// Record receives the OPEN and CLOSE events for the activity log (nil:
	// none kept).
	Record func(sdk.Event)
	// Now is the clock of timeouts and re-checks (time.Now when nil).
	Now func() time.Time
	// Poll is how often, in real time, the loop looks at the clock (1 s by
	// default); RecheckEvery how often, by the clock, it reads the store
	// again (30 s by default).
	Poll, RecheckEvery time.Duration
	Logger             hclog.Logger
}

// Manager holds the open tunnels of this central.
type Manager struct {
	opts Options
	log  hclog.Logger

	mu   sync.Mutex
	open map[string]*Tunnel
	// tickets wait for their one redemption (tickets.go).
	tickets map[string]ticket
	// nextCheck is when, by the clock, the store is read again.
	nextCheck time.Time
}

// New returns a Manager. Call Run to end idle, old and revoked tunnels.
func New(opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.RecheckEvery <= 0 {
		opts.RecheckEvery = DefaultRecheckEvery
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	return &Manager{opts: opts, log: opts.Logger, open: map[string]*Tunnel{}, tickets: map[string]ticket{}}
}

// Tunnel is one admitted tunnel: holding its slot until it ends.
type Tunnel struct {
	m      *Manager
	id     string
	req    Request
	opened time.Time

	// idle and lifetime are the policy's, refreshed at re-checks.
	idle, lifetime atomic.Int64

	toVM, fromVM atomic.Int64
	lastActive   atomic.Int64 // unix nanoseconds, by the clock

	endOnce sync.Once
	ended   chan struct{}
	reason  string
	// conns are closed when the tunnel ends; set by Relay.
	connMu sync.Mutex
	conns  []net.Conn
	// relaying is set once the relay started (OPEN 101 was recorded).
	relaying bool
}

// ID is the tunnel's id ("tun_" and 12 hex digits).
func (t *Tunnel) ID() string { return t.id }

// Ended is closed once the tunnel has ended.
func (t *Tunnel) Ended() <-chan struct{} { return t.ended }

// Reason is why the tunnel ended ("" while it is open).
func (t *Tunnel) Reason() string {
	select {
	case <-t.ended:
		return t.reason
	default:
		return ""
	}
}

// Admit checks a request against the policy (tunnels.enabled, the ports
// for a port tunnel, max_per_tenant) and takes a slot for it. A refusal is
// recorded as OPEN with its status (403 or 429). The caller then calls
// Relay, or Abort when it cannot reach the node.
func (m *Manager) Admit(ctx context.Context, req Request) (*Tunnel, error) {
	pol, err := m.opts.Store.GetPolicy(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the policy: %w", err)
	}
	tp := pol.Tunnels
	switch {
	case !tp.Enabled:
		m.record(req, "OPEN", 403, nil)
		return nil, ErrDisabled
	case req.Kind == sdk.TunnelPort && !PortAllowed(tp.Ports, req.Port):
		m.record(req, "OPEN", 403, nil)
		return nil, fmt.Errorf("%w: port %d is not among the policy's tunnel ports %s", ErrPort, req.Port, strings.Join(tp.Ports, ", "))
	}
	now := m.opts.Now()
	// A screen ticket carries its opener for up to 30 s: look again now.
	if reason, err := m.principalGone(ctx, req.Opener, now); err != nil {
		return nil, fmt.Errorf("check the opener: %w", err)
	} else if reason != "" {
		m.record(req, "OPEN", 403, nil)
		return nil, fmt.Errorf("%w: %s", ErrAccess, reason)
	}
	m.mu.Lock()
	n := 0
	for _, o := range m.open {
		if o.req.Opener.slot() == req.Opener.slot() {
			n++
		}
	}
	if n >= tp.MaxPerTenant {
		m.mu.Unlock()
		m.record(req, "OPEN", 429, nil)
		return nil, fmt.Errorf("%w: %d of %d are open", ErrLimit, n, tp.MaxPerTenant)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	t := &Tunnel{m: m, id: "tun_" + hex.EncodeToString(b), req: req, opened: now, ended: make(chan struct{})}
	t.limits(tp)
	t.lastActive.Store(now.UnixNano())
	m.open[t.id] = t
	m.mu.Unlock()
	return t, nil
}

// limits takes the policy's idle timeout and lifetime.
func (t *Tunnel) limits(tp sdk.TunnelPolicy) {
	t.idle.Store(int64(minutes(tp.IdleTimeoutMinutes, 1, 1440)))
	t.lifetime.Store(int64(minutes(tp.MaxLifetimeMinutes, 1, 10080)))
}

// minutes turns a policy value into a duration, held to its range (the
// store validates it; this keeps a bad record from meaning "never").
func minutes(v, lo, hi int) time.Duration {
	return time.Duration(min(max(v, lo), hi)) * time.Minute
}

// PortAllowed reports whether port is one of the policy's entries: single
// ports ("22") and inclusive ranges ("1024-65535").
func PortAllowed(entries []string, port int) bool {
	for _, e := range entries {
		lo, hi, isRange := strings.Cut(e, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= port && port <= b {
			return true
		}
	}
	return false
}

// Abort gives back an admitted tunnel that never relayed (the node
// refused or did not answer) and records OPEN with that status.
func (t *Tunnel) Abort(status int) {
	t.m.remove(t)
	t.endOnce.Do(func() { close(t.ended) })
	t.m.record(t.req, "OPEN", status, nil)
}

func (m *Manager) remove(t *Tunnel) {
	m.mu.Lock()
	delete(m.open, t.id)
	m.mu.Unlock()
}

// Relay records OPEN (101) and copies bytes between the client and the
// node until the tunnel ends, then records CLOSE with the bytes each way,
// the duration and the reason, and returns the reason. Each direction
// writes what it read before it reads again, so a slow side holds the
// other back and memory stays at one buffer per direction. Relay owns both
// connections and closes them.
func (t *Tunnel) Relay(client, node net.Conn) string {
	t.connMu.Lock()
	t.conns = []net.Conn{client, node}
	t.relaying = true
	t.connMu.Unlock()
	t.m.record(t.req, "OPEN", 101, nil)
	t.m.log.Info("tunnel opened", "id", t.id, "tenant", t.req.Opener.TenantName, "vm", t.req.VMName, "node", t.req.Node,
		"kind", t.req.Kind, "port", t.req.Port, "by", t.req.Opener.label())
	select {
	case <-t.ended: // closed (DELETE, re-check) between Admit and now
		t.closeConns()
	default:
	}
	done := make(chan struct{}, 2)
	go func() { t.copy(node, client, &t.toVM, ReasonClient, ReasonClient, ReasonNodeLost); done <- struct{}{} }()
	go func() { t.copy(client, node, &t.fromVM, ReasonVM, ReasonNodeLost, ReasonClient); done <- struct{}{} }()
	<-done
	<-done
	t.m.remove(t)
	d := t.m.opts.Now().Sub(t.opened)
	t.m.record(t.req, "CLOSE", 200, &sdk.TunnelEnd{ID: t.id, BytesToVM: t.toVM.Load(), BytesFromVM: t.fromVM.Load(),
		DurationMS: d.Milliseconds(), Reason: t.reason})
	t.m.log.Info("tunnel closed", "id", t.id, "tenant", t.req.Opener.TenantName, "vm", t.req.VMName, "node", t.req.Node,
		"bytes_to_vm", t.toVM.Load(), "bytes_from_vm", t.fromVM.Load(), "duration", d.Round(time.Millisecond), "reason", t.reason)
	return t.reason
}

// copy moves bytes from src to dst until src ends (the tunnel then ends
// with srcGone, or srcBroke when src failed rather than closed, unless
// something ended it first), dst refuses a write (dstGone) or the tunnel
// ends.
func (t *Tunnel) copy(dst, src net.Conn, count *atomic.Int64, srcGone, srcBroke, dstGone string) {
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			t.lastActive.Store(t.m.opts.Now().UnixNano())
			// Counted as read, before the write: whoever sees the bytes
			// arrive (an echo, a reply) finds them in the count already.
			count.Add(int64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				t.end(dstGone)
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.m.log.Debug("tunnel read ended", "id", t.id, "error", err)
				t.end(srcBroke)
				return
			}
			t.end(srcGone)
			return
		}
	}
}

// end ends the tunnel once, with the first reason given, and closes both
// connections: the client's with a close message saying why.
func (t *Tunnel) end(reason string) {
	t.endOnce.Do(func() {
		t.reason = reason
		close(t.ended)
		t.closeConns()
	})
}

// closeWither is a connection that can say why it closes (wsconn.Conn).
type closeWither interface {
	CloseWith(code int, reason string) error
}

func (t *Tunnel) closeConns() {
	t.connMu.Lock()
	conns := t.conns
	t.connMu.Unlock()
	for _, c := range conns {
		if cw, ok := c.(closeWither); ok {
			code := websocket.CloseNormalClosure // one side ended: the other reads EOF
			if t.reason != ReasonClient && t.reason != ReasonVM {
				code = CloseEnded // central ended it: the client reads the reason
			}
			// Not while holding anything: a peer that does not read may
			// take up to the close message's write deadline.
			go func() { _ = cw.CloseWith(code, t.reason) }()
			continue
		}
		_ = c.Close()
	}
}

// List returns the open tunnels, oldest first: a tenant's own (tenantID
// set), or all of them ("").
func (m *Manager) List(tenantID string) []sdk.Tunnel {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []sdk.Tunnel{}
	for _, t := range m.open {
		if (tenantID != "" && t.req.Opener.TenantID != tenantID) || t.Reason() != "" {
			continue // another's, or ending
		}
		out = append(out, t.wire())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].OpenedAt.Equal(out[j].OpenedAt) {
			return out[i].OpenedAt.Before(out[j].OpenedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (t *Tunnel) wire() sdk.Tunnel {
	return sdk.Tunnel{ID: t.id, Tenant: t.req.Opener.TenantID, TenantName: t.req.Opener.TenantName, Node: t.req.Node,
		VM: t.req.VMID, VMName: t.req.VMName, Kind: t.req.Kind, Port: t.req.Port, OpenedBy: t.req.Opener.label(),
		OpenedAt: t.opened.UTC(), LastActive: time.Unix(0, t.lastActive.Load()).UTC(),
		BytesToVM: t.toVM.Load(), BytesFromVM: t.fromVM.Load()}
}

// Close ends an open tunnel at once: the tenant's own (tenantID set), or
// any for the operator (""). Another tenant's tunnel is ErrNotFound.
func (m *Manager) Close(id, tenantID string) (sdk.Tunnel, error) {
	m.mu.Lock()
	t, ok := m.open[id]
	m.mu.Unlock()
	if !ok || (tenantID != "" && t.req.Opener.TenantID != tenantID) || t.Reason() != "" {
		return sdk.Tunnel{}, ErrNotFound
	}
	reason := ReasonByOperator
	if tenantID != "" {
		reason = ReasonByTenant
	}
	w := t.wire()
	t.end(reason)
	return w, nil
}

// CloseAll ends every tunnel (central shutting down).
func (m *Manager) CloseAll(reason string) {
	for _, t := range m.snapshot() {
		t.end(reason)
	}
}

func (m *Manager) snapshot() []*Tunnel {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Tunnel, 0, len(m.open))
	for _, t := range m.open {
		out = append(out, t)
	}
	return out
}

// Run ends tunnels that go idle or outlive their lifetime, and re-checks
// every tunnel's access every RecheckEvery, until ctx ends; then it ends
// every tunnel. It runs on every central (each relays its own tunnels).
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(m.opts.Poll)
	defer tick.Stop()
	defer m.CloseAll(ReasonShutdown)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.Tick(ctx)
		}
	}
}

// Tick does one round of the loop at the clock's time: idle and lifetime
// ends, and the store's re-check when it is due.
func (m *Manager) Tick(ctx context.Context) {
	now := m.opts.Now()
	for _, t := range m.snapshot() {
		switch {
		case now.Sub(time.Unix(0, t.lastActive.Load())) >= time.Duration(t.idle.Load()):
			t.end(ReasonIdle)
		case now.Sub(t.opened) >= time.Duration(t.lifetime.Load()):
			t.end(ReasonLifetime)
		}
	}
	m.mu.Lock()
	due := !now.Before(m.nextCheck)
	if due {
		m.nextCheck = now.Add(m.opts.RecheckEvery)
	}
	m.mu.Unlock()
	if due {
		m.Recheck(ctx)
	}
}

// Recheck reads the store for every open tunnel and ends those whose
// access is gone: the tenant disabled or deleted, the API key revoked,
// expired or made read-only, the member removed or made a viewer, the VM
// stopped or gone, or tunnels turned off. A rotated primary token ends
// nothing: the tunnel is not tied to a token. A store that does not answer
// ends nothing either (the next re-check tries again).
func (m *Manager) Recheck(ctx context.Context) {
	open := m.snapshot()
	if len(open) == 0 {
		return
	}
	pol, err := m.opts.Store.GetPolicy(ctx)
	if err != nil {
		m.log.Warn("tunnels: cannot re-check: the store does not answer", "error", err)
		return
	}
	now := m.opts.Now()
	for _, t := range open {
		if !pol.Tunnels.Enabled {
			t.end(ReasonTurnedOff)
			continue
		}
		t.limits(pol.Tunnels)
		reason, err := m.access(ctx, t.req, now)
		if err != nil {
			m.log.Warn("tunnels: cannot re-check a tunnel", "id", t.id, "vm", t.req.VMName, "error", err)
			continue
		}
		if reason != "" {
			t.end(reason)
		}
	}
}

// access says why a tunnel's opener may no longer reach its VM ("" while
// it may).
func (m *Manager) access(ctx context.Context, req Request, now time.Time) (string, error) {
	if reason, err := m.principalGone(ctx, req.Opener, now); reason != "" || err != nil {
		return reason, err
	}
	if m.opts.VMGone != nil {
		return m.opts.VMGone(ctx, req.Node, req.VMID)
	}
	return "", nil
}

// principalGone says why the opener no longer has the access it opened
// the tunnel with ("" while it has): its tenant, key or membership.
func (m *Manager) principalGone(ctx context.Context, o Opener, now time.Time) (string, error) {
	if !o.Operator {
		tn, err := m.opts.Store.GetTenant(ctx, o.TenantID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "the tenant was deleted", nil
		case err != nil:
			return "", err
		case tn.Disabled:
			return "the tenant was disabled", nil
		}
		if o.KeyID != "" {
			k, err := m.opts.Store.GetKey(ctx, o.TenantID, o.KeyID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return "the API key was revoked", nil
			case err != nil:
				return "", err
			case k.Expired(now):
				return "the API key expired", nil
			case k.ReadOnly:
				return "the API key was made read-only", nil
			}
		}
		if o.User != "" {
			mb, err := m.opts.Store.GetTeamMember(ctx, o.TenantID, o.User)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return "the member was removed from the team", nil
			case err != nil:
				return "", err
			case mb.Role.Rank() < sdk.RoleMember.Rank():
				return "the member was made a " + string(mb.Role), nil
			}
		}
	}
	return "", nil
}

// Refused records an OPEN refused before admission (a read-only key, a
// gone node) with its status.
func (m *Manager) Refused(req Request, status int) { m.record(req, "OPEN", status, nil) }

// record writes one OPEN or CLOSE event to the activity log.
func (m *Manager) record(req Request, method string, status int, end *sdk.TunnelEnd) {
	if m.opts.Record == nil {
		return
	}
	verb := "open"
	if method == "CLOSE" {
		verb = "close"
	}
	e := sdk.Event{Time: m.opts.Now().UTC(), Who: req.Opener.who(), Actor: "operator", Method: method, Path: req.Path,
		Target: req.VMName, Action: verb + " tunnel to " + req.what(), Status: status, Key: req.Opener.KeyName,
		User: req.Opener.User, Tunnel: end}
	if req.Kind == sdk.TunnelScreen {
		e.Action = verb + " " + req.what()
	}
	if !req.Opener.Operator {
		e.Tenant, e.Actor = req.Opener.TenantID, req.Opener.TenantName
	}
	m.opts.Record(e)
}
