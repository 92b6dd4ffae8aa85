package store

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// readStored decodes testdata/stored/<name>.json, a record as the store
// wrote it to etcd at commit ec95ca2, the way the store reads one (unknown
// keys refused here, so a key the type no longer knows fails; then
// clampStored), and writes it again: the JSON written must equal the file,
// key for key and value for value. So a change to a record type, or to the
// sdk type it is made of, that would lose a stored field, rename its key,
// change its encoding or start storing a derived field fails this test
// instead of breaking what existing etcd data says.
func readStored[T any](t *testing.T, name string) *T {
	t.Helper()
	golden, err := os.ReadFile(filepath.Join("testdata", "stored", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := DecodeStrict(golden, v); err != nil {
		t.Fatalf("%s: decode the stored record: %v", name, err)
	}
	clampStored(v)
	var want, got any
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	written := mustJSON(v)
	if err := json.NewDecoder(bytes.NewReader([]byte(written))).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: read and written again, the record is\n%s\nnot as stored\n%s", name, written, golden)
	}
	return v
}

// TestStoredRecordsReadAndWriteAsBefore holds every record type whose
// fields are the sdk's to the layout existing etcd data has, and checks
// that each stored value lands in the field that means it.
func TestStoredRecordsReadAndWriteAsBefore(t *testing.T) {
	if p := readStored[sdk.Policy](t, "policy"); p.MinLeaseHours != 24 || p.LedgerRetentionDays != 400 || !p.AllowSharedPoolClaims ||
		len(p.OperatorEmails) != 1 || p.OperatorEmails[0] != "ops@example.com" ||
		p.Tunnels.MaxLifetimeMinutes != 480 || len(p.Tunnels.Ports) != 2 || p.Tunnels.Ports[1] != "8000-8100" {
		t.Errorf("policy read as %+v", p)
	}
	if im := readStored[sdk.Image](t, "image"); im.GuestOS != GuestMacOS || im.MemoryMiB != 8192 || im.SSHUser != "admin" ||
		im.Source != "oci://registry.example/sonoma:14" {
		t.Errorf("image read as %+v", im)
	}
	tn := readStored[Tenant](t, "tenant")
	if q := tn.Quota; tn.TokenSHA256 != HashToken("fvt_acme") || !tn.Disabled || q.MaxVMs != 20 || q.MaxLeasedHosts != 2 ||
		q.MaxSnapshotsPerVM == nil || *q.MaxSnapshotsPerVM != 5 || q.MaxVolumeGiB != 500 || tn.Budget() != 250_000_000 {
		t.Errorf("tenant read as %+v", tn)
	}
	if tn := readStored[Tenant](t, "tenant-plain"); tn.Quota.MaxSnapshotsPerVM != nil || tn.Budget() != 0 || tn.Disabled {
		t.Errorf("tenant without quotas or budget read as %+v", tn)
	}
	if l := readStored[Lease](t, "lease"); l.Active() || l.PricePerHour != 1_500_000 || l.PriceClass != "m2-pro" ||
		l.EndReason != "expired" || !l.VMsRemoved || l.EndsAt.IsZero() {
		t.Errorf("ended lease read as %+v", l)
	}
	if l := readStored[Lease](t, "lease-active"); !l.Active() || !l.EndsAt.IsZero() || l.PricePerHour != 1_200_000 {
		t.Errorf("active lease read as %+v", l)
	}
	if p := readStored[Pool](t, "pool"); p.Tenant != "t-0123456789abcdef" || p.MaxSize != 4 || p.NodeSelector["rack"] != "b" ||
		!p.Deleting || p.BlockedSince.IsZero() {
		t.Errorf("pool read as %+v", p)
	}
	if d := readStored[Drain](t, "drain"); !d.Finished || len(d.VMs) != 1 || d.VMs[0].MovedTo != "mac-2" || !d.VMs[0].Ephemeral {
		t.Errorf("drain read as %+v", d)
	}
	// API keys came after ec95ca2: these are their first layout.
	if k := readStored[APIKey](t, "api-key"); k.ID != "key-0123456789abcdef" || k.Name != "ci-github" || !k.ReadOnly ||
		k.Tenant != "t-0123456789abcdef" || k.TokenSHA256 != HashToken("fvt_acme") || k.ExpiresAt.Month() != 4 || k.LastUsedAt.Day() != 1 ||
		k.Validate() != nil {
		t.Errorf("api key read as %+v", k)
	}
	if k := readStored[APIKey](t, "api-key-plain"); k.ReadOnly || !k.ExpiresAt.IsZero() || !k.LastUsedAt.IsZero() || k.Expired(time.Now().AddDate(100, 0, 0)) {
		t.Errorf("api key that never expired nor was used read as %+v", k)
	}
	// Snapshot records came with issue 15: this is their first layout.
	if s := readStored[Snapshot](t, "snapshot"); s.Name != "before-upgrade" || s.VMID != "vm-0123456789abcdef" || !s.Memory ||
		s.SizeGiB != 3 || s.Tenant != "t-0123456789abcdef" || s.Pending || s.Live() || s.TakenAt.Hour() != 10 {
		t.Errorf("snapshot read as %+v", s)
	}
	n := readStored[Node](t, "node")
	if n.Capacity.Free.MacOSSlots != 1 || n.Capacity.Total.MemoryMiB != 65536 || !n.Healthy() || n.Unavailable() != "cordoned" ||
		n.LeaseID != "l-00000000000000aa" || len(n.VMs) != 1 || n.VMs[0].GuestOS != GuestMacOS || n.Fingerprint["cpu"] != "m2" {
		t.Errorf("node read as %+v", n)
	}
}
