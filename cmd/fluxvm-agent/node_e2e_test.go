package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/plugins/driver/reaper"
	"github.com/fluxvm/fluxvm/sdk"
)

func TestMain(m *testing.M) {
	// VMs of a node agent the tests SIGKILL are re-parented to this process.
	if err := reaper.Start(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// node is a real `fluxvm-agent node` process.
type node struct {
	t          testing.TB
	bin        string
	dir        string
	config     string
	url        string
	admin, ro  string
	cmd        *exec.Cmd
	stateDir   string
	logPath    string
	startCount int
}

func newNode(t testing.TB, plugins string) *node {
	t.Helper()
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir := t.TempDir()
	n := &node{t: t, bin: bin, dir: dir, stateDir: filepath.Join(dir, "state"),
		admin: "admin-" + strconv.FormatInt(time.Now().UnixNano(), 16), ro: "read-only-token-0123456789"}
	n.url = "http://" + freeAddr(t)
	n.config = filepath.Join(dir, "agent.hcl")
	hcl := fmt.Sprintf(`name = "e2e"
state_dir = %q
listen = %q
tokens {
  admin = [%q]
  read_only = [%q]
}
policy { allowed_image_dirs = [%q, %q] }
%s
`, n.stateDir, strings.TrimPrefix(n.url, "http://"), n.admin, n.ro, image.DefaultDir(), filepath.Join(dir, "images"), plugins)
	if err := os.WriteFile(n.config, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	n.logPath = filepath.Join(dir, "agent.log")
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			log, _ := os.ReadFile(n.logPath)
			t.Logf("agent log:\n%s", tail(log, 8000))
		}
	})
	return n
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// start runs the agent and waits until its API answers.
func (n *node) start() {
	n.t.Helper()
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	n.cmd = exec.Command(n.bin, "node", "-config", n.config, "-log-level", "debug")
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.startCount++
	deadline := time.Now().Add(90 * time.Second)
	for {
		if code, _ := n.call("GET", "/v1/health", nil, n.ro); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the agent did not serve /v1/health within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the agent with SIGTERM, as systemd would.
func (n *node) stop() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
	}
}

// kill SIGKILLs the agent.
func (n *node) kill() {
	n.t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		n.t.Fatal(err)
	}
	_ = n.cmd.Wait()
}

func (n *node) call(method, path string, body any, token string) (int, []byte) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, n.url+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// must calls the API as admin and decodes the answer, failing on another status.
func (n *node) must(method, path string, body any, want int, out any) {
	n.t.Helper()
	code, data := n.call(method, path, body, n.admin)
	if code != want {
		n.t.Fatalf("%s %s = %d %s, want %d", method, path, code, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			n.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

func (n *node) waitFor(what string, timeout time.Duration, ok func() bool) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (n *node) waitReady(id string) *sdk.VM {
	n.t.Helper()
	var vm sdk.VM
	n.waitFor("vm "+id+" ready", 3*time.Minute, func() bool {
		n.must("GET", "/v1/vms/"+id, nil, http.StatusOK, &vm)
		return vm.AgentReady
	})
	return &vm
}

func (n *node) exec(id string, command any) sdk.ExecResult {
	n.t.Helper()
	var res sdk.ExecResult
	n.must("POST", "/v1/vms/"+id+"/exec", map[string]any{"command": command, "timeout_seconds": 60}, http.StatusOK, &res)
	return res
}

func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

// pluginPid finds the agent's child process running the named plugin.
func pluginPid(t *testing.T, agentPid int, name string) int {
	t.Helper()
	pid := pluginPidOf(agentPid, name)
	if pid == 0 {
		t.Fatalf("no live %q plugin process under agent %d", name, agentPid)
	}
	return pid
}

// pluginPidOf is the pid of the agent's live child running the named plugin, or 0.
func pluginPidOf(agentPid int, name string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !bytes.HasSuffix(cmdline, []byte("\x00plugin\x00"+name+"\x00")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(agentPid) && alive(pid) {
			return pid
		}
	}
	return 0
}

// TestNodeRunsRealVMsThroughCrashes is the node agent end to end: a real QEMU
// VM through the node API, surviving a SIGKILL of the agent and of its
// plugin, a TTL that deletes a VM by itself, and a delete that leaves nothing.
func TestNodeRunsRealVMsThroughCrashes(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	n := newNode(t, `plugin "qemu" {
  config { machine = "microvm" }
}`)
	n.start()
	var health sdk.NodeHealth
	n.must("GET", "/v1/health", nil, http.StatusOK, &health)
	if len(health.Drivers) != 1 || health.Drivers[0].Name != "qemu" || health.Drivers[0].Health != "healthy" {
		t.Fatalf("health = %+v, want a healthy qemu driver", health.Drivers)
	}

	var vm sdk.VM
	n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: "e2e-vm", Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 256, Display: true}, http.StatusCreated, &vm)
	id := vm.ID
	vm = *n.waitReady(id)
	if r := n.exec(id, []string{"uname", "-a"}); r.ExitCode != 0 || !strings.Contains(r.Stdout, "Linux") {
		t.Fatalf("uname -a = %+v", r)
	}
	if r := n.exec(id, "echo to-stderr >&2; exit 3"); r.ExitCode != 3 || r.Stderr != "to-stderr\n" {
		t.Fatalf("exit 3 = %+v", r)
	}
	code, shot := n.call("GET", "/v1/vms/"+id+"/screenshot", nil, n.admin)
	if code != http.StatusOK {
		t.Fatalf("screenshot = %d %s", code, shot)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	n.must("POST", "/v1/vms/"+id+"/pause", nil, http.StatusOK, &vm)
	if vm.State != sdk.StatePaused {
		t.Fatalf("after pause: %s", vm.State)
	}
	n.must("POST", "/v1/vms/"+id+"/resume", nil, http.StatusOK, &vm)
	if vm.State != sdk.StateRunning {
		t.Fatalf("after resume: %s", vm.State)
	}
	qemuPid, _ := strconv.Atoi(vm.Attributes["pid"])
	workspace := vm.Attributes["workspace"]
	if qemuPid == 0 || workspace == "" {
		t.Fatalf("attributes %v lack pid or workspace", vm.Attributes)
	}

	// SIGKILL the agent: the VM keeps running, and a new agent finds it.
	n.kill()
	if !alive(qemuPid) {
		t.Fatal("the VM died with its agent")
	}
	n.start()
	n.must("GET", "/v1/vms/"+id, nil, http.StatusOK, &vm)
	if vm.State != sdk.StateRunning || vm.Attributes["pid"] != strconv.Itoa(qemuPid) {
		t.Fatalf("after the agent restart the vm is %s (pid %s), want running with pid %d", vm.State, vm.Attributes["pid"], qemuPid)
	}
	n.waitReady(id)
	if r := n.exec(id, "echo back"); r.ExitCode != 0 || r.Stdout != "back\n" {
		t.Fatalf("exec after agent restart = %+v", r)
	}

	// SIGKILL the qemu plugin: the agent restarts it and recovers the VM.
	plugin := pluginPid(t, n.cmd.Process.Pid, "qemu")
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.waitFor("the qemu plugin restarted", time.Minute, func() bool {
		n.must("GET", "/v1/health", nil, http.StatusOK, &health)
		return health.Drivers[0].Restarts >= 1 && health.Drivers[0].Health == "healthy"
	})
	if !alive(qemuPid) {
		t.Fatal("the VM died with its plugin")
	}
	n.waitReady(id)
	if r := n.exec(id, []string{"cat", "/proc/uptime"}); r.ExitCode != 0 {
		t.Fatalf("exec after plugin restart = %+v", r)
	}

	// A VM with a TTL is deleted by the node when it expires.
	var short sdk.VM
	n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: "e2e-ttl", Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 128, TTLSeconds: 5}, http.StatusCreated, &short)
	n.waitFor("the TTL vm is deleted", time.Minute, func() bool {
		code, _ := n.call("GET", "/v1/vms/"+short.ID, nil, n.admin)
		return code == http.StatusNotFound
	})

	// Delete leaves no workspace and no process.
	n.must("DELETE", "/v1/vms/"+id, nil, http.StatusNoContent, nil)
	if _, err := os.Stat(workspace); !os.IsNotExist(err) {
		t.Errorf("workspace %s is still there (%v)", workspace, err)
	}
	n.waitFor("the qemu process ends", 10*time.Second, func() bool { return !alive(qemuPid) })
	if code, _ := n.call("GET", "/v1/vms/"+id, nil, n.admin); code != http.StatusNotFound {
		t.Errorf("GET after delete = %d, want 404", code)
	}
	entries, _ := os.ReadDir(filepath.Join(n.stateDir, "drivers", "qemu", "vms"))
	if len(entries) != 0 {
		t.Errorf("workspaces left: %v", entries)
	}
}

// TestNodeRecoversTwentySimVMs restarts an agent holding 20 simulated VMs
// and checks that all 20 come back, none lost.
func TestNodeRecoversTwentySimVMs(t *testing.T) {
	n := newNode(t, `plugin "sim" {}`)
	img := filepath.Join(n.dir, "images", "sim.img")
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, []byte("sim"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.start()
	ids := map[string]bool{}
	for i := range 20 {
		var vm sdk.VM
		n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: fmt.Sprintf("sim-%02d", i), Image: img, VCPUs: 1, MemoryMiB: 256}, http.StatusCreated, &vm)
		ids[vm.ID] = true
	}
	pluginLog := filepath.Join(n.stateDir, "logs", "sim.log")
	before, err := os.Stat(pluginLog)
	if err != nil || before.Size() == 0 {
		t.Fatalf("the sim plugin's log %s: %v", pluginLog, err)
	}
	n.kill()
	n.start()
	// The plugin's log is kept across the restart (appended to), and the
	// node's files are private.
	if after, err := os.Stat(pluginLog); err != nil {
		t.Errorf("plugin log after the restart: %v", err)
	} else if after.Size() <= before.Size() {
		t.Errorf("plugin log after the restart: %d bytes, was %d: not appended to", after.Size(), before.Size())
	}
	for _, f := range []string{pluginLog, filepath.Join(n.stateDir, "agent.db")} {
		if fi, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	var list struct{ VMs []sdk.VM }
	n.must("GET", "/v1/vms", nil, http.StatusOK, &list)
	if len(list.VMs) != 20 {
		t.Fatalf("after restart %d vms, want 20", len(list.VMs))
	}
	for _, vm := range list.VMs {
		if !ids[vm.ID] || vm.State != sdk.StateRunning || vm.LastError != "" {
			t.Errorf("vm %s (%s): state %s, error %q", vm.Name, vm.ID, vm.State, vm.LastError)
		}
	}
}

// TestNodeRefusesBadConfig checks that a bad config stops the agent with
// exit code 1 and a message naming file:line, and that -check validates.
func TestNodeRefusesBadConfig(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := fmt.Sprintf("state_dir = %q\ntokens { admin = [\"0123456789abcdef0123\"] }\nplugin \"sim\" {\n  config { vcpus = 8 }\n}\n", filepath.Join(dir, "state"))
	cases := []struct {
		name, file string
		args       []string
		wantCode   int
		wantOut    string
	}{
		{"syntax error", write("syntax.hcl", "state_dir = \"/x\"\ntokens {\n  admin = [\n"), nil, 1, "syntax.hcl:"},
		{"unknown attribute", write("unknown.hcl", good+"bogus = 1\n"), nil, 1, "unknown.hcl:6,1-6: Unsupported argument"},
		{"plugin attribute of the wrong type", write("ptype.hcl", strings.Replace(good, "vcpus = 8", `vcpus = "many"`, 1)), []string{"-check"}, 1, "ptype.hcl:4,"},
		{"unknown plugin attribute", write("pattr.hcl", strings.Replace(good, "vcpus = 8", `cpus = 8`, 1)), []string{"-check"}, 1, "pattr.hcl:4,"},
		{"plugin that is not built in", write("noplugin.hcl", strings.Replace(good, `"sim"`, `"nope"`, 1)), []string{"-check"}, 1, "not built in"},
		{"netns config of the wrong type", write("netcfg.hcl", good+"plugin \"netns\" {\n  config { egress_nat = \"sometimes\" }\n}\n"), []string{"-check"}, 1, "netcfg.hcl:7,"},
		{"netns as a driver", write("netdrv.hcl", good+"plugin \"netns\" {\n  type = \"driver\"\n}\n"), []string{"-check"}, 1, `"netns" is a network plugin`},
		{"network plugin that is not built in", write("othernet.hcl", good+"plugin \"other\" {\n  type = \"network\"\n}\n"), []string{"-check"}, 1, "not built in"},
		{"only a network plugin", write("onlynet.hcl", strings.Replace(good, "plugin \"sim\" {\n  config { vcpus = 8 }\n}\n", "plugin \"netns\" {}\n", 1)), []string{"-check"}, 1, "no driver plugin"},
		{"check passes with netns", write("goodnet.hcl", good+"plugin \"netns\" {\n  config { egress_nat = false }\n}\n"), []string{"-check"}, 0, "ok"},
		{"check passes", write("good.hcl", good), []string{"-check"}, 0, "ok"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			args := append([]string{"node", "-config", c.file}, c.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantCode || !strings.Contains(string(out), c.wantOut) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, c.wantCode, c.wantOut)
			}
			if strings.Contains(string(out), "0123456789abcdef0123") {
				t.Errorf("the output shows the token: %s", out)
			}
		})
	}
}

// TestNodeRunsAThirdPartyPluginFromPluginDir builds the example driver (a
// module of its own) into the node's plugin_dir and runs a VM through it:
// the path a hosting provider's driver takes.
func TestNodeRunsAThirdPartyPluginFromPluginDir(t *testing.T) {
	pluginDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "example"), ".")
	build.Dir = "../../examples/driver-example"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example driver: %v\n%s", err, out)
	}
	n := newNode(t, fmt.Sprintf("plugin_dir = %q\nplugin \"example\" {\n  config { memory_mib = 2048 }\n}", pluginDir))
	img := filepath.Join(n.dir, "images", "disk.img")
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, []byte("example"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.start()
	var health sdk.NodeHealth
	n.must("GET", "/v1/health", nil, http.StatusOK, &health)
	if len(health.Drivers) != 1 || health.Drivers[0].Name != "example" || health.Drivers[0].Health != "healthy" {
		t.Fatalf("health = %+v, want the healthy third-party driver", health.Drivers)
	}
	if health.Capacity.Total.MemoryMiB != 2048 {
		t.Errorf("capacity %+v: the plugin's config block did not reach it", health.Capacity)
	}
	var vm sdk.VM
	n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: "third-party", Image: img, VCPUs: 1, MemoryMiB: 256}, http.StatusCreated, &vm)
	if vm.Driver != "example" || vm.State != sdk.StateRunning {
		t.Fatalf("vm = %+v, want running on the example driver", vm)
	}
	pid, _ := strconv.Atoi(vm.Attributes["pid"])
	n.kill()
	n.start()
	n.must("GET", "/v1/vms/"+vm.ID, nil, http.StatusOK, &vm)
	if vm.State != sdk.StateRunning || (pid != 0 && vm.Attributes["pid"] != strconv.Itoa(pid)) {
		t.Fatalf("after an agent restart: %+v", vm)
	}
	n.must("DELETE", "/v1/vms/"+vm.ID, nil, http.StatusNoContent, nil)
	if pid != 0 {
		n.waitFor("the example VM's process ends", 10*time.Second, func() bool { return !alive(pid) })
	}
}

// TestNodeReportsADriverItCannotUse configures the qemu plugin with a QEMU
// that does not exist: the node still starts, and its health shows the
// driver as undetected with what to do, instead of hiding it.
func TestNodeReportsADriverItCannotUse(t *testing.T) {
	n := newNode(t, `plugin "qemu" {
  config { qemu_binary = "/nonexistent/qemu-system-x86_64" }
}`)
	n.start()
	var health sdk.NodeHealth
	n.must("GET", "/v1/health", nil, http.StatusOK, &health)
	if len(health.Drivers) != 1 {
		t.Fatalf("drivers = %+v", health.Drivers)
	}
	d := health.Drivers[0]
	if d.Name != "qemu" || d.Health == "healthy" || d.Description == "" {
		t.Fatalf("driver = %+v, want qemu reported as not healthy, with a reason", d)
	}
	t.Logf("reported: %s: %s", d.Health, d.Description)
	code, body := n.call("POST", "/v1/vms", sdk.CreateVMRequest{Name: "x", Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 128}, n.admin)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "hint") {
		t.Fatalf("create on a node without a usable driver = %d %s, want 503 with a hint", code, body)
	}
}
