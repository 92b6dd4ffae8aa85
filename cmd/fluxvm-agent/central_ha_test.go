package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
)

// TestCentralLeaderFailover runs two `fluxvm-agent central` processes on one
// etcd, SIGKILLs the one that leads, and checks that the other takes over the
// background loops within seconds while both kept serving the API.
func TestCentralLeaderFailover(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir, err := os.MkdirTemp("", "fxha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The etcd both centrals use lives in the test, so killing a central
	// never takes the etcd with it.
	etcd, err := store.Open(context.Background(), store.Options{DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://" + freeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	const token = "fleet-token-for-the-failover-test"

	type central struct {
		url string
		cmd *exec.Cmd
	}
	start := func(name string) *central {
		c := &central{url: "http://" + freeAddr(t)}
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		c.cmd = exec.Command(bin, "central", "-token", token, "-listen", strings.TrimPrefix(c.url, "http://"),
			"-state-dir", filepath.Join(dir, name), "-etcd-endpoints", strings.Join(etcd.Endpoints(), ","))
		c.cmd.Stdout, c.cmd.Stderr = log, log
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
			if t.Failed() {
				data, _ := os.ReadFile(log.Name())
				t.Logf("%s log:\n%s", name, tail(data, 4000))
			}
		})
		return c
	}
	health := func(c *central) (ok, leader bool) {
		resp, err := http.Get(c.url + "/healthz")
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
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	serves := func(c *central) bool {
		req, _ := http.NewRequest("GET", c.url+"/fleet/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}

	a, b := start("a"), start("b")
	var leader, other *central
	waitFor("one central leads", 30*time.Second, func() bool {
		okA, la := health(a)
		okB, lb := health(b)
		switch {
		case okA && okB && la && !lb:
			leader, other = a, b
		case okA && okB && lb && !la:
			leader, other = b, a
		}
		return leader != nil
	})
	if !serves(a) || !serves(b) {
		t.Fatal("both centrals must serve the API, leader or not")
	}
	killed := time.Now()
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	waitFor("the other central takes over", 20*time.Second, func() bool {
		_, l := health(other)
		return l
	})
	t.Logf("took over %v after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
	if !serves(other) {
		t.Fatal("the new leader does not serve the API")
	}
}
