package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestCentralActivityLogSurvivesAThousandRefusedMegabyteRequests is issue
// #12's acceptance, on a real `fluxvm-agent central` process with its
// embedded etcd: 1,000 refused requests with 1 MiB bodies from one tenant
// leave every earlier activity entry in place (the operator's, another
// tenant's, and the same tenant's earlier 403), in the files and in GET
// /fleet/events, no answer repeats the long name, and central's resident
// memory grows by less than 10 MiB. Memory is read from /proc (VmRSS) after
// central has idled, before and after; nothing in central is made to collect
// garbage, and no setting of its runtime is changed.
func TestCentralActivityLogSurvivesAThousandRefusedMegabyteRequests(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir, err := os.MkdirTemp("", "fxact")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	const token = "fleet-token-for-the-activity-test"
	url := "http://" + freeAddr(t)
	state := filepath.Join(dir, "central")
	cmd := startLogged(t, dir, "central", bin, "central", "-token", token, "-listen", strings.TrimPrefix(url, "http://"), "-state-dir", state)
	waitUntil(t, "central's /healthz", 30*time.Second, func() bool { ok, _ := healthOf(url); return ok })

	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, tok string, body []byte) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	must := func(method, path, tok string, body string, want int, out any) {
		t.Helper()
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		code, data := call(method, path, tok, b)
		if code != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, code, data, want)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
	}
	type created struct {
		Tenant struct{ ID string } `json:"tenant"`
		Token  string              `json:"token"`
	}
	var alpha, beta created
	must("POST", "/fleet/tenants", token, `{"name": "alpha"}`, 201, &alpha)
	must("POST", "/fleet/tenants", token, `{"name": "beta"}`, 201, &beta)
	must("PUT", "/fleet/images/deb", token, `{"guest_os": "linux", "image": "/d.raw"}`, 201, nil)
	must("GET", "/fleet/policy", beta.Token, "", 403, nil)
	must("GET", "/fleet/policy", alpha.Token, "", 403, nil) // alpha's own earlier 403
	must("PUT", "/fleet/tenants/me/budget", beta.Token, `{"monthly": 5}`, 200, nil)
	must("PUT", "/fleet/tenants/me/budget", alpha.Token, `{"monthly": 7}`, 200, nil)
	var before sdk.EventList
	must("GET", "/fleet/events", token, "", 200, &before)
	if len(before.Events) != 7 {
		t.Fatalf("%d events before the flood: %+v", len(before.Events), before.Events)
	}
	changesBefore, err := os.ReadFile(filepath.Join(state, audit.FileName))
	if err != nil {
		t.Fatal(err)
	}
	refusalsBefore, err := os.ReadFile(filepath.Join(state, audit.RefusedFileName))
	if err != nil {
		t.Fatal(err)
	}

	settle := func() float64 {
		time.Sleep(3 * time.Second)
		return rssMiB(t, cmd.Process.Pid)
	}
	// A fresh central's heap grows to its working size with any traffic
	// (some 5 MiB over the first thousand small requests). The baseline is
	// taken once it has served as many ordinary reads, so that what is
	// measured is what the flood adds; the growth from the fresh process is
	// logged too.
	rssFresh := settle()
	for i := range 1000 {
		path := []string{"/fleet/events", "/fleet/images", "/fleet/vms", "/fleet/tenants/me"}[i%4]
		if code, data := call("GET", path, alpha.Token, nil); code != 200 {
			t.Fatalf("GET %s = %d %s", path, code, data)
		}
	}
	rssBefore := settle()
	huge := strings.Repeat("n", jsonapi.MaxBodyBytes-64)
	body := []byte(`{"name": "` + huge + `", "image": "deb"}`)
	began := time.Now()
	for i := range 1000 {
		code, data := call("POST", "/fleet/vms", alpha.Token, body)
		if code != http.StatusBadRequest || len(data) > 512 || bytes.Contains(data, []byte(huge[:jsonapi.MaxEcho+1])) {
			t.Fatalf("refused request %d -> %d, %d bytes: %.300s", i, code, len(data), data)
		}
	}
	flood := time.Since(began)
	rssAfter := settle()
	t.Logf("1000 refused 1 MiB requests in %v; central's VmRSS %.1f MiB before, %.1f MiB after (%+.1f MiB; %+.1f MiB from the fresh process's %.1f MiB)",
		flood.Round(time.Millisecond), rssBefore, rssAfter, rssAfter-rssBefore, rssAfter-rssFresh, rssFresh)
	if rssBefore == 0 || rssAfter-rssBefore >= 10 {
		t.Fatalf("central's resident memory grew by %.1f MiB (%.1f to %.1f), want less than 10", rssAfter-rssBefore, rssBefore, rssAfter)
	}

	// GET /fleet/events: every earlier event, and the flood summed up.
	code, data := call("GET", "/fleet/events?limit=5000", token, nil)
	var after sdk.EventList
	if code != 200 || json.Unmarshal(data, &after) != nil {
		t.Fatalf("GET /fleet/events = %d %.300s", code, data)
	}
	if len(data) > 256<<10 {
		t.Fatalf("GET /fleet/events?limit=5000 is %d bytes", len(data))
	}
	for _, want := range before.Events {
		found := false
		for _, got := range after.Events {
			found = found || got == want
		}
		if !found {
			t.Fatalf("GET /fleet/events lost %+v", want)
		}
	}
	total := 0
	for _, ev := range after.Events[:len(after.Events)-len(before.Events)] {
		if ev.Tenant != alpha.Tenant.ID || ev.Status != 400 || ev.Target != "" {
			t.Fatalf("a flood event %+v", ev)
		}
		total += max(ev.Suppressed, 1)
	}
	if total != 1000 {
		t.Fatalf("the events count %d of the 1000 refused requests", total)
	}
	var mine sdk.EventList
	must("GET", "/fleet/events?limit=5000", beta.Token, "", 200, &mine)
	if len(mine.Events) != 2 {
		t.Fatalf("beta sees %+v", mine.Events)
	}

	// The files: the changes file as it was; the refusals file begins as it
	// was; nothing rotated; the flood left a few kilobytes.
	changes, _ := os.ReadFile(filepath.Join(state, audit.FileName))
	refusals, _ := os.ReadFile(filepath.Join(state, audit.RefusedFileName))
	if !bytes.Equal(changes, changesBefore) {
		t.Fatalf("the changes file changed:\n%s", changes)
	}
	if !bytes.HasPrefix(refusals, refusalsBefore) || bytes.Count(refusalsBefore, []byte("\n")) != 2 {
		t.Fatalf("the earlier refusals are not in place:\n%s", refusalsBefore)
	}
	if len(refusals) > 64<<10 {
		t.Fatalf("the refusals file grew to %d bytes", len(refusals))
	}
	for _, p := range []string{audit.FileName + ".1", audit.RefusedFileName + ".1"} {
		if _, err := os.Stat(filepath.Join(state, p)); err == nil {
			t.Fatalf("%s exists: the log rotated", p)
		}
	}
	for _, p := range []string{audit.FileName, audit.RefusedFileName} {
		if st, err := os.Stat(filepath.Join(state, p)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", p, err, st.Mode().Perm())
		}
	}
}
