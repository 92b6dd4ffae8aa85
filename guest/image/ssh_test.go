package image_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/guest/protocol"
)

// TestRealSSHServerInGuestTakesInstalledKeyAndCopiesFilesBothWays boots the built
// image under QEMU (TCG, microvm, as the driver does) with a user-network host
// forward to the guest's port 22 that the test sets up on QEMU's command line,
// installs a key for "admin" the way the node agent does (exec of
// `/init ssh-keys admin` with the key on stdin, which returns once sshd listens), then
// drives the guest's real sshd at once
// with the real OpenSSH client: a command, scp both ways with equal sha256, a
// refused stranger's key, and the host key the guest made for itself.
func TestRealSSHServerInGuestTakesInstalledKeyAndCopiesFilesBothWays(t *testing.T) {
	m, err := image.Load(image.DefaultDir())
	if errors.Is(err, image.ErrNotBuilt) {
		t.Fatalf("no guest image in %s: run scripts/guest-image.sh first: %v", image.DefaultDir(), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if m.SSHServer == "" {
		t.Fatalf("the image in %s has no SSH server (no ssh_server in its manifest): rebuild it with scripts/guest-image.sh", m.Dir())
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "ssh", "scp", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install qemu-system-x86, qemu-utils and openssh-client", tool)
		}
	}
	dir := t.TempDir()
	keygen := func(name string) string {
		p := filepath.Join(dir, name)
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		return p
	}
	key, stranger := keygen("tenant"), keygen("stranger")
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	overlay := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", m.Path("disk"), overlay).CombinedOutput(); err != nil {
		t.Fatalf("create overlay: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "ga.sock")
	consoleLog := filepath.Join(dir, "console.log")
	const mac = "52:54:00:12:34:57"
	cmdline := m.Cmdline + fmt.Sprintf(" tsc_early_khz=%d tsc=reliable no_timer_check i8042.noaux i8042.nokbd pci=lastbus=0 random.trust_cpu=on noreplace-smp loglevel=3", hostTSCkHz(t))
	args := []string{
		"-M", "microvm", "-accel", "tcg", "-m", "256", "-no-reboot", "-nodefaults", "-no-user-config", "-display", "none",
		"-kernel", m.Path("kernel"), "-initrd", m.Path("initrd"), "-append", cmdline,
		"-device", "virtio-serial-device",
		"-chardev", "socket,path=" + sock + ",server=on,wait=off,id=ga",
		"-device", "virtserialport,chardev=ga,name=" + m.AgentPort(),
		"-serial", "file:" + consoleLog,
		"-blockdev", "driver=qcow2,node-name=d0,file.driver=file,file.filename=" + overlay,
		"-device", "virtio-blk-device,drive=d0,serial=fluxvm-data",
		"-netdev", "user,id=n0,hostfwd=tcp:127.0.0.1:" + strconv.Itoa(port) + "-:22",
		"-device", "virtio-net-device,netdev=n0,mac=" + mac,
	}
	var qemuOut bytes.Buffer
	qemu := exec.Command("qemu-system-x86_64", args...)
	qemu.Stdout, qemu.Stderr = &qemuOut, &qemuOut
	start := time.Now()
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = qemu.Wait(); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var c *protocol.Client
	defer func() {
		if t.Failed() && c != nil {
			var out bytes.Buffer
			_, _ = c.Exec(ctx, &protocol.ExecRequest{Shell: "cat /var/log/sshd.log; ls -la /etc/ssh /home/admin/.ssh"}, &out, &out)
			t.Logf("in the guest:\n%s", out.String())
		}
		_ = qemu.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(consoleLog)
			t.Logf("qemu output:\n%s\nconsole:\n%s", qemuOut.String(), b)
		}
	}()

	if c, err = protocol.Dial(ctx, sock); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent ready %.2fs after qemu started", time.Since(start).Seconds())
	// What the QEMU driver does for a user-network VM.
	if err := c.ConfigureNetwork(ctx, &protocol.NetworkConfig{
		Interfaces: []protocol.Interface{{MAC: mac, Addresses: []string{"10.0.2.15/24"}, Gateway: "10.0.2.2"}},
	}); err != nil {
		t.Fatal(err)
	}
	guest := func(req *protocol.ExecRequest) (int, string) {
		t.Helper()
		var out bytes.Buffer
		code, err := c.Exec(ctx, req, &out, &out)
		if err != nil {
			t.Fatalf("exec %+v: %v", req, err)
		}
		return code, out.String()
	}
	if code, out := guest(&protocol.ExecRequest{Argv: []string{"/init", "ssh-keys", "admin"}, Stdin: pub}); code != 0 {
		t.Fatalf("/init ssh-keys admin = %d: %s", code, out)
	}
	if code, out := guest(&protocol.ExecRequest{Shell: "stat -c '%a %U %n' /home/admin /home/admin/.ssh /home/admin/.ssh/authorized_keys"}); code != 0 ||
		out != "700 admin /home/admin\n700 admin /home/admin/.ssh\n600 admin /home/admin/.ssh/authorized_keys\n" {
		t.Errorf("modes and owners of admin's files:\n%s", out)
	}

	knownHosts := filepath.Join(dir, "known_hosts")
	ssh := func(identity string, args ...string) (string, error) {
		base := []string{"-i", identity, "-p", strconv.Itoa(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile=" + knownHosts, "-o", "ConnectTimeout=20",
			"-o", "HostKeyAlias=fluxvm-ssh-test", "admin@127.0.0.1"}
		cmd := exec.CommandContext(ctx, "ssh", append(base, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if err != nil {
			return out.String(), fmt.Errorf("%w: %s", err, errOut.String())
		}
		return out.String(), nil
	}
	// ssh-keys returned once sshd listened: the first try must work.
	uname, err := ssh(key, "uname", "-a")
	if err != nil {
		t.Fatalf("ssh admin@guest uname -a: %v", err)
	}
	t.Logf("ssh answered %.2fs after qemu started: %s", time.Since(start).Seconds(), strings.TrimSpace(uname))
	if !strings.HasPrefix(uname, "Linux ") || !strings.Contains(uname, m.KernelVersion) {
		t.Errorf("uname -a over ssh = %q; want the guest's Linux %s", uname, m.KernelVersion)
	}
	if out, err := ssh(key, "id -un; pwd"); err != nil || out != "admin\n/home/admin\n" {
		t.Errorf("id -un; pwd over ssh = %q, %v; want admin and /home/admin", out, err)
	}

	// The host key ssh saw is the one the guest made at boot.
	_, hostPub := guest(&protocol.ExecRequest{Argv: []string{"cat", "/etc/ssh/ssh_host_ed25519_key.pub"}})
	kh, _ := os.ReadFile(knownHosts)
	if f := strings.Fields(hostPub); len(f) < 2 || !strings.Contains(string(kh), f[1]) {
		t.Errorf("known_hosts %q lacks the guest's host key %q", kh, hostPub)
	}

	if out, err := ssh(stranger, "true"); err == nil {
		t.Errorf("a key that was not installed logged in: %q", out)
	}

	// scp (the SFTP protocol in OpenSSH 9) both ways.
	up := filepath.Join(dir, "up.bin")
	data := make([]byte, 8<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(up, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%x", sha256.Sum256(data))
	scp := func(from, to string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "scp", "-q", "-i", key, "-P", strconv.Itoa(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-o", "UserKnownHostsFile="+knownHosts, "-o", "HostKeyAlias=fluxvm-ssh-test", from, to)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scp %s %s: %v: %s", from, to, err, out)
		}
	}
	t0 := time.Now()
	scp(up, "admin@127.0.0.1:up.bin")
	t.Logf("scp up 8 MiB: %.2fs", time.Since(t0).Seconds())
	if out, err := ssh(key, "sha256sum up.bin"); err != nil || !strings.HasPrefix(out, want) {
		t.Fatalf("sha256 in the guest = %q, %v; want %s", out, err, want)
	}
	down := filepath.Join(dir, "down.bin")
	t0 = time.Now()
	scp("admin@127.0.0.1:up.bin", down)
	t.Logf("scp down 8 MiB: %.2fs", time.Since(t0).Seconds())
	got, err := os.ReadFile(down)
	if err != nil {
		t.Fatal(err)
	}
	if g := fmt.Sprintf("%x", sha256.Sum256(got)); g != want {
		t.Errorf("sha256 of the file copied back = %s; want %s", g, want)
	}
}
