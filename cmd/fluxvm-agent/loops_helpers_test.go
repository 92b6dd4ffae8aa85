package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
)

// Helpers of the tests that run several fluxvm-agent processes (centrals,
// schedulers) on one etcd.

// sharedEtcd builds fluxvm-agent and opens an etcd that lives in the test, so
// that killing a process never takes the etcd with it. It returns the binary,
// a folder for the processes' state and logs, and the etcd.
func sharedEtcd(t *testing.T, prefix string) (bin, dir string, etcd *store.Store) {
	t.Helper()
	bin = drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	etcd, err = store.Open(context.Background(), store.Options{DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://" + freeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	return bin, dir, etcd
}

// startLogged starts bin with args, its output in dir/name.log (printed when
// the test failed); the process is killed when the test ends, if it still runs.
func startLogged(t *testing.T, dir, name, bin string, args ...string) *exec.Cmd {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log.Name())
			t.Logf("%s log:\n%s", name, tail(data, 4000))
		}
	})
	return cmd
}

// healthOf reads GET /healthz of a central or scheduler: whether it is ok,
// and whether it runs the background loops.
func healthOf(url string) (ok, leader bool) {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
		Leader bool   `json:"leader"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode == http.StatusOK && h.Status == "ok", h.Leader
}

// leads reports whether the process at url is healthy and runs the loops.
func leads(url string) bool {
	ok, leader := healthOf(url)
	return ok && leader
}

// waitUntil polls cond every 100 ms and fails the test after timeout; it
// returns how long it waited.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(began).Round(100 * time.Millisecond)
}
