package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/devenv"
	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// dev is a running `fluxvm-agent dev` and what it printed.
type dev struct {
	t        *testing.T
	cmd      *exec.Cmd
	mu       sync.Mutex
	out      bytes.Buffer // stdout so far
	stderr   bytes.Buffer
	up       chan struct{} // closed once the whole banner is printed
	exited   chan struct{}
	central  string   // the printed central URL
	operator string   // the printed operator token
	tenant   string   // the printed tenant token
	export   string   // the printed export line
	try      []string // the printed commands to try
	fluxctl  string   // the printed fluxctl command for the node
}

var (
	devCentralRE  = regexp.MustCompile(`(?m)^  central URL +(http://\S+)$`)
	devOperatorRE = regexp.MustCompile(`(?m)^  operator token +(\S+)$`)
	devTenantRE   = regexp.MustCompile(`(?m)^  tenant token +(fvt_\S+) `)
	devExportRE   = regexp.MustCompile(`(?m)^  (export .*FLUXVM_AGENT_TOKEN=fvt_\S+)$`)
	devTryRE      = regexp.MustCompile(`(?m)^  (fluxctl fleet .*)$`)
	devFluxctlRE  = regexp.MustCompile(`(?m)^The node directly: (\S*fluxctl .*)$`)
)

// startDev runs `fluxvm-agent dev ARGS...` with env added to the test's
// environment and waits for its banner.
func startDev(t *testing.T, bin string, env []string, args ...string) *dev {
	t.Helper()
	d := &dev{t: t, cmd: exec.Command(bin, append([]string{"dev"}, args...)...), up: make(chan struct{}), exited: make(chan struct{})}
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stderr = &d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(d.exited)
		sc := bufio.NewScanner(stdout)
		printed := false
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if !printed && strings.HasPrefix(sc.Text(), "Ctrl-C stops FluxVM") {
				printed = true
				close(d.up)
			}
		}
		_ = d.cmd.Wait()
	}()
	t.Cleanup(d.stop)
	select {
	case <-d.up:
	case <-d.exited:
		t.Fatalf("fluxvm-agent dev exited before it was up:\n%s\nstderr:\n%s", d.stdout(), d.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("fluxvm-agent dev printed no banner within 60s:\n%s", d.stdout())
	}
	out := d.stdout()
	for re, dst := range map[*regexp.Regexp]*string{devCentralRE: &d.central, devOperatorRE: &d.operator, devTenantRE: &d.tenant, devFluxctlRE: &d.fluxctl, devExportRE: &d.export} {
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the banner has no match for %s:\n%s", re, out)
		}
		*dst = m[1]
	}
	for _, m := range devTryRE.FindAllStringSubmatch(out, -1) {
		d.try = append(d.try, m[1])
	}
	if len(d.try) != 4 {
		t.Fatalf("the banner shows %d commands to try, want the README's 4:\n%s", len(d.try), out)
	}
	return d
}

func (d *dev) stdout() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// stop sends SIGTERM, as Ctrl-C would, and waits for the exit.
func (d *dev) stop() {
	if d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("fluxvm-agent dev did not stop within 30s of SIGTERM")
	}
	if d.t.Failed() {
		d.t.Logf("dev stdout:\n%s\ndev stderr:\n%s", d.stdout(), d.stderr.String())
	}
}

// paste runs a printed command after the printed export line, as a person
// who pasted both into a shell would, with extra directories on PATH.
func (d *dev) paste(command string, path ...string) string {
	d.t.Helper()
	return d.run(d.export+"\n"+command, path...)
}

// run runs a printed command through sh -c, with extra directories on PATH.
func (d *dev) run(command string, path ...string) string {
	d.t.Helper()
	c := exec.Command("sh", "-c", command)
	c.Env = append(os.Environ(), "PATH="+strings.Join(append(path, os.Getenv("PATH")), string(os.PathListSeparator)))
	out, err := c.CombinedOutput()
	if err != nil {
		d.t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// api calls central with token and wants status want.
func (d *dev) api(method, path, token string, body any, want int, out any) {
	d.t.Helper()
	c := &node{t: d.t, url: d.central, admin: token}
	c.must(method, path, body, want, out)
}

func devStateDir(t *testing.T) string {
	t.Helper()
	// Short: the VMs' unix sockets live under it.
	dir, err := os.MkdirTemp("", "fxd")
	if err != nil {
		t.Fatal(err)
	}
	// dev keeps its VMs running across restarts: stop them before their
	// workspaces go, or they outlive the test.
	t.Cleanup(func() { devenv.KillVMsUnder(dir); _ = os.RemoveAll(dir) })
	return dir
}

// TestDevRunsARealVMAndKeepsItsTokensAcrossRestarts plays a newcomer: with
// the tokens `fluxvm-agent dev` prints, a tenant launches the catalog image
// through central, runs `uname -a` in the real QEMU VM, lists and deletes
// it; the three printed commands and the fluxctl one work as printed. A
// restart prints the same tokens and still knows the VM; -reset makes new
// tokens, and the old ones stop working.
func TestDevRunsARealVMAndKeepsItsTokensAcrossRestarts(t *testing.T) {
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: apt-get install qemu-system-x86 qemu-utils (make deps)", bin)
		}
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	fluxctlDir := filepath.Dir(drivertest.Build(t, "../..", "./cmd/fluxctl"))
	dir := devStateDir(t)
	listen, nodeListen := freeAddr(t), freeAddr(t)
	args := []string{"-state-dir", dir, "-listen", listen, "-node-listen", nodeListen}

	d := startDev(t, bin, nil, args...)
	if d.central != "http://"+listen || !strings.Contains(d.stdout(), "node: qemu driver (") {
		t.Fatalf("want central at http://%s on the qemu driver:\n%s", listen, d.stdout())
	}

	// The tenant's own calls: launch the catalog image, run a command in
	// it by ID, list it, delete it.
	var created sdk.FleetCreateVMResponse
	d.api("POST", "/fleet/vms", d.tenant, map[string]any{"name": "t1", "image": "debian-minimal"}, http.StatusCreated, &created)
	if created.Node != "dev" || created.VM.Driver != "qemu" {
		t.Fatalf("created %+v, want a qemu VM on node dev", created)
	}
	vmPath := "/fleet/vms/" + created.Node + "/" + created.VM.ID
	var res sdk.ExecResult
	d.api("POST", vmPath+"/exec", d.tenant, map[string]any{"command": []string{"uname", "-a"}, "timeout_seconds": 60}, http.StatusOK, &res)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Linux") {
		t.Fatalf("uname -a through central = %+v", res)
	}

	// The printed lines, pasted: the export line, then launch web-1 and
	// run uname -a in it (fluxctl prints JSON into a pipe).
	var web sdk.FleetCreateVMResponse
	if err := json.Unmarshal([]byte(d.paste(d.try[0], fluxctlDir)), &web); err != nil || web.VM.Name != "web-1" {
		t.Fatalf("the first printed command made %+v (%v)", web, err)
	}
	if out := d.paste(d.try[1], fluxctlDir); !strings.Contains(out, "Linux") {
		t.Fatalf("the second printed command printed %q, want uname's Linux", out)
	}
	if out := d.run(d.fluxctl+" -o json", fluxctlDir); !strings.Contains(out, `"web-1"`) || !strings.Contains(out, `"t1"`) {
		t.Fatalf("the printed fluxctl command lists:\n%s", out)
	}
	// The demo quota fits the dev node: the quota, not the node, says no
	// first, so its hint is the one that fits.
	var devNode sdk.FleetNode
	d.api("GET", "/fleet/nodes/dev", d.operator, nil, http.StatusOK, &devNode)
	// The node enrolled: central knows it by its own credential, kept in
	// its state dir, and its config holds no operator token.
	cfg, err := os.ReadFile(filepath.Join(dir, "node.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	credPath := filepath.Join(dir, "node", "central-credential.json")
	cred, err := os.ReadFile(credPath)
	if !devNode.Enrolled || strings.Contains(string(cfg), d.operator) || err != nil {
		t.Fatalf("want node dev enrolled with a credential in %s and no operator token in its config: enrolled=%v, %v\n%s", credPath, devNode.Enrolled, err, cfg)
	}
	if fi, err := os.Stat(credPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the node's credential: want mode 0600, got %v (%v)", fi.Mode(), err)
	}
	var me sdk.TenantMe
	d.api("GET", "/fleet/tenants/me", d.tenant, nil, http.StatusOK, &me)
	if q := me.Tenant.Quota; q.MaxVCPUs == 0 || q.MaxVCPUs > devNode.Capacity.Total.VCPUs || q.MaxVMs == 0 || q.MaxVMs > q.MaxVCPUs {
		t.Fatalf("demo quota %+v does not fit node dev's %+v", q, devNode.Capacity.Total)
	}
	if me.Tenant.Quota.MaxVMs == 2 { // t1 and web-1 run
		var e sdk.ErrorBody
		c := &node{t: t, url: d.central, admin: d.tenant}
		code, body := c.call("POST", "/fleet/vms", map[string]any{"name": "third", "image": "debian-minimal"}, d.tenant)
		if json.Unmarshal(body, &e); code != http.StatusTooManyRequests || !strings.Contains(e.Error, "max_vms") || !strings.Contains(e.Hint, "fluxctl fleet rm") {
			t.Fatalf("a third VM on a quota of 2 = %d %s; want 429 naming max_vms with a hint to remove one", code, body)
		}
	}
	var list sdk.FleetVMList
	d.api("GET", "/fleet/vms", d.tenant, nil, http.StatusOK, &list)
	if len(list.VMs) != 2 {
		t.Fatalf("the tenant lists %+v, want t1 and web-1", list.VMs)
	}
	d.api("DELETE", vmPath, d.tenant, nil, http.StatusNoContent, nil)
	d.stop()
	if !strings.Contains(d.stdout(), "VMs keep running") {
		t.Fatalf("stopping did not say what happens to the VMs:\n%s", d.stdout())
	}
	if fi, err := os.Stat(filepath.Join(dir, "dev.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev.json holds the tokens: want mode 0600, got %v (%v)", fi.Mode(), err)
	}

	// A restart: the same tokens, and web-1 is still there.
	again := startDev(t, bin, nil, args...)
	if again.operator != d.operator || again.tenant != d.tenant {
		t.Fatalf("after a restart the tokens changed: operator %s -> %s, tenant %s -> %s", d.operator, again.operator, d.tenant, again.tenant)
	}
	if again2, err := os.ReadFile(credPath); err != nil || string(again2) != string(cred) {
		t.Fatalf("after a restart the node enrolled again (or lost its credential): %v", err)
	}
	again.api("GET", "/fleet/vms", again.tenant, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].Name != "web-1" {
		t.Fatalf("after a restart the tenant lists %+v, want web-1", list.VMs)
	}
	// web-1 is taken now: the printed commands use another name.
	if !strings.HasPrefix(again.try[0], "fluxctl fleet launch web-2 ") || again.try[3] != "fluxctl fleet rm web-2 -y" {
		t.Fatalf("after a restart with web-1 running the banner offers %q", again.try)
	}
	again.paste("fluxctl fleet rm web-1 -y", fluxctlDir)
	again.api("GET", "/fleet/vms", again.tenant, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("after the printed delete the tenant lists %+v", list.VMs)
	}
	again.stop()

	// -reset: new tokens; the old ones are refused.
	fresh := startDev(t, bin, nil, append(args, "-reset")...)
	if !strings.Contains(fresh.stdout(), "reset: wiped "+dir) || fresh.operator == d.operator || fresh.tenant == d.tenant {
		t.Fatalf("-reset kept the tokens or did not say so:\n%s", fresh.stdout())
	}
	fresh.api("GET", "/fleet/tenants/me", d.tenant, nil, http.StatusUnauthorized, nil)
	fresh.api("GET", "/fleet/tenants/me", fresh.tenant, nil, http.StatusOK, nil)
	fresh.api("GET", "/fleet/nodes", d.operator, nil, http.StatusUnauthorized, nil)
}

// TestDevFallsBackToSimWithoutTheGuestImage proves the sim fallback: no
// guest image, so the node runs the sim driver, says why, catalogs a
// placeholder image, and the printed commands work against it.
func TestDevFallsBackToSimWithoutTheGuestImage(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir := devStateDir(t)
	d := startDev(t, bin, []string{"FLUXVM_IMAGE_DIR=" + filepath.Join(dir, "no-image")},
		"-state-dir", dir, "-listen", freeAddr(t), "-node-listen", freeAddr(t))
	if !strings.Contains(d.stdout(), "node: sim driver") || !strings.Contains(d.stdout(), "make guest-image") ||
		!strings.Contains(d.stdout(), "catalog image   sim-linux") {
		t.Fatalf("want the sim driver, why, and the sim-linux image:\n%s", d.stdout())
	}
	fluxctlDir := filepath.Dir(drivertest.Build(t, "../..", "./cmd/fluxctl"))
	var web sdk.FleetCreateVMResponse
	if out := d.paste(d.try[0], fluxctlDir); json.Unmarshal([]byte(out), &web) != nil || web.VM.Driver != "sim" {
		t.Fatalf("the first printed command: %s", out)
	}
	if !strings.Contains(d.stdout(), "prices          a sample list") {
		t.Fatalf("the banner does not say the price list is a sample:\n%s", d.stdout())
	}
	if out := d.paste(d.try[1], fluxctlDir); !strings.Contains(out, `"name": "web-1"`) {
		t.Fatalf("the second printed command: %s", out)
	}
	d.paste(d.try[2], fluxctlDir) // status
	d.paste(d.try[3], fluxctlDir) // rm
}

// TestDevSaysWhatToChangeWhenItCannotStart proves each refusal names its
// remedy: the flag of a port in use, a state dir that cannot be written, a
// state dir another dev holds.
func TestDevSaysWhatToChangeWhenItCannotStart(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held := devStateDir(t)
	holder := startDev(t, bin, []string{"FLUXVM_IMAGE_DIR=" + filepath.Join(held, "no-image")},
		"-state-dir", held, "-listen", freeAddr(t), "-node-listen", freeAddr(t))
	defer holder.stop()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"central port in use", []string{"-state-dir", t.TempDir(), "-listen", taken.Addr().String(), "-node-listen", freeAddr(t)},
			taken.Addr().String() + " is in use (another fluxvm-agent dev, central or node?); stop that, or pick another port with -listen"},
		{"node port in use", []string{"-state-dir", t.TempDir(), "-listen", freeAddr(t), "-node-listen", taken.Addr().String()},
			"pick another port with -node-listen"},
		{"state dir not writable", []string{"-state-dir", filepath.Join(notADir, "state")},
			"state dir " + filepath.Join(notADir, "state") + " is not writable"},
		{"state dir in use", []string{"-state-dir", held, "-reset"},
			"another fluxvm-agent dev (pid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(bin, append([]string{"dev"}, tc.args...)...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("dev %v = %v:\n%s\nwant exit 1 saying %q", tc.args, err, out, tc.want)
			}
		})
	}
	// The held dev survived the refused -reset.
	holder.api("GET", "/fleet/tenants/me", holder.tenant, nil, http.StatusOK, nil)
}
