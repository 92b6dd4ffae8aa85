package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
)

// clock is the injected time the retention window reads.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func row(id, tenant string, end time.Time) sdk.HistoryRow {
	return sdk.HistoryRow{ID: id, Tenant: tenant, Node: "node-1", VM: "vm-" + id, VCPUs: 1, MemoryMiB: 256, GuestOS: "linux",
		StartedAt: end.Add(-time.Hour), EndedAt: end}
}

func TestPushingARowTwiceStoresItOnceAndCountsBothPushes(t *testing.T) {
	in := NewIngest(IngestOptions{Store: storetest.Open(t)})
	ctx := context.Background()
	end := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for range 2 {
		if _, err := in.PutRows(ctx, "mem-a", "site-a", []sdk.HistoryRow{row("r1", "acme", end), row("r2", "acme", end)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := in.List(ctx, sdk.HistoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 2 || l.Totals.Rows != 2 || l.Rows[0].Pushes != 2 || l.Rows[1].Pushes != 2 {
		t.Fatalf("after pushing two rows twice: %+v", l)
	}
}

func TestARowNamingAPayloadTheOwnerLacksIsRefusedByNameAndAWrongHashIsRefused(t *testing.T) {
	in := NewIngest(IngestOptions{Store: storetest.Open(t)})
	ctx := context.Background()
	r := row("r1", "acme", time.Now())
	data := []byte(`{"action":"launch vm"}` + "\n")
	r.Activity = sum(data)
	_, err := in.PutRows(ctx, "mem-a", "site-a", []sdk.HistoryRow{r})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "row r1") {
		t.Fatalf("row before its payload: %v", err)
	}
	if _, err := in.PutPayloads(ctx, "mem-a", []sdk.HistoryPayload{{SHA256: sum([]byte("other")), Data: string(data)}}); !errors.Is(err, ErrRefused) {
		t.Fatalf("payload under a hash that is not its own: %v", err)
	}
	if _, err := in.PutPayloads(ctx, "mem-a", []sdk.HistoryPayload{{SHA256: r.Activity, Data: string(data)}}); err != nil {
		t.Fatal(err)
	}
	// Another member's payload is not this member's.
	if _, err := in.PutRows(ctx, "mem-b", "site-b", []sdk.HistoryRow{r}); !errors.Is(err, ErrRefused) {
		t.Fatalf("a row naming another member's payload: %v", err)
	}
	if _, err := in.PutRows(ctx, "mem-a", "site-a", []sdk.HistoryRow{r}); err != nil {
		t.Fatal(err)
	}
	if got, err := in.Payload(ctx, "mem-a", r.Activity); err != nil || string(got) != string(data) {
		t.Fatalf("payload read back: %q %v", got, err)
	}
}

func TestAnInvalidRowRefusesItsWholeBatchWithoutNamingIt(t *testing.T) {
	in := NewIngest(IngestOptions{Store: storetest.Open(t)})
	ctx := context.Background()
	now := time.Now()
	cases := map[string]func(*sdk.HistoryRow){
		"ended before it started": func(r *sdk.HistoryRow) { r.StartedAt = r.EndedAt.Add(time.Hour) },
		"still running":           func(r *sdk.HistoryRow) { r.EndedAt = time.Time{} },
		"negative vcpus":          func(r *sdk.HistoryRow) { r.VCPUs = -1 },
		"id with a slash":         func(r *sdk.HistoryRow) { r.ID = "a/b" },
		"no vm name":              func(r *sdk.HistoryRow) { r.VM = "" },
		"activity not a hash":     func(r *sdk.HistoryRow) { r.Activity = "xyz" },
	}
	for name, spoil := range cases {
		b := row("bad-row-id", "acme", now)
		spoil(&b)
		_, err := in.PutRows(ctx, "mem-a", "site-a", []sdk.HistoryRow{row("good", "acme", now), b})
		if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), "bad-row-id") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if l, _ := in.List(ctx, sdk.HistoryFilter{}); len(l.Rows) != 0 {
		t.Fatalf("a refused batch stored %d rows", len(l.Rows))
	}
}

func TestHistoryFiltersByMemberTenantAndTimeAndTotalsWhatIsLeft(t *testing.T) {
	in := NewIngest(IngestOptions{Store: storetest.Open(t)})
	ctx := context.Background()
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 6 {
		m, tenant := "mem-a", "acme"
		if i%2 == 1 {
			m = "mem-b"
		}
		if i >= 4 {
			tenant = "globex"
		}
		if _, err := in.PutRows(ctx, m, strings.Replace(m, "mem", "site", 1), []sdk.HistoryRow{row(fmt.Sprint("r", i), tenant, day.Add(time.Duration(i)*24*time.Hour))}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		f    sdk.HistoryFilter
		want []string
	}{
		{sdk.HistoryFilter{}, []string{"r5", "r4", "r3", "r2", "r1", "r0"}},
		{sdk.HistoryFilter{Member: "site-b"}, []string{"r5", "r3", "r1"}},
		{sdk.HistoryFilter{Member: "mem-a", Tenant: "acme"}, []string{"r2", "r0"}},
		{sdk.HistoryFilter{From: day.Add(48 * time.Hour), To: day.Add(96 * time.Hour)}, []string{"r4", "r3", "r2"}},
		{sdk.HistoryFilter{Limit: 2}, []string{"r5", "r4"}},
	} {
		l, err := in.List(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range l.Rows {
			got = append(got, r.ID)
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%+v: rows %v, want %v", c.f, got, c.want)
		}
		if c.f.Limit == 0 && l.Totals.Rows != int64(len(c.want)) || l.Totals.VMSeconds != 3600*l.Totals.Rows {
			t.Errorf("%+v: totals %+v", c.f, l.Totals)
		}
	}
	l, _ := in.List(ctx, sdk.HistoryFilter{Limit: 2})
	if l.Totals.Rows != 6 || l.Totals.ByMember["site-a"] != 3 || l.Totals.ByTenant["globex"] != 2 {
		t.Errorf("totals count every row the filters leave, not the page: %+v", l.Totals)
	}
}

func TestRetentionDropsRowsAfterTheWindowAndOnlyUnnamedOldPayloads(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	in := NewIngest(IngestOptions{Store: storetest.Open(t), Now: c.now})
	ctx := context.Background()
	put := func(id string) {
		data := []byte(id + " activity\n")
		r := row(id, "acme", c.now())
		r.Activity = sum(data)
		if _, err := in.PutPayloads(ctx, "mem-a", []sdk.HistoryPayload{{SHA256: r.Activity, Data: string(data)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := in.PutRows(ctx, "mem-a", "site-a", []sdk.HistoryRow{r}); err != nil {
			t.Fatal(err)
		}
	}
	put("old")
	c.add(60 * 24 * time.Hour)
	put("young")
	// A payload uploaded before its row came is named by no row, but is
	// younger than the window, so it stays.
	orphan := []byte("uploaded, row not yet sent")
	if _, err := in.PutPayloads(ctx, "mem-a", []sdk.HistoryPayload{{SHA256: sum(orphan), Data: string(orphan)}}); err != nil {
		t.Fatal(err)
	}
	if rows, pays, err := in.Reclaim(ctx); err != nil || rows+pays != 0 {
		t.Fatalf("within 90 days: dropped %d rows, %d payloads, %v", rows, pays, err)
	}
	c.add(31 * 24 * time.Hour) // old is 91 days old, young 31
	rows, pays, err := in.Reclaim(ctx)
	if err != nil || rows != 1 || pays != 1 {
		t.Fatalf("after 91 days: dropped %d rows, %d payloads, %v", rows, pays, err)
	}
	l, _ := in.List(ctx, sdk.HistoryFilter{})
	if len(l.Rows) != 1 || l.Rows[0].ID != "young" {
		t.Fatalf("left: %+v", l.Rows)
	}
	if _, err := in.Payload(ctx, "mem-a", l.Rows[0].Activity); err != nil {
		t.Fatalf("the young row's payload: %v", err)
	}
	if _, err := in.Payload(ctx, "mem-a", sum(orphan)); err != nil {
		t.Fatalf("a payload younger than the window that no row names yet: %v", err)
	}
}

// FuzzRowBatch: whatever a member sends as a row batch, the owner's rule
// answers without panicking, and a row it accepts is finished and bounded.
func FuzzRowBatch(f *testing.F) {
	f.Add([]byte(`{"rows":[{"id":"r1","vm":"a","node":"n","vcpus":1,"memory_mib":64,"guest_os":"linux","started_at":"2026-01-01T00:00:00Z","ended_at":"2026-01-01T01:00:00Z"}]}`))
	f.Add([]byte(`{"rows":[{"id":"","ended_at":"0001-01-01T00:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b sdk.HistoryRowBatch
		if json.Unmarshal(data, &b) != nil {
			return
		}
		for _, r := range b.Rows {
			if checkRow(r) == nil && (r.EndedAt.Before(r.StartedAt) || r.EndedAt.IsZero() || len(r.ID) > 128 || r.VCPUs < 0) {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}
