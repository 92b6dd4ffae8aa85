package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// syncBuffer is a bytes.Buffer that a running command writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFleetSSHAndSCPReachARealGuestThroughTunnels is issue 14's first
// acceptance line end to end, with nothing stood in: a real central and a
// QEMU node (TCG) whose API is a unix socket, so central reaches it only
// through the channel the node opens. A VM launched with --ssh-key gets
// the key installed by its guest agent for the catalog image's ssh_user
// (debian); the real OpenSSH client, run by fluxctl fleet ssh, reaches the
// guest's real sshd through ProxyCommand = the fluxctl binary's
// tunnel-stdio: a WebSocket tunnel to central, relayed through the channel
// to the node, which forwards to the guest's port 22 with QEMU's
// hostfwd_add. It prints the guest's uname; no process has the token on
// its command line meanwhile. Then scp with a --print-config block copies
// a file both ways (50 MiB, equal sha256) and rsync -e ssh a tree there and
// back; fleet port-forward reaches busybox httpd, started in the guest with
// fleet run; fleet tunnels lists the tunnel it holds and closes it.
func TestFleetSSHAndSCPReachARealGuestThroughTunnels(t *testing.T) {
	for _, tool := range []string{"qemu-system-x86_64", "ssh", "scp", "ssh-keygen", "rsync"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: apt-get install qemu-system-x86 qemu-utils openssh-client rsync (make deps)", tool)
		}
	}
	m, err := image.Load(image.DefaultDir())
	if err != nil {
		t.Fatalf("guest image: %v (run scripts/guest-image.sh)", err)
	}
	if m.SSHServer == "" {
		t.Fatalf("the guest image in %s has no SSH server: rebuild it with scripts/guest-image.sh", m.Dir())
	}
	dir := t.TempDir()
	fluxctl := filepath.Join(dir, "fluxctl")
	if out, err := exec.Command("go", "build", "-o", fluxctl, ".").CombinedOutput(); err != nil {
		t.Fatalf("build fluxctl: %v\n%s", err, out)
	}
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tenant@test", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}

	f := fleettest.Start(t, fleettest.WithQEMU(m.Dir()))
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := op.GetNode(t.Context(), f.Node); err != nil || n.URL != "" {
		t.Fatalf("node %s: %+v, %v; want it listed with no URL central could dial", f.Node, n, err)
	}
	if _, err := op.PutImage(t.Context(), sdk.Image{Name: "deb", GuestOS: "linux", Image: f.Image, VCPUs: 1, MemoryMiB: 256, SSHUser: "debian"}); err != nil {
		t.Fatal(err)
	}
	_, token := f.Tenant(t, "acme", nil)
	direct := fleetCLI(f, token)
	// A private key is refused before anything is sent.
	direct.run(t, "fleet", "launch", "web-1", "--image", "deb", "--ssh-key", key).refused(t, "launch with a private key", "is a private key; nothing was sent", key+".pub")
	direct.run(t, "fleet", "launch", "web-1", "--image", "deb", "--ssh-key", key+".pub", "--wait", "--wait-timeout", "3m").ok(t, "launch --ssh-key --wait")
	tenantFC, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	vm, err := tenantFC.FindVM(t.Context(), "web-1")
	if err != nil {
		t.Fatal(err)
	}

	c := fleetCLI(f, token)
	knownHosts := filepath.Join(dir, "known_hosts")
	sshOpts := []string{"-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
		"-o", "UserKnownHostsFile=" + knownHosts, "-o", "ConnectTimeout=30"}
	run := func(args ...string) result {
		t.Helper()
		var out, errb bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }, executable: fluxctl}
		code := a.run(t.Context(), args)
		return result{out.String(), errb.String(), code}
	}

	// The key is installed once the VM reads as ready, and sshd runs.
	r := run(append(append([]string{"fleet", "ssh", "web-1", "--"}, sshOpts...), "uname", "-a;", "id", "-un")...)
	if r.code != 0 || !strings.Contains(r.stdout, "Linux ") || !strings.Contains(r.stdout, m.KernelVersion) || !strings.HasSuffix(r.stdout, "\ndebian\n") {
		t.Fatalf("fleet ssh web-1 -- uname -a; id -un: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("through the tunnel: %s", strings.TrimSpace(r.stdout))
	// Under its alias (ssh-keygen -F finds hashed entries too, Debian's default).
	if out, err := exec.Command("ssh-keygen", "-F", "fluxvm-"+vm.ID, "-f", knownHosts).CombinedOutput(); err != nil || !strings.Contains(string(out), "ssh-ed25519 ") {
		kh, _ := os.ReadFile(knownHosts)
		t.Errorf("known_hosts has no key for fluxvm-%s (%v, %s):\n%s", vm.ID, err, out, kh)
	}
	// While a session is open, the ProxyCommand runs, and no process on
	// the machine has the token on its command line.
	sessionDone := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }, executable: fluxctl}
		code := a.run(t.Context(), append(append([]string{"fleet", "ssh", "web-1", "--"}, sshOpts...), "sleep", "4"))
		sessionDone <- result{out.String(), errb.String(), code}
	}()
	sawProxy := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !sawProxy; time.Sleep(100 * time.Millisecond) {
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range cmdlines {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			line := strings.ReplaceAll(string(b), "\x00", " ")
			if strings.Contains(line, token) {
				t.Fatalf("%s holds the token: %q", p, line)
			}
			if strings.Contains(line, "tunnel-stdio "+vm.Node+"/"+vm.ID+" 22") {
				sawProxy = true
			}
		}
	}
	if !sawProxy {
		t.Error("no tunnel-stdio process was seen while the session ran")
	}
	if r := <-sessionDone; r.code != 0 {
		t.Errorf("fleet ssh web-1 -- sleep 4: exit %d: %s", r.code, r.stderr)
	}
	// ssh's exit code is the remote command's.
	if r := run(append(append([]string{"fleet", "ssh", "web-1", "--"}, sshOpts...), "exit", "7")...); r.code != 7 {
		t.Errorf("fleet ssh web-1 -- exit 7: exit %d, stderr %s", r.code, r.stderr)
	}
	// USER@ overrides the image's login: root has no key.
	if r := run(append(append([]string{"fleet", "ssh", "root@web-1", "--"}, sshOpts...), "true")...); r.code != 255 || !strings.Contains(r.stderr, "Permission denied") {
		t.Errorf("fleet ssh root@web-1: exit %d, stderr %s; want ssh's 255 and Permission denied", r.code, r.stderr)
	}

	// The config block: the image's login, the alias, and a ProxyCommand
	// that names this binary and central but not the token.
	r = run("fleet", "ssh", "--print-config", "web-1").ok(t, "ssh --print-config")
	want := fmt.Sprintf("Host web-1\n  User debian\n  HostKeyAlias fluxvm-%s\n  ProxyCommand %s fleet --central %s tunnel-stdio %s/%s %%p\n",
		vm.ID, fluxctl, f.URL, vm.Node, vm.ID)
	if r.stdout != want || strings.Contains(r.stdout, token) {
		t.Fatalf("--print-config printed\n%s\nwant\n%s", r.stdout, want)
	}
	cfg := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(cfg, []byte(r.stdout+"  IdentityFile "+key+"\n  IdentitiesOnly yes\n  BatchMode yes\n  UserKnownHostsFile "+knownHosts+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 50<<20)
	_, _ = rand.Read(data)
	up, down := filepath.Join(dir, "up.bin"), filepath.Join(dir, "down.bin")
	if err := os.WriteFile(up, data, 0o600); err != nil {
		t.Fatal(err)
	}
	scp := func(from, to string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "scp", "-q", "-F", cfg, from, to)
		// What a user with the token exported has; nothing else carries it.
		cmd.Env = append(os.Environ(), envFleetToken+"="+token)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scp -F config %s %s: %v\n%s", from, to, err, out)
		}
		t.Logf("scp %s %s: 50 MiB in %.2fs", from, to, time.Since(start).Seconds())
	}
	scp(up, "web-1:up.bin")
	scp("web-1:up.bin", down)
	got, err := os.ReadFile(down)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatal("the file copied to the guest and back differs from the one sent")
	}
	// rsync -e ssh with the same block: a tree there and back again.
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"a.txt": "alpha\n", "sub/b.txt": strings.Repeat("beta\n", 10000)} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rsync := func(from, to string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "rsync", "-a", "-e", "ssh -F "+cfg, from, to)
		cmd.Env = append(os.Environ(), envFleetToken+"="+token)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rsync -a -e 'ssh -F config' %s %s: %v\n%s", from, to, err, out)
		}
	}
	rsync(tree+"/", "web-1:tree/")
	back := filepath.Join(dir, "back")
	rsync("web-1:tree/", back+"/")
	if out, err := exec.Command("diff", "-r", tree, back).CombinedOutput(); err != nil {
		t.Fatalf("the tree rsync'ed there and back differs: %v\n%s", err, out)
	}

	// port-forward: busybox httpd in the guest, started through the exec
	// route (fleet run), serves a page that a local port reaches, one
	// tunnel per connection.
	page := "served in " + vm.ID + "\n"
	direct.run(t, "fleet", "run", "web-1", "--", "sh", "-c",
		"mkdir -p /tmp/www && printf '%s' '"+page+"' > /tmp/www/index.html && busybox httpd -p 8080 -h /tmp/www").ok(t, "run busybox httpd")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pfErr := &syncBuffer{}
	pfDone := make(chan int, 1)
	go func() {
		a := &app{stdin: strings.NewReader(""), stdout: &syncBuffer{}, stderr: pfErr, getenv: func(k string) string { return c.env[k] }}
		pfDone <- a.run(ctx, []string{"fleet", "port-forward", "web-1", "0:8080"})
	}()
	re := regexp.MustCompile(`Forwarding (127\.0\.0\.1:\d+) -> web-1 port 8080`)
	var local string
	for deadline := time.Now().Add(30 * time.Second); local == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(pfErr.String()); m != nil {
			local = m[1]
		}
	}
	if local == "" {
		t.Fatalf("port-forward did not say where it listens: %q", pfErr.String())
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get("http://" + local + "/index.html")
	if err != nil {
		t.Fatalf("GET through port-forward: %v\n%s", err, pfErr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != page {
		t.Fatalf("GET through port-forward: %d %q; want 200 %q", resp.StatusCode, body, page)
	}
	t.Logf("through fleet port-forward: %s %q", resp.Status, body)
	// A connection that holds its tunnel: half a request, which httpd
	// waits on. fleet tunnels lists it (and only it: the GET's tunnel ended
	// with its connection) and closes it.
	conn, err := net.Dial("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := "GET / HTTP/1.0\r\n"
	if _, err := conn.Write([]byte(half)); err != nil {
		t.Fatal(err)
	}
	c.stdoutTTY = true
	row := regexp.MustCompile(`^tun_\w+\s+web-1\s+8080\s+` + strconv.Itoa(len(half)) + ` B\s+0 B\s+\d+s$`)
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list := c.run(t, "fleet", "tunnels").ok(t, "tunnels").stdout
		lines = strings.Split(strings.TrimSpace(list), "\n")
		if len(lines) == 2 && row.MatchString(lines[1]) || time.Now().After(deadline) {
			break
		}
	}
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID VM PORT TO VM FROM VM IDLE" || !row.MatchString(lines[1]) {
		t.Fatalf("fleet tunnels printed:\n%s\nwant the one tunnel to port 8080 with %d B to the VM", strings.Join(lines, "\n"), len(half))
	}
	id := strings.Fields(lines[1])[0]
	c.run(t, "fleet", "tunnels", "-o", "wide").ok(t, "tunnels -o wide").has(t, "tunnels -o wide", "AGE", "NODE", vm.ID, "primary token")
	c.run(t, "fleet", "tunnels", "close", id).ok(t, "tunnels close").has(t, "tunnels close", "✓ Closed tunnel "+id)
	// port-forward says why the connection ended.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(pfErr.String(), "central ended the tunnel: closed by the tenant") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(pfErr.String(), "error: central ended the tunnel: closed by the tenant\nhint: someone closed it") {
		t.Errorf("port-forward did not say why its connection ended:\n%s", pfErr.String())
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 64<<10)); err == nil {
		t.Errorf("the forwarded connection read %d bytes after its tunnel was closed; want it closed", n)
	}
	c.stdoutTTY = false
	c.run(t, "fleet", "tunnels", "close", id).refused(t, "closing it again", "no open tunnel "+id, "fluxctl fleet tunnels lists")
	// A port the policy refuses: tunnel-stdio says why, with fluxctl's hint.
	c.run(t, "fleet", "tunnel-stdio", vm.Node+"/"+vm.ID, "25").refused(t, "a port outside the policy", "port 25 is not among the policy's tunnel ports 22, 1024-65535", "the fleet's policy decides which ports")
	c.run(t, "fleet", "tunnel-stdio", vm.Node+"/nope", "22").refused(t, "no such VM", "no vm nope on node "+vm.Node, "fluxctl fleet vms lists your VMs")
	cancel()
	select {
	case code := <-pfDone:
		if code != 0 {
			t.Errorf("port-forward ended with %d after its interrupt; want 0\n%s", code, pfErr.String())
		}
	case <-time.After(10 * time.Second):
		t.Error("port-forward did not stop when interrupted")
	}
	direct.run(t, "fleet", "rm", "web-1", "-y").ok(t, "rm")
}

// TestLaunchSSHKeyOutsideTheLimitsIsRefusedWithAHint: central refuses keys
// it would not install, with its hint, and fluxctl says it; nothing launches.
func TestLaunchSSHKeyOutsideTheLimitsIsRefusedWithAHint(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "deb")
	_, token := f.Tenant(t, "acme", nil)
	c := fleetCLI(f, token)
	dir := t.TempDir()
	notKey := filepath.Join(dir, "notes.pub")
	if err := os.WriteFile(notKey, []byte("my password is hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.run(t, "fleet", "launch", "web-1", "--image", "deb", "--ssh-key", notKey).refused(t, "not a key", "is not an OpenSSH public key", "~/.ssh/id_ed25519.pub")
	var many strings.Builder
	for i := range sdk.MaxSSHAuthorizedKeys + 1 {
		fmt.Fprintf(&many, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%02d k%d\n", i, i)
	}
	manyFile := filepath.Join(dir, "many.pub")
	if err := os.WriteFile(manyFile, []byte(many.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c.run(t, "fleet", "launch", "web-1", "--image", "deb", "--ssh-key", manyFile).refused(t, "too many keys", "at most "+strconv.Itoa(sdk.MaxSSHAuthorizedKeys), "")
	c.run(t, "fleet", "launch", "web-1", "--image", "deb", "--ssh-key", filepath.Join(dir, "missing.pub")).refused(t, "a missing file", "read the SSH key", "public key file")
	if out := c.run(t, "fleet", "vms", "-o", "json").ok(t, "vms").stdout; strings.Contains(out, "web-1") {
		t.Fatalf("a refused launch left a VM: %s", out)
	}
}
