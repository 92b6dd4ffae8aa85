package pools

import (
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// The answers of the pool routes are sdk types; the store's records stay
// storage-only and are turned into them here, one function per answer.

// Wire is a pool as the API answers it (sdk.Pool) from its record: the
// record's sdk.Pool with the fields derived from it, Shared and Mode.
func Wire(p store.Pool) sdk.Pool {
	out := p.Pool
	out.Shared, out.Mode = p.Tenant == "", modeOf(&p)
	return out
}

// WireStatus is GET /fleet/pools/{name}/status (sdk.PoolStatus): the pool
// and what Status counted of its members.
func WireStatus(p *store.Pool, st *Status) sdk.PoolStatus {
	out := sdk.PoolStatus{Name: p.Name, Tenant: p.Tenant, Shared: p.Tenant == "", Mode: modeOf(p),
		Size: p.Size, MaxSize: p.MaxSize, Target: st.Target, RecentClaims: st.RecentClaims,
		DemandWindowS: int(DemandWindow / time.Second), Growing: st.Growing, Warm: st.Warm, Booting: st.Booting,
		Retiring: st.Retiring, Deleting: p.Deleting, Blocked: p.Blocked, Members: []sdk.PoolMember{}}
	for _, m := range st.Members {
		v := sdk.PoolMember{Name: m.ID, Node: m.Node, VMID: m.VMID, State: m.State, CreatedAt: m.CreatedAt}
		if !m.ReadyAt.IsZero() {
			v.ReadyAt = &m.ReadyAt
		}
		if !m.ClaimedAt.IsZero() {
			v.ClaimedAt = &m.ClaimedAt
		}
		out.Members = append(out.Members, v)
	}
	return out
}

// modeOf is a pool's mode; records written before snapshot mode have none.
func modeOf(p *store.Pool) string {
	if p.Mode == "" {
		return ModeRunning
	}
	return p.Mode
}
