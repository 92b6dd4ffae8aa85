// Package api serves central's fleet API (/fleet/..., /healthz, /metrics):
// it authenticates the operator and tenants, lets each call only the routes
// the access table allows, records every change in the activity log, and
// answers in JSON with errors people can act on. The routes are described in
// schemas/fleet-openapi.yaml and the tests hold the server to it.
package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/fleet"
	"github.com/fluxvm/fluxvm/central/history"
	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/keys"
	"github.com/fluxvm/fluxvm/central/leases"
	"github.com/fluxvm/fluxvm/central/metering"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/overlays"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/pools"
	"github.com/fluxvm/fluxvm/central/previews"
	"github.com/fluxvm/fluxvm/central/reconciler"
	"github.com/fluxvm/fluxvm/central/signup"
	"github.com/fluxvm/fluxvm/central/snapshots"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/team"
	"github.com/fluxvm/fluxvm/central/tunnels"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/central/volumes"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/central/webhooks/netguard"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
	"github.com/hashicorp/go-hclog"
)

// specHint points callers at the API's description.
const specHint = "the fleet API is described in schemas/fleet-openapi.yaml"

// Options configure the fleet API.
type Options struct {
	Store *store.Store
	// FleetToken is the operator's token (nodes heartbeat with it too).
	// Empty is lab mode: callers without a token are the operator, until
	// the first tenant exists; from then on only tenants get in.
	FleetToken string
	Logger     hclog.Logger
	Version    string
	// Now is the clock (time.Now by default).
	Now func() time.Time
	// Activity receives every change made through the API (nil: none kept).
	Activity ActivityLog
	// HeartbeatInterval is how often nodes are told to heartbeat (10 s by
	// default); a node silent for three intervals is marked down.
	HeartbeatInterval time.Duration
	// Events receives every notification (nil: the store records them in
	// etcd, where GET /fleet/notifications and the webhooks read them).
	Events notify.Sink
	// WebhookGuard sends tenants' webhook deliveries (nil: netguard with
	// the system's resolver). Tests give one with their own resolver.
	WebhookGuard *netguard.Guard
	// WebhookSleep waits between a delivery's tries (nil: a timer); tests
	// inject their clock's.
	WebhookSleep func(ctx context.Context, d time.Duration) error
	// PublicURL is central's URL as browsers reach it: a change made with a
	// console session must come from its origin, and with https the session
	// cookie is Secure.
	PublicURL string
	// SessionTTL is how long a console session lasts (identity.DefaultTTL
	// by default).
	SessionTTL time.Duration
	// OperatorEmails sign in to the console as the operator (matched
	// lowercase), with the policy's operator_emails.
	OperatorEmails []string
	// OIDC is the sign-in with the company's identity provider (nil: SSO
	// is off), and OIDCProviderName its name on the sign-in button.
	OIDC             *identity.OIDC
	OIDCProviderName string
	// Payments is Stripe (off without a secret key); Signup opens
	// self-service sign-up (off by default).
	Payments payments.Config
	Signup   SignupOptions
	// HistoryRetention is how long this owner keeps rows members pushed
	// (0: 90 days).
	HistoryRetention time.Duration
}

// ActivityLog is where the API records changes (central/audit.Log).
type ActivityLog interface {
	// Append records one change; it must not block for long.
	Append(e audit.Event)
	// Recent returns up to limit of the newest events, newest first; with
	// tenant set, only that tenant's (by id).
	Recent(limit int, tenant string) []audit.Event
}

// Access says who may call a route.
type Access int

const (
	// Operator routes are for the fleet token only.
	Operator Access = iota
	// Tenant routes are for tenants (their own objects) and the operator.
	Tenant
	// Public routes need no token.
	Public
	// FleetMember routes are for a member central's fleet-scoped token only
	// (docs/fleets.md), on the owner central.
	FleetMember
)

func (a Access) String() string {
	return [...]string{"operator", "tenant", "public", "member"}[a]
}

// Route is one entry of the access table: every route the server serves is
// here, and nothing else is.
type Route struct {
	Method, Path string
	Access       Access
	// NoActivity keeps a changing route out of the activity log (node
	// heartbeats).
	NoActivity bool
	// Action says in words what a changing route does, for the activity
	// log: "launch vm", "run in"; the target's name follows it there.
	Action string
	// Role is, on a tenant route, the least role a member of the tenant's
	// team needs to call it (the primary token acts as an owner, an API key
	// as an admin). Empty closes the route to members: a new tenant route is
	// theirs only once it says which role may call it.
	Role sdk.Role
	// NodeOwn admits an enrolled node's credential on the route for its own
	// {name} (its heartbeat and channel), besides the route's Access.
	NodeOwn bool
	// OwnerPoll admits the poll token a member central gave its owner
	// (GET /fleet/federation/site on the member).
	OwnerPoll bool
	handler   func(*Server) http.HandlerFunc
}

// Principal is who is calling.
type Principal struct {
	Operator bool
	Tenant   *store.Tenant // set for a tenant
	// Key is the tenant's named API key the call came with (nil: the
	// tenant's primary token, or the operator).
	Key *sdk.APIKey
	// Role is what the caller may do in its tenant: owner for the primary
	// token, admin for a key, a member's own role in a session.
	Role sdk.Role
	// User is the email of the member whose console session made the call
	// ("": no session).
	User string
	// Member is the fleet member whose credential made the call: a member
	// central's fleet-scoped token or an enrolled node's credential.
	Member *fleet.Member
}

// Who names the principal for logs.
func (p Principal) Who() string {
	if p.Tenant != nil {
		return "tenant:" + p.Tenant.ID
	}
	if p.Member != nil {
		return p.Member.Kind + ":" + p.Member.Name
	}
	return "operator"
}

type principalKey struct{}

// PrincipalOf returns the caller of a request that passed authentication.
func PrincipalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// Server is the fleet API.
type Server struct {
	opts   Options
	log    hclog.Logger
	router *mux.Router
	// leading is whether this central leads the election (SetLeader).
	leading atomic.Bool
	// pools keeps the warm pools (its loop runs on the leader: PoolLoop).
	pools *pools.Service
	fleet []byte // the fleet token, for constant-time comparison
	// prom is this server's Prometheus registry (see health.go).
	prom      *metrics
	fleetProm *fleetMetrics // placements, reservations, leadership (metrics_fleet.go)
	nodes     *nodecall.Caller
	place     *placement.Placer
	vms       *vms.Remover
	launch    *vms.Launcher
	lister    *vms.Lister
	leases    *leases.Service
	metering  *metering.Service
	recon     *reconciler.Reconciler
	drainer   *drainer.Drainer
	keys      *keys.Service
	team      *team.Service
	sessions  *identity.Sessions
	webhooks  *webhooks.Service
	tunnels   *tunnels.Manager
	previews  *previews.Service
	snapshots *snapshots.Service
	volumes   *volumes.Service
	overlays  *overlays.Service
	payments  *payments.Service
	signup    *signup.Service
	// federation pairs this central with others and enrolls nodes (docs/fleets.md).
	federation *fleet.Service
	// pusher sends this member's history to its owner; ingest keeps what
	// members sent this owner (docs/history.md).
	pusher *history.Pusher
	ingest *history.Ingest
	// pruned is when the leader last dropped old notifications (UnixNano).
	pruned atomic.Int64
	// publicOrigin is PublicURL's scheme and host, what a console's Origin must be.
	publicOrigin string
}

// New makes the fleet API.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	s := &Server{opts: opts, log: opts.Logger, router: mux.NewRouter(), fleet: []byte(opts.FleetToken)}
	s.prom = newMetrics(opts.Store)
	s.fleetProm = newFleetMetrics(s.prom.reg, opts.Store)
	s.nodes = nodecall.New(opts.FleetToken)
	s.place = placement.New(opts.Store)
	s.vms = vms.New(opts.Store, s.nodes, opts.Now, opts.Logger)
	s.lister = vms.NewLister(viewNodes{opts.Store, s.place}, s.nodes)
	s.launch = vms.NewLauncher(opts.Store, s.place, s.nodes, s.fleetProm, opts.Now, opts.Logger)
	s.drainer = drainer.New(opts.Store, s.nodes, s.place, s.vms, opts.Now, opts.Logger)
	s.leases = leases.New(opts.Store, s.vms, opts.Now, opts.Logger)
	s.pools = pools.New(opts.Store, s.nodes, s.place, opts.Now, opts.Logger)
	s.keys = keys.New(opts.Store, opts.Now, opts.Logger)
	s.team = team.New(opts.Store, opts.Now, opts.Logger)
	s.tunnels = tunnels.New(tunnels.Options{Store: opts.Store, VMGone: s.vmGone, Now: opts.Now, Logger: opts.Logger.Named("tunnels"),
		Record: func(e sdk.Event) {
			if opts.Activity != nil {
				opts.Activity.Append(e)
			}
		}})
	s.previews = previews.New(previews.Options{Store: opts.Store, Client: s.nodes.Client, Now: opts.Now, Logger: opts.Logger.Named("previews")})
	s.sessions = identity.NewSessions(opts.Store, opts.SessionTTL, opts.Now, s.isOperatorEmail, opts.Logger)
	if u, err := url.Parse(opts.PublicURL); err == nil && u.Scheme != "" && u.Host != "" {
		s.publicOrigin = u.Scheme + "://" + u.Host
	}
	events := opts.Events
	if events == nil {
		events = opts.Store
	}
	s.metering = metering.New(opts.Store, events, opts.Now, opts.Logger)
	s.vms.Notify, s.launch.Notify, s.drainer.Notify, s.leases.Notify = events, events, events, events
	s.snapshots = snapshots.New(opts.Store, s.nodes, opts.Now, opts.Logger.Named("snapshots"))
	s.snapshots.Notify = events
	s.vms.Deleted = func(ctx context.Context, node, vmID string) { // snapshots and previews end with their VM
		s.snapshots.VMDeleted(ctx, node, vmID)
		s.previews.VMDeleted(ctx, node, vmID)
	}
	s.volumes = volumes.New(opts.Store, s.nodes, opts.Now, opts.Logger.Named("volumes"))
	s.overlays = overlays.New(opts.Store, s.nodes, opts.Now, opts.Logger.Named("overlays"))
	s.volumes.Notify = events
	s.recon = reconciler.New(reconciler.Options{Store: opts.Store, Nodes: s.nodes, Leases: s.leases, Drains: s.drainer, Budgets: s.metering,
		Ending: s.leases, Notify: events, Silence: DownAfterIntervals * opts.HeartbeatInterval, Now: opts.Now, Logger: opts.Logger})
	guard := opts.WebhookGuard
	if guard == nil {
		guard = &netguard.Guard{Resolver: net.DefaultResolver}
	}
	s.webhooks = webhooks.New(webhooks.Options{Store: opts.Store, Guard: guard, Now: opts.Now, Sleep: opts.WebhookSleep,
		Logger: opts.Logger.Named("webhooks")})
	s.payments = s.newPayments()
	s.signup = s.newSignup()
	s.federation = fleet.New(fleet.Options{Store: opts.Store, Now: opts.Now, Logger: opts.Logger.Named("fleet"), LocalSite: s.localSite})
	s.overlays.FleetFloor = s.federation.FloorPolicy // a member's tenant networks are held to its owner's floor
	s.pusher, s.ingest = s.newHistory()
	for _, rt := range Routes() {
		rt := rt
		s.router.Handle(rt.Path, s.instrument(rt.Method+" "+rt.Path, s.guard(rt, rt.handler(s)))).Methods(rt.Method)
	}
	s.router.NotFoundHandler = s.instrument("unmatched", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonapi.WriteError(w, http.StatusNotFound, "no such endpoint: "+jsonapi.Echo(r.Method)+" "+jsonapi.Echo(r.URL.Path), specHint)
	}))
	s.router.MethodNotAllowedHandler = s.instrument("unmatched", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonapi.WriteError(w, http.StatusMethodNotAllowed, jsonapi.Echo(r.Method)+" is not allowed on "+jsonapi.Echo(r.URL.Path), specHint)
	}))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// guard authenticates the caller, applies the access table, holds the
// request to the ranges of the API's description and records the change in
// the activity log.
func (s *Server) guard(rt Route, next http.HandlerFunc) http.Handler {
	next = inBounds(rt, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.Access == Public {
			next(w, r)
			return
		}
		p, status, msg, hint := s.authenticate(r)
		if status != 0 {
			if status == http.StatusForbidden && (p.Tenant != nil || p.User != "") {
				s.record(r, p, rt.Action, "", status) // a disabled tenant knocking, a change from outside the console
			}
			jsonapi.WriteError(w, status, msg, hint)
			return
		}
		if msg, hint := memberRefusal(rt, r, p); msg != "" {
			s.record(r, p, rt.Action, "", http.StatusForbidden)
			jsonapi.WriteError(w, http.StatusForbidden, msg, hint)
			return
		}
		if rt.Access == Operator && !p.Operator && !(rt.NodeOwn && p.Member != nil) {
			s.record(r, p, rt.Action, "", http.StatusForbidden)
			jsonapi.WriteError(w, http.StatusForbidden, "this route is for the operator: "+r.Method+" "+rt.Path,
				"tenants may call the routes listed in docs/tenancy.md; ask the operator for anything else")
			return
		}
		if msg, hint := roleRefusal(rt, p); msg != "" {
			s.record(r, p, rt.Action, "", http.StatusForbidden)
			jsonapi.WriteError(w, http.StatusForbidden, msg, hint)
			return
		}
		if p.Key != nil && p.Key.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.record(r, p, rt.Action, "", http.StatusForbidden)
			jsonapi.WriteError(w, http.StatusForbidden, "API key "+p.Key.Name+" is read-only: it may only read (GET), not "+r.Method+" "+rt.Path,
				"make this call with a full key or the tenant's primary token; the primary token makes full keys (fluxctl fleet keys create NAME)")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		// Reads, and dry runs (an estimate; nothing changes), are not activity.
		if r.Method == http.MethodGet || r.Method == http.MethodHead || rt.NoActivity || r.URL.Query().Get("dry_run") == "true" {
			next(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		n := &named{target: targetOf(r)}
		next(rec, r.WithContext(context.WithValue(r.Context(), namedKey{}, n)))
		s.record(r, p, rt.Action, n.target, rec.status)
	})
}

// roleRefusal says why a tenant's caller may not call a tenant route with
// its role ("" when it may): a member in a console session on a route that
// names no role, or anyone whose role ranks below the route's.
func roleRefusal(rt Route, p Principal) (msg, hint string) {
	switch {
	case p.Tenant == nil || rt.Access != Tenant:
		return "", ""
	case rt.Role == "" && p.User != "":
		return "members signed in to the console may not call " + rt.Method + " " + rt.Path,
			"this route takes the tenant's primary token or one of its API keys"
	case p.Role.Rank() < rt.Role.Rank():
		return fmt.Sprintf("the %s role may not call %s %s: it takes %s or above", p.Role, rt.Method, rt.Path, rt.Role),
			"an admin or owner of the team can change your role (fluxctl fleet member-role EMAIL ROLE)"
	}
	return "", ""
}

// authenticate finds the caller from the bearer token: the operator's fleet
// token, a tenant's primary token (fvt_) or one of its API keys (fvk_). An
// expired key is as invalid as an unknown one; a disabled tenant's token and
// keys are refused alike.
func (s *Server) authenticate(r *http.Request) (p Principal, status int, msg, hint string) {
	const tokenHint = "send Authorization: Bearer <token>: the operator's fleet token (central -token), a tenant's fvt_ token or one of its fvk_ API keys"
	header := r.Header.Get("Authorization")
	if c, err := r.Cookie(identity.CookieName); header == "" && err == nil && c.Value != "" {
		return s.sessionPrincipal(r, c.Value)
	}
	scheme, token, _ := strings.Cut(header, " ")
	if header != "" && !strings.EqualFold(scheme, "Bearer") {
		// A bare token, or another scheme, is refused before it is looked at.
		return p, http.StatusUnauthorized, "the Authorization header must use the Bearer scheme", tokenHint
	}
	token = strings.TrimSpace(token)
	if token != "" && len(s.fleet) > 0 && subtle.ConstantTimeCompare([]byte(token), s.fleet) == 1 {
		return Principal{Operator: true}, 0, "", ""
	}
	if strings.HasPrefix(token, sdk.FleetTokenPrefix) || strings.HasPrefix(token, sdk.NodeCredentialPrefix) || strings.HasPrefix(token, sdk.OwnerPollPrefix) {
		return s.fleetPrincipal(r, token)
	}
	if strings.HasPrefix(token, TenantTokenPrefix) || strings.HasPrefix(token, sdk.APIKeyPrefix) {
		var err error
		if strings.HasPrefix(token, TenantTokenPrefix) {
			p.Tenant, err = s.opts.Store.TenantByToken(r.Context(), store.HashToken(token))
		} else {
			var k *store.APIKey
			k, p.Tenant, err = s.keys.Authenticate(r.Context(), token)
			if err == nil {
				wire := keys.Wire(*k)
				p.Key, p.Role = &wire, sdk.RoleAdmin
			}
		}
		if p.Key == nil {
			p.Role = sdk.RoleOwner
		}
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, keys.ErrUnknown):
			return Principal{}, http.StatusUnauthorized, "invalid token", tokenHint
		case err != nil:
			s.log.Error("look up a tenant's token or key", "error", err)
			return Principal{}, http.StatusServiceUnavailable, "cannot check the token now", "central's store does not answer; retry"
		case p.Tenant.Disabled:
			return p, http.StatusForbidden, "tenant " + p.Tenant.Name + " is disabled", "ask the operator to enable it"
		}
		return p, 0, "", ""
	}
	if len(s.fleet) == 0 && token == "" {
		// Lab mode: open until the first tenant exists.
		ts, err := s.opts.Store.ListTenants(r.Context())
		if err != nil {
			return p, http.StatusServiceUnavailable, "cannot check the token now", "central's store does not answer; retry"
		}
		if len(ts) == 0 {
			return Principal{Operator: true}, 0, "", ""
		}
		return p, http.StatusUnauthorized, "central runs without -token and has tenants: only tenant tokens are accepted",
			"restart central with -token to get an operator, or send a tenant's fvt_ token"
	}
	if token == "" {
		return p, http.StatusUnauthorized, "missing token", tokenHint
	}
	return p, http.StatusUnauthorized, "invalid token", tokenHint
}

// sessionPrincipal finds the caller from a console session's cookie (only
// when no Authorization header came: a bearer token ignores the cookie),
// and refuses a change that does not come from the console.
func (s *Server) sessionPrincipal(r *http.Request, token string) (p Principal, status int, msg, hint string) {
	who, err := s.sessions.Lookup(r.Context(), token)
	switch {
	case errors.Is(err, identity.ErrNoSession):
		return p, http.StatusUnauthorized, "your console session has ended", "sign in again (GET /auth/login)"
	case err != nil:
		s.log.Error("look up a console session", "error", err)
		return p, http.StatusServiceUnavailable, "cannot check the session now", "central's store does not answer; retry"
	}
	p.User = who.Session.Email
	if who.Tenant == nil {
		p.Operator = true
	} else {
		p.Tenant, p.Role = who.Tenant, who.Member.Role
	}
	if err := identity.CheckConsoleChange(r, s.publicOrigin); err != nil {
		return p, http.StatusForbidden, err.Error(), "changes made in the console come from the console's own pages; scripts use a token or an API key"
	}
	if p.Tenant != nil && p.Tenant.Disabled {
		return p, http.StatusForbidden, "tenant " + p.Tenant.Name + " is disabled", "ask the operator to enable it"
	}
	return p, 0, "", ""
}

// isOperatorEmail says whether email signs in as the operator: one of
// central's -sso-operator emails, or of the policy's operator_emails (read
// on every call, so that removing one ends its sessions at once).
func (s *Server) isOperatorEmail(ctx context.Context, email string) (bool, error) {
	for _, e := range s.opts.OperatorEmails {
		if store.NormalEmail(e) == email {
			return true, nil
		}
	}
	p, err := s.opts.Store.GetPolicy(ctx)
	if err != nil {
		return false, err
	}
	for _, e := range p.OperatorEmails {
		if store.NormalEmail(e) == email {
			return true, nil
		}
	}
	return false, nil
}

// record appends one event to the activity log. The path is the escaped
// one (plain ASCII, as the caller sent it); the log bounds it, and every
// other field.
func (s *Server) record(r *http.Request, p Principal, action, target string, status int) {
	if s.opts.Activity == nil {
		return
	}
	if action == "" { // a read, refused
		action = r.Method + " " + r.URL.EscapedPath()
	}
	e := audit.Event{Time: s.opts.Now().UTC(), Who: p.Who(), Actor: "operator", Method: r.Method, Path: r.URL.EscapedPath(),
		Target: target, Action: strings.TrimSpace(action + " " + target), Status: status}
	if p.Tenant != nil {
		e.Tenant, e.Actor = p.Tenant.ID, p.Tenant.Name
	}
	if p.Key != nil {
		e.Key = p.Key.Name
	}
	e.User = p.User
	s.opts.Activity.Append(e)
}

// named holds the target of a change for the activity log: first what the
// request names, then, when a handler found the object, its name (a VM
// named by its id is logged by its name).
type named struct{ target string }

type namedKey struct{}

// nameTarget tells the activity log the name of what the request is about,
// once the handler has found it; a name that is not valid is not logged.
func nameTarget(r *http.Request, name string) {
	if store.ValidName(name) {
		setTarget(r, name)
	}
}

// setTarget replaces the activity log's target of r with a value its
// caller has checked.
func setTarget(r *http.Request, target string) {
	if n, ok := r.Context().Value(namedKey{}).(*named); ok {
		n.target = target
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// viewNodes is the store with the node records read from placement's watched view
// (placement.Placer.Nodes) rather than from etcd: the fleet-wide VM list's reads.
type viewNodes struct {
	*store.Store
	place *placement.Placer
}

func (v viewNodes) ListNodes(ctx context.Context) ([]store.Node, error) { return v.place.Nodes(ctx) }
