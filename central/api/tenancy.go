package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// TenantTokenPrefix starts every tenant token; authenticate routes tokens by it.
const TenantTokenPrefix = "fvt_"

// tokenNote goes with every token central shows: it is shown once.
const tokenNote = "store this token now; central keeps only its SHA-256"

// tenantNameHint says what a tenant name may be.
const tenantNameHint = "tenant names are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (and not \"me\")"

// reservedTenantName is taken by GET /fleet/tenants/me.
const reservedTenantName = "me"

// wireTenant is a tenant as the API shows it (sdk.Tenant): the record's
// sdk.Tenant, that is everything but its token digest. Every answer that
// shows a tenant is built here.
func wireTenant(t *store.Tenant) sdk.Tenant { return t.Tenant }

// updateTenantRequest is PATCH /fleet/tenants/{id}: fields left out stay as
// they are.
type updateTenantRequest struct {
	Name     *string     `json:"name"`
	Disabled *bool       `json:"disabled"`
	Quota    *quotaPatch `json:"quota"`
}

// quotaPatch changes some quotas: a number sets one, null removes it (no
// limit; for max_snapshots_per_vm, the policy's), absent leaves it.
type quotaPatch struct {
	MaxVMs            optionalInt `json:"max_vms"`
	MaxVCPUs          optionalInt `json:"max_vcpus"`
	MaxMemoryMiB      optionalInt `json:"max_memory_mib"`
	MaxLeasedHosts    optionalInt `json:"max_leased_hosts"`
	MaxSnapshotsPerVM optionalInt `json:"max_snapshots_per_vm"`
	MaxVolumeGiB      optionalInt `json:"max_volume_gib"`
}

// optionalInt is a JSON field that may be absent, null or a whole number.
type optionalInt struct {
	Set   bool // present in the body
	Null  bool // present as null
	Value int64
}

// UnmarshalJSON implements json.Unmarshaler (the decoder calls it for null too).
func (o *optionalInt) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Null, o.Value = true, 0
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

func (o optionalInt) apply(dst *int64) {
	if o.Set {
		*dst = o.Value
	}
}

func (q *quotaPatch) apply(dst *sdk.Quotas) {
	q.MaxVMs.apply(&dst.MaxVMs)
	q.MaxVCPUs.apply(&dst.MaxVCPUs)
	q.MaxMemoryMiB.apply(&dst.MaxMemoryMiB)
	q.MaxLeasedHosts.apply(&dst.MaxLeasedHosts)
	q.MaxVolumeGiB.apply(&dst.MaxVolumeGiB)
	switch s := q.MaxSnapshotsPerVM; {
	case s.Null:
		dst.MaxSnapshotsPerVM = nil
	case s.Set:
		v := s.Value
		dst.MaxSnapshotsPerVM = &v
	}
}

// tenantMeView is GET /fleet/tenants/me: the calling tenant, what it uses and
// its effective snapshot limit.
type tenantMeView struct {
	Tenant sdk.Tenant      `json:"tenant"`
	Usage  sdk.TenantUsage `json:"usage"`
	// MaxSnapshotsPerVM is the limit that applies: the tenant's quota, else
	// the policy's.
	MaxSnapshotsPerVM int64 `json:"max_snapshots_per_vm"`
	// Billing is this month's spend so far and the budget.
	Billing *sdk.Budget `json:"billing,omitempty"`
}

// wireUsage is a tenant's usage as the API shows it (sdk.TenantUsage).
func wireUsage(u store.UsageView) sdk.TenantUsage {
	usage := func(u store.Usage) sdk.Usage {
		return sdk.Usage{VMs: u.VMs, VCPUs: u.VCPUs, MemoryMiB: u.MemoryMiB, MacOS: u.MacOS}
	}
	return sdk.TenantUsage{Running: usage(u.Running), Reserved: usage(u.Reserved), Total: usage(u.Total())}
}

// invalid answers a store.ErrInvalid as a 400, without the sentinel's prefix.
func invalid(w http.ResponseWriter, err error, hint string) {
	msg := err.Error()
	if i := strings.Index(msg, store.ErrInvalid.Error()+": "); i >= 0 {
		msg = msg[i+len(store.ErrInvalid.Error())+2:]
	}
	jsonapi.WriteError(w, http.StatusBadRequest, msg, hint)
}

// checkTenantName refuses what the store would, plus the reserved "me".
func checkTenantName(w http.ResponseWriter, name string) bool {
	switch {
	case name == "":
		jsonapi.WriteError(w, http.StatusBadRequest, "name is required", tenantNameHint)
	case name == reservedTenantName:
		jsonapi.WriteError(w, http.StatusBadRequest, `tenant name "me" is reserved`,
			"GET /fleet/tenants/me is the calling tenant; pick another name")
	case !store.ValidName(name):
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("tenant name %q is not valid", jsonapi.Echo(name)), tenantNameHint)
	default:
		return true
	}
	return false
}

// findTenant looks a tenant up by id, then by name.
func (s *Server) findTenant(ctx context.Context, ref string) (*store.Tenant, error) {
	if !store.ValidName(ref) {
		return nil, fmt.Errorf("find tenant: %w", store.ErrNotFound)
	}
	t, err := s.opts.Store.GetTenant(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		t, err = s.opts.Store.TenantByName(ctx, ref)
	}
	return t, err
}

// tenantFromPath finds the route's {id} (an id or a name), or answers 404;
// the tenant is what the request is about, for the activity log.
func (s *Server) tenantFromPath(w http.ResponseWriter, r *http.Request) (*store.Tenant, bool) {
	t, ok := s.pathTenant(w, r)
	if ok {
		nameTarget(r, t.Name)
	}
	return t, ok
}

// pathTenant is tenantFromPath for routes about something of the tenant's
// (its keys), which name that in the activity log instead.
func (s *Server) pathTenant(w http.ResponseWriter, r *http.Request) (*store.Tenant, bool) {
	ref := mux.Vars(r)["id"]
	t, err := s.findTenant(r.Context(), ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+jsonapi.Echo(ref), "GET /fleet/tenants lists the tenants, by id and name")
		return nil, false
	case err != nil:
		s.storeError(w, "read tenant "+jsonapi.Echo(ref), err)
		return nil, false
	}
	return t, true
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.opts.Store.ListTenants(r.Context())
	if err != nil {
		s.storeError(w, "list tenants", err)
		return
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	out := sdk.TenantList{Tenants: make([]sdk.Tenant, 0, len(ts))}
	for i := range ts {
		out.Tenants = append(out.Tenants, wireTenant(&ts[i]))
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// createTenant makes a tenant and shows its token once. In lab mode (no
// fleet token) it is refused: the first tenant would end lab mode and lock
// the tokenless operator out of every operator route.
func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	if len(s.fleet) == 0 {
		jsonapi.WriteError(w, http.StatusConflict, "central runs in lab mode (no -token): tenants need an operator token",
			"restart central with -token <fleet token>, then create tenants with that token; the first tenant would otherwise lock the operator out")
		return
	}
	var req sdk.CreateTenantRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if !checkTenantName(w, req.Name) {
		return
	}
	token := store.NewToken(TenantTokenPrefix)
	t := &store.Tenant{Tenant: sdk.Tenant{Name: req.Name, CreatedAt: s.opts.Now().UTC(), Quota: req.Quota}, TokenSHA256: store.HashToken(token)}
	err := s.opts.Store.CreateTenant(r.Context(), t)
	switch {
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, "quotas are whole numbers, 0 or more (0: no limit)")
		return
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, "tenant "+req.Name+" already exists",
			"pick another name, or GET /fleet/tenants/"+req.Name+" to see it")
		return
	case err != nil:
		s.storeError(w, "create tenant "+req.Name, err)
		return
	}
	s.log.Info("tenant created", "tenant", t.ID, "name", t.Name)
	w.Header().Set("Location", "/fleet/tenants/"+t.ID)
	jsonapi.Write(w, http.StatusCreated, sdk.TenantWithToken{Tenant: wireTenant(t), Token: token, Note: tokenNote})
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	if t, ok := s.tenantFromPath(w, r); ok {
		jsonapi.Write(w, http.StatusOK, wireTenant(t))
	}
}

// updateTenant renames, disables or enables a tenant or changes its quotas,
// in one compare-and-swap write.
func (s *Server) updateTenant(w http.ResponseWriter, r *http.Request) {
	var req updateTenantRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if req.Name != nil && !checkTenantName(w, *req.Name) {
		return
	}
	t, ok := s.tenantFromPath(w, r)
	if !ok {
		return
	}
	updated, err := s.opts.Store.UpdateTenant(r.Context(), t.ID, func(t *store.Tenant) error {
		if req.Name != nil {
			t.Name = *req.Name
		}
		if req.Disabled != nil {
			t.Disabled = *req.Disabled
		}
		if req.Quota != nil {
			req.Quota.apply(&t.Quota)
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, "quotas are whole numbers, 0 or more (0 or null: no limit)")
		return
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, "another tenant is named "+*req.Name, "pick another name")
		return
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+mux.Vars(r)["id"], "it was deleted meanwhile")
		return
	case err != nil:
		s.storeError(w, "update tenant "+t.Name, err)
		return
	}
	s.log.Info("tenant updated", "tenant", updated.ID, "name", updated.Name, "disabled", updated.Disabled)
	jsonapi.Write(w, http.StatusOK, wireTenant(updated))
}

// deleteTenant removes a tenant that has no VMs running or being created.
// Its ledger entries stay for metering.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	t, ok := s.tenantFromPath(w, r)
	if !ok {
		return
	}
	// Pools first: the pool loop would boot their VMs again.
	pools, err := s.opts.Store.ListPools(r.Context())
	if err != nil {
		s.storeError(w, "read the pools of tenant "+t.Name, err)
		return
	}
	var names []string
	for _, p := range pools {
		if p.Tenant == t.ID {
			names = append(names, p.Name)
		}
	}
	if len(names) > 0 {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("tenant %s has warm pools: %s", t.Name, strings.Join(names, ", ")),
			fmt.Sprintf("delete them first (DELETE /fleet/pools/{name}?tenant=%s deletes a pool and its idle VMs), then its VMs, then retry", t.ID))
		return
	}
	vols, err := s.volumes.TenantVolumes(r.Context(), t.ID)
	if err != nil {
		s.storeError(w, "read the volumes of tenant "+t.Name, err)
		return
	}
	if len(vols) > 0 {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("tenant %s has volumes: %s", t.Name, strings.Join(vols, ", ")),
			fmt.Sprintf("delete them first (DELETE /fleet/volumes/{name}; GET /fleet/volumes?tenant=%s lists them), then retry", t.ID))
		return
	}
	u, err := s.opts.Store.TenantUsage(r.Context(), t.ID)
	if err != nil {
		s.storeError(w, "read the usage of tenant "+t.Name, err)
		return
	}
	if n := u.Total().VMs; n > 0 {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("tenant %s has %d VMs running or being created", t.Name, n),
			"delete its VMs first (GET /fleet/vms lists them; disable the tenant to stop new ones), then retry")
		return
	}
	err = s.opts.Store.DeleteTenant(r.Context(), t.ID)
	switch {
	case errors.Is(err, store.ErrConflict):
		// A create raced in after the check above.
		jsonapi.WriteError(w, http.StatusConflict, "tenant "+t.Name+" cannot be deleted now: "+err.Error(),
			"delete its VMs first (GET /fleet/vms lists them; disable the tenant to stop new ones), then retry")
		return
	case err != nil && !errors.Is(err, store.ErrNotFound):
		s.storeError(w, "delete tenant "+t.Name, err)
		return
	}
	s.log.Info("tenant deleted", "tenant", t.ID, "name", t.Name)
	w.WriteHeader(http.StatusNoContent)
}

// rotateTenantToken gives a tenant a new token; the old one stops working
// with the same etcd transaction.
func (s *Server) rotateTenantToken(w http.ResponseWriter, r *http.Request) {
	t, ok := s.tenantFromPath(w, r)
	if !ok {
		return
	}
	token := store.NewToken(TenantTokenPrefix)
	updated, err := s.opts.Store.RotateTenantToken(r.Context(), t.ID, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+mux.Vars(r)["id"], "it was deleted meanwhile")
		return
	}
	if err != nil {
		s.storeError(w, "rotate the token of tenant "+t.Name, err)
		return
	}
	s.log.Info("tenant token rotated", "tenant", t.ID, "name", t.Name)
	jsonapi.Write(w, http.StatusOK, sdk.TenantWithToken{Tenant: wireTenant(updated), Token: token, Note: tokenNote})
}

// tenantMe shows the calling tenant its record, usage and limits.
func (s *Server) tenantMe(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	if p.Tenant == nil {
		jsonapi.WriteError(w, http.StatusBadRequest, "the operator is not a tenant",
			"call this with a tenant's fvt_ token; as the operator, GET /fleet/tenants/{id}")
		return
	}
	u, err := s.opts.Store.TenantUsage(r.Context(), p.Tenant.ID)
	if err != nil {
		s.storeError(w, "read your usage", err)
		return
	}
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	b, err := s.metering.MonthToDate(r.Context(), p.Tenant)
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, tenantMeView{
		Tenant:            wireTenant(p.Tenant),
		Usage:             wireUsage(u),
		MaxSnapshotsPerVM: store.SnapshotsPerVM(p.Tenant.Quota, pol),
		Billing:           b,
	})
}
