// Package testservers starts, for central's tests, the third-party servers
// they talk to as real processes: stripe-mock (Stripe's API) and mailpit
// (an SMTP server whose mail is read back through its HTTP API). The
// binaries are what scripts/tools.sh installs (make deps); a test that
// cannot find one fails and says so.
package testservers

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Versions scripts/tools.sh pins; the binaries live in
// $FLUXVM_CACHE_DIR/tools/<name>@<version>/<name>.
var versions = map[string]string{
	"stripe-mock": "v0.203.0",
	"mailpit":     "v1.33.1",
}

// Binary finds a tool's binary, or fails the test with how to install it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	cache := os.Getenv("FLUXVM_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/fluxvm"
	}
	p := filepath.Join(cache, "tools", name+"@"+versions[name], name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s %s is not installed at %s: run make deps (scripts/tools.sh installs it)", name, versions[name], p)
	}
	return p
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the server binds it; start retries once if so.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the binary with args and waits until url answers HTTP; the
// process is killed when the test ends.
func start(t testing.TB, bin string, args []string, url string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	log := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		f.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			out, _ := os.ReadFile(log)
			t.Fatalf("%s exited at start:\n%s", bin, out)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := os.ReadFile(log)
	t.Fatalf("%s did not answer %s within 20 s:\n%s", bin, url, out)
}

// StripeMock starts stripe-mock on loopback and returns its base URL
// (http://127.0.0.1:PORT).
func StripeMock(t testing.TB) string {
	t.Helper()
	bin := Binary(t, "stripe-mock")
	addr := freePort(t)
	base := "http://" + addr
	start(t, bin, []string{"-http-addr", addr}, base+"/v1/customers/cus_x")
	return base
}

// Mailpit is a running mailpit.
type Mailpit struct {
	// SMTP is host:port of its SMTP server; API its HTTP base URL.
	SMTP, API string
}

// StartMailpit starts mailpit on loopback with its database in the test's
// temporary directory.
func StartMailpit(t testing.TB) *Mailpit {
	t.Helper()
	bin := Binary(t, "mailpit")
	smtp, web := freePort(t), freePort(t)
	m := &Mailpit{SMTP: smtp, API: "http://" + web}
	start(t, bin, []string{"--smtp", smtp, "--listen", web, "--database", filepath.Join(t.TempDir(), "mailpit.db")}, m.API+"/api/v1/info")
	return m
}

// String names the server in messages.
func (m *Mailpit) String() string { return fmt.Sprintf("mailpit (smtp %s, api %s)", m.SMTP, m.API) }
