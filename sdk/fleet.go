package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultCentralURL is where central listens unless told otherwise.
const DefaultCentralURL = "http://127.0.0.1:7799"

// FleetClient calls central's fleet API (/fleet/...). It is safe for
// concurrent use. The token is the operator's fleet token, a tenant's
// fvt_ token or one of its fvk_ API keys, or, for heartbeats, the fleet
// token a node was given.
type FleetClient struct {
	c *client
}

// NewFleetClient returns a client for central at baseURL (for example
// "http://127.0.0.1:7799"). It does not connect; the first call does.
func NewFleetClient(baseURL string, opts ...Option) (*FleetClient, error) {
	c, err := newClient("central", baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &FleetClient{c: c}, nil
}

// URL is central's base URL as the client uses it.
func (f *FleetClient) URL() string { return f.c.shown }

func fleetVMPath(node, id string, action ...string) string {
	p := "/fleet/vms/" + url.PathEscape(node) + "/" + url.PathEscape(id)
	for _, a := range action {
		p += "/" + a
	}
	return p
}

// Heartbeat reports a node to central.
func (f *FleetClient) Heartbeat(ctx context.Context, node string, hb Heartbeat) (*HeartbeatReply, error) {
	var out HeartbeatReply
	if err := f.c.call(ctx, http.MethodPost, "/fleet/nodes/"+url.PathEscape(node)+"/heartbeat", nil, hb, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVM places a VM on a node chosen by central's scheduler, within the
// caller's quota. A quota refusal is IsQuota; no fitting node IsConflict.
func (f *FleetClient) CreateVM(ctx context.Context, req FleetCreateVMRequest) (*FleetCreateVMResponse, error) {
	var out FleetCreateVMResponse
	if err := f.c.call(ctx, http.MethodPost, "/fleet/vms", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVMs lists the caller's VMs on every node (the operator's: all), and
// the nodes that did not answer.
func (f *FleetClient) ListVMs(ctx context.Context) (*FleetVMList, error) {
	var out FleetVMList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/vms", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVM deletes a VM on a node and ends its ledger entry.
func (f *FleetClient) DeleteVM(ctx context.Context, node, id string) error {
	return f.c.call(ctx, http.MethodDelete, fleetVMPath(node, id), nil, nil, nil)
}

// Exec runs a command in a VM through its node; see NodeClient.Exec.
func (f *FleetClient) Exec(ctx context.Context, node, id string, req ExecRequest) (*ExecResult, error) {
	var res ExecResult
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Health is GET /healthz, which needs no token. A central whose etcd does
// not answer is an *APIError of status 503 (IsUnavailable).
func (f *FleetClient) Health(ctx context.Context) (*FleetHealth, error) {
	var out FleetHealth
	if err := f.c.call(ctx, http.MethodGet, "/healthz", nil, nil, &out); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
			// Its body is a Health, not an error body: say what it means.
			ae.Message = "central at " + f.c.shown + " is degraded: its etcd does not answer"
			ae.Hint = "central's log says why; check its etcd (embedded under -state-dir, or -etcd endpoints)"
		}
		return nil, err
	}
	return &out, nil
}

// ListNodes lists every node central knows, up or down (operator only).
func (f *FleetClient) ListNodes(ctx context.Context) ([]FleetNode, error) {
	var out FleetNodeList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/nodes", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Nodes == nil {
		out.Nodes = []FleetNode{}
	}
	return out.Nodes, nil
}

// GetNode returns one node. Tenants get IsNotFound for every node until
// leases exist.
func (f *FleetClient) GetNode(ctx context.Context, name string) (*FleetNode, error) {
	var out FleetNode
	if err := f.c.call(ctx, http.MethodGet, "/fleet/nodes/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Capacity reports what the caller could launch now, and where.
func (f *FleetClient) Capacity(ctx context.Context) (*CapacityReport, error) {
	var out CapacityReport
	if err := f.c.call(ctx, http.MethodGet, "/fleet/capacity", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func tenantPath(idOrName string, action ...string) string {
	p := "/fleet/tenants/" + url.PathEscape(idOrName)
	for _, a := range action {
		p += "/" + a
	}
	return p
}

// ListTenants lists the tenants by name (operator only).
func (f *FleetClient) ListTenants(ctx context.Context) ([]Tenant, error) {
	var out TenantList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/tenants", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Tenants == nil {
		out.Tenants = []Tenant{}
	}
	return out.Tenants, nil
}

// CreateTenant makes a tenant and returns it with its token, which is shown
// this once (operator only). A name in use is IsConflict.
func (f *FleetClient) CreateTenant(ctx context.Context, req CreateTenantRequest) (*TenantWithToken, error) {
	var out TenantWithToken
	if err := f.c.call(ctx, http.MethodPost, "/fleet/tenants", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTenant returns a tenant by id or name (operator only).
func (f *FleetClient) GetTenant(ctx context.Context, idOrName string) (*Tenant, error) {
	var out Tenant
	if err := f.c.call(ctx, http.MethodGet, tenantPath(idOrName), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateTenant renames, disables or enables a tenant or changes its quotas
// (operator only), and returns it as stored.
func (f *FleetClient) UpdateTenant(ctx context.Context, idOrName string, req UpdateTenantRequest) (*Tenant, error) {
	var out Tenant
	if err := f.c.call(ctx, http.MethodPatch, tenantPath(idOrName), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteTenant deletes a tenant that has no VMs (operator only); one that
// still has some is IsConflict.
func (f *FleetClient) DeleteTenant(ctx context.Context, idOrName string) error {
	return f.c.call(ctx, http.MethodDelete, tenantPath(idOrName), nil, nil, nil)
}

// RotateTenantToken gives a tenant a new token; the old one stops working
// at once (operator only).
func (f *FleetClient) RotateTenantToken(ctx context.Context, idOrName string) (*TenantWithToken, error) {
	var out TenantWithToken
	if err := f.c.call(ctx, http.MethodPost, tenantPath(idOrName, "rotate-token"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TenantMe returns the calling tenant with what it uses of its quota. The
// operator is not a tenant: it gets a 400.
func (f *FleetClient) TenantMe(ctx context.Context) (*TenantMe, error) {
	var out TenantMe
	if err := f.c.call(ctx, http.MethodGet, "/fleet/tenants/me", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// keysPath is the route of a tenant's keys: the caller's own (tenant "")
// or, for the operator, those of tenant (id or name).
func keysPath(tenant string, key ...string) string { return ownPath(tenant, "keys", key...) }

// ownPath is the path of a tenant's keys or team (sub): the caller's own
// with tenant "", else tenant's (the operator), and the escaped segments of
// rest below it.
func ownPath(tenant, sub string, rest ...string) string {
	p := "/fleet/tenants/me/" + sub
	if tenant != "" {
		p = tenantPath(tenant, sub)
	}
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// ListKeys lists API keys by name, never the keys themselves: the calling
// tenant's own with tenant "" (any of its keys may list them), or, for the
// operator, those of tenant (id or name).
func (f *FleetClient) ListKeys(ctx context.Context, tenant string) ([]APIKey, error) {
	var out APIKeyList
	if err := f.c.call(ctx, http.MethodGet, keysPath(tenant), nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Keys == nil {
		out.Keys = []APIKey{}
	}
	return out.Keys, nil
}

// CreateKey makes an API key and returns it with the key itself, shown
// this once. A tenant makes its own (tenant "") with its primary token: a
// key making a key IsForbidden. The operator names the tenant (id or name).
// A name in use IsConflict; a tenant's 51st key IsQuota.
func (f *FleetClient) CreateKey(ctx context.Context, tenant string, req CreateKeyRequest) (*APIKeyWithToken, error) {
	var out APIKeyWithToken
	if err := f.c.call(ctx, http.MethodPost, keysPath(tenant), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeKey revokes an API key, named by its id or its name; it stops
// working at once. Tenant is as for CreateKey, and so is who may call. A
// key that is not there (or not the tenant's) IsNotFound.
func (f *FleetClient) RevokeKey(ctx context.Context, tenant, key string) error {
	return f.c.call(ctx, http.MethodDelete, keysPath(tenant, key), nil, nil, nil)
}

func membersPath(tenant string, email ...string) string { return ownPath(tenant, "members", email...) }

// ListMembers lists a tenant's members by email: the caller's own tenant
// with tenant "", or, for the operator, tenant (id or name).
func (f *FleetClient) ListMembers(ctx context.Context, tenant string) ([]Member, error) {
	var out MemberList
	if err := f.c.call(ctx, http.MethodGet, membersPath(tenant), nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Members == nil {
		out.Members = []Member{}
	}
	return out.Members, nil
}

// AddMember adds a person to a tenant with a role. Tenant is as for
// ListMembers. An API key adding a member IsForbidden (only the primary
// token, an admin or owner, or the operator add people), and so is anyone
// but an owner adding an owner; an email already there IsConflict, a
// tenant's 501st member IsQuota.
func (f *FleetClient) AddMember(ctx context.Context, tenant string, req AddMemberRequest) (*Member, error) {
	var out Member
	if err := f.c.call(ctx, http.MethodPost, membersPath(tenant), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetMemberRole changes a member's role; who may is as for AddMember.
// Demoting the last owner IsConflict.
func (f *FleetClient) SetMemberRole(ctx context.Context, tenant, email string, role Role) (*Member, error) {
	var out Member
	if err := f.c.call(ctx, http.MethodPatch, membersPath(tenant, email), nil, MemberRoleRequest{Role: role}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveMember takes a person out of a tenant; who may is as for
// AddMember. Removing the last owner IsConflict; someone not there
// IsNotFound.
func (f *FleetClient) RemoveMember(ctx context.Context, tenant, email string) error {
	return f.c.call(ctx, http.MethodDelete, membersPath(tenant, email), nil, nil, nil)
}

// GetPolicy returns the fleet's policy (operator only).
func (f *FleetClient) GetPolicy(ctx context.Context) (*Policy, error) {
	var out Policy
	if err := f.c.call(ctx, http.MethodGet, "/fleet/policy", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutPolicy replaces the policy with p and returns it as stored, with
// central's adjustments (a min_lease_hours below 24 is raised to 24).
// Operator only.
func (f *FleetClient) PutPolicy(ctx context.Context, p Policy) (*Policy, error) {
	var out Policy
	if err := f.c.call(ctx, http.MethodPut, "/fleet/policy", nil, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPolicyVersion returns the policy with its version (the ETag central
// answered), to hand back to PutPolicyIfMatch.
func (f *FleetClient) GetPolicyVersion(ctx context.Context) (*Policy, string, error) {
	var out Policy
	h, err := f.c.callWith(ctx, http.MethodGet, "/fleet/policy", nil, nil, &out, nil)
	if err != nil {
		return nil, "", err
	}
	return &out, h.Get("ETag"), nil
}

// PutPolicyIfMatch replaces the policy only if it is still at version (from
// GetPolicyVersion): a policy changed since is an *APIError that IsStale
// reports, and nothing changes. It returns the policy as stored and its new
// version.
func (f *FleetClient) PutPolicyIfMatch(ctx context.Context, p Policy, version string) (*Policy, string, error) {
	var out Policy
	h, err := f.c.callWith(ctx, http.MethodPut, "/fleet/policy", nil, p, &out, http.Header{"If-Match": {version}})
	if err != nil {
		return nil, "", err
	}
	return &out, h.Get("ETag"), nil
}

// ListImages returns the image catalog.
func (f *FleetClient) ListImages(ctx context.Context) ([]Image, error) {
	var out ImageList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/images", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Images == nil {
		out.Images = []Image{}
	}
	return out.Images, nil
}

// PutImage adds im to the catalog under im.Name, or replaces the entry of
// that name, and returns it with central's defaults filled in (operator
// only). Central does not copy the disk: it must be on the nodes already.
func (f *FleetClient) PutImage(ctx context.Context, im Image) (*Image, error) {
	var out Image
	if err := f.c.call(ctx, http.MethodPut, "/fleet/images/"+url.PathEscape(im.Name), nil, im, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteImage removes a catalog entry (operator only); VMs launched from it
// keep running.
func (f *FleetClient) DeleteImage(ctx context.Context, name string) error {
	return f.c.call(ctx, http.MethodDelete, "/fleet/images/"+url.PathEscape(name), nil, nil, nil)
}

func (f *FleetClient) power(ctx context.Context, node, id, action string, body any) (*FleetVM, error) {
	var out FleetVM
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, action), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartVM boots a stopped VM.
func (f *FleetClient) StartVM(ctx context.Context, node, id string) (*FleetVM, error) {
	return f.power(ctx, node, id, "start", nil)
}

// StopVM asks the guest to shut down and waits up to timeout before the node
// stops the VM hard. A zero timeout leaves the choice to the node.
func (f *FleetClient) StopVM(ctx context.Context, node, id string, timeout time.Duration) (*FleetVM, error) {
	var body any
	if timeout > 0 {
		body = StopRequest{TimeoutSeconds: int64((timeout + time.Second - 1) / time.Second)}
	}
	return f.power(ctx, node, id, "stop", body)
}

// RestartVM stops a VM and starts it again.
func (f *FleetClient) RestartVM(ctx context.Context, node, id string) (*FleetVM, error) {
	return f.power(ctx, node, id, "restart", nil)
}

// PauseVM freezes a running VM's vCPUs.
func (f *FleetClient) PauseVM(ctx context.Context, node, id string) (*FleetVM, error) {
	return f.power(ctx, node, id, "pause", nil)
}

// ResumeVM continues a paused VM.
func (f *FleetClient) ResumeVM(ctx context.Context, node, id string) (*FleetVM, error) {
	return f.power(ctx, node, id, "resume", nil)
}

// Logs returns the end of a VM's console log: its last lines lines, or the
// node's default when lines is 0.
func (f *FleetClient) Logs(ctx context.Context, node, id string, lines int) ([]byte, error) {
	var q url.Values
	if lines > 0 {
		q = url.Values{"lines": {strconv.Itoa(lines)}}
	}
	return f.c.blob(ctx, http.MethodGet, fleetVMPath(node, id, "logs"), q)
}

// Reconcile runs one reconcile pass now and reports what it did (operator
// only).
func (f *FleetClient) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	var out ReconcileReport
	if err := f.c.call(ctx, http.MethodPost, "/fleet/reconcile", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListEvents returns the newest entries of central's activity log, newest
// first: a tenant's own, or, for the operator, everyone's or q.Tenant's.
func (f *FleetClient) ListEvents(ctx context.Context, q EventQuery) ([]Event, error) {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Tenant != "" {
		v.Set("tenant", q.Tenant)
	}
	var out EventList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/events", v, nil, &out); err != nil {
		return nil, err
	}
	if out.Events == nil {
		out.Events = []Event{}
	}
	return out.Events, nil
}

// AmbiguousVMError is FindVM's answer when a reference fits more than one
// VM: a name used on two nodes, or an ID prefix that several IDs share.
type AmbiguousVMError struct {
	Ref     string
	Matches []FleetVM
}

func (e *AmbiguousVMError) Error() string {
	names := make([]string, len(e.Matches))
	for i, m := range e.Matches {
		names[i] = fmt.Sprintf("%s (%s on %s)", m.Name, m.ID, m.Node)
	}
	return fmt.Sprintf("%q matches %d VMs: %s", e.Ref, len(e.Matches), strings.Join(names, ", "))
}

// FindVM finds one of the caller's VMs by reference in GET /fleet/vms: an
// exact name, an exact ID, an ID prefix, or any of these after "NODE/". A
// reference that fits several VMs is an *AmbiguousVMError; one that fits
// none an *APIError of status 404 (IsNotFound), made by the client.
func (f *FleetClient) FindVM(ctx context.Context, ref string) (*FleetVM, error) {
	list, err := f.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	return findVM(list.VMs, ref)
}

func findVM(vms []FleetVM, ref string) (*FleetVM, error) {
	node, name := "", ref
	if n, rest, ok := strings.Cut(ref, "/"); ok {
		node, name = n, rest
	}
	var byName, byID, byPrefix []FleetVM
	for _, vm := range vms {
		if name == "" || (node != "" && vm.Node != node) {
			continue
		}
		switch {
		case vm.Name == name:
			byName = append(byName, vm)
		case vm.ID == name:
			byID = append(byID, vm)
		case strings.HasPrefix(vm.ID, name):
			byPrefix = append(byPrefix, vm)
		}
	}
	for _, m := range [][]FleetVM{byName, byID, byPrefix} {
		switch len(m) {
		case 0:
			continue
		case 1:
			return &m[0], nil
		}
		return nil, &AmbiguousVMError{Ref: ref, Matches: m}
	}
	return nil, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("no vm %q among your VMs", ref),
		Hint: "GET /fleet/vms lists your VMs with their names, IDs and nodes"}
}

// WaitReady polls GET /fleet/vms every poll (500ms when 0) until the VM id
// on node has a ready guest agent, and returns it then. It fails with
// ErrVMDown (wrapped) when the VM stops or is lost first, with an IsNotFound
// error when it disappears from a node that answers, and with the context's
// error when ctx ends: give ctx a deadline. A node that does not answer
// does not end the wait.
func (f *FleetClient) WaitReady(ctx context.Context, node, id string, poll time.Duration) (*FleetVM, error) {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var last *FleetVM
	for {
		list, err := f.ListVMs(ctx)
		if err != nil && !IsUnavailable(err) {
			return last, err
		}
		if err == nil {
			var vm *FleetVM
			for i := range list.VMs {
				if v := &list.VMs[i]; v.Node == node && v.ID == id {
					vm = v
				}
			}
			switch {
			case vm == nil:
				return last, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("vm %s is gone from node %s", id, node),
					Hint: "it was deleted, or its TTL ran out; GET /fleet/vms lists your VMs"}
			case vm.AgentReady:
				return vm, nil
			case !vm.Unreachable && (vm.State == StateStopped || vm.State == StateLost):
				why := ""
				if vm.LastError != "" {
					why = " (" + vm.LastError + ")"
				}
				return vm, fmt.Errorf("wait for vm %s: it is %s before its guest agent answered%s: %w", vm.Name, vm.State, why, ErrVMDown)
			}
			last = vm
		}
		select {
		case <-ctx.Done():
			state := "unknown"
			if last != nil {
				state = last.State
			}
			return last, fmt.Errorf("wait for vm %s on node %s: guest agent not ready (state %s): %w", id, node, state, ctx.Err())
		case <-t.C:
		}
	}
}

// LaunchAndWait creates a VM through central (CreateVM) and waits, polling
// GET /fleet/vms every poll, until its guest agent is ready (WaitReady). The
// answer is the create's, with VM as it was when ready. When the wait fails
// the VM stays: the answer is still returned with the error, so the caller
// can delete it (DeleteVM(ctx, resp.Node, resp.VM.ID)).
func (f *FleetClient) LaunchAndWait(ctx context.Context, req FleetCreateVMRequest, poll time.Duration) (*FleetCreateVMResponse, error) {
	resp, err := f.CreateVM(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.VM.AgentReady {
		return resp, nil
	}
	vm, err := f.WaitReady(ctx, resp.Node, resp.VM.ID, poll)
	if vm != nil {
		resp.VM = vm.VM
	}
	if err != nil {
		return resp, fmt.Errorf("launch vm %s on node %s: %w", resp.VM.Name, resp.Node, err)
	}
	return resp, nil
}
