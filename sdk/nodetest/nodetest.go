// Package nodetest starts a real FluxVM node agent for tests of node API
// clients: fluxvm-agent built from this module, with the simulated driver
// and fresh tokens, in a temporary directory that goes away with the test.
// It needs the Go toolchain and this module's source, so it serves tests in
// this repository, not programs that merely import the SDK.
package nodetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// Node is a running node agent.
type Node struct {
	// URL is the node API's base URL, http://127.0.0.1:PORT.
	URL string
	// AdminToken may do anything; ReadOnlyToken only GETs.
	AdminToken, ReadOnlyToken string
	// Image is what to pass as CreateVMRequest.Image: a file inside the
	// node's allowed image dir (the sim driver only needs it to exist), or
	// the guest image directory given to WithQEMU.
	Image string
	// ImageDir is the node's image directory: where pulls land.
	ImageDir string
	// Dir holds the config, the state dir, the images and the node's log.
	Dir string
}

// Option changes the node Start runs.
type Option func(*options)

type options struct {
	qemuImage    string
	adminToken   string
	simImage     string
	portForwards map[string]string
}

// WithAdminToken has the node accept token as an admin token (Node.AdminToken),
// so that one client, like central's, can call several nodes.
func WithAdminToken(token string) Option {
	return func(o *options) { o.adminToken = token }
}

// WithImage has the sim node take image, an existing file, as Node.Image and
// allow its directory, so that one create spec fits several nodes.
func WithImage(image string) Option {
	return func(o *options) { o.simImage = image }
}

// WithSimPortForwards gives the sim driver port_forwards: guest TCP port ->
// a host address that stands for it, so tunnels (and previews) reach a
// server the test runs.
func WithSimPortForwards(forwards map[string]string) Option {
	return func(o *options) { o.portForwards = forwards }
}

// WithQEMU runs the built-in qemu driver (TCG, no acceleration probe)
// instead of sim, so VMs boot a real guest and exec works. imageDir is a
// guest image directory (make guest-image builds one); it becomes
// Node.Image, and its parent the node's allowed image dir.
func WithQEMU(imageDir string) Option {
	return func(o *options) { o.qemuImage = imageDir }
}

// Start builds fluxvm-agent, starts `fluxvm-agent node` with the sim driver
// (guest agent ready 100 ms after a boot) and waits for GET /v1/health. The
// node is stopped when the test ends; its log is printed if the test failed.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// Not t.TempDir: its path holds the test's name, and the VMs' unix
	// sockets under the state dir must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "fluxvm-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "fluxvm-agent")
	build := exec.Command(goTool(), "build", "-o", bin, "github.com/fluxvm/fluxvm/cmd/fluxvm-agent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build fluxvm-agent: %v\n%s", err, out)
	}
	n := &Node{Dir: dir, AdminToken: randomHex(t), ReadOnlyToken: randomHex(t)}
	if o.adminToken != "" {
		n.AdminToken = o.adminToken
	}
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	n.Image = filepath.Join(images, "test.img")
	if err := os.WriteFile(n.Image, []byte("sim image"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o.simImage != "" {
		n.Image, images = o.simImage, filepath.Dir(o.simImage)
	}
	plugin := `plugin "sim" {
  config { boot_delay_ms = 100 }
}`
	if len(o.portForwards) > 0 {
		forwards := ""
		for p, addr := range o.portForwards {
			forwards += fmt.Sprintf("\n      %q = %q", p, addr)
		}
		plugin = `plugin "sim" {
  config {
    boot_delay_ms = 100
    port_forwards = {` + forwards + `
    }
  }
}`
	}
	allowed := fmt.Sprintf("%q", images)
	if o.qemuImage != "" {
		// The node's own directory comes first: images pulled through
		// the node API land there, not in the shared guest image cache.
		n.Image = o.qemuImage
		allowed = fmt.Sprintf("%q, %q", images, filepath.Dir(o.qemuImage))
		plugin = fmt.Sprintf(`plugin "qemu" {
  config {
    accel      = "tcg"
    image_dirs = [%s]
  }
}`, allowed)
	}
	n.ImageDir = images
	addr := freeAddr(t)
	n.URL = "http://" + addr
	cfg := fmt.Sprintf(`name = "test-node"
state_dir = %q
listen = %q
tokens {
  admin     = [%q]
  read_only = [%q]
}
policy { allowed_image_dirs = [%s] }
%s
`, filepath.Join(dir, "state"), addr, n.AdminToken, n.ReadOnlyToken, allowed, plugin)
	cfgPath := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "node.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "node", "-config", cfgPath, "-log-level", "debug")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// VMs outlive their agent by design (a QEMU process would keep
		// running), so a test that failed halfway leaves none behind.
		n.deleteVMs(t)
		// SIGTERM lets the agent stop its plugins; a hard kill would
		// leave the sim plugin process behind.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("node log:\n%s", tail(b, 60))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL+"/v1/health", nil)
		req.Header.Set("Authorization", "Bearer "+n.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return n
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("node exited before it answered (%v):\n%s", err, tail(b, 60))
		case <-ctx.Done():
			b, _ := os.ReadFile(logPath)
			t.Fatalf("node did not answer GET /v1/health within a minute:\n%s", tail(b, 60))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *Node) deleteVMs(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := sdk.NewNodeClient(n.URL, sdk.WithToken(n.AdminToken))
	if err != nil {
		return
	}
	vms, err := nc.ListVMs(ctx)
	if err != nil {
		return
	}
	for _, vm := range vms {
		if err := nc.DeleteVM(ctx, vm.ID); err != nil && !sdk.IsNotFound(err) {
			t.Logf("nodetest: delete vm %s: %v", vm.Name, err)
		}
	}
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

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freeAddr finds a free local TCP port. The port is released before the
// node binds it, which another process could take meanwhile; in a test
// machine's range of ephemeral ports that is rare enough.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ClosedURL returns the URL of a local port nothing listens on, for tests
// of an unreachable node.
func ClosedURL(t testing.TB) string {
	return "http://" + freeAddr(t)
}

func tail(b []byte, lines int) []byte {
	for i, n := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			if n++; n > lines {
				return b[i+1:]
			}
		}
	}
	return bytes.Clone(b)
}
