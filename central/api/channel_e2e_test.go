package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// The node channel end to end: real centrals, and real node agents whose
// API listens on a unix socket only, so central reaches them through
// nothing but the channel each opens.

// startSocketNode starts a `fluxvm-agent node` with the sim driver whose API
// is on a unix socket (no TCP port at all) and which heartbeats to
// centralURL and opens its channel there. Its url is the unix:// URL of the
// socket.
func startSocketNode(t *testing.T, name, centralURL, imagesDir string) *fxNode {
	t.Helper()
	dir := fxTempDir(t)
	sock := filepath.Join(dir, "api.sock")
	n := &fxNode{t: t, name: name, admin: "node-admin-" + strconv.FormatInt(time.Now().UnixNano(), 16),
		bin: drivertest.Build(t, "../..", "./cmd/fluxvm-agent"), config: filepath.Join(dir, "node.hcl"), log: filepath.Join(dir, "node.log"),
		url: "unix://" + sock}
	hcl := fmt.Sprintf(`name = %q
state_dir = %q
listen = "unix:%s"
tokens {
  admin = [%q, %q]
}
policy { allowed_image_dirs = [%q] }
plugin "sim" {
  config {
    boot_delay_ms = 100
    vcpus         = 8
    memory_mib    = 8192
  }
}
central {
  url   = %q
  token = %q
}
`, name, filepath.Join(dir, "state"), sock, n.admin, fxToken, imagesDir, centralURL, fxToken)
	if err := os.WriteFile(n.config, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			b, _ := os.ReadFile(n.log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("node %s log:\n%s", name, b)
		}
	})
	startSocketNodeProcess(t, n)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the node API's socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	return n
}

// startSocketNodeProcess runs n's agent and waits until its socket answers.
func startSocketNodeProcess(t *testing.T, n *fxNode) {
	t.Helper()
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n.cmd = exec.Command(n.bin, "node", "-config", n.config, "-log-level", "debug")
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(n.url, sdk.WithToken(n.admin))
	if err != nil {
		t.Fatal(err)
	}
	fxWait(t, "node "+n.name+" api on its socket", 60*time.Second, func() bool {
		_, err := nc.Health(context.Background())
		return err == nil
	})
}

// channelUp reads whether central holds node's channel, from its metrics.
func channelUp(t *testing.T, centralURL, node string) bool {
	return fxMetrics(t, centralURL)[`fluxvm_node_channel_connected{node="`+node+`"}`] == 1
}

// TestNodeOnAUnixSocketIsServedThroughItsChannel: a node central cannot
// dial (its API is a unix socket, its heartbeat carries no URL) is listed,
// gets VMs created, its VMs' logs and exec answered and deleted, all
// through the channel it opened.
func TestNodeOnAUnixSocketIsServedThroughItsChannel(t *testing.T) {
	url := startFxCentral(t, central.Options{HeartbeatInterval: time.Second})
	images, img := fxImages(t)
	startSocketNode(t, "chan-1", url, images)
	fxWaitUp(t, url, "chan-1")
	if n := fxNodeState(t, url, "chan-1"); n.URL != "" {
		t.Fatalf("the node's heartbeat carries url %q; a node on a unix socket advertises none", n.URL)
	}
	fxWait(t, "chan-1's channel", 10*time.Second, func() bool { return channelUp(t, url, "chan-1") })

	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(t, url, "acme", nil)
	var created sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "web", "image": "tiny"}, http.StatusCreated, &created)
	if created.Node != "chan-1" || created.VM.State != sdk.StateRunning {
		t.Fatalf("created %+v, want a running VM on chan-1", created.VM)
	}
	var list sdk.FleetVMList
	fxMust(t, "GET", url+"/fleet/vms", token, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].Unreachable || list.VMs[0].ID != created.VM.ID || len(list.UnreachableNodes) != 0 {
		t.Fatalf("list through the channel: %+v", list)
	}
	vmURL := url + "/fleet/vms/chan-1/" + created.VM.ID
	var stopped sdk.FleetVM
	fxMust(t, "POST", vmURL+"/stop", token, nil, http.StatusOK, &stopped)
	if stopped.State != sdk.StateStopped {
		t.Fatalf("stop through the channel: %+v", stopped)
	}
	fxMust(t, "POST", vmURL+"/start", token, nil, http.StatusOK, nil)
	if code, body := fxCall(t, "GET", vmURL+"/logs?lines=5", token, nil); code != http.StatusOK {
		t.Errorf("logs through the channel: %d %s", code, body)
	}
	// The sim driver runs no guest: the node's own 501 comes back through
	// the channel, which proves the call reached the node.
	if code, body := fxCall(t, "POST", vmURL+"/exec", token, map[string]any{"command": "true"}); code != http.StatusNotImplemented ||
		!strings.Contains(string(body), "exec") {
		t.Errorf("exec through the channel: %d %s, want the node's 501", code, body)
	}
	fxMust(t, "DELETE", vmURL, token, nil, http.StatusNoContent, nil)
	fxMust(t, "GET", url+"/fleet/vms", token, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("after the delete: %+v", list.VMs)
	}
}

// TestNodeWithoutChannelIs502WithAHint: a node central knows from its record
// but that holds no channel here and advertises no URL gets a 502 that says
// what is missing.
func TestNodeWithoutChannelIs502WithAHint(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	ctx := context.Background()
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "ghost", State: store.NodeUp, LastHeartbeat: time.Now().UTC(),
		GuestOS: []string{"linux"}, Capacity: sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 4, MemoryMiB: 4096}}}}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	code, body := fxCall(t, "POST", c.url+"/fleet/nodes/ghost/scrub", fxToken, nil)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "no channel") || !strings.Contains(string(body), `"hint"`) {
		t.Errorf("a call to a node without channel or url: %d %s, want 502 saying it has no channel, with a hint", code, body)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the 502 took %v", took)
	}
}

// freePort is a loopback host:port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestChannelIsBackWithinSecondsAfterCentralOrNodeRestarts SIGKILLs a real
// `fluxvm-agent central` and starts it again on the same state dir and
// port: the node's channel is back within 5 s of central answering, and
// calls through it work again. Then the node is SIGKILLed and started
// again: central sees its heartbeat and its channel within 5 s.
func TestChannelIsBackWithinSecondsAfterCentralOrNodeRestarts(t *testing.T) {
	images, img := fxImages(t)
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	stateDir, addr := fxTempDir(t), freePort(t)
	url := "http://" + addr
	logPath := filepath.Join(stateDir, "central.log")
	var cmd *exec.Cmd
	startCentral := func() {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd = exec.Command(bin, "central", "-token", fxToken, "-listen", addr, "-state-dir", stateDir, "-heartbeat-secs", "1")
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fxWait(t, "central answers", 60*time.Second, func() bool { code, _ := fxCall(t, "GET", url+"/healthz", "", nil); return code == 200 })
	}
	t.Cleanup(func() {
		if cmd != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("central log:\n%s", b)
		}
	})
	startCentral()
	n := startSocketNode(t, "chan-r", url, images)
	fxWaitUp(t, url, "chan-r")
	fxWait(t, "chan-r's channel", 10*time.Second, func() bool { return channelUp(t, url, "chan-r") })
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(t, url, "acme", nil)
	var created sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "web", "image": "tiny"}, http.StatusCreated, &created)

	// Central dies without a word and comes back on the same state.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	time.Sleep(time.Second) // the node notices and backs off
	startCentral()
	answered := time.Now()
	fxWait(t, "chan-r's channel to the restarted central", 15*time.Second, func() bool { return channelUp(t, url, "chan-r") })
	took := time.Since(answered)
	t.Logf("channel back %v after the restarted central answered", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the channel came back %v after central answered; the acceptance allows 5 s", took)
	}
	var list sdk.FleetVMList
	fxMust(t, "GET", url+"/fleet/vms", token, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].Unreachable || list.VMs[0].State != sdk.StateRunning {
		t.Fatalf("the VM through the restarted central: %+v, want it running and reachable", list)
	}
	fxMust(t, "POST", url+"/fleet/vms/chan-r/"+created.VM.ID+"/stop", token, nil, http.StatusOK, nil)

	// The node dies and comes back: central sees it within 5 s.
	n.kill()
	fxWait(t, "central to drop the dead node's channel", 15*time.Second, func() bool { return !channelUp(t, url, "chan-r") })
	restarted := time.Now()
	startSocketNodeProcess(t, n)
	fxWait(t, "chan-r's heartbeat and channel after its restart", 30*time.Second, func() bool {
		nd := fxNodeState(t, url, "chan-r")
		return nd.State == store.NodeUp && nd.LastHeartbeat.After(restarted) && channelUp(t, url, "chan-r")
	})
	took = time.Since(restarted)
	t.Logf("central saw the restarted node (heartbeat and channel) %v after it was started", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("central saw the restarted node after %v; the acceptance allows 5 s", took)
	}
	fxMust(t, "DELETE", url+"/fleet/vms/chan-r/"+created.VM.ID, token, nil, http.StatusNoContent, nil)
}
