package store

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

func TestOpenEmbeddedIsFastPrivateAndKeepsDataAcrossRestart(t *testing.T) {
	dir := t.TempDir() + "/etcd"
	start := time.Now()
	s := openEmbedded(t, Options{DataDir: dir})
	took := time.Since(start)
	t.Logf("embedded etcd ready in %v at %v", took, s.Endpoints())
	if took > 5*time.Second {
		t.Errorf("embedded etcd took %v to start", took)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v, want 0700", fi.Mode().Perm())
	}
	if !strings.HasPrefix(s.Endpoints()[0], "http://127.0.0.1:") {
		t.Errorf("endpoints %v, want loopback", s.Endpoints())
	}
	ctx := testCtx(t)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 3})
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	s2 := openEmbedded(t, Options{DataDir: dir}) // new ports, same data
	got, err := s2.TenantByName(ctx, "acme")
	if err != nil {
		t.Fatalf("tenant after restart: %v", err)
	}
	if got.ID != tn.ID || got.Quota.MaxVMs != 3 {
		t.Errorf("tenant after restart = %+v, want id %s with max_vms 3", got, tn.ID)
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	ctx := testCtx(t)
	if _, err := Open(ctx, Options{}); err == nil {
		t.Error("embedded store without a data dir opened")
	}
	if _, err := Open(ctx, Options{DataDir: t.TempDir(), Prefix: "/nope"}); err == nil {
		t.Error("prefix without a trailing slash accepted")
	}
}

func TestPrefixesIsolateStoresOnOneEtcd(t *testing.T) {
	ctx := testCtx(t)
	a := openEmbedded(t, Options{Prefix: "/a/"})
	b := openPeer(t, a, Options{Prefix: "/b/"})
	testNode(t, a, "n1", 4, 4096, 0)
	if _, err := b.GetNode(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("node of prefix /a/ seen under /b/: %v", err)
	}
}

func TestNodeRoundTripAndUpdate(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	n := &Node{FleetNode: sdk.FleetNode{
		Name: "mac-1", URL: "http://10.0.0.1:7777", Labels: map[string]string{"rack": "a"},
		Capacity:    sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 12, MemoryMiB: 65536, MacOSSlots: 2}, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 32768, MacOSSlots: 1}},
		Drivers:     []sdk.FleetNodeDriver{{Name: "vz", Health: "healthy"}, {Name: "sim", Health: "healthy", Simulated: true}},
		Fingerprint: map[string]string{"cpu.arch": "arm64"}, LastHeartbeat: time.Now().UTC().Round(0),
		State: NodeUp, Cordoned: true, Draining: true, ScrubPending: true, GuestOS: []string{"linux", "macos"}, Nested: true,
		VMs: []sdk.HeartbeatVM{{ID: "vm-1", Name: "ci", Tenant: "t-1", State: "running", VCPUs: 4, MemoryMiB: 8192, GuestOS: "macos"}},
	}}
	if err := s.PutNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetNode(ctx, "mac-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, n) {
		t.Errorf("node round trip:\n got %+v\nwant %+v", got, n)
	}
	// A heartbeat through UpdateNode keeps what central owns.
	got, err = s.UpdateNode(ctx, "mac-1", true, func(n *Node) error {
		n.Capacity.Free.VCPUs = 2
		return nil
	})
	if err != nil || !got.Cordoned || got.Capacity.Free.VCPUs != 2 {
		t.Errorf("update = %+v, %v; want cordoned kept and free vcpus 2", got, err)
	}
	if _, err := s.UpdateNode(ctx, "mac-2", false, func(*Node) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a missing node without create: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateNode(ctx, "mac-2", true, func(*Node) error { return nil }); err != nil {
		t.Errorf("first heartbeat of mac-2: %v", err)
	}
	ns, err := s.ListNodes(ctx)
	if err != nil || len(ns) != 2 || ns[0].Name != "mac-1" || ns[1].Name != "mac-2" {
		t.Errorf("list nodes = %v, %v", ns, err)
	}
	if err := s.PutNode(ctx, &Node{FleetNode: sdk.FleetNode{Name: "bad/name"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("node name with a slash: %v, want ErrInvalid", err)
	}
	if err := s.DeleteNode(ctx, "mac-2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNode(ctx, "mac-2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

func TestTenantIndexesAndTokenRotation(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	five := int64(5)
	acme := &Tenant{Tenant: sdk.Tenant{Name: "acme", Quota: sdk.Quotas{MaxVMs: 20, MaxMemoryMiB: 98304, MaxSnapshotsPerVM: &five}}, TokenSHA256: HashToken("fvt_old")}
	if err := s.CreateTenant(ctx, acme); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(acme.ID, "t-") || len(acme.ID) != 18 || acme.CreatedAt.IsZero() {
		t.Errorf("created tenant id %q created_at %v", acme.ID, acme.CreatedAt)
	}
	for name, get := range map[string]func() (*Tenant, error){
		"by id":    func() (*Tenant, error) { return s.GetTenant(ctx, acme.ID) },
		"by name":  func() (*Tenant, error) { return s.TenantByName(ctx, "acme") },
		"by token": func() (*Tenant, error) { return s.TenantByToken(ctx, HashToken("fvt_old")) },
	} {
		got, err := get()
		if err != nil || !reflect.DeepEqual(got, acme) {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, acme)
		}
	}
	if err := s.CreateTenant(ctx, &Tenant{Tenant: sdk.Tenant{Name: "acme"}, TokenSHA256: HashToken("x")}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate name: %v, want ErrExists", err)
	}
	if err := s.CreateTenant(ctx, &Tenant{Tenant: sdk.Tenant{Name: "other"}, TokenSHA256: HashToken("fvt_old")}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate token: %v, want ErrExists", err)
	}
	if err := s.CreateTenant(ctx, &Tenant{Tenant: sdk.Tenant{Name: "plain"}, TokenSHA256: "fvt_not_hashed"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unhashed token: %v, want ErrInvalid", err)
	}
	if err := s.CreateTenant(ctx, &Tenant{Tenant: sdk.Tenant{Name: "neg", Quota: sdk.Quotas{MaxVCPUs: -1}}, TokenSHA256: HashToken("n")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative quota: %v, want ErrInvalid", err)
	}

	if _, err := s.RotateTenantToken(ctx, acme.ID, HashToken("fvt_new")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TenantByToken(ctx, HashToken("fvt_old")); !errors.Is(err, ErrNotFound) {
		t.Errorf("old token after rotation: %v, want ErrNotFound", err)
	}
	if got, err := s.TenantByToken(ctx, HashToken("fvt_new")); err != nil || got.ID != acme.ID {
		t.Errorf("new token after rotation: %+v, %v", got, err)
	}

	other := testTenant(t, s, "globex", sdk.Quotas{})
	if _, err := s.UpdateTenant(ctx, other.ID, func(t *Tenant) error { t.Name = "acme"; return nil }); !errors.Is(err, ErrExists) {
		t.Errorf("rename onto a taken name: %v, want ErrExists", err)
	}
	if _, err := s.RotateTenantToken(ctx, other.ID, HashToken("fvt_new")); !errors.Is(err, ErrExists) {
		t.Errorf("rotate onto another tenant's token: %v, want ErrExists", err)
	}
	if _, err := s.UpdateTenant(ctx, acme.ID, func(t *Tenant) error { t.Name = "acme-corp"; t.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TenantByName(ctx, "acme"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old name after rename: %v, want ErrNotFound", err)
	}
	if got, err := s.TenantByName(ctx, "acme-corp"); err != nil || !got.Disabled {
		t.Errorf("new name after rename: %+v, %v", got, err)
	}

	if err := s.DeleteTenant(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TenantByToken(ctx, HashToken("fvt_new")); !errors.Is(err, ErrNotFound) {
		t.Errorf("token of a deleted tenant: %v, want ErrNotFound", err)
	}
	if err := s.CreateTenant(ctx, &Tenant{Tenant: sdk.Tenant{Name: "acme-corp"}, TokenSHA256: HashToken("fvt_new")}); err != nil {
		t.Errorf("name and token of a deleted tenant are not free again: %v", err)
	}
	ts, err := s.ListTenants(ctx)
	if err != nil || len(ts) != 2 {
		t.Errorf("list tenants = %d, %v; want 2", len(ts), err)
	}
}

func TestQuotaSnapshotsFollowPolicyUnlessSet(t *testing.T) {
	p := DefaultPolicy()
	zero, five := int64(0), int64(5)
	for _, c := range []struct {
		q    sdk.Quotas
		want int64
	}{{sdk.Quotas{}, 20}, {sdk.Quotas{MaxSnapshotsPerVM: &five}, 5}, {sdk.Quotas{MaxSnapshotsPerVM: &zero}, 0}} {
		if got := SnapshotsPerVM(c.q, p); got != c.want {
			t.Errorf("SnapshotsPerVM(%+v) = %d, want %d", c.q, got, c.want)
		}
	}
}

func TestPolicyDefaultsRaiseMinLeaseAndRefuseBadInput(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	p, err := s.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, DefaultPolicy()) {
		t.Errorf("policy before any put = %+v, want defaults", p)
	}
	want := DefaultPolicy()
	if !want.RequireLeaseForMacOS || !want.ExclusiveLeasedHosts || want.MinLeaseHours != 24 || want.LedgerRetentionDays != 400 ||
		want.IsolateTenantNetworks || want.TenantSubnetPrefix != "10.230" || want.AllowSharedPoolClaims ||
		!want.SignupRequireEmailVerification || want.MaxSnapshotsPerVM != 20 {
		t.Errorf("defaults differ from the spec's policy table: %+v", want)
	}

	p, err = DecodePolicy(strings.NewReader(`{"min_lease_hours": 5, "ledger_retention_days": 0}`), DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if p.MinLeaseHours != 24 || p.LedgerRetentionDays != 0 || !p.RequireLeaseForMacOS {
		t.Errorf("decoded = %+v; want min_lease_hours raised to 24, retention 0, omitted fields default", p)
	}
	p.MinLeaseHours = 48
	if _, err := s.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetPolicy(ctx); !reflect.DeepEqual(got, p) {
		t.Errorf("policy round trip = %+v, want %+v", got, p)
	}
	low := DefaultPolicy()
	low.MinLeaseHours = 1
	if got, err := s.PutPolicy(ctx, low); err != nil || got.MinLeaseHours != 24 {
		t.Errorf("PutPolicy with min_lease_hours 1 = %d, %v; want 24", got.MinLeaseHours, err)
	}

	for _, bad := range []string{
		`{"min_lease_hour": 48}`,
		`{"tunnels": {"enabled": true, "bogus": 1}}`,
		`{"ledger_retention_days": -1}`,
		`{"tenant_subnet_prefix": "10.300"}`,
		`{"tenant_subnet_prefix": "10.230.1"}`,
		`{"max_snapshots_per_vm": -2}`,
		`{"operator_emails": ["not-an-email"]}`,
		`{"tunnels": {"ports": ["0"]}}`,
		`{"tunnels": {"ports": ["2000-1000"]}}`,
		`{"tunnels": {"idle_timeout_minutes": 0}}`,
		`{"tunnels": {"max_lifetime_minutes": 10081}}`,
		`{"tunnels": {"max_per_tenant": 1001}}`,
		`{"require_lease_for_macos": "yes"}`,
		`{} {}`,
		`{`,
	} {
		if _, err := DecodePolicy(strings.NewReader(bad), DefaultPolicy()); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodePolicy(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestImageCatalogFillsDefaultsAndValidates(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	im := &sdk.Image{Name: "debian-13", GuestOS: "linux", Image: "/var/lib/fluxvm/images/debian-13.qcow2"}
	if err := s.PutImage(ctx, im); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetImage(ctx, "debian-13")
	if err != nil {
		t.Fatal(err)
	}
	if got.VCPUs != 4 || got.MemoryMiB != 8192 || got.SSHUser != "admin" {
		t.Errorf("image defaults = %+v; want 4 vCPUs, 8192 MiB, ssh_user admin", got)
	}
	mac := &sdk.Image{Name: "macos-27-xcode", DisplayName: "macOS 27 with Xcode", GuestOS: "macos",
		Image: "/Users/fluxvm/vms/macos-27-xcode/disk.raw", VCPUs: 6, MemoryMiB: 16384,
		Source: "ghcr.io/acme/macos-xcode:27", SSHUser: "runner"}
	if err := s.PutImage(ctx, mac); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetImage(ctx, mac.Name); !reflect.DeepEqual(got, mac) {
		t.Errorf("image round trip = %+v, want %+v", got, mac)
	}
	ims, err := s.ListImages(ctx)
	if err != nil || len(ims) != 2 || ims[0].Name != "debian-13" {
		t.Errorf("list images = %v, %v", ims, err)
	}
	for _, bad := range []sdk.Image{
		{Name: "x", GuestOS: "windows", Image: "/d"},
		{Name: "x", GuestOS: "linux"},
		{Name: "-x", GuestOS: "linux", Image: "/d"},
		{Name: "x", GuestOS: "linux", Image: "/d", VCPUs: -1},
		{Name: "x", GuestOS: "linux", Image: "/d", MemoryMiB: 1},
	} {
		if err := s.PutImage(ctx, &bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("PutImage(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.DeleteImage(ctx, "debian-13"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetImage(ctx, "debian-13"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted image: %v, want ErrNotFound", err)
	}
}

func TestLedgerLifecycleAndRetention(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 16, 65536, 2)
	acme := testTenant(t, s, "acme", sdk.Quotas{})

	res, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 4, MemoryMiB: 8192, MacOS: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	e, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-1", Name: "ci-1", Image: "macos-27-xcode", StartedAt: start})
	if err != nil {
		t.Fatal(err)
	}
	// The entry's id is derived from node and VM, whoever records it.
	want := LedgerEntry{ID: EntryID("n1", "vm-1"), Tenant: acme.ID, Node: "n1", VMID: "vm-1", Name: "ci-1", VCPUs: 4, MemoryMiB: 8192,
		GuestOS: "macos", Image: "macos-27-xcode", StartedAt: start}
	if !reflect.DeepEqual(*e, want) {
		t.Errorf("committed entry = %+v, want %+v", *e, want)
	}
	if got, err := s.GetEntry(ctx, want.ID); err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("entry round trip = %+v, %v", got, err)
	}
	if _, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-1"}); !errors.Is(err, ErrExists) {
		t.Errorf("second commit of one reservation: %v, want ErrExists", err)
	}
	if rs, _ := s.ListReservations(ctx); len(rs) != 0 {
		t.Errorf("reservations after commit: %v", rs)
	}
	u, _ := s.TenantUsage(ctx, acme.ID)
	if u.Running != (Usage{VMs: 1, VCPUs: 4, MemoryMiB: 8192, MacOS: 1}) || u.Reserved != (Usage{}) {
		t.Errorf("tenant usage after commit = %+v", u)
	}
	for name, list := range map[string]func() ([]LedgerEntry, error){
		"running on node":    func() ([]LedgerEntry, error) { return s.RunningOnNode(ctx, "n1") },
		"running for tenant": func() ([]LedgerEntry, error) { return s.RunningForTenant(ctx, acme.ID) },
		"tenant entries":     func() ([]LedgerEntry, error) { return s.EntriesForTenant(ctx, acme.ID) },
	} {
		if es, err := list(); err != nil || len(es) != 1 || es[0].ID != want.ID {
			t.Errorf("%s = %v, %v", name, es, err)
		}
	}

	end := start.Add(3 * time.Hour)
	ended, err := s.EndEntry(ctx, want.ID, "deleted", end)
	if err != nil || !ended.EndedAt.Equal(end) || ended.EndReason != "deleted" {
		t.Fatalf("end = %+v, %v", ended, err)
	}
	again, err := s.EndEntry(ctx, want.ID, "vanished", end.Add(time.Hour))
	if err != nil || again.EndReason != "deleted" {
		t.Errorf("second end = %+v, %v; want the first end kept", again, err)
	}
	if u, _ := s.TenantUsage(ctx, acme.ID); u.Total() != (Usage{}) {
		t.Errorf("tenant usage after end = %+v", u)
	}
	if es, _ := s.RunningOnNode(ctx, "n1"); len(es) != 0 {
		t.Errorf("running on node after end = %v", es)
	}
	if es, _ := s.EntriesForTenant(ctx, acme.ID); len(es) != 1 || es[0].Running() {
		t.Errorf("tenant entries after end = %v", es)
	}
	if _, err := s.EndEntry(ctx, "nope", "x", end); !errors.Is(err, ErrNotFound) {
		t.Errorf("end of a missing entry: %v", err)
	}

	// A running entry adopted by the reconciler, and retention.
	adopted, err := s.RecordEntry(ctx, LedgerEntry{Tenant: acme.ID, Node: "n1", VMID: "vm-2", Name: "ci-2", VCPUs: 2, MemoryMiB: 2048, StartedAt: start})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.DropEndedBefore(ctx, end); err != nil || n != 0 {
		t.Errorf("drop before the end = %d, %v; want 0", n, err)
	}
	if n, err := s.DropEndedBefore(ctx, end.Add(time.Second)); err != nil || n != 1 {
		t.Errorf("drop after the end = %d, %v; want 1", n, err)
	}
	if es, _ := s.ListEntries(ctx, nil); len(es) != 1 || es[0].ID != adopted.ID {
		t.Errorf("entries after retention = %v; want only the running one", es)
	}
}

func TestLedgerScansReadLargeLedgersWholeStreamedOrInPages(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 1<<20, 1<<30, 0)
	const total, ended = 1100, 700 // more than two scan pages, more than ten delete batches
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < total; i += 8 {
				e, err := s.RecordEntry(ctx, LedgerEntry{ID: fmt.Sprintf("l-%04d", i), Node: "n1", VMID: "vm", Name: "vm",
					VCPUs: 1, MemoryMiB: 1, StartedAt: start.Add(time.Duration(i) * time.Second)})
				if err == nil && i < ended {
					_, err = s.EndEntry(ctx, e.ID, "deleted", start.Add(time.Hour))
				}
				if err != nil {
					errs <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	es, err := s.ListEntries(ctx, nil)
	if err != nil || len(es) != total || es[0].ID != "l-0000" || es[total-1].ID != fmt.Sprintf("l-%04d", total-1) {
		t.Fatalf("list = %d entries, %v; want %d in start order", len(es), err, total)
	}
	// An etcd before 3.7 has no RangeStream: the same scan in pages.
	s.noRangeStream.Store(true)
	paged, err := s.ListEntries(ctx, nil)
	if err != nil || !reflect.DeepEqual(paged, es) {
		t.Fatalf("list in pages = %d entries, %v; want the %d the stream read", len(paged), err, len(es))
	}
	s.noRangeStream.Store(false)
	rep, err := s.Recount(ctx)
	if err != nil || rep.Running != total-ended || len(rep.Fixed) != 0 {
		t.Errorf("recount = %+v, %v; want %d running, nothing to fix", rep, err, total-ended)
	}
	if n, err := s.DropEndedBefore(ctx, start.Add(2*time.Hour)); err != nil || n != ended {
		t.Errorf("dropped %d, %v; want %d", n, err, ended)
	}
	if u, _ := s.NodeUsage(ctx, "n1"); u.Running.VMs != total-ended {
		t.Errorf("node usage after retention = %+v; want %d running", u, total-ended)
	}
}
