package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestSchedulerTakesTheLoopsFromCentral runs `fluxvm-agent central` and then
// `fluxvm-agent scheduler` on one etcd: the scheduler takes the background
// loops (central stops leading, and a node that stops heartbeating is marked
// down by the scheduler alone), and when the scheduler is SIGKILLed, then
// started and stopped with SIGTERM, central takes the loops back each time.
func TestSchedulerTakesTheLoopsFromCentral(t *testing.T) {
	bin, dir, etcd := sharedEtcd(t, "fxsc")
	const token = "fleet-token-for-the-scheduler-test"
	endpoints := strings.Join(etcd.Endpoints(), ",")
	start := func(name string, args ...string) *exec.Cmd { return startLogged(t, dir, name, bin, args...) }
	waitFor := func(what string, timeout time.Duration, cond func() bool) time.Duration {
		t.Helper()
		return waitUntil(t, what, timeout, cond)
	}

	centralURL := "http://" + freeAddr(t)
	start("central", "central", "-token", token, "-listen", strings.TrimPrefix(centralURL, "http://"),
		"-state-dir", filepath.Join(dir, "central"), "-etcd-endpoints", endpoints, "-heartbeat-secs", "1")
	waitFor("central leads while no scheduler runs", 30*time.Second, func() bool { return leads(centralURL) })

	schedURL := "http://" + freeAddr(t)
	startScheduler := func() *exec.Cmd {
		return start("scheduler", "scheduler", "-token", token, "-etcd-endpoints", endpoints, "-heartbeat-secs", "1",
			"-listen", strings.TrimPrefix(schedURL, "http://"))
	}
	sched := startScheduler()
	took := waitFor("the scheduler takes the loops and central steps aside", 30*time.Second, func() bool {
		return leads(schedURL) && !leads(centralURL)
	})
	t.Logf("the scheduler led %v after it started", took)

	// The loops run in the scheduler: a node that heartbeats once and then
	// falls silent is marked down although central does not lead.
	hb, _ := json.Marshal(sdk.Heartbeat{URL: "http://127.0.0.1:1",
		Drivers:  []sdk.HeartbeatDriver{{Name: "sim", Health: "healthy", GuestOS: []string{"linux"}}},
		Capacity: sdk.Capacity{Total: sdk.Resources{VCPUs: 4, MemoryMiB: 4096}}})
	req, _ := http.NewRequest("POST", centralURL+"/fleet/nodes/ghost/heartbeat", bytes.NewReader(hb))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("heartbeat: %s", resp.Status)
	}
	nodeState := func() string {
		req, _ := http.NewRequest("GET", centralURL+"/fleet/nodes/ghost", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var n struct {
			State string `json:"state"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&n)
		return n.State
	}
	waitFor("the scheduler marks the silent node down", 20*time.Second, func() bool { return nodeState() == "down" })
	if leads(centralURL) {
		t.Fatal("central leads again while the scheduler runs")
	}

	// A crashed scheduler: central takes the loops back after the session's TTL.
	if err := sched.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sched.Wait()
	took = waitFor("central takes the loops back from a killed scheduler", 30*time.Second, func() bool { return leads(centralURL) })
	t.Logf("central led again %v after the scheduler was killed", took)

	// A scheduler stopped with SIGTERM hands the loops back at once.
	sched = startScheduler()
	waitFor("a second scheduler takes the loops", 30*time.Second, func() bool { return leads(schedURL) && !leads(centralURL) })
	if err := sched.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := sched.Wait(); err != nil {
		t.Fatalf("the scheduler did not exit cleanly on SIGTERM: %v", err)
	}
	took = waitFor("central takes the loops back from a stopped scheduler", 10*time.Second, func() bool { return leads(centralURL) })
	t.Logf("central led again %v after the scheduler stopped", took)
}

// TestSchedulerNeedsEtcdEndpoints: without -etcd-endpoints the scheduler says
// what to pass instead of starting an etcd of its own.
func TestSchedulerNeedsEtcdEndpoints(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	out, err := exec.Command(bin, "scheduler").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "-etcd-endpoints is required") ||
		!strings.Contains(string(out), "-etcd-listen") {
		t.Fatalf("scheduler without endpoints: %v\n%s", err, out)
	}
}
