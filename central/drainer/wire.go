package drainer

import (
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Wire is a drain as the API answers it (sdk.Drain) from its record: the
// record's sdk.Drain, with its VMs as a list of their own (never null).
// Draining is the node's, not the record's: it is left nil, for GET
// .../drain to fill.
func Wire(d store.Drain) sdk.Drain {
	out := d.Drain
	out.VMs = append([]sdk.DrainVM{}, d.VMs...)
	out.Draining = nil
	return out
}
