package store

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestKeyLayoutNamesEveryKey drives every kind of write the store makes and
// then holds every key under the prefix to the key-layout table in crud.go:
// a key no line of the table describes fails the test, and so does a line
// no key matched, so the table cannot go stale either way.
func TestKeyLayoutNamesEveryKey(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	now := time.Now().UTC()

	testNode(t, s, "n1", 16, 65536, 2)
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	if _, err := s.TenantSubnetIndex(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPolicy(ctx, DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	if err := s.PutImage(ctx, &sdk.Image{Name: "deb", GuestOS: GuestLinux, Image: "/img/deb", VCPUs: 1, MemoryMiB: 64}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitSpec(ctx, res, LedgerEntry{VMID: "vm-1", Name: "a"}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	held, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, held)
	if _, err := s.MarkDeleted(ctx, "n1", "vm-2", "deleted", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordEntry(ctx, LedgerEntry{Tenant: acme.ID, Node: "n1", VMID: "vm-3", Name: "c", VCPUs: 1, MemoryMiB: 64}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndEntry(ctx, EntryID("n1", "vm-3"), "deleted", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateLedgerIndex(ctx); err != nil {
		t.Fatal(err)
	}
	testNode(t, s, "n2", 16, 65536, 2)
	if _, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: acme.ID, Node: "n2", Start: now, MinHours: 24}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDrain(ctx, &Drain{Drain: sdk.Drain{Node: "n1", Mode: "cordon", StartedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePool(ctx, &Pool{Pool: sdk.Pool{Name: "p", Tenant: acme.ID, Image: "deb", GuestOS: GuestLinux, VCPUs: 1, MemoryMiB: 64,
		Size: 1, MaxSize: 1, CreatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePool(ctx, &Pool{Pool: sdk.Pool{Name: "shared", Image: "deb", GuestOS: GuestLinux, VCPUs: 1, MemoryMiB: 64,
		Size: 1, MaxSize: 1, CreatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateMember(ctx, &PoolMember{ID: "pool-p-1", Pool: "p", Tenant: acme.ID, Node: "n1", State: MemberCreating, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, &APIKey{APIKey: sdk.APIKey{Name: "ci", CreatedAt: now}, Tenant: acme.ID, TokenSHA256: HashToken("fvk_ci")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddTeamMember(ctx, &TeamMember{Member: sdk.Member{Email: "alex@example.com", Role: sdk.RoleOwner, AddedAt: now}, Tenant: acme.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSession(ctx, &Session{Email: "alex@example.com", Tenant: acme.ID, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		TokenSHA256: HashToken("session")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPrices(ctx, billing.DefaultPrices(), now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Emit(ctx, notify.Event{Type: "budget.near", Tenant: acme.ID, Time: now}, "acme-2026-12-near"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWebhook(ctx, &Webhook{Webhook: sdk.Webhook{ID: "whk_0123456789ab", URL: "https://hooks.example.com/", Tenant: acme.ID},
		Secret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDelivery(ctx, acme.ID, "whk_0123456789ab", sdk.WebhookDelivery{ID: "dlv-1", Notification: "n-1", OK: true}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSnapshot(ctx, &Snapshot{FleetSnapshot: sdk.FleetSnapshot{Name: "before", Node: "n1", VMID: "vm-1", VM: "a"},
		ID: NewSnapshotID(), Tenant: acme.ID, CreatedAt: now}, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddPreview(ctx, &Preview{Preview: sdk.Preview{ID: NewPreviewID(), Node: "n1", VM: "vm-1", VMName: "a", Port: 8080},
		Owner: acme.ID}, func([]Preview) (*Preview, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.AddVolume(ctx, &Volume{FleetVolume: sdk.FleetVolume{ID: NewVolumeID(), Name: "data", Tenant: acme.ID, Node: "n1", SizeGiB: 1,
		CreatedAt: now}, Sizes: []VolumeSize{{GiB: 1, From: now}}}, 0); err != nil {
		t.Fatal(err)
	}
	l, err := s.Campaign(ctx, "loops")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	if err := s.AnnounceScheduler(ctx); err != nil {
		t.Fatal(err)
	}

	// The table: the lines of crud.go's comment that start with "P ".
	src, err := os.ReadFile("crud.go")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		text string
		re   *regexp.Regexp
		seen bool
	}
	var rows []*row
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if !strings.HasPrefix(line, "//\tP ") || len(f) < 2 {
			continue
		}
		// <x> is one segment; a trailing "/" is a prefix of anything below it.
		pat := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(regexp.QuoteMeta(f[1]), `[^/]+`)
		if strings.HasSuffix(f[1], "/") {
			pat += ".+"
		}
		rows = append(rows, &row{text: f[1], re: regexp.MustCompile("^" + pat + "$")})
	}
	if len(rows) < 20 {
		t.Fatalf("read %d rows of the key layout from crud.go; the table's format changed", len(rows))
	}
	resp, err := s.Client().Get(ctx, s.Prefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), s.Prefix())
		matched := false
		for _, r := range rows {
			if r.re.MatchString(k) {
				r.seen, matched = true, true
			}
		}
		if !matched {
			t.Errorf("key %q is in no row of the key layout (crud.go)", k)
		}
	}
	for _, r := range rows {
		if !r.seen && r.text != "probe" {
			t.Errorf("no key matched the row %q: write one here, or drop the row", r.text)
		}
	}
}
