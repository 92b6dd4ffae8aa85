package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMemberCentralKilledMidDrainResendsOnlyRowsTheOwnerNeverAcknowledged
// is issue 21's history acceptance on real processes: two `fluxvm-agent
// central`s, each on its own embedded etcd, pair through the real flow; the
// member drains 350 finished rows (four batches), and is SIGKILLed while
// its third batch is in flight (held between member and owner, never
// delivered; the drain is the background one consent starts, or the manual
// one asked here, whichever runs: drains take turns). Started again on the same state, its next drain sends what
// the owner never acknowledged: every row arrives at the owner exactly once.
func TestMemberCentralKilledMidDrainResendsOnlyRowsTheOwnerNeverAcknowledged(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir, err := os.MkdirTemp("", "fxhist")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	const token = "fleet-token-for-the-history-test"
	ownerURL := "http://" + freeAddr(t)
	startLogged(t, dir, "owner", bin, "central", "-token", token, "-listen", strings.TrimPrefix(ownerURL, "http://"), "-state-dir", filepath.Join(dir, "owner"))

	// Between member and owner: the owner's API as it is, but the third
	// push of rows is held and never delivered (the member dies meanwhile).
	target, _ := url.Parse(ownerURL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var rowPushes atomic.Int32
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/fleet/history/rows" && hold.Load() && rowPushes.Add(1) == 3 {
			held <- struct{}{}
			<-release
			http.Error(w, `{"error": "not delivered"}`, http.StatusBadGateway)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(relay.Close)
	t.Cleanup(func() { close(release) })

	memberURL := "http://" + freeAddr(t)
	etcdURL := "http://" + freeAddr(t)
	memberArgs := []string{"central", "-token", token, "-listen", strings.TrimPrefix(memberURL, "http://"), "-state-dir", filepath.Join(dir, "member"), "-etcd-listen", etcdURL}
	member := startLogged(t, dir, "member", bin, memberArgs...)
	for _, u := range []string{ownerURL, memberURL} {
		waitUntil(t, u+"/healthz", 60*time.Second, func() bool { ok, _ := healthOf(u); return ok })
	}

	client := &http.Client{Timeout: 60 * time.Second}
	call := func(base, method, path, body string, want int, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s%s = %d %s, want %d", method, base, path, resp.StatusCode, data, want)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
	}

	// Pair through the real flow, comparing both screens' codes.
	var inv sdk.FleetInvite
	call(ownerURL, "POST", "/fleet/federation/invites", `{"kind": "central"}`, 201, &inv)
	var joining sdk.FleetMembership
	join, _ := json.Marshal(sdk.FleetJoinRequest{OwnerURL: relay.URL, Invite: inv.Invite, Name: "site-b"})
	call(memberURL, "POST", "/fleet/federation/join", string(join), 201, &joining)
	var reqs sdk.FleetRequestList
	call(ownerURL, "GET", "/fleet/federation/requests", "", 200, &reqs)
	if len(reqs.Requests) != 1 || reqs.Requests[0].Code != joining.Code {
		t.Fatalf("owner's requests %+v, member's code %s", reqs.Requests, joining.Code)
	}
	call(ownerURL, "POST", "/fleet/federation/requests/"+reqs.Requests[0].ID+"/approve", `{"code": "`+joining.Code+`"}`, 200, nil)
	call(memberURL, "POST", "/fleet/federation/confirm", `{"code": "`+joining.Code+`"}`, 200, nil)

	// 350 finished VMs in the member's ledger, written to its etcd.
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	end := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	const rows = 350
	for i := range rows {
		e := store.LedgerEntry{ID: fmt.Sprintf("e-%04d", i), Node: "member-node", VMID: fmt.Sprint("vm-", i), Name: fmt.Sprint("job-", i),
			VCPUs: 1, MemoryMiB: 128, GuestOS: "linux", StartedAt: end.Add(time.Duration(i-rows) * time.Minute), EndedAt: end, EndReason: "deleted"}
		b, _ := json.Marshal(e)
		if _, err := ec.Put(context.Background(), store.DefaultPrefix+"ledger/"+e.ID, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	hold.Store(true)
	call(memberURL, "POST", "/fleet/history/sync/consent", `{"enabled": true}`, 200, nil)
	go func() {
		req, _ := http.NewRequest("POST", memberURL+"/fleet/history/sync", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the member's third batch never came")
	}
	if err := member.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = member.Wait()

	owned := func() map[string]sdk.HistoryEntry {
		var l sdk.HistoryList
		call(ownerURL, "GET", "/fleet/history?limit=1000", "", 200, &l)
		m := map[string]sdk.HistoryEntry{}
		for _, r := range l.Rows {
			m[r.ID] = r
		}
		return m
	}
	if n := len(owned()); n != 2*sdk.HistoryMaxBatchRows {
		t.Fatalf("the owner holds %d rows when the member died, want the two batches acknowledged (%d)", n, 2*sdk.HistoryMaxBatchRows)
	}

	hold.Store(false)
	startLogged(t, dir, "member-again", bin, memberArgs...)
	waitUntil(t, "the member again", 60*time.Second, func() bool { ok, _ := healthOf(memberURL); return ok })
	var st sdk.HistorySyncStatus
	call(memberURL, "POST", "/fleet/history/sync", "", 200, &st)
	// (The leader's background drain may have sent them first: either way once.)
	if st.State != sdk.HistorySynced || st.Acked != rows {
		t.Fatalf("the drain after the restart: %+v", st)
	}
	got := owned()
	if len(got) != rows {
		t.Fatalf("the owner holds %d rows, want %d", len(got), rows)
	}
	var twice bytes.Buffer
	for id, r := range got {
		if r.Pushes != 1 {
			fmt.Fprintf(&twice, " %s(%d)", id, r.Pushes)
		}
	}
	if twice.Len() > 0 {
		t.Fatalf("rows pushed more than once:%s", twice.String())
	}
}
