// Package overlays runs tenants' private networks across nodes: it keeps
// each overlay's record (subnet, port, members and their public keys) in the
// store and tells every member node what its part and its peers are, so the
// node's network plugin joins them with encrypted tunnels. Keys are made on
// the nodes; central sees and hands out public keys only, and rotates them
// one node at a time so that traffic goes on.
package overlays

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// An overlay's index n gives it 10.231.<n>.0/24 and UDP port 51820+n; member
// node k (0 to 15) holds 10.231.<n>.<16k>/28 of it: 13 guests per node.
const (
	SubnetPrefix = "10.231"
	BasePort     = 51820
)

// NodeTimeout bounds one call to a node about an overlay.
const NodeTimeout = 30 * time.Second

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// Store is what overlays need of central's store.
type Store interface {
	GetNode(ctx context.Context, name string) (*store.Node, error)
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	CreateOverlay(ctx context.Context, rec *store.Overlay) error
	GetOverlay(ctx context.Context, tenant, name string) (*store.Overlay, error)
	ListOverlays(ctx context.Context, tenant string) ([]store.Overlay, error)
	PutOverlay(ctx context.Context, rec *store.Overlay) error
	DeleteOverlay(ctx context.Context, rec *store.Overlay) error
	LockOverlay(ctx context.Context, tenant, name string) (func(), error)
}

// Service does the overlay routes' work. It is safe for concurrent use;
// changes of one overlay run under its lock in the store, on every central.
type Service struct {
	st    Store
	nodes *nodecall.Caller
	now   func() time.Time
	log   hclog.Logger
	// FleetFloor is, on a member central, the fleet owner's egress floor
	// in force (nil: none; central/fleet keeps it). Nil: no fleet floor.
	FleetFloor func(ctx context.Context) (*sdk.EgressPolicy, error)
}

// New makes a Service.
func New(st Store, nodes *nodecall.Caller, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, nodes: nodes, now: now, log: log}
}

// Subnet is the overlay's /24; Part is member slot k's /28 of it.
func Subnet(index int) string  { return fmt.Sprintf("%s.%d.0/24", SubnetPrefix, index) }
func Part(index, k int) string { return fmt.Sprintf("%s.%d.%d/28", SubnetPrefix, index, 16*k) }

func view(rec *store.Overlay, operator bool) sdk.Overlay {
	o := rec.Overlay
	o.Subnet, o.ListenPort = Subnet(rec.Index), int64(BasePort+rec.Index)
	if o.Members == nil {
		o.Members = []sdk.OverlayMember{}
	}
	if o.Egress.Mode == "" {
		o.Egress.Mode = "open"
	}
	if !operator {
		o.Tenant = ""
	}
	return o
}

func notFound(name string) error {
	return &jsonapi.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no overlay %q", jsonapi.Echo(name)), Hint: "GET /fleet/overlays lists yours"}
}

// List lists a tenant's overlays (every tenant's for "" and the operator).
func (s *Service) List(ctx context.Context, tenant string, operator bool) ([]sdk.Overlay, error) {
	recs, err := s.st.ListOverlays(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := []sdk.Overlay{}
	for i := range recs {
		out = append(out, view(&recs[i], operator))
	}
	return out, nil
}

// Get returns one of the tenant's overlays.
func (s *Service) Get(ctx context.Context, tenant, name string, operator bool) (*sdk.Overlay, error) {
	rec, err := s.get(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	v := view(rec, operator)
	return &v, nil
}

func (s *Service) get(ctx context.Context, tenant, name string) (*store.Overlay, error) {
	rec, err := s.st.GetOverlay(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(name)
	}
	return rec, err
}

// Create makes the tenant's overlay and adds its first nodes. The tenant's
// egress policy is clamped to the floor (Floor); what would loosen it is
// refused, with the reasons on the record.
func (s *Service) Create(ctx context.Context, tenant string, req sdk.CreateOverlayRequest) (*sdk.Overlay, error) {
	if tenant == "" {
		return nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: "an overlay belongs to a tenant", Hint: "as the operator, name the tenant: ?tenant=ID"}
	}
	if !nameRE.MatchString(req.Name) {
		return nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("overlay name %q is not valid", jsonapi.Echo(req.Name)),
			Hint: "an overlay name is 1-40 lowercase letters, digits and '-', starting with a letter or digit"}
	}
	if len(req.Nodes) > sdk.MaxOverlayMembers {
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("an overlay has at most %d nodes, not %d", sdk.MaxOverlayMembers, len(req.Nodes)), Hint: "name fewer nodes"}
	}
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return nil, err
	}
	floor, _, err := s.Floor(ctx, pol)
	if err != nil {
		return nil, err
	}
	eff, refused, err := Clamp(&floor, req.Egress)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	rec := &store.Overlay{Overlay: sdk.Overlay{Name: req.Name, Tenant: tenant, Egress: eff, EgressRefused: refused, CreatedAt: s.now().UTC()},
		ID: "ov-" + hex.EncodeToString(id), LocalEgress: req.Egress}
	switch err := s.st.CreateOverlay(ctx, rec); {
	case errors.Is(err, store.ErrExists):
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("you have an overlay named %s already", req.Name), Hint: "choose another name, or delete that one"}
	case errors.Is(err, store.ErrNoOverlayIndex):
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("the fleet holds %d overlays, all taken", store.MaxOverlays), Hint: "delete an overlay first"}
	case err != nil:
		return nil, err
	}
	for _, r := range refused {
		s.log.Warn("egress policy refused: it would loosen the operator's floor", "tenant", tenant, "overlay", req.Name, "reason", r)
	}
	var out *sdk.Overlay
	for _, n := range req.Nodes {
		if out, err = s.AddNode(ctx, tenant, req.Name, n, true); err != nil {
			return nil, err
		}
	}
	if out == nil {
		v := view(rec, false)
		out = &v
	}
	return out, nil
}

// Delete removes the overlay from every member node, then its record. A node
// with VMs still in the overlay refuses (409), and the overlay stays.
func (s *Service) Delete(ctx context.Context, tenant, name string) error {
	unlock, err := s.st.LockOverlay(ctx, tenant, name)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := s.get(ctx, tenant, name)
	if err != nil {
		return err
	}
	for len(rec.Members) > 0 {
		m := rec.Members[0]
		if err := s.leave(ctx, rec, m.Node); err != nil {
			return err
		}
		rec.Members = rec.Members[1:]
		if err := s.st.PutOverlay(ctx, rec); err != nil {
			return err
		}
		if err := s.sync(ctx, rec, ""); err != nil {
			return err
		}
	}
	return s.st.DeleteOverlay(ctx, rec)
}

// AddNode makes node a member: the node makes its part and its key, then
// every other member learns it as a peer.
func (s *Service) AddNode(ctx context.Context, tenant, name, node string, operator bool) (*sdk.Overlay, error) {
	unlock, err := s.st.LockOverlay(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := s.get(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	n, err := s.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !store.ValidName(node)) {
		return nil, &jsonapi.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no node %q", jsonapi.Echo(node)), Hint: "fluxctl fleet nodes lists them"}
	}
	if err != nil {
		return nil, err
	}
	if len(n.Networks) == 0 {
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("node %s has no network plugin up, so it cannot hold an overlay", node),
			Hint: "choose a node whose NETWORKS column (fluxctl fleet nodes -o wide) names one"}
	}
	used := map[string]bool{}
	for _, m := range rec.Members {
		if m.Node == node {
			return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("node %s is a member of overlay %s already", node, name), Hint: "nothing to do"}
		}
		used[m.Subnet] = true
	}
	if len(rec.Members) >= sdk.MaxOverlayMembers {
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("overlay %s has %d nodes, the most it holds", name, sdk.MaxOverlayMembers), Hint: "remove a node first"}
	}
	m := sdk.OverlayMember{Node: node}
	for k := 0; k < sdk.MaxOverlayMembers; k++ {
		if p := Part(rec.Index, k); !used[p] {
			m.Subnet = p
			break
		}
	}
	st, err := s.ensure(ctx, rec, m, n)
	if err != nil {
		return nil, err
	}
	if st.Endpoint == "" {
		_ = s.leaveNode(ctx, rec, n)
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("node %s does not say where other nodes reach it", node),
			Hint: `set overlay_address in the node's plugin "netns" config block (its address the other nodes reach)`}
	}
	m.PublicKey, m.Endpoint = st.PublicKey, st.Endpoint
	rec.Members = append(rec.Members, m)
	if err := s.st.PutOverlay(ctx, rec); err != nil {
		return nil, err
	}
	if err := s.sync(ctx, rec, node); err != nil {
		return nil, err
	}
	v := view(rec, operator)
	return &v, nil
}

// RemoveNode takes node out: its part goes from the node (refused while
// VMs are in it), then every other member forgets it.
func (s *Service) RemoveNode(ctx context.Context, tenant, name, node string, operator bool) (*sdk.Overlay, error) {
	unlock, err := s.st.LockOverlay(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := s.get(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(rec.Members, func(m sdk.OverlayMember) bool { return m.Node == node })
	if i < 0 {
		return nil, &jsonapi.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("node %q is not a member of overlay %s", jsonapi.Echo(node), name), Hint: "GET /fleet/overlays/" + name + " lists its members"}
	}
	if err := s.leave(ctx, rec, node); err != nil {
		return nil, err
	}
	rec.Members = slices.Delete(rec.Members, i, i+1)
	if err := s.st.PutOverlay(ctx, rec); err != nil {
		return nil, err
	}
	if err := s.sync(ctx, rec, ""); err != nil {
		return nil, err
	}
	v := view(rec, operator)
	return &v, nil
}

// Rotate changes every member's key, one node at a time: the node makes a
// next key, the others learn it beside the current one, the node puts it in
// use, the others drop the old one. Each node's switch costs at most the
// packets in flight while the others are told (docs/networks.md has the
// measured figure).
func (s *Service) Rotate(ctx context.Context, tenant, name string, operator bool) (*sdk.Overlay, error) {
	unlock, err := s.st.LockOverlay(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := s.get(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	for i := range rec.Members {
		m := &rec.Members[i]
		n, nc, err := s.client(ctx, m.Node)
		if err != nil {
			return nil, err
		}
		k, err := nc.OverlayKey(ctx, rec.ID, false)
		if err != nil {
			return nil, &nodecall.NodeError{Node: n, What: "make the next overlay key", Err: err}
		}
		m.NextPublicKey = k.NextPublicKey
		if err := s.sync(ctx, rec, m.Node); err != nil {
			return nil, err
		}
		if k, err = nc.OverlayKey(ctx, rec.ID, true); err != nil {
			return nil, &nodecall.NodeError{Node: n, What: "put the next overlay key in use", Err: err}
		}
		m.PublicKey, m.NextPublicKey = k.PublicKey, ""
		if err := s.st.PutOverlay(ctx, rec); err != nil {
			return nil, err
		}
		if err := s.sync(ctx, rec, m.Node); err != nil {
			return nil, err
		}
	}
	at := s.now().UTC()
	rec.RotatedAt = &at
	if err := s.st.PutOverlay(ctx, rec); err != nil {
		return nil, err
	}
	v := view(rec, operator)
	return &v, nil
}

// Launch checks that a tenant's VM can join the named overlays on node and
// returns what the node's create request needs: the overlay's network id on
// the node, the node's part and the overlay's egress policy, held to the
// floor in force (Floor). One overlay per VM: its one NIC.
func (s *Service) Launch(ctx context.Context, tenant, node string, names []string) (networkID, subnet string, egress sdk.EgressPolicy, err error) {
	if tenant == "" {
		return "", "", egress, &jsonapi.Error{Status: http.StatusBadRequest, Msg: "the operator's VMs are in no tenant's overlay", Hint: "leave networks out"}
	}
	if len(names) > 1 {
		return "", "", egress, &jsonapi.Error{Status: http.StatusBadRequest, Msg: "a VM joins one overlay (more networks per VM are not built yet)", Hint: "name one network"}
	}
	if node == "" {
		return "", "", egress, &jsonapi.Error{Status: http.StatusBadRequest, Msg: "a VM in an overlay names its node, one of the overlay's members (placement among the members is not built yet)",
			Hint: "add node: NAME (GET /fleet/overlays/" + names[0] + " lists the members)"}
	}
	rec, err := s.get(ctx, tenant, names[0])
	if err != nil {
		return "", "", egress, err
	}
	for _, m := range rec.Members {
		if m.Node == node {
			// Held to the floor in force now too: one made stricter since
			// the overlay was (the operator's, or a fleet owner's that this
			// central joined since) binds its new VMs.
			pol, err := s.st.GetPolicy(ctx)
			if err != nil {
				return "", "", egress, err
			}
			floor, _, err := s.Floor(ctx, pol)
			if err != nil {
				return "", "", egress, err
			}
			if egress, _, err = Clamp(&floor, &rec.Egress); err != nil {
				return "", "", egress, err
			}
			return rec.ID, m.Subnet, egress, nil
		}
	}
	return "", "", egress, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("node %s is not a member of overlay %s", node, rec.Name),
		Hint: fmt.Sprintf("fluxctl fleet networks add-node %s %s, or choose a member", rec.Name, node)}
}

func (s *Service) client(ctx context.Context, node string) (*store.Node, *sdk.NodeClient, error) {
	n, err := s.st.GetNode(ctx, node)
	if err != nil {
		return nil, nil, fmt.Errorf("overlay member %s: %w", node, err)
	}
	nc, err := s.nodes.Client(n)
	if err != nil {
		return nil, nil, &nodecall.NodeError{Node: n, What: "reach the node", Err: err}
	}
	return n, nc, nil
}

// nodeOverlay is what member m's node must hold: its part and every other
// member with a key as a peer.
func nodeOverlay(rec *store.Overlay, m sdk.OverlayMember) sdk.NodeOverlay {
	o := sdk.NodeOverlay{Subnet: Subnet(rec.Index), LocalSubnet: m.Subnet, ListenPort: int64(BasePort + rec.Index), Peers: []sdk.NodeOverlayPeer{}}
	for _, p := range rec.Members {
		if p.Node != m.Node && p.PublicKey != "" {
			o.Peers = append(o.Peers, sdk.NodeOverlayPeer{PublicKey: p.PublicKey, NextPublicKey: p.NextPublicKey, Endpoint: p.Endpoint, Subnet: p.Subnet})
		}
	}
	return o
}

func (s *Service) ensure(ctx context.Context, rec *store.Overlay, m sdk.OverlayMember, n *store.Node) (*sdk.NodeOverlayStatus, error) {
	nc, err := s.nodes.Client(n)
	if err != nil {
		return nil, &nodecall.NodeError{Node: n, What: "reach the node", Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	st, err := nc.EnsureOverlay(cctx, rec.ID, nodeOverlay(rec, m))
	if err != nil {
		return nil, &nodecall.NodeError{Node: n, What: "make its part of overlay " + rec.Name, Err: err}
	}
	return st, nil
}

// sync tells every member but skip its peers as the record has them.
func (s *Service) sync(ctx context.Context, rec *store.Overlay, skip string) error {
	for _, m := range rec.Members {
		if m.Node == skip {
			continue
		}
		n, err := s.st.GetNode(ctx, m.Node)
		if err != nil {
			return fmt.Errorf("overlay member %s: %w", m.Node, err)
		}
		if _, err := s.ensure(ctx, rec, m, n); err != nil {
			return err
		}
	}
	return nil
}

// leave removes the overlay from node; a node that is gone from the fleet
// has nothing to remove.
func (s *Service) leave(ctx context.Context, rec *store.Overlay, node string) error {
	n, err := s.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.leaveNode(ctx, rec, n)
}

func (s *Service) leaveNode(ctx context.Context, rec *store.Overlay, n *store.Node) error {
	nc, err := s.nodes.Client(n)
	if err != nil {
		return &nodecall.NodeError{Node: n, What: "reach the node", Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	if err := nc.DeleteOverlay(cctx, rec.ID); err != nil {
		return &nodecall.NodeError{Node: n, What: "remove its part of overlay " + rec.Name, Err: err}
	}
	return nil
}
