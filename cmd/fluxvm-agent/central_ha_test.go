package main_test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCentralLeaderFailover runs two `fluxvm-agent central` processes on one
// etcd, SIGKILLs the one that leads, and checks that the other takes over the
// background loops within seconds while both kept serving the API.
func TestCentralLeaderFailover(t *testing.T) {
	bin, dir, etcd := sharedEtcd(t, "fxha")
	const token = "fleet-token-for-the-failover-test"

	type central struct {
		url string
		cmd *exec.Cmd
	}
	start := func(name string) *central {
		c := &central{url: "http://" + freeAddr(t)}
		c.cmd = startLogged(t, dir, name, bin, "central", "-token", token, "-listen", strings.TrimPrefix(c.url, "http://"),
			"-state-dir", filepath.Join(dir, name), "-etcd-endpoints", strings.Join(etcd.Endpoints(), ","))
		return c
	}
	health := func(c *central) (ok, leader bool) { return healthOf(c.url) }
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		waitUntil(t, what, timeout, cond)
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
