// Package fleettest starts a real FluxVM fleet for tests of fleet API
// clients: `fluxvm-agent central` on its embedded etcd and one
// `fluxvm-agent node` heartbeating to it, with the simulated driver (or
// QEMU), built from this module in a temporary directory. The node's API
// listens on a unix socket only, so central reaches it through nothing but
// the channel the node opens to it, as a node behind NAT is reached
// (WithNodeOnTCP gives it a loopback TCP port instead). It needs the Go
// toolchain and this module's source, so it serves tests in this
// repository, not programs that merely import the SDK.
package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// Fleet is a running central with one node reporting to it.
type Fleet struct {
	// URL is central's base URL, http://127.0.0.1:PORT.
	URL string
	// OperatorToken is central's fleet token: the operator's credential.
	// The node lists it among its admin tokens, so central can call it.
	OperatorToken string
	// Node is the node's name and NodeURL its API: unix:///DIR/api.sock,
	// which the SDK's NodeClient dials, or http://127.0.0.1:PORT with
	// WithNodeOnTCP.
	Node, NodeURL string
	// Image is a disk path every node allows, for a catalog entry
	// (PUT /fleet/images/{name} "image"): a file the sim driver only
	// needs to exist, or the guest image directory given to WithQEMU.
	Image string
	// Dir holds the binaries' state, configs and logs.
	Dir string
	// NodeToken is the node API's admin token: the operator's token, or
	// with WithEnrollment one of the node's own that central never holds.
	NodeToken string
	// NodeConfig is the node's HCL file and NodeStateDir its state dir
	// (with WithEnrollment, where its credential lives).
	NodeConfig, NodeStateDir string
	// EnrollCodes are, with WithEnrollment, the confirmation codes as the
	// node printed it and as central's request showed it, compared before
	// approval.
	EnrollCodes [2]string

	central, node *process
	// centralArgs start central again on the same state dir and port.
	centralArgs []string
	bin         string
}

// Option changes the fleet Start runs.
type Option func(*options)

type options struct {
	qemuImage        string
	vcpus, memoryMiB int64
	tcpNode          bool
	portForwards     map[string]string
	enroll           bool
	netnsConfig      *string
}

// WithEnrollment has the node enroll into central by pairing (fluxvm-agent
// node enroll, the codes compared, the operator approving with the node's
// code) instead of holding the operator's token: its config lists only a
// token of its own, and central calls it only through its channel.
func WithEnrollment() Option { return func(o *options) { o.enroll = true } }

// WithQEMU runs the node with the qemu driver (TCG, microvm) instead of
// sim, so VMs boot a real guest and exec works. imageDir is a guest image
// directory (make guest-image builds one); it becomes Fleet.Image.
func WithQEMU(imageDir string) Option { return func(o *options) { o.qemuImage = imageDir } }

// WithNodeOnTCP has the node's API listen on a loopback TCP port, which
// its heartbeat advertises as its URL (central still calls it through its
// channel while it holds one), instead of on a unix socket in Dir that
// only the channel reaches: for tests of what shows or uses a node's URL.
func WithNodeOnTCP() Option { return func(o *options) { o.tcpNode = true } }

// WithSimPortForwards gives the sim driver port_forwards: guest TCP port
// ("22") to a host address ("127.0.0.1:2222") that a tunnel to that port of
// any of its VMs reaches, standing in for the guest's server. It has no
// effect with WithQEMU, whose guests serve their own ports.
func WithSimPortForwards(forwards map[string]string) Option {
	return func(o *options) { o.portForwards = forwards }
}

// WithNetnsPlugin gives the node a real netns network plugin (with config,
// HCL attributes such as `overlay_address = "192.0.2.1"`), so that it takes
// VMs in tenant networks and joins overlays. The agent runs it as a third
// party's plugin (a script in plugin_dir, type = "network", named "fxnet")
// that starts `fluxvm-agent plugin netns` under `unshare -n`: its bridges,
// taps, rules and WireGuard devices live in a network namespace of its own,
// never the host's. It needs root and unshare(1); Launch fails without them.
func WithNetnsPlugin(config string) Option { return func(o *options) { o.netnsConfig = &config } }

// WithNodeSize sets what the sim node offers (default 8 vCPUs, 16 GiB).
func WithNodeSize(vcpus, memoryMiB int64) Option {
	return func(o *options) { o.vcpus, o.memoryMiB = vcpus, memoryMiB }
}

// Start runs a fleet for one test and waits until central sees the node up
// with a healthy driver. It is stopped when the test ends; the logs are
// printed when the test failed.
func Start(t testing.TB, opts ...Option) *Fleet {
	t.Helper()
	f, err := Launch(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.stopProcesses()
		if t.Failed() {
			t.Logf("central log:\n%s\nnode log:\n%s", f.central.tail(), f.node.tail())
		}
		_ = os.RemoveAll(f.Dir)
	})
	return f
}

// Launch is Start for a TestMain, which has no testing.TB: the caller must
// call Stop.
func Launch(opts ...Option) (*Fleet, error) {
	o := options{vcpus: 8, memoryMiB: 16384}
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := build()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: VM workspaces hold unix sockets, whose paths must fit
	// in 107 bytes.
	dir, err := os.MkdirTemp("", "fxt")
	if err != nil {
		return nil, err
	}
	f := &Fleet{Dir: dir, OperatorToken: "fleet-" + randomHex(), Node: "node-1"}
	f.NodeToken = f.OperatorToken
	if o.enroll {
		f.NodeToken = "node-own-" + randomHex()
	}
	ok := false
	defer func() {
		if !ok {
			f.Stop()
		}
	}()

	f.bin = bin
	// A free port can be taken between freeAddr closing it and central
	// listening (by another test, or by central's own embedded etcd): then
	// central says so and exits, and another port is tried.
	for attempt := 1; ; attempt++ {
		caddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		f.URL = "http://" + caddr
		f.centralArgs = []string{"central", "-token", f.OperatorToken,
			"-listen", caddr, "-state-dir", filepath.Join(dir, "central"), "-heartbeat-secs", "1"}
		err = f.startCentral()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
		f.central.stop()
	}

	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return nil, err
	}
	f.Image = filepath.Join(images, "sim.img")
	if err := os.WriteFile(f.Image, []byte("sim image"), 0o644); err != nil {
		return nil, err
	}
	forwards := ""
	if len(o.portForwards) > 0 {
		ports := make([]string, 0, len(o.portForwards))
		for p := range o.portForwards {
			ports = append(ports, p)
		}
		sort.Strings(ports)
		var b strings.Builder
		b.WriteString("\n    port_forwards = {")
		for _, p := range ports {
			fmt.Fprintf(&b, "\n      %q = %q", p, o.portForwards[p])
		}
		b.WriteString("\n    }")
		forwards = b.String()
	}
	plugin := fmt.Sprintf(`plugin "sim" {
  config {
    boot_delay_ms = 100
    vcpus         = %d
    memory_mib    = %d%s
  }
}`, o.vcpus, o.memoryMiB, forwards)
	if o.qemuImage != "" {
		f.Image, images = o.qemuImage, filepath.Dir(o.qemuImage)
		plugin = `plugin "qemu" {
  config {
    machine = "microvm"
    accel   = "tcg"
  }
}`
	}
	if o.netnsConfig != nil {
		extra, err := netnsPlugin(dir, bin, *o.netnsConfig)
		if err != nil {
			return nil, err
		}
		plugin += extra
	}
	var naddr string
	if o.tcpNode {
		if naddr, err = freeAddr(); err != nil {
			return nil, err
		}
		f.NodeURL = "http://" + naddr
	} else {
		sock := filepath.Join(dir, "api.sock")
		naddr, f.NodeURL = "unix:"+sock, "unix://"+sock
	}
	f.NodeStateDir = filepath.Join(dir, "node")
	centralToken := fmt.Sprintf("\n  token = %q", f.OperatorToken)
	if o.enroll {
		centralToken = ""
	}
	cfg := fmt.Sprintf(`name = %q
state_dir = %q
listen = %q
tokens {
  admin = [%q]
}
policy { allowed_image_dirs = [%q] }
%s
central {
  url   = %q%s
}
`, f.Node, f.NodeStateDir, naddr, f.NodeToken, images, plugin, f.URL, centralToken)
	cfgPath := filepath.Join(dir, "node.hcl")
	f.NodeConfig = cfgPath
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if o.enroll {
		if err := f.enroll(); err != nil {
			return nil, err
		}
	}
	f.node, err = startProcess(filepath.Join(dir, "node.log"), bin, "node", "-config", cfgPath, "-log-level", "debug")
	if err != nil {
		return nil, err
	}
	if err := f.node.waitFor("node "+f.Node+" up in central with a healthy driver", 60*time.Second, f.nodeUp); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// netnsPlugin writes the script WithNetnsPlugin runs and returns the
// node configuration that names it.
func netnsPlugin(dir, bin, config string) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("the netns network plugin needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return "", fmt.Errorf("no unshare(1) to give the netns plugin a network namespace of its own: %w", err)
	}
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o700); err != nil {
		return "", err
	}
	script := "#!/bin/sh\nexec " + unshare + " -n " + bin + " plugin netns\n"
	if err := os.WriteFile(filepath.Join(pluginDir, "fxnet"), []byte(script), 0o700); err != nil {
		return "", err
	}
	return fmt.Sprintf(`
plugin_dir = %q
plugin "fxnet" {
  type = "network"
  config { %s }
}`, pluginDir, config), nil
}

// enroll runs `fluxvm-agent node enroll` as a person would: the operator
// mints a node invite, the node prints its code, the operator finds the
// same code on the request and approves with the node's code, and the
// person at the node types the code the operator reads out.
func (f *Fleet) enroll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		return err
	}
	inv, err := fc.CreateFleetInvite(ctx, sdk.PairNode)
	if err != nil {
		return fmt.Errorf("mint a node invite: %w", err)
	}
	cmd := exec.CommandContext(ctx, f.bin, "node", "enroll", "-config", f.NodeConfig, "-invite", inv.Invite)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start fluxvm-agent node enroll: %w", err)
	}
	lines := make(chan string, 16)
	var printed bytes.Buffer
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var nodeCode string
	for nodeCode == "" {
		line, ok := <-lines
		if !ok {
			_ = cmd.Wait()
			return fmt.Errorf("fluxvm-agent node enroll printed no code:\n%s%s", printed.String(), stderr.String())
		}
		printed.WriteString(line + "\n")
		if c, found := strings.CutPrefix(line, "Confirmation code: "); found {
			nodeCode = strings.TrimSpace(c)
		}
	}
	list, err := fc.ListPairingRequests(ctx)
	if err != nil {
		return fmt.Errorf("list pairing requests: %w", err)
	}
	var req *sdk.FleetPairingRequest
	for i := range list.Requests {
		if list.Requests[i].Name == f.Node && list.Requests[i].Kind == sdk.PairNode {
			req = &list.Requests[i]
		}
	}
	if req == nil {
		return fmt.Errorf("central lists no enrollment request of %s: %+v", f.Node, list.Requests)
	}
	ownerCode := sdk.ShowPairingCode(req.Code)
	f.EnrollCodes = [2]string{nodeCode, ownerCode}
	if nodeCode != ownerCode {
		return fmt.Errorf("the node shows %s, central's request %s: not approving", nodeCode, ownerCode)
	}
	if _, err := fc.ApprovePairing(ctx, req.ID, nodeCode); err != nil {
		return fmt.Errorf("approve the enrollment: %w", err)
	}
	if _, err := io.WriteString(stdin, ownerCode+"\n"); err != nil {
		return err
	}
	_ = stdin.Close()
	go func() {
		for l := range lines {
			printed.WriteString(l + "\n")
		}
	}()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("fluxvm-agent node enroll: %w\n%s", err, stderr.String())
	}
	return nil
}

// startCentral runs central with centralArgs and waits for its GET
// /healthz.
func (f *Fleet) startCentral() error {
	var err error
	f.central, err = startProcess(filepath.Join(f.Dir, "central.log"), f.bin, f.centralArgs...)
	if err != nil {
		return err
	}
	return f.central.waitFor("central's GET /healthz", 60*time.Second, func() bool {
		return get(f.URL+"/healthz") == http.StatusOK
	})
}

// KillCentral SIGKILLs central, as a crash or a host losing power would:
// it closes nothing in order, so the node's channel and every open tunnel
// just break.
func (f *Fleet) KillCentral(t testing.TB) {
	t.Helper()
	if err := f.central.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL central: %v", err)
	}
	<-f.central.exited
}

// RestartCentral starts central again, after KillCentral, on the same state
// dir and port, and returns once its GET /healthz answers. The node is not
// told: it finds central again by redialling its channel.
func (f *Fleet) RestartCentral(t testing.TB) {
	t.Helper()
	if err := f.startCentral(); err != nil {
		t.Fatal(err)
	}
}

// nodeUp reports whether central lists the node up with a guest OS (so a
// healthy driver) and capacity.
func (f *Fleet) nodeUp() bool {
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := fc.GetNode(ctx, f.Node)
	return err == nil && n.State == sdk.NodeUp && len(n.GuestOS) > 0 && n.Capacity.Total.VCPUs > 0
}

// Stop deletes the node's VMs (they outlive their agent by design), then
// stops the node and central and removes Dir.
func (f *Fleet) Stop() {
	f.stopProcesses()
	if f.Dir != "" {
		_ = os.RemoveAll(f.Dir)
	}
}

func (f *Fleet) stopProcesses() {
	if f.node != nil && f.NodeURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if nc, err := sdk.NewNodeClient(f.NodeURL, sdk.WithToken(f.NodeToken)); err == nil {
			if vms, err := nc.ListVMs(ctx); err == nil {
				for _, vm := range vms {
					_ = nc.DeleteVM(ctx, vm.ID)
				}
			}
		}
		cancel()
	}
	f.node.stop()
	f.central.stop()
}

// Tenant creates a tenant with the quota given (keys as in sdk.Quotas'
// JSON, e.g. "max_vms") and returns its id and token.
func (f *Fleet) Tenant(t testing.TB, name string, quota map[string]int64) (id, token string) {
	t.Helper()
	var req sdk.CreateTenantRequest
	req.Name = name
	b, _ := json.Marshal(quota)
	if err := json.Unmarshal(b, &req.Quota); err != nil {
		t.Fatalf("quota %v: %v", quota, err)
	}
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := fc.CreateTenant(context.Background(), req)
	if err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	return tw.Tenant.ID, tw.Token
}

// CatalogImage puts Fleet.Image in the catalog as name, a Linux image of 1
// vCPU and 256 MiB.
func (f *Fleet) CatalogImage(t testing.TB, name string) {
	t.Helper()
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.PutImage(context.Background(), sdk.Image{Name: name, GuestOS: "linux", Image: f.Image, VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatalf("put image %s: %v", name, err)
	}
}

// process is one fluxvm-agent with its log file.
type process struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// startProcess runs bin; its output is appended to logPath (a restarted
// central keeps the log of its first run).
func startProcess(logPath, bin string, args ...string) (*process, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	p := &process{cmd: exec.Command(bin, args...), log: logPath, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start fluxvm-agent %s: %w", args[0], err)
	}
	go func() {
		_ = p.cmd.Wait()
		lf.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitFor polls ok until it holds, the process exits or timeout passes.
func (p *process) waitFor(what string, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case <-p.exited:
			return fmt.Errorf("waiting for %s: fluxvm-agent exited:\n%s", what, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v:\n%s", what, timeout, p.tail())
		}
	}
	return nil
}

// stop sends SIGTERM, which lets a node stop its plugins, and kills after
// 10 seconds.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail is the end of the process's log.
func (p *process) tail() string {
	if p == nil {
		return ""
	}
	b, _ := os.ReadFile(p.log)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// build compiles fluxvm-agent once per test process, into a shared
// directory where each process has its own binary and removes those of
// processes that have ended, so test runs leave nothing behind.
func build() (string, error) {
	buildOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "fluxvm-fleettest")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		stale, _ := filepath.Glob(filepath.Join(dir, "fluxvm-agent-*"))
		for _, p := range stale {
			pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "fluxvm-agent-"))
			if err == nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				_ = os.Remove(p)
			}
		}
		bin := filepath.Join(dir, fmt.Sprintf("fluxvm-agent-%d", os.Getpid()))
		out, err := exec.Command(goTool(), "build", "-o", bin, "github.com/fluxvm/fluxvm/cmd/fluxvm-agent").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build fluxvm-agent: %v\n%s", err, out)
			return
		}
		buildBin = bin
	})
	return buildBin, buildErr
}

// goTool is the go command: the one in $GOROOT when `go test` set it, else
// the one on $PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// get is the status of an unauthenticated GET, 0 when nothing answered.
func get(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomHex() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("crypto/rand failed"))
	}
	return hex.EncodeToString(b)
}
