package drainer

import (
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Wire is a drain as the API answers it (sdk.Drain) from its record;
// Draining is left nil, for GET .../drain to fill.
func Wire(d store.Drain) sdk.Drain {
	out := sdk.Drain{Node: d.Node, Mode: d.Mode, Forced: d.Forced, StartedAt: d.StartedAt, UpdatedAt: d.UpdatedAt,
		Finished: d.Finished, FinishedAt: d.FinishedAt, VMs: []sdk.DrainVM{}}
	for _, v := range d.VMs {
		out.VMs = append(out.VMs, sdk.DrainVM{ID: v.ID, Name: v.Name, Tenant: v.Tenant, Ephemeral: v.Ephemeral,
			Action: v.Action, MovedTo: v.MovedTo, Error: v.Error})
	}
	return out
}
