package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNewcomerFirstTenMinutes plays a newcomer: it runs the README's first
// command (make dev) in the background, waits for the URL it prints, and with
// the printed tenant token launches a real VM with the fluxctl that make dev
// built, runs uname -a in it, lists it as JSON and deletes it.
func TestNewcomerFirstTenMinutes(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile("(?m)^make dev ").Match(readme) {
		t.Fatal("the README's first command is no longer `make dev`: update this test with it")
	}
	state, err := os.MkdirTemp("", "fxn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	// A port found free can be taken (by another test's connection) before
	// make dev binds it; make dev then says so and stops, and the newcomer
	// would simply run it again: so does the test, with other ports.
	var url, tenant string
	var lines chan string
	for try := 1; url == "" || tenant == ""; try++ {
		var seen []string
		url, tenant, lines, seen = startDev(t, state, free(), free())
		if url != "" && tenant != "" {
			break
		}
		if try == 3 || !strings.Contains(strings.Join(seen, "\n"), "is in use") {
			t.Fatalf("make dev ended before printing its URL and tokens:\n%s", strings.Join(seen, "\n"))
		}
		t.Logf("make dev found a port taken; starting it again on others")
	}
	go func() {
		for range lines { // keep draining so make dev never blocks on its output
		}
	}()

	fluxctl := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join("..", "..", "bin", "fluxctl"), args...)
		cmd.Env = append(os.Environ(), "CENTRAL_URL="+url, "FLUXVM_AGENT_TOKEN="+tenant)
		b, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(b), code
	}
	if out, code := fluxctl("fleet", "launch", "newcomer", "--image", "debian-minimal", "--wait"); code != 0 {
		t.Fatalf("fluxctl fleet launch: exit %d\n%s", code, out)
	}
	out2, code := fluxctl("fleet", "run", "newcomer", "--", "uname", "-a")
	if code != 0 || !strings.Contains(out2, "Linux") {
		t.Fatalf("fluxctl fleet run newcomer -- uname -a: exit %d\n%s", code, out2)
	}
	list, code := fluxctl("fleet", "vms", "-o", "json")
	var vms struct {
		VMs []struct {
			Name string `json:"name"`
		} `json:"vms"`
	}
	if code != 0 || json.Unmarshal([]byte(list), &vms) != nil || len(vms.VMs) != 1 || vms.VMs[0].Name != "newcomer" {
		t.Fatalf("fluxctl fleet vms -o json: exit %d\n%s", code, list)
	}
	if out, code := fluxctl("fleet", "rm", "newcomer", "-y"); code != 0 {
		t.Fatalf("fluxctl fleet rm newcomer -y: exit %d\n%s", code, out)
	}
}

// startDev runs make dev on the given addresses and reads what it prints
// until the central URL and the tenant token are there (returned with the
// rest of its output, still being read into lines), or until it stops
// (url or tenant empty, and what it printed).
func startDev(t *testing.T, state, central, node string) (url, tenant string, lines chan string, seen []string) {
	dev := exec.Command("make", "dev", "DEV_FLAGS=-state-dir "+state+" -listen "+central+" -node-listen "+node)
	dev.Dir = "../.."
	dev.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dev.Stderr = dev.Stdout
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-dev.Process.Pid, syscall.SIGTERM)
		_ = dev.Wait()
	})
	lines = make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(5 * time.Minute)
	for url == "" || tenant == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				return "", "", lines, seen
			}
			seen = append(seen, line)
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[0] == "central" && f[1] == "URL":
				url = f[2]
			case len(f) >= 3 && f[0] == "tenant" && f[1] == "token":
				tenant = f[2]
			}
		case <-deadline:
			t.Fatalf("make dev printed no URL and tokens within 5 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
	return url, tenant, lines, seen
}
