// Package volumes creates, lists, grows and deletes volumes (disks that
// outlive the VMs using them) on their nodes, with central's rules around
// them: names per tenant, the max_volume_gib quota, one node per volume, and
// the checks a launch with volumes needs. It keeps a record of every volume
// in the store for the quota and billing, and sends volume.created and
// volume.deleted notifications.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// NodeTimeout bounds one call to a node about a volume.
const NodeTimeout = time.Minute

// nameRE is a volume name: 1-40 lowercase letters, digits and '-'.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// Store is what volumes need of central's store.
type Store interface {
	AddVolume(ctx context.Context, rec *store.Volume, limitGiB int64) error
	GrowVolume(ctx context.Context, id string, sizeGiB, limitGiB int64, at time.Time) (*store.Volume, error)
	PutVolume(ctx context.Context, rec *store.Volume) error
	DropVolume(ctx context.Context, rec *store.Volume) error
	ListVolumes(ctx context.Context, keep func(*store.Volume) bool) ([]store.Volume, error)
	GetTenant(ctx context.Context, id string) (*store.Tenant, error)
	GetNode(ctx context.Context, name string) (*store.Node, error)
	ListNodes(ctx context.Context) ([]store.Node, error)
}

// Service does the volume routes' work. It is safe for concurrent use.
type Service struct {
	st    Store
	nodes *nodecall.Caller
	now   func() time.Time
	log   hclog.Logger
	// Notify receives volume.created and volume.deleted (nil: nothing is
	// sent). Set it before use.
	Notify notify.Sink
}

// New makes a Service.
func New(st Store, nodes *nodecall.Caller, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, nodes: nodes, now: now, log: log}
}

// Caller is who asks: a tenant (its id) or the operator (Operator set).
type Caller struct {
	Tenant   string
	Operator bool
}

// CheckName refuses a volume name the spec does not allow.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("volume name %q is not valid", jsonapi.Echo(name)),
			Hint: "a volume name is 1-40 lowercase letters, digits and '-', starting with a letter or digit"}
	}
	return nil
}

// view is what a caller sees of a record: only the operator sees the
// node's path and the owner.
func view(rec *store.Volume, c Caller) sdk.FleetVolume {
	v := rec.FleetVolume
	if !c.Operator {
		v.Path, v.Tenant = "", ""
	}
	return v
}

func (s *Service) client(n *store.Node) (*sdk.NodeClient, error) {
	nc, err := s.nodes.Client(n)
	if err != nil {
		return nil, &nodecall.NodeError{Node: n, What: "reach the node", Err: err}
	}
	return nc, nil
}

// limit is max_volume_gib of a tenant (0: none; the operator has none).
func (s *Service) limit(ctx context.Context, tenant string) (int64, error) {
	if tenant == "" {
		return 0, nil
	}
	t, err := s.st.GetTenant(ctx, tenant)
	if err != nil {
		return 0, &store.OpError{Op: "read the tenant", Err: err}
	}
	return t.Quota.MaxVolumeGiB, nil
}

// place picks the node of a new volume: the one named (which the caller
// must be able to use), else a node the tenant leases, else the usable one
// with the most free memory.
func (s *Service) place(ctx context.Context, c Caller, name string) (*store.Node, error) {
	usable := func(n *store.Node) string {
		if why := n.Unavailable(); why != "" {
			return why
		}
		if n.LeasedBy != "" && n.LeasedBy != c.Tenant && !c.Operator {
			return "leased to another tenant"
		}
		return ""
	}
	if name != "" {
		n, err := s.st.GetNode(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("no node %q", jsonapi.Echo(name)), Hint: "fluxctl fleet nodes lists them; or leave --node out"}
		} else if err != nil {
			return nil, &store.OpError{Op: "read the node", Err: err}
		}
		if why := usable(n); why != "" {
			return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("node %s cannot take a volume: it is %s", n.Name, why), Hint: "pick another node, or leave --node out"}
		}
		return n, nil
	}
	nodes, err := s.st.ListNodes(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "list the nodes", Err: err}
	}
	var best *store.Node
	better := func(n *store.Node) bool {
		nl, bl := c.Tenant != "" && n.LeasedBy == c.Tenant, c.Tenant != "" && best.LeasedBy == c.Tenant
		if nl != bl {
			return nl
		}
		return n.Capacity.Free.MemoryMiB > best.Capacity.Free.MemoryMiB
	}
	for i := range nodes {
		n := &nodes[i]
		if usable(n) == "" && (best == nil || better(n)) {
			best = n
		}
	}
	if best == nil {
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: "no node can take a volume now (every node is down, cordoned, draining or leased to someone else)",
			Hint: "fluxctl fleet nodes shows them; retry when one is up"}
	}
	return best, nil
}

// Create makes a volume on its node. The record holds its place under the
// quota (in the transaction that checks it) before the node is asked, so
// parallel creates cannot overshoot it. The size's range is the API's to
// enforce (schemas/fleet-openapi.yaml); the node checks it again.
func (s *Service) Create(ctx context.Context, c Caller, req sdk.FleetCreateVolumeRequest) (*sdk.FleetVolume, error) {
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	n, err := s.place(ctx, c, req.Node)
	if err != nil {
		return nil, err
	}
	limit, err := s.limit(ctx, c.Tenant)
	if err != nil {
		return nil, err
	}
	nc, err := s.client(n)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	rec := &store.Volume{FleetVolume: sdk.FleetVolume{ID: store.NewVolumeID(), Name: req.Name, Tenant: c.Tenant, Node: n.Name,
		SizeGiB: req.SizeGiB, CreatedAt: now}, Pending: true, Sizes: []store.VolumeSize{{GiB: req.SizeGiB, From: now}}}
	var qe *store.QuotaError
	switch err := s.st.AddVolume(ctx, rec, limit); {
	case errors.As(err, &qe):
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("%d GiB more of volumes would make %d GiB, over max_volume_gib %d", req.SizeGiB, qe.Used+req.SizeGiB, limit),
			Hint: "delete a volume first (fluxctl fleet volume-rm NAME), ask for less, or ask the operator to raise max_volume_gib"}
	case errors.Is(err, store.ErrExists):
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("a volume named %s exists already", req.Name), Hint: "names are unique per tenant: pick another, or delete the old one first"}
	case err != nil:
		return nil, &store.OpError{Op: "record the volume", Err: err}
	}
	// From here on the record must be settled whatever the caller does.
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	nv, err := nc.CreateVolume(cctx, sdk.CreateVolumeRequest{Name: rec.ID, ID: rec.ID, SizeGiB: req.SizeGiB, Tenant: c.Tenant})
	if err != nil {
		if derr := s.st.DropVolume(ctx, rec); derr != nil {
			s.log.Warn("drop the record of a volume not made", "volume", req.Name, "error", derr)
		}
		return nil, &nodecall.NodeError{Node: n, What: "create the volume", Err: err}
	}
	rec.Pending, rec.Path = false, nv.Path
	if err := s.st.PutVolume(ctx, rec); err != nil {
		s.log.Error("record a volume made", "volume", req.Name, "error", err)
	}
	s.log.Info("volume created", "volume", rec.Name, "id", rec.ID, "node", n.Name, "size_gib", rec.SizeGiB)
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyVolumeCreated, Tenant: c.Tenant,
		Title:  fmt.Sprintf("volume %s (%d GiB) was created on node %s", rec.Name, rec.SizeGiB, n.Name),
		Detail: rec.ID, Link: "/fleet/volumes/" + rec.Name}, "volume.created/"+rec.ID, now)
	out := view(rec, c)
	return &out, nil
}

// List lists live volumes: a tenant's own, or (operator) every tenant's or
// one's (tenant set). Each node is asked once which VMs use its volumes.
func (s *Service) List(ctx context.Context, c Caller, tenant string) (*sdk.FleetVolumeList, error) {
	want, all := c.Tenant, c.Operator && tenant == ""
	if c.Operator && tenant != "" {
		want = tenant
	}
	recs, err := s.st.ListVolumes(ctx, func(v *store.Volume) bool { return v.Live() && (all || v.Tenant == want) })
	if err != nil {
		return nil, &store.OpError{Op: "list the volumes", Err: err}
	}
	attached := map[string]string{}
	asked := map[string]bool{}
	for _, r := range recs {
		if asked[r.Node] {
			continue
		}
		asked[r.Node] = true
		n, err := s.st.GetNode(ctx, r.Node)
		if err != nil {
			continue
		}
		nc, err := s.client(n)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nvs, err := nc.Volumes(cctx)
		cancel()
		if err != nil {
			s.log.Warn("ask a node which VMs use its volumes", "node", n.Name, "error", err)
			continue
		}
		for _, nv := range nvs {
			attached[nv.ID] = nv.AttachedTo
		}
	}
	out := &sdk.FleetVolumeList{Volumes: []sdk.FleetVolume{}}
	for i := range recs {
		v := view(&recs[i], c)
		v.AttachedTo = attached[v.ID]
		out.Volumes = append(out.Volumes, v)
	}
	if !c.Operator {
		out.UsedGiB = store.TenantVolumeGiB(recs, c.Tenant)
		if out.LimitGiB, err = s.limit(ctx, c.Tenant); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// find finds a live volume the caller may see by name or id; another
// tenant's is not found.
func (s *Service) find(ctx context.Context, c Caller, nameOrID string) (*store.Volume, error) {
	recs, err := s.st.ListVolumes(ctx, func(v *store.Volume) bool {
		return v.Live() && (c.Operator || v.Tenant == c.Tenant) && (v.ID == nameOrID || v.Name == nameOrID)
	})
	if err != nil {
		return nil, &store.OpError{Op: "read the volumes", Err: err}
	}
	switch {
	case len(recs) == 0:
		return nil, &jsonapi.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no volume %q", jsonapi.Echo(nameOrID)), Hint: "fluxctl fleet volumes lists yours"}
	case len(recs) > 1:
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("%d tenants have a volume named %q", len(recs), jsonapi.Echo(nameOrID)), Hint: "name the volume by its id (vol-...)"}
	}
	if recs[0].Pending {
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("volume %s is being created", recs[0].Name), Hint: "retry in a moment"}
	}
	return &recs[0], nil
}

// nodeOf is the node of a volume and a client for it.
func (s *Service) nodeOf(ctx context.Context, rec *store.Volume) (*store.Node, *sdk.NodeClient, error) {
	n, err := s.st.GetNode(ctx, rec.Node)
	if err != nil {
		return nil, nil, &store.OpError{Op: "read node " + rec.Node, Err: err}
	}
	nc, err := s.client(n)
	return n, nc, err
}

// Get returns one volume, with the VM that uses it as its node says.
func (s *Service) Get(ctx context.Context, c Caller, nameOrID string) (*sdk.FleetVolume, error) {
	rec, err := s.find(ctx, c, nameOrID)
	if err != nil {
		return nil, err
	}
	out := view(rec, c)
	if _, nc, err := s.nodeOf(ctx, rec); err == nil {
		if nv, err := nc.GetVolume(ctx, rec.ID); err == nil {
			out.AttachedTo = nv.AttachedTo
		}
	}
	return &out, nil
}

// attachedError turns a node's 409 about a volume in use into the rule's
// refusal.
func attachedError(n *store.Node, rec *store.Volume, what string, err error) error {
	if sdk.IsConflict(err) {
		return &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("volume %s is attached to a VM: it cannot be %s", rec.Name, what),
			Hint: "delete the VM that uses it first (fluxctl fleet volumes shows which); a volume is used by one VM at a time"}
	}
	return &nodecall.NodeError{Node: n, What: "change the volume", Err: err}
}

// Delete deletes a free volume and its data; its record is kept (deleted)
// for billing.
func (s *Service) Delete(ctx context.Context, c Caller, nameOrID string) (*sdk.FleetVolume, error) {
	rec, err := s.find(ctx, c, nameOrID)
	if err != nil {
		return nil, err
	}
	n, nc, err := s.nodeOf(ctx, rec)
	if err != nil {
		return nil, err
	}
	if err := nc.DeleteVolume(ctx, rec.ID); err != nil && !sdk.IsNotFound(err) {
		return nil, attachedError(n, rec, "deleted", err)
	}
	now := s.now().UTC()
	rec.DeletedAt = now
	if err := s.st.PutVolume(context.WithoutCancel(ctx), rec); err != nil {
		return nil, &store.OpError{Op: "record the volume's deletion", Err: err}
	}
	s.log.Info("volume deleted", "volume", rec.Name, "id", rec.ID, "node", rec.Node)
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyVolumeDeleted, Tenant: rec.Tenant,
		Title:  fmt.Sprintf("volume %s was deleted from node %s", rec.Name, rec.Node),
		Detail: rec.ID, Link: "/fleet/volumes"}, "volume.deleted/"+rec.ID, now)
	out := view(rec, c)
	return &out, nil
}

// Resize grows a free volume: the quota is checked and the new size
// recorded (in one transaction) before the node grows the file, and put
// back if the node refuses.
func (s *Service) Resize(ctx context.Context, c Caller, nameOrID string, sizeGiB int64) (*sdk.FleetVolume, error) {
	rec, err := s.find(ctx, c, nameOrID)
	if err != nil {
		return nil, err
	}
	if sizeGiB < rec.SizeGiB {
		return nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("volume %s is %d GiB: volumes only grow, not to %d GiB", rec.Name, rec.SizeGiB, sizeGiB),
			Hint: fmt.Sprintf("give --size of at least %d; to shrink, copy the data to a new, smaller volume", rec.SizeGiB)}
	}
	n, nc, err := s.nodeOf(ctx, rec)
	if err != nil {
		return nil, err
	}
	if nv, err := nc.GetVolume(ctx, rec.ID); err == nil && nv.AttachedTo != "" {
		return nil, attachedError(n, rec, "resized", &sdk.APIError{Status: http.StatusConflict})
	}
	if sizeGiB == rec.SizeGiB {
		out := view(rec, c)
		return &out, nil
	}
	limit, err := s.limit(ctx, rec.Tenant)
	if err != nil {
		return nil, err
	}
	old := *rec
	old.Sizes = append([]store.VolumeSize(nil), rec.Sizes...)
	var qe *store.QuotaError
	grown, err := s.st.GrowVolume(ctx, rec.ID, sizeGiB, limit, s.now().UTC())
	switch {
	case errors.As(err, &qe):
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("growing volume %s to %d GiB would make %d GiB of volumes, over max_volume_gib %d", rec.Name, sizeGiB, qe.Used+qe.Asked, limit),
			Hint: "delete a volume first (fluxctl fleet volume-rm NAME), or ask the operator to raise max_volume_gib"}
	case err != nil:
		return nil, &store.OpError{Op: "record the volume's size", Err: err}
	}
	ctx = context.WithoutCancel(ctx)
	if _, err := nc.ResizeVolume(ctx, rec.ID, sizeGiB); err != nil {
		if perr := s.st.PutVolume(ctx, &old); perr != nil {
			s.log.Error("put back the size of a volume its node did not grow", "volume", rec.Name, "error", perr)
		}
		return nil, attachedError(n, rec, "resized", err)
	}
	s.log.Info("volume resized", "volume", rec.Name, "id", rec.ID, "from_gib", old.SizeGiB, "to_gib", sizeGiB)
	out := view(grown, c)
	return &out, nil
}

// ForLaunch checks a launch's volumes (names or ids of the caller's) and
// returns their node and ids: all on one node (409 otherwise), that node
// the one the launch names if it names one (409), none in use by a VM (409,
// as its node says). How many a launch may name is the API description's
// to enforce (volumes maxItems: the driver contract's MaxVolumes).
func (s *Service) ForLaunch(ctx context.Context, c Caller, names []string, node string) (string, []string, error) {
	var ids []string
	var recs []*store.Volume
	at := ""
	for _, name := range names {
		rec, err := s.find(ctx, c, name)
		if err != nil {
			var e *jsonapi.Error
			if errors.As(err, &e) && e.Status == http.StatusNotFound {
				e.Status = http.StatusBadRequest // the launch is malformed, not its route unknown
			}
			return "", nil, err
		}
		for _, id := range ids {
			if id == rec.ID {
				return "", nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("volume %s is named twice", rec.Name), Hint: "name each volume once"}
			}
		}
		if at != "" && rec.Node != at {
			return "", nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("the volumes are on two nodes (%s and %s): a VM runs on one", at, rec.Node),
				Hint: "attach volumes of one node only"}
		}
		at = rec.Node
		ids = append(ids, rec.ID)
		recs = append(recs, rec)
	}
	if node != "" && node != at {
		return "", nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("the volumes are on node %s, not %s", at, node),
			Hint: "leave --node out: a launch with volumes runs on their node"}
	}
	n, nc, err := s.nodeOf(ctx, recs[0])
	if err != nil {
		return "", nil, err
	}
	for _, rec := range recs {
		nv, err := nc.GetVolume(ctx, rec.ID)
		if err != nil {
			return "", nil, &nodecall.NodeError{Node: n, What: "read volume " + rec.Name, Err: err}
		}
		if nv.AttachedTo != "" {
			return "", nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("volume %s is attached to another VM", rec.Name),
				Hint: "delete that VM first (fluxctl fleet volumes shows which): a volume is used by one VM at a time"}
		}
	}
	return at, ids, nil
}

// TenantVolumes lists the names of a tenant's live volumes.
func (s *Service) TenantVolumes(ctx context.Context, tenant string) ([]string, error) {
	recs, err := s.st.ListVolumes(ctx, func(v *store.Volume) bool { return v.Live() && v.Tenant == tenant })
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(recs))
	for _, r := range recs {
		names = append(names, r.Name)
	}
	return names, nil
}
