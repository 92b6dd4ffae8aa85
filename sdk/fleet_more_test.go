package sdk_test

import (
	"bytes"
	"context"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// waitWarm polls a pool's status until it has want warm VMs.
func waitWarm(t *testing.T, fc *sdk.FleetClient, pool, tenant string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := fc.GetPoolStatus(t.Context(), pool, tenant)
		if err != nil {
			t.Fatalf("status of pool %s: %v", pool, err)
		}
		if st.Warm == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never had %d warm VMs: %+v", pool, want, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestScreenIsAPNGWithinMaxWidthAndRefusedWithoutADisplay(t *testing.T) {
	ctx := t.Context()
	liveFleet.CatalogImage(t, "screen-img")
	_, token := liveFleet.Tenant(t, unique("screen"), nil)
	tenant := fleetClient(t, token)
	launch := func(name string, display bool) *sdk.FleetCreateVMResponse {
		resp, err := tenant.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: name, Image: "screen-img", Display: display}, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.DeleteVM(context.Background(), resp.Node, resp.VM.ID) })
		return resp
	}
	shown, dark := launch("shown", true), launch("dark", false)

	full, err := tenant.Screen(ctx, shown.Node, shown.VM.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(full))
	if err != nil {
		t.Fatalf("the screen is not a PNG: %v", err)
	}
	if cfg.Width <= 320 {
		t.Fatalf("the full screen is %d pixels wide; the test needs one wider than 320", cfg.Width)
	}
	small, err := tenant.Screen(ctx, shown.Node, shown.VM.ID, 320)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(small))
	if err != nil {
		t.Fatalf("the scaled screen is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w < 1 || w > 320 {
		t.Fatalf("max_width 320 gave a screen %d pixels wide", w)
	}

	_, err = tenant.Screen(ctx, dark.Node, dark.VM.ID, 0)
	if ae := wantStatus(t, "screen of a VM without a display", err, http.StatusConflict); !sdk.IsConflict(err) ||
		!strings.Contains(ae.Message, "display") {
		t.Fatalf("screen of a VM without a display: %+v, want the node's refusal naming the display", ae)
	}
	// Another tenant's VM is not there for this one.
	_, other := liveFleet.Tenant(t, unique("peeker"), nil)
	_, err = fleetClient(t, other).Screen(ctx, shown.Node, shown.VM.ID, 0)
	if wantStatus(t, "screen of another tenant's VM", err, http.StatusNotFound); !sdk.IsNotFound(err) {
		t.Fatalf("screen of another tenant's VM = %v, want not found", err)
	}
}

func TestResizePoolChangesTheStoredSizeOnlyForItsOwner(t *testing.T) {
	ctx := t.Context()
	liveFleet.CatalogImage(t, "resize-img")
	owner := unique("resizer")
	_, token := liveFleet.Tenant(t, owner, nil)
	tenant := fleetClient(t, token)
	op := fleetClient(t, liveFleet.OperatorToken)
	one := 1
	if _, err := tenant.CreatePool(ctx, sdk.CreatePoolRequest{Name: "grow", Image: "resize-img", Size: &one}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = tenant.DeletePool(context.Background(), "grow", "") })

	two := 2
	p, err := tenant.ResizePool(ctx, "grow", "", sdk.PoolPatch{Size: &two})
	if err != nil {
		t.Fatal(err)
	}
	// A pool created without max_size keeps max_size = size as it grows.
	if p.Name != "grow" || p.Size != 2 || p.MaxSize != 2 {
		t.Fatalf("resize to 2 answered %+v", p)
	}
	stored, err := tenant.GetPool(ctx, "grow", "")
	if err != nil || stored.Size != 2 || stored.MaxSize != 2 {
		t.Fatalf("pool after the resize = %+v, %v", stored, err)
	}
	if st, err := tenant.GetPoolStatus(ctx, "grow", ""); err != nil || st.Target != 2 {
		t.Fatalf("status after the resize = %+v, %v; want target 2", st, err)
	}

	// The operator names the tenant's pool with tenant; max_size alone
	// leaves size.
	four := 4
	p, err = op.ResizePool(ctx, "grow", owner, sdk.PoolPatch{MaxSize: &four})
	if err != nil || p.Size != 2 || p.MaxSize != 4 || p.Tenant == "" {
		t.Fatalf("the operator's resize of max_size = %+v, %v", p, err)
	}

	// Another tenant cannot see the pool, so it cannot resize it.
	_, other := liveFleet.Tenant(t, unique("intruder"), nil)
	_, err = fleetClient(t, other).ResizePool(ctx, "grow", "", sdk.PoolPatch{Size: &one})
	if wantStatus(t, "resize of another tenant's pool", err, http.StatusNotFound); !sdk.IsNotFound(err) {
		t.Fatalf("resize of another tenant's pool = %v, want not found", err)
	}
	if stored, err := tenant.GetPool(ctx, "grow", ""); err != nil || stored.Size != 2 {
		t.Fatalf("pool after a refused resize = %+v, %v; want size 2 still", stored, err)
	}
	bad := 101
	_, err = tenant.ResizePool(ctx, "grow", "", sdk.PoolPatch{Size: &bad})
	wantStatus(t, "resize beyond 100", err, http.StatusBadRequest)
}

// TestMacOSPoolChecksOutAndTakesBackAWarmMacOSGuest runs on fleettest's sim
// node, which takes macOS guests (two slots).
func TestMacOSPoolChecksOutAndTakesBackAWarmMacOSGuest(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)

	// No shared macOS pool yet: central's 404 says how to make one.
	_, err := op.CheckoutMacOS(ctx, sdk.MacOSCheckoutRequest{})
	if ae := wantStatus(t, "checkout without a macOS pool", err, http.StatusNotFound); !sdk.IsNotFound(err) ||
		!strings.Contains(ae.Message, "no shared pool of macOS guests") || !strings.Contains(ae.Hint, "POST /fleet/pools") {
		t.Fatalf("checkout without a macOS pool: %+v", ae)
	}

	if _, err := op.PutImage(ctx, sdk.Image{Name: "macos-ci-img", GuestOS: "macos", Image: liveFleet.Image, VCPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := op.CreatePool(ctx, sdk.CreatePoolRequest{Name: "macos-ci", Image: "macos-ci-img", Size: &one}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = op.DeletePool(context.Background(), "macos-ci", "") })
	waitWarm(t, op, "macos-ci", "", 1)

	_, err = op.CheckoutMacOS(ctx, sdk.MacOSCheckoutRequest{Pool: "nope"})
	if ae := wantStatus(t, "checkout from a pool that does not exist", err, http.StatusNotFound); !strings.Contains(ae.Message, "matches") {
		t.Fatalf("checkout with a filter matching nothing: %+v", ae)
	}
	out, err := op.CheckoutMacOS(ctx, sdk.MacOSCheckoutRequest{Image: "macos-ci-img"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = op.ReturnMacOS(context.Background(), out.Node, out.ID) })
	if out.Node != liveFleet.Node || out.Pool != "macos-ci" || out.VM.ID != out.ID || out.VM.GuestOS != "macos" || out.IdleOnNode != 1 ||
		out.Reason == "" || out.Return != "POST /fleet/macos-pool/"+out.Node+"/"+out.ID+"/return" {
		t.Fatalf("checkout = %+v", out)
	}

	// A VM that is not a macOS pool VM is not taken back.
	liveFleet.CatalogImage(t, "plain-img")
	plain, err := op.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "not-from-a-pool", Image: "plain-img"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.DeleteVM(context.Background(), plain.Node, plain.VM.ID) })
	_, err = op.ReturnMacOS(ctx, plain.Node, plain.VM.ID)
	if ae := wantStatus(t, "return of a plain VM", err, http.StatusConflict); !strings.Contains(ae.Message, "not a macOS pool VM") {
		t.Fatalf("return of a plain VM: %+v", ae)
	}

	back, err := op.ReturnMacOS(ctx, out.Node, out.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Returned || back.Node != out.Node || back.ID != out.ID || back.Pool != "macos-ci" || back.Note == "" {
		t.Fatalf("return = %+v", back)
	}
	list, err := op.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range list.VMs {
		if vm.ID == out.ID {
			t.Fatalf("the returned VM is still listed: %+v", vm)
		}
	}
	_, err = op.ReturnMacOS(ctx, out.Node, out.ID)
	if wantStatus(t, "a second return", err, http.StatusNotFound); !sdk.IsNotFound(err) {
		t.Fatalf("second return = %v, want not found", err)
	}

	// The pool refills, and central's answers fit the SDK's types exactly.
	waitWarm(t, op, "macos-ci", "", 1)
	raw := rawDo(t, http.MethodPost, "/fleet/macos-pool/checkout", liveFleet.OperatorToken, []byte(`{"pool": "macos-ci"}`))
	var again sdk.MacOSCheckout
	roundTrips(t, "POST /fleet/macos-pool/checkout", raw, &again)
	raw = rawDo(t, http.MethodPost, "/fleet/macos-pool/"+again.Node+"/"+again.ID+"/return", liveFleet.OperatorToken, nil)
	roundTrips(t, "POST /fleet/macos-pool/{node}/{id}/return", raw, &sdk.MacOSReturn{})

	// Tenants have no macOS pool to check out from.
	_, token := liveFleet.Tenant(t, unique("macless"), nil)
	_, err = fleetClient(t, token).CheckoutMacOS(ctx, sdk.MacOSCheckoutRequest{})
	if wantStatus(t, "a tenant's checkout", err, http.StatusForbidden); !sdk.IsForbidden(err) {
		t.Fatalf("a tenant's checkout = %v, want forbidden", err)
	}
}
