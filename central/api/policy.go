package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, version, err := s.opts.Store.PolicyVersion(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	setETag(w, version)
	jsonapi.Write(w, http.StatusOK, wirePolicy(p))
}

// putPolicy replaces the policy with a whole document: a field left out
// takes its default (GET /fleet/policy, edit, PUT back is the way to change
// one field). Unknown fields are refused, values are checked, and a
// min_lease_hours below 24 is raised to 24 (Apple's minimum) and said so in a
// Warning header. With If-Match it replaces only the version read (412
// otherwise). The answer is the policy as stored, with its new ETag.
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	body := wirePolicy(store.DefaultPolicy())
	if e := jsonapi.ReadBody(w, r, &body, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	p := storePolicy(body)
	asked := p.MinLeaseHours
	stored, err := s.opts.Store.PutPolicy(r.Context(), p, version...)
	if stale(w, err, "policy") {
		return
	}
	if errors.Is(err, store.ErrInvalid) {
		invalid(w, err, "GET /fleet/policy shows every field with its current value; "+specHint)
		return
	}
	if err != nil {
		s.storeError(w, "store the policy", err)
		return
	}
	if stored.MinLeaseHours != asked {
		w.Header().Set("Warning", fmt.Sprintf(`299 fluxvm "min_lease_hours %d raised to %d: Apple's licence asks for 24 hours of sole use"`,
			asked, stored.MinLeaseHours))
	}
	s.log.Info("policy replaced")
	if _, v, err := s.opts.Store.PolicyVersion(r.Context()); err == nil {
		setETag(w, v)
	}
	jsonapi.Write(w, http.StatusOK, wirePolicy(stored))
}

// wirePolicy is the policy as the API shows it (sdk.Policy), and
// storePolicy the record a PUT's body becomes: the only two places the
// record and the wire type meet.
func wirePolicy(p store.Policy) sdk.Policy {
	t := p.Tunnels
	return sdk.Policy{RequireLeaseForMacOS: p.RequireLeaseForMacOS, ExclusiveLeasedHosts: p.ExclusiveLeasedHosts,
		MinLeaseHours: p.MinLeaseHours, LedgerRetentionDays: p.LedgerRetentionDays, IsolateTenantNetworks: p.IsolateTenantNetworks,
		TenantSubnetPrefix: p.TenantSubnetPrefix, AllowSharedPoolClaims: p.AllowSharedPoolClaims,
		SignupRequireEmailVerification: p.SignupRequireEmailVerification, MaxSnapshotsPerVM: p.MaxSnapshotsPerVM,
		OperatorEmails: p.OperatorEmails,
		Tunnels: sdk.TunnelPolicy{Enabled: t.Enabled, Ports: t.Ports, IdleTimeoutMinutes: t.IdleTimeoutMinutes,
			MaxLifetimeMinutes: t.MaxLifetimeMinutes, MaxPerTenant: t.MaxPerTenant}}
}

func storePolicy(p sdk.Policy) store.Policy {
	t := p.Tunnels
	return store.Policy{RequireLeaseForMacOS: p.RequireLeaseForMacOS, ExclusiveLeasedHosts: p.ExclusiveLeasedHosts,
		MinLeaseHours: p.MinLeaseHours, LedgerRetentionDays: p.LedgerRetentionDays, IsolateTenantNetworks: p.IsolateTenantNetworks,
		TenantSubnetPrefix: p.TenantSubnetPrefix, AllowSharedPoolClaims: p.AllowSharedPoolClaims,
		SignupRequireEmailVerification: p.SignupRequireEmailVerification, MaxSnapshotsPerVM: p.MaxSnapshotsPerVM,
		OperatorEmails: p.OperatorEmails,
		Tunnels: store.TunnelPolicy{Enabled: t.Enabled, Ports: t.Ports, IdleTimeoutMinutes: t.IdleTimeoutMinutes,
			MaxLifetimeMinutes: t.MaxLifetimeMinutes, MaxPerTenant: t.MaxPerTenant}}
}
