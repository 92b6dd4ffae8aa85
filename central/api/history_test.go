package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/history"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// pairCentrals makes member a member of owner's fleet through the whole
// flow, both operators comparing the codes their screens show.
func pairCentrals(t *testing.T, owner, member *env, name string) {
	t.Helper()
	pairCentralsWithURL(t, owner, member, name, "")
}

// pairCentralsWithURL is pairCentrals for a member that gives its URL, so
// the owner polls it (with the poll token the member gives it).
func pairCentralsWithURL(t *testing.T, owner, member *env, name, url string) {
	t.Helper()
	var inv sdk.FleetInvite
	owner.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "central"}`}, 201).decode(t, &inv)
	var joining sdk.FleetMembership
	member.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: owner.srv.URL, Invite: inv.Invite, Name: name, URL: url})}, 201).decode(t, &joining)
	var list sdk.FleetRequestList
	owner.must(req{method: "GET", path: "/fleet/federation/requests", token: testFleetToken}, 200).decode(t, &list)
	var id string
	for _, q := range list.Requests {
		if q.Name == name && q.State == sdk.RequestPending {
			id = q.ID
			if q.Code != joining.Code {
				t.Fatalf("the screens show %q (owner) and %q (member)", q.Code, joining.Code)
			}
		}
	}
	owner.must(req{method: "POST", path: "/fleet/federation/requests/" + id + "/approve", token: testFleetToken, body: jsonBody(t, sdk.FleetApproveRequest{Code: joining.Code})}, 200)
	member.must(req{method: "POST", path: "/fleet/federation/confirm", token: testFleetToken, body: jsonBody(t, sdk.FleetConfirmJoinRequest{Code: joining.Code})}, 200)
}

// finishVMs writes n finished VMs into e's ledger (as the reconciler
// leaves them), named prefix-0..n-1, with an activity record each.
func finishVMs(t *testing.T, e *env, prefix, tenant string, n int) []store.LedgerEntry {
	t.Helper()
	end := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	out := make([]store.LedgerEntry, n)
	for i := range n {
		le := store.LedgerEntry{ID: fmt.Sprintf("%s-%04d", prefix, i), Tenant: tenant, Node: "member-node", VMID: fmt.Sprintf("vm-%s-%d", prefix, i),
			Name: fmt.Sprintf("%s-%d", prefix, i), VCPUs: 1, MemoryMiB: 256, GuestOS: "linux", StartedAt: end.Add(-time.Hour), EndedAt: end, EndReason: "deleted"}
		st := e.api.opts.Store // fedEnv's own etcd
		if _, err := st.Client().Put(context.Background(), st.Prefix()+"ledger/"+le.ID, jsonBody(t, le)); err != nil {
			t.Fatal(err)
		}
		e.audit.Append(audit.Event{Time: end.Add(-30 * time.Minute), Tenant: tenant, Who: "operator", Actor: "operator", Method: "POST", Path: "/fleet/vms", Target: le.Name, Action: "launch vm " + le.Name, Status: 201})
		out[i] = le
	}
	return out
}

// ownerRows is every row the owner holds, by id.
func ownerRows(t *testing.T, owner *env) map[string]sdk.HistoryEntry {
	t.Helper()
	var l sdk.HistoryList
	owner.must(req{method: "GET", path: "/fleet/history?limit=1000", token: testFleetToken}, 200).decode(t, &l)
	out := map[string]sdk.HistoryEntry{}
	for _, r := range l.Rows {
		out[r.ID] = r
	}
	if int64(len(out)) != l.Totals.Rows {
		t.Fatalf("owner lists %d rows, totals say %d", len(out), l.Totals.Rows)
	}
	return out
}

func drain(t *testing.T, member *env, want int) sdk.HistorySyncStatus {
	t.Helper()
	var st sdk.HistorySyncStatus
	member.must(req{method: "POST", path: "/fleet/history/sync", token: testFleetToken}, want).decode(t, &st)
	return st
}

func TestRefusedRowIsIsolatedByBisectionAndRetiredAfterThreeDrainsWhileEveryOtherRowArrivesOnce(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	pairCentrals(t, owner, member, "site-b")
	acme, _ := member.createTenant("acme", "")
	good := finishVMs(t, member, "web", acme.ID, 150)
	// A row the owner's rule refuses: its VM ended before it started (a
	// node's clock stepped back), in the middle of the second batch.
	bad := good[120]
	bad.ID, bad.Name, bad.StartedAt = "web-skewed", "web-skewed", bad.EndedAt.Add(time.Hour)
	if _, err := member.api.opts.Store.Client().Put(context.Background(), member.api.opts.Store.Prefix()+"ledger/"+bad.ID, jsonBody(t, bad)); err != nil {
		t.Fatal(err)
	}

	// Joining is not consent.
	var st sdk.HistorySyncStatus
	member.must(req{method: "GET", path: "/fleet/history/sync", token: testFleetToken}, 200).decode(t, &st)
	if st.State != sdk.HistoryConsentRequired || st.Consent {
		t.Fatalf("status after joining: %+v", st)
	}
	member.must(req{method: "POST", path: "/fleet/history/sync", token: testFleetToken}, 409)
	var pv sdk.HistoryPreview
	member.must(req{method: "GET", path: "/fleet/history/sync/preview", token: testFleetToken}, 200).decode(t, &pv)
	if pv.Rows != 151 || pv.UnsentRows != 151 || pv.Payloads != 150 || pv.Bytes <= 0 || len(pv.NeverSent) == 0 {
		t.Fatalf("preview: %+v", pv)
	}
	if n := len(ownerRows(t, owner)); n != 0 {
		t.Fatalf("the owner holds %d rows before consent", n)
	}
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 200).decode(t, &st)
	if !st.Consent || st.State != sdk.HistoryIdle || st.Preview == nil || st.Preview.UnsentRows != 151 {
		t.Fatalf("status after consent: %+v", st)
	}

	for d := 1; d <= 3; d++ {
		st = drain(t, member, 200)
		if st.State != sdk.HistorySynced || st.Acked != 150 {
			t.Fatalf("drain %d: %+v", d, st)
		}
		if retiredNow := len(st.Retired) == 1; retiredNow != (d == 3) {
			t.Fatalf("drain %d: retired %+v", d, st.Retired)
		}
	}
	if r := st.Retired[0]; r.Row != "web-skewed" || r.VM != "web-skewed" || !strings.Contains(r.Reason, "finished before it started") {
		t.Fatalf("retired row: %+v", r)
	}
	// A fourth drain leaves the retired row out and resends nothing.
	st = drain(t, member, 200)
	rows := ownerRows(t, owner)
	if len(rows) != 150 {
		t.Fatalf("the owner holds %d rows, want the 150 good ones", len(rows))
	}
	for _, le := range good {
		r, ok := rows[le.ID]
		if !ok || r.Pushes != 1 || r.Member != "site-b" || r.Tenant != "acme" || r.VM != le.Name || r.Activity == "" {
			t.Fatalf("row %s at the owner: %+v (held %v)", le.ID, r, ok)
		}
	}
	if _, ok := rows["web-skewed"]; ok {
		t.Fatal("the owner stored the refused row")
	}
	member.must(req{method: "GET", path: "/fleet/history/sync/preview", token: testFleetToken}, 200).decode(t, &pv)
	if pv.UnsentRows != 0 || pv.Retired != 1 {
		t.Fatalf("preview after the drains: %+v", pv)
	}
	// The owner's filters and totals over what the member sent.
	var l sdk.HistoryList
	owner.must(req{method: "GET", path: "/fleet/history?member=site-b&tenant=acme&limit=10", token: testFleetToken}, 200).decode(t, &l)
	if len(l.Rows) != 10 || l.Totals.Rows != 150 || l.Totals.ByMember["site-b"] != 150 || l.Totals.VMSeconds != 150*3600 {
		t.Fatalf("filtered history: %d rows, totals %+v", len(l.Rows), l.Totals)
	}
	owner.must(req{method: "GET", path: "/fleet/history?tenant=globex", token: testFleetToken}, 200).decode(t, &l)
	if len(l.Rows) != 0 || l.Totals.Rows != 0 {
		t.Fatalf("another tenant's filter: %+v", l)
	}
}

func TestWithdrawingConsentStopsTheNextDrainAndLeavingDropsConsent(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	pairCentrals(t, owner, member, "site-b")
	finishVMs(t, member, "first", "", 10)
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 200)
	if st := drain(t, member, 200); st.State != sdk.HistorySynced || st.Acked != 10 {
		t.Fatalf("first drain: %+v", st)
	}
	finishVMs(t, member, "second", "", 5)
	var st sdk.HistorySyncStatus
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": false}`}, 200).decode(t, &st)
	if st.Consent || st.State != sdk.HistoryConsentRequired {
		t.Fatalf("after withdrawing: %+v", st)
	}
	drain(t, member, 409)
	if _, err := member.api.pusher.Drain(context.Background(), false); !errors.Is(err, history.ErrConsent) {
		t.Fatalf("background drain without consent: %v", err)
	}
	if n := len(ownerRows(t, owner)); n != 10 {
		t.Fatalf("the owner holds %d rows after consent was withdrawn, want 10", n)
	}

	// Consent belongs to the membership: leave, join again, and it is off.
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 200)
	member.must(req{method: "DELETE", path: "/fleet/federation/membership", token: testFleetToken}, 204)
	member.must(req{method: "GET", path: "/fleet/history/sync/preview", token: testFleetToken}, 409)
	pairCentrals(t, owner, member, "site-b")
	member.must(req{method: "GET", path: "/fleet/history/sync", token: testFleetToken}, 200).decode(t, &st)
	if st.Consent || st.State != sdk.HistoryConsentRequired || st.Acked != 0 {
		t.Fatalf("after leaving and joining again: %+v", st)
	}
	drain(t, member, 409)
}

func TestARemovedMemberDrainReadsRemovedAndBackgroundDrainsStayStopped(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	pairCentrals(t, owner, member, "site-b")
	finishVMs(t, member, "vm", "", 3)
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 200)
	owner.must(req{method: "DELETE", path: "/fleet/federation/members/site-b", token: testFleetToken}, 204)
	st := drain(t, member, 200)
	if st.State != sdk.HistoryRemoved || !strings.Contains(st.Reason, "removed") {
		t.Fatalf("drain after removal: %+v", st)
	}
	bg, err := member.api.pusher.Drain(context.Background(), false)
	if err != nil || bg.State != sdk.HistoryRemoved || !bg.LastDrain.Equal(*st.LastDrain) {
		t.Fatalf("a background drain after a 403 ran: %+v %v", bg, err)
	}
}

func TestHistoryPushRoutesRefuseBadInput(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	cred, _ := pairByHand(t, owner, sdk.PairCentral, "site-x")
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/fleet/history/rows", cred, `{"rows": [{"id": "a"}]}`, 400},
		{"POST", "/fleet/history/rows", cred, `{"rows": "no"}`, 400},
		{"POST", "/fleet/history/rows", cred, `{"rows": [], "extra": 1}`, 400},
		{"POST", "/fleet/history/payloads", cred, `{"payloads": [{"sha256": "` + strings.Repeat("0", 64) + `", "data": "hi"}]}`, 400},
		{"POST", "/fleet/history/rows", "", `{"rows": []}`, 401},
		{"POST", "/fleet/history/rows", testFleetToken, `{"rows": []}`, 403},
		{"GET", "/fleet/history", cred, "", 403},
		{"GET", "/fleet/history?limit=0", testFleetToken, "", 400},
		{"GET", "/fleet/history?limit=1001", testFleetToken, "", 400},
		{"GET", "/fleet/history?from=yesterday", testFleetToken, "", 400},
		{"GET", "/fleet/history?member=" + strings.Repeat("m", 129), testFleetToken, "", 400},
	} {
		// Sent as given: some are outside the spec on purpose.
		if out := owner.call(req{method: c.method, path: c.path, token: c.token, body: c.body}); out.status != c.want {
			t.Errorf("%s %s %s -> %d %s, want %d", c.method, c.path, c.body, out.status, out.body, c.want)
		}
	}
	rows := make([]string, 101)
	for i := range rows {
		rows[i] = `{"id": "r` + fmt.Sprint(i) + `", "vm": "v", "node": "n", "vcpus": 1, "memory_mib": 1, "guest_os": "linux", "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T01:00:00Z"}`
	}
	if out := owner.call(req{method: "POST", path: "/fleet/history/rows", token: cred, body: `{"rows": [` + strings.Join(rows, ",") + `]}`}); out.status != 400 {
		t.Errorf("101 rows -> %d %s", out.status, out.body)
	}
	// A central in no fleet: 409 with what to do.
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 409)
	if out := member.call(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": "yes"}`}); out.status != 400 {
		t.Errorf("consent with a string -> %d", out.status)
	}
	member.must(req{method: "POST", path: "/fleet/history/sync", token: testFleetToken}, 409)
}

func TestAnOwnerThatDoesNotAnswerLeavesTheDrainInBackoffWithNothingAcknowledged(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	pairCentrals(t, owner, member, "site-b")
	finishVMs(t, member, "vm", "", 4)
	member.must(req{method: "POST", path: "/fleet/history/sync/consent", token: testFleetToken, body: `{"enabled": true}`}, 200)
	owner.srv.Close()
	st := drain(t, member, 200)
	if st.State != sdk.HistoryBackoff || !strings.Contains(st.Reason, "did not answer") || st.Acked != 0 {
		t.Fatalf("drain with the owner gone: %+v", st)
	}
	var pv sdk.HistoryPreview
	member.must(req{method: "GET", path: "/fleet/history/sync/preview", token: testFleetToken}, 200).decode(t, &pv)
	if pv.UnsentRows != 4 {
		t.Fatalf("preview after a drain nobody answered: %+v", pv)
	}
}
