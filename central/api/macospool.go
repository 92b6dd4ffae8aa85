package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/pools"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// The macOS pool is the operator's view of the warm pools of macOS guests
// across the fleet: a checkout takes a warm macOS VM from the Mac with the
// most idle ones (pools.Service.CheckoutMacOS), and a return
// deletes it, so the pool loop boots a clean one in its place. It is for an
// operator's own CI that hands VMs to jobs; tenants launch from pools with
// POST /fleet/vms.

// macOSCheckoutRequest is POST /fleet/macos-pool/checkout; both fields are
// optional filters.
type macOSCheckoutRequest struct {
	// Pool takes only from the shared pool of that name.
	Pool string `json:"pool"`
	// Image takes only VMs of that catalog image.
	Image string `json:"image"`
}

// macOSCheckout is the answer: where the VM is and how to give it back.
type macOSCheckout struct {
	Node string `json:"node"`
	ID   string `json:"id"`
	Pool string `json:"pool"`
	VM   sdk.VM `json:"vm"`
	// IdleOnNode is how many warm macOS VMs the node had before this one
	// was taken; Reason says why this node.
	IdleOnNode int    `json:"idle_on_node"`
	Reason     string `json:"reason"`
	Return     string `json:"return"`
}

// macOSReturn is the answer of a return.
type macOSReturn struct {
	Node     string `json:"node"`
	ID       string `json:"id"`
	Pool     string `json:"pool"`
	Returned bool   `json:"returned"`
	Note     string `json:"note"`
}

// checkoutMacOS is POST /fleet/macos-pool/checkout.
func (s *Server) checkoutMacOS(w http.ResponseWriter, r *http.Request) {
	var req macOSCheckoutRequest
	if e := jsonapi.ReadBody(w, r, &req, false, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if req.Pool != "" && !store.ValidName(req.Pool) {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("pool %q is not a valid name", jsonapi.Echo(req.Pool)), "GET /fleet/pools lists the pools")
		return
	}
	c, err := s.pools.CheckoutMacOS(r.Context(), req.Pool, req.Image)
	switch {
	case errors.Is(err, pools.ErrNoMacOSPool):
		what := "no shared pool of macOS guests"
		if req.Pool != "" || req.Image != "" {
			what += " matches"
		}
		jsonapi.WriteError(w, http.StatusNotFound, what,
			`create one with POST /fleet/pools {"name": "macos-ci", "image": "<a macOS catalog image>", "size": 2}`)
		return
	case errors.Is(err, pools.ErrNoIdle):
		jsonapi.WriteError(w, http.StatusConflict, "no warm macOS VM is idle now",
			"the pool loop is booting replacements: GET /fleet/pools/{name}/status shows them; try again shortly or raise the pool's size")
		return
	case err != nil:
		s.storeError(w, "check out a macOS vm", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, macOSCheckout{Node: c.Node, ID: c.Member.VMID, Pool: c.Pool.Name, VM: *c.VM, IdleOnNode: c.IdleOnNode,
		Reason: fmt.Sprintf("%s had the most idle macOS VMs (%d)", c.Node, c.IdleOnNode),
		Return: fmt.Sprintf("POST /fleet/macos-pool/%s/%s/return", c.Node, c.Member.VMID)})
}

// returnMacOS is POST /fleet/macos-pool/{node}/{id}/return: the VM, which
// must be a checked-out macOS pool VM, is deleted and its pool refills.
func (s *Server) returnMacOS(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	nc, ok := s.nodeClient(w, t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), nodecall.CallTimeout)
	defer cancel()
	vm, err := nc.GetVM(ctx, t.ID)
	if err != nil {
		if sdk.IsNotFound(err) {
			jsonapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no vm %s on node %s", jsonapi.Echo(mux.Vars(r)["id"]), t.Node.Name),
				"it may have been returned already; GET /fleet/vms lists the VMs")
			return
		}
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, "read the vm", err)
		return
	}
	pool := vm.Labels[PoolLabel]
	if pool == "" || vm.GuestOS != store.GuestMacOS {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("vm %s on node %s is not a macOS pool VM", vm.Name, t.Node.Name),
			"only VMs from POST /fleet/macos-pool/checkout are returned; DELETE /fleet/vms/{node}/{id} deletes any other")
		return
	}
	if t.Entry != nil && t.Entry.Tenant != "" {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("vm %s on node %s belongs to a tenant now", vm.Name, t.Node.Name),
			"a tenant that launched it from a shared pool deletes it with DELETE /fleet/vms/{node}/{id}")
		return
	}
	if s.pools.InPool(ctx, "", pool, vm.ID) {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("vm %s is still idle in pool %s", vm.Name, pool),
			"check it out first with POST /fleet/macos-pool/checkout")
		return
	}
	if _, err := s.vms.Delete(ctx, t.Node, vm.ID, t.Entry, "returned"); err != nil {
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, "delete the returned vm", err)
		return
	}
	s.pools.Kick()
	jsonapi.Write(w, http.StatusOK, macOSReturn{Node: t.Node.Name, ID: vm.ID, Pool: pool, Returned: true,
		Note: "deleted; the pool boots a clean VM in its place"})
}
