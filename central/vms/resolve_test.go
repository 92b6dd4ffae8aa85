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

// listCounter is the real store, counting the whole-catalog reads.
type listCounter struct {
	*store.Store
	lists int
}

func (c *listCounter) ListImages(ctx context.Context) ([]sdk.Image, error) {
	c.lists++
	return c.Store.ListImages(ctx)
}

// TestResolveReadsTheWholeCatalogOnlyToRefuse: a create that names a
// catalog image reads that image alone; the list of every image's name is
// read only for a refusal's hint, which still carries it.
func TestResolveReadsTheWholeCatalogOnlyToRefuse(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	for _, name := range []string{"deb", "alpine"} {
		if err := st.PutImage(ctx, &sdk.Image{Name: name, GuestOS: store.GuestLinux, Image: "/img/" + name, VCPUs: 1, MemoryMiB: 256}); err != nil {
			t.Fatal(err)
		}
	}
	cat := &listCounter{Store: st}
	if _, _, err := Resolve(ctx, cat, "t-acme", &sdk.FleetCreateVMRequest{Name: "web", Image: "deb"}); err != nil {
		t.Fatal(err)
	}
	if cat.lists != 0 {
		t.Errorf("a create of a catalog image listed the catalog %d times; want none", cat.lists)
	}
	for _, req := range []sdk.FleetCreateVMRequest{{Name: "a", Image: "nope"}, {Name: "a"}, {Name: "a", Image: "Bad Name!"}} {
		cat.lists = 0
		_, _, err := Resolve(ctx, cat, "t-acme", &req)
		var rf *jsonapi.Error
		if !errors.As(err, &rf) {
			t.Errorf("image %q: %v; want a refusal", req.Image, err)
			continue
		}
		if rf.Status != http.StatusBadRequest || !strings.Contains(rf.Hint, "catalog images: alpine, deb") || cat.lists != 1 {
			t.Errorf("image %q: %v (hint %q), %d lists; want a 400 naming the catalog's images, from one list", req.Image, err, rf.Hint, cat.lists)
		}
	}
}
