// Package previews serves HTTP previews of ports inside tenants' VMs through
// central: it opens and closes previews (records in etcd, so every central
// serves them and a restart keeps them) and reverse-proxies each request,
// WebSocket upgrades included, to the guest port through the VM's node, the
// way tunnels reach a guest port (the node's tunnel route and its driver's
// port forward).
//
// A preview is tied to the boot of the VM it was opened in: every request
// asks the node about the VM first, and a VM that stopped, restarted or was
// deleted makes the preview a 404 from that moment, its record dropped.
// Every credential the caller presented is stripped before a request goes
// on, so a token never reaches the guest.
package previews

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/tunnels"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Limits. They are here, in one place; the API's description states the
// port's range too (schemas/fleet-openapi.yaml).
const (
	// MinPort and MaxPort bound a preview's guest port; the policy's
	// tunnels.ports narrows it further.
	MinPort, MaxPort = 1, 65535
	// MaxPerVM is how many previews (ports) one VM may have open.
	MaxPerVM = 4
	// MaxPerOwner is how many previews a tenant (or the operator) may have
	// open in all.
	MaxPerOwner = 20
	// MaxInFlight is how many requests (WebSockets included) one preview
	// carries at once on one central.
	MaxInFlight = 32
	// MaxRequestBody is the largest request body a preview passes on.
	MaxRequestBody = 16 << 20
	// MaxResponseBody is the most a preview passes back for one request: a
	// longer answer is cut off (its connection ends mid-body).
	MaxResponseBody = 64 << 20
	// MaxResponseHeader bounds the guest's response headers.
	MaxResponseHeader = 64 << 10
	// HeaderTimeout is how long a request waits for the guest's answer to
	// start.
	HeaderTimeout = 60 * time.Second
)

// Errors the service returns; the API maps them to statuses.
var (
	// ErrDisabled: the policy's tunnels are off (403).
	ErrDisabled = tunnels.ErrDisabled
	// ErrPort: the port is out of range (400) or outside the policy (403):
	// see ErrBadPort.
	ErrPort = tunnels.ErrPort
	// ErrBadPort: the port is outside 1-65535 (400).
	ErrBadPort = errors.New("bad port")
	// ErrLimit: too many previews for the VM or the owner (429).
	ErrLimit = errors.New("too many previews")
	// ErrNotFound: no such preview, another's, or its VM's boot is over (404).
	ErrNotFound = errors.New("no such preview")
	// ErrVMGone: the VM does not exist on its node (404).
	ErrVMGone = errors.New("the vm does not exist")
	// ErrNotRunning: the VM does not run, so it serves nothing (409).
	ErrNotRunning = errors.New("the vm is not running")
)

// Caller is who opens, closes, lists or uses previews, as the API
// authenticated it.
type Caller struct {
	// Operator is set for the operator, who reaches every preview.
	Operator   bool
	TenantID   string
	TenantName string
	// Label names the caller for people: "primary token", "key ci", an
	// email, "operator".
	Label string
	// ReadOnly is a read-only API key: it may list previews, not use them.
	ReadOnly bool
	// Credential is the bearer token the request came with: stripped
	// wherever else in the request it shows (a header, a query value).
	Credential string
}

// owner is the key-layout owner of the caller's previews.
func (c Caller) owner() string {
	if c.Operator {
		return store.PreviewOperator
	}
	return c.TenantID
}

// Target is a VM the API found and checked the caller may reach.
type Target struct {
	Node, ID, Name string
	// Tenant is the VM's tenant ("" for the operator's own VM).
	Tenant, TenantName string
}

// Store is what previews read and write of central's store.
type Store interface {
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	GetNode(ctx context.Context, name string) (*store.Node, error)
	AddPreview(ctx context.Context, rec *store.Preview, decide func([]store.Preview) (*store.Preview, error)) (*store.Preview, error)
	OwnerPreviews(ctx context.Context, owner string) ([]store.Preview, error)
	ListPreviewRecords(ctx context.Context) ([]store.Preview, error)
	DropPreview(ctx context.Context, owner, id string) error
}

// Options configure a Service.
type Options struct {
	Store Store
	// Client returns a client of node n's API (central's nodecall: through
	// the node's channel, or its advertised URL).
	Client func(n *store.Node) (*sdk.NodeClient, error)
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger hclog.Logger
}

// Service opens, closes, lists and serves previews.
type Service struct {
	opts Options
	log  hclog.Logger

	mu sync.Mutex
	// inFlight are this central's requests per preview, each with the
	// cancel that ends it when the preview is closed here.
	inFlight map[string]map[*flight]struct{}
}

type flight struct{ cancel context.CancelFunc }

// New returns a Service.
func New(opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	return &Service{opts: opts, log: opts.Logger, inFlight: map[string]map[*flight]struct{}{}}
}

// Open opens a preview of port on a running VM for the caller; the same VM
// and port in the same boot hands back the preview already open (created
// false). Errors: ErrBadPort, ErrDisabled, ErrPort, ErrVMGone,
// ErrNotRunning, ErrLimit, or the node's or store's.
func (s *Service) Open(ctx context.Context, c Caller, t Target, port int) (p sdk.Preview, created bool, err error) {
	if port < MinPort || port > MaxPort {
		return p, false, fmt.Errorf("%w: port %d is outside %d-%d", ErrBadPort, port, MinPort, MaxPort)
	}
	pol, err := s.opts.Store.GetPolicy(ctx)
	if err != nil {
		return p, false, fmt.Errorf("read the policy: %w", err)
	}
	switch {
	case !pol.Tunnels.Enabled:
		return p, false, ErrDisabled
	case !tunnels.PortAllowed(pol.Tunnels.Ports, port):
		return p, false, fmt.Errorf("%w: port %d is not among the policy's tunnel ports %s", ErrPort, port, strings.Join(pol.Tunnels.Ports, ", "))
	}
	vm, err := s.vm(ctx, t.Node, t.ID)
	if err != nil {
		return p, false, err
	}
	if vm.State != sdk.StateRunning || vm.StartedAt == nil {
		return p, false, fmt.Errorf("%w: vm %s is %s", ErrNotRunning, t.Name, vm.State)
	}
	owner := c.owner()
	if old, err := s.opts.Store.OwnerPreviews(ctx, owner); err != nil {
		return p, false, err
	} else if len(old) >= MaxPerOwner {
		// At the limit: previews whose VM's boot is over go first.
		s.prune(ctx, old)
	}
	rec := &store.Preview{Preview: sdk.Preview{ID: store.NewPreviewID(), Tenant: t.Tenant, TenantName: t.TenantName, Node: t.Node,
		VM: t.ID, VMName: t.Name, Port: port, OpenedBy: c.Label, OpenedAt: s.opts.Now().UTC()}, Owner: owner, VMStartedAt: vm.StartedAt.UTC()}
	rec.Path = sdk.PreviewPathPrefix + rec.ID + "/"
	got, err := s.opts.Store.AddPreview(ctx, rec, func(existing []store.Preview) (*store.Preview, error) {
		onVM := 0
		for i := range existing {
			e := &existing[i]
			if e.Node != t.Node || e.VM != t.ID {
				continue
			}
			if e.Port == port && e.VMStartedAt.Equal(rec.VMStartedAt) {
				return e, nil
			}
			onVM++
		}
		switch {
		case onVM >= MaxPerVM:
			return nil, fmt.Errorf("%w: vm %s has %d previews open, the most a vm may have", ErrLimit, t.Name, onVM)
		case len(existing) >= MaxPerOwner:
			return nil, fmt.Errorf("%w: %d are open, the most one tenant may have", ErrLimit, len(existing))
		}
		return nil, nil
	})
	if err != nil {
		return p, false, err
	}
	if got.ID == rec.ID {
		s.log.Info("preview opened", "id", rec.ID, "tenant", t.TenantName, "vm", t.Name, "node", t.Node, "port", port, "by", c.Label)
	}
	return got.Preview, got.ID == rec.ID, nil
}

// vm asks the VM's node about it.
func (s *Service) vm(ctx context.Context, node, id string) (*sdk.VM, error) {
	n, err := s.opts.Store.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: node %s is gone", ErrVMGone, node)
	}
	if err != nil {
		return nil, err
	}
	nc, err := s.opts.Client(n)
	if err != nil {
		return nil, err
	}
	vm, err := nc.GetVM(ctx, id)
	if sdk.IsNotFound(err) {
		return nil, ErrVMGone
	}
	if err != nil {
		return nil, err
	}
	return vm, nil
}

// gone says why a preview's boot is over ("" while its VM runs in it, or
// is paused in it), asking the VM's node. A node that cannot be asked is
// an error: it ends nothing.
func (s *Service) gone(ctx context.Context, rec *store.Preview) (reason string, paused bool, err error) {
	vm, err := s.vm(ctx, rec.Node, rec.VM)
	switch {
	case errors.Is(err, ErrVMGone):
		return "the vm was deleted", false, nil
	case err != nil:
		return "", false, err
	case vm.StartedAt == nil || !vm.StartedAt.Equal(rec.VMStartedAt):
		return "the vm was stopped or started again since the preview was opened", false, nil
	case vm.State == sdk.StatePaused:
		return "", true, nil
	case vm.State != sdk.StateRunning:
		return "the vm is " + vm.State, false, nil
	}
	return "", false, nil
}

// prune drops the records of previews whose VM's boot is over.
func (s *Service) prune(ctx context.Context, recs []store.Preview) {
	for i := range recs {
		if reason, _, err := s.gone(ctx, &recs[i]); err == nil && reason != "" {
			s.drop(ctx, &recs[i], reason)
		}
	}
}

// drop removes a preview's record and ends its requests on this central.
func (s *Service) drop(ctx context.Context, rec *store.Preview, reason string) {
	if err := s.opts.Store.DropPreview(ctx, rec.Owner, rec.ID); err != nil {
		s.log.Warn("cannot drop a preview's record", "id", rec.ID, "vm", rec.VMName, "error", err)
		return
	}
	s.endFlights(rec.ID)
	s.log.Info("preview closed", "id", rec.ID, "tenant", rec.TenantName, "vm", rec.VMName, "node", rec.Node, "port", rec.Port, "reason", reason)
}

// VMDeleted drops the previews of a VM central deleted (central/vms calls
// it), and ends their requests on this central. A store that does not
// answer leaves them: their next request finds the VM gone.
func (s *Service) VMDeleted(ctx context.Context, node, vmID string) {
	recs, err := s.opts.Store.ListPreviewRecords(ctx)
	if err != nil {
		s.log.Warn("cannot list previews to drop a deleted vm's", "node", node, "error", err)
		return
	}
	for i := range recs {
		if recs[i].Node == node && recs[i].VM == vmID {
			s.drop(ctx, &recs[i], "the vm was deleted")
		}
	}
}

// Close closes the VM's previews that the caller may reach: the one of
// port, or all of them when port is 0. It returns the ones closed; none is
// ErrNotFound.
func (s *Service) Close(ctx context.Context, c Caller, t Target, port int) ([]sdk.Preview, error) {
	recs, err := s.reachable(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []sdk.Preview
	for i := range recs {
		r := &recs[i]
		if r.Node != t.Node || r.VM != t.ID || (port != 0 && r.Port != port) {
			continue
		}
		reason := "closed by the tenant"
		if c.Operator {
			reason = "closed by the operator"
		}
		if err := s.opts.Store.DropPreview(ctx, r.Owner, r.ID); err != nil {
			return out, err
		}
		s.endFlights(r.ID)
		s.log.Info("preview closed", "id", r.ID, "tenant", r.TenantName, "vm", r.VMName, "node", r.Node, "port", r.Port, "reason", reason)
		out = append(out, r.Preview)
	}
	if len(out) == 0 {
		what := "previews"
		if port != 0 {
			what = "preview of port " + strconv.Itoa(port)
		}
		return nil, fmt.Errorf("%w: vm %s has no open %s", ErrNotFound, t.Name, what)
	}
	return out, nil
}

// reachable is the previews the caller may use: its tenant's, or every
// one for the operator.
func (s *Service) reachable(ctx context.Context, c Caller) ([]store.Preview, error) {
	if c.Operator {
		return s.opts.Store.ListPreviewRecords(ctx)
	}
	return s.opts.Store.OwnerPreviews(ctx, c.owner())
}

// List returns the caller's open previews (every one for the operator),
// oldest first. It lists what is recorded: a preview whose VM stopped is
// dropped when it is next used or closed.
func (s *Service) List(ctx context.Context, c Caller) ([]sdk.Preview, error) {
	recs, err := s.reachable(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.Preview, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Preview)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].OpenedAt.Before(out[j].OpenedAt) })
	return out, nil
}

// find is the preview id the caller may use, or ErrNotFound.
func (s *Service) find(ctx context.Context, c Caller, id string) (*store.Preview, error) {
	if !store.ValidName(id) {
		return nil, ErrNotFound
	}
	recs, err := s.reachable(ctx, c)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if recs[i].ID == id {
			return &recs[i], nil
		}
	}
	return nil, ErrNotFound
}

// enter counts a request against the preview's MaxInFlight on this central
// and gives it a context that Close and drop end; leave undoes it.
func (s *Service) enter(ctx context.Context, id string) (context.Context, func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.inFlight[id]
	if len(fs) >= MaxInFlight {
		return nil, nil, false
	}
	if fs == nil {
		fs = map[*flight]struct{}{}
		s.inFlight[id] = fs
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &flight{cancel: cancel}
	fs[f] = struct{}{}
	return ctx, func() {
		cancel()
		s.mu.Lock()
		delete(fs, f)
		if len(fs) == 0 && s.inFlight[id] != nil && len(s.inFlight[id]) == 0 {
			delete(s.inFlight, id)
		}
		s.mu.Unlock()
	}, true
}

// endFlights ends this central's requests of a preview (a WebSocket
// relayed through it among them).
func (s *Service) endFlights(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.inFlight[id] {
		f.cancel()
	}
}

// InFlight is how many requests preview id carries on this central now.
func (s *Service) InFlight(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inFlight[id])
}

// Status is the HTTP status of an error of the service, with words for
// people: the API's answer.
func Status(err error) (status int, hint string) {
	switch {
	case errors.Is(err, ErrBadPort):
		return http.StatusBadRequest, fmt.Sprintf(`send {"port": N} with N in %d-%d`, MinPort, MaxPort)
	case errors.Is(err, ErrDisabled):
		return http.StatusForbidden, "previews ride on tunnels: the operator turns them on in the policy (tunnels.enabled, GET/PUT /fleet/policy)"
	case errors.Is(err, ErrPort):
		return http.StatusForbidden, "the operator sets the ports tunnels and previews may reach in the policy (tunnels.ports)"
	case errors.Is(err, ErrLimit):
		return http.StatusTooManyRequests, fmt.Sprintf("close one (GET /fleet/previews lists them; DELETE /fleet/vms/{node}/{id}/preview closes a vm's): a vm may have %d, a tenant %d", MaxPerVM, MaxPerOwner)
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound, "GET /fleet/previews lists your open previews; a preview ends when its vm stops"
	case errors.Is(err, ErrVMGone):
		return http.StatusNotFound, "GET /fleet/vms lists your VMs"
	case errors.Is(err, ErrNotRunning):
		return http.StatusConflict, "start the vm (POST /fleet/vms/{node}/{id}/start) and open the preview again"
	}
	return 0, ""
}
