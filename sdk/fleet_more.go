package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// A VM's screen through central, resizing a warm pool, and the operator's
// macOS pool: checking warm macOS guests out for CI jobs and giving them
// back.

// Screen returns a PNG of a VM's display, taken by its node and passed on
// by central, scaled down to maxWidth pixels when it is wider (0 keeps its
// size). A VM without a display is the node's refusal, IsConflict.
func (f *FleetClient) Screen(ctx context.Context, node, id string, maxWidth int) ([]byte, error) {
	var q url.Values
	if maxWidth > 0 {
		q = url.Values{"max_width": {strconv.Itoa(maxWidth)}}
	}
	return f.c.blob(ctx, http.MethodGet, fleetVMPath(node, id, "screen"), q)
}

// PoolPatch is PATCH /fleet/pools/{name}: nil fields stay as they are. A
// new Size above MaxSize raises MaxSize with it, and so does any new Size
// of a pool whose MaxSize equalled its Size (it did not grow with demand
// before, and does not after), unless MaxSize is given too.
type PoolPatch struct {
	// Size is how many warm VMs the pool keeps at least (0 to 100).
	Size *int `json:"size,omitempty"`
	// MaxSize is how far the pool may grow toward recent demand (0 to 100).
	MaxSize *int `json:"max_size,omitempty"`
}

// ResizePool changes a pool's size or max_size and returns the pool as
// stored; central's pool loop then boots or retires warm VMs to match.
// tenant is as in GetPool: the operator's way to name a tenant's pool. A
// tenant may resize only its own pools: another tenant's, like one that
// does not exist, is IsNotFound, and a shared pool it may launch from is
// IsForbidden.
func (f *FleetClient) ResizePool(ctx context.Context, name, tenant string, patch PoolPatch) (*Pool, error) {
	p, q := poolPath(name, tenant)
	var out Pool
	if err := f.c.call(ctx, http.MethodPatch, p, q, patch, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MacOSCheckoutRequest is POST /fleet/macos-pool/checkout; both fields
// only narrow the choice, and the zero value takes from any shared pool of
// macOS guests.
type MacOSCheckoutRequest struct {
	// Pool takes only from the shared pool of that name.
	Pool string `json:"pool,omitempty"`
	// Image takes only VMs of that catalog image.
	Image string `json:"image,omitempty"`
}

// MacOSCheckout is a warm macOS VM handed to the operator: where it runs,
// the pool it came from, and the route that gives it back.
type MacOSCheckout struct {
	Node string `json:"node"`
	ID   string `json:"id"`
	Pool string `json:"pool"`
	VM   VM     `json:"vm"`
	// IdleOnNode is how many warm macOS VMs Node had before this one was
	// taken; Reason says why central chose Node.
	IdleOnNode int    `json:"idle_on_node"`
	Reason     string `json:"reason"`
	// Return is the API route that gives the VM back (ReturnMacOS).
	Return string `json:"return"`
}

// MacOSReturn is the answer of a return: the VM was deleted and its pool
// boots a clean one in its place.
type MacOSReturn struct {
	Node     string `json:"node"`
	ID       string `json:"id"`
	Pool     string `json:"pool"`
	Returned bool   `json:"returned"`
	Note     string `json:"note"`
}

// CheckoutMacOS takes a warm macOS VM from the shared macOS pools, from the
// Mac with the most idle ones, so work spreads over the Macs' slots
// (operator only). No shared macOS pool (or none matching req) is
// IsNotFound; pools with no VM idle right now are IsConflict.
func (f *FleetClient) CheckoutMacOS(ctx context.Context, req MacOSCheckoutRequest) (*MacOSCheckout, error) {
	var out MacOSCheckout
	if err := f.c.call(ctx, http.MethodPost, "/fleet/macos-pool/checkout", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReturnMacOS gives back a VM CheckoutMacOS handed out: central deletes it
// and its pool boots a clean one (operator only). A VM already returned is
// IsNotFound; one that is not a checked-out macOS pool VM IsConflict.
func (f *FleetClient) ReturnMacOS(ctx context.Context, node, id string) (*MacOSReturn, error) {
	var out MacOSReturn
	if err := f.c.call(ctx, http.MethodPost, "/fleet/macos-pool/"+url.PathEscape(node)+"/"+url.PathEscape(id)+"/return", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
