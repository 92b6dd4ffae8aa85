package vms

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestResolve turns create requests into node requests from a real catalog
// (embedded etcd) and refuses the bad ones with the right kind, never
// repeating more than a bounded piece of what was sent.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	if err := st.PutImage(ctx, &sdk.Image{Name: "deb", GuestOS: store.GuestLinux, Image: "/img/deb", VCPUs: 2, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}

	spec, image, err := Resolve(ctx, st, "t-acme", &sdk.FleetCreateVMRequest{Name: "web", Image: "deb",
		Labels: map[string]string{EphemeralLabel: "true", "team": "ci"}})
	if err != nil || image != "deb" || spec.Image != "/img/deb" || spec.VCPUs != 2 || spec.MemoryMiB != 512 ||
		spec.GuestOS != store.GuestLinux || spec.Tenant != "t-acme" {
		t.Fatalf("Resolve = %+v %q %v; want the catalog's image and size, stamped t-acme", spec, image, err)
	}

	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		what   string
		tenant string
		req    sdk.FleetCreateVMRequest
		kind   int
		says   string
	}{
		{"a bad name", "t-acme", sdk.FleetCreateVMRequest{Name: "-x", Image: "deb"}, http.StatusBadRequest, "not a valid vm name"},
		{"a 1 MiB name", "t-acme", sdk.FleetCreateVMRequest{Name: huge, Image: "deb"}, http.StatusBadRequest, "not a valid vm name"},
		{"no image", "t-acme", sdk.FleetCreateVMRequest{Name: "a"}, http.StatusBadRequest, "image is required"},
		{"an unknown image", "t-acme", sdk.FleetCreateVMRequest{Name: "a", Image: "nope"}, http.StatusBadRequest, `no image "nope"`},
		{"a tenant's image_path", "t-acme", sdk.FleetCreateVMRequest{Name: "a", ImagePath: "/img/deb"}, http.StatusForbidden, "for the operator"},
		{"a relative image_path", "", sdk.FleetCreateVMRequest{Name: "a", ImagePath: "img/deb"}, http.StatusBadRequest, "absolute path"},
		{"a reserved label", "t-acme", sdk.FleetCreateVMRequest{Name: "a", Image: "deb", Labels: map[string]string{"fluxvm.dev/pool": "p"}}, http.StatusBadRequest, "reserved prefix"},
		{"too many labels", "t-acme", sdk.FleetCreateVMRequest{Name: "a", Image: "deb", Labels: func() map[string]string {
			m := map[string]string{}
			for i := range MaxLabels + 1 {
				m[strings.Repeat("k", i+1)] = "v"
			}
			return m
		}()}, http.StatusBadRequest, "at most"},
	} {
		_, _, err := Resolve(ctx, st, tc.tenant, &tc.req)
		var rf *jsonapi.Error
		if !errors.As(err, &rf) || rf.Status != tc.kind || !strings.Contains(rf.Msg, tc.says) || rf.Hint == "" {
			t.Errorf("%s: %v; want a refusal of status %d saying %q, with a hint", tc.what, err, tc.kind, tc.says)
			continue
		}
		if len(rf.Msg) > 300 {
			t.Errorf("%s: the refusal repeats %d bytes of the request", tc.what, len(rf.Msg))
		}
	}
	// The operator may set FluxVM's own labels and name a disk.
	if _, _, err := Resolve(ctx, st, "", &sdk.FleetCreateVMRequest{Name: "a", ImagePath: "/img/deb", VCPUs: 1, MemoryMiB: 64, Labels: map[string]string{"fluxvm.dev/pool": "p"}}); err != nil {
		t.Fatalf("the operator's create: %v", err)
	}
}
