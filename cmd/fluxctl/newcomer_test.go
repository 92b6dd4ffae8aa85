package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/devenv"
)

// TestNewcomerFirstTenMinutes plays a newcomer: it runs the README's first
// command (make dev) in the background, waits for the URL it prints, and with
// the printed tenant token launches a real VM with the fluxctl that make dev
// built, runs uname -a in it, lists it as JSON and deletes it. Then it pastes
// what the banner prints (the export line and the commands to try) into a
// shell, and runs every shell block of README.md and docs/ marked runnable
// (docs/design/005-docs-that-run.md): a doc line that fails fails here.
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
	// dev keeps its VMs running across restarts: stop them before their
	// workspaces go, or they outlive the test.
	t.Cleanup(func() { devenv.KillVMsUnder(state); _ = os.RemoveAll(state) })
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
	var banner []string
	for try := 1; url == "" || tenant == ""; try++ {
		var seen []string
		url, tenant, lines, seen = startDev(t, state, free(), free())
		if url != "" && tenant != "" {
			banner = seen
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

	// Every line the banner hands over works when pasted, and so does every
	// shell block the docs mark runnable, in a shell that has only what the
	// banner's export line set (plus the operator's token for blocks marked
	// so).
	var export, operator string
	var pasted, more []string // the README's commands; the operator's and the node's lines
	for _, line := range banner {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "  export "):
			export = strings.TrimSpace(line)
		case len(f) >= 3 && f[0] == "operator" && f[1] == "token":
			operator = f[2]
		case export != "" && strings.HasPrefix(line, "  fluxctl "):
			pasted = append(pasted, strings.TrimSpace(line))
		case strings.HasPrefix(line, "As the operator: "), strings.HasPrefix(line, "The node directly: "):
			_, cmd, _ := strings.Cut(line, ": ")
			more = append(more, cmd)
		}
	}
	if export == "" || operator == "" || len(pasted) != 4 {
		t.Fatalf("the banner lacks the export line, the operator token or the README's four commands:\n%s", strings.Join(banner, "\n"))
	}
	sh := func(what, script string) {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", export+"\n"+script)
		cmd.Env = withoutFluxVMEnv(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s failed (%v):\n%s\n--- output:\n%s", what, err, script, out)
		}
	}
	sh("the banner's commands", strings.Join(pasted, "\n"))
	if len(more) != 2 {
		t.Fatalf("the banner lacks the operator's or the node's line:\n%s", strings.Join(banner, "\n"))
	}
	for _, line := range more {
		sh("the banner's line", line)
	}
	blocks := runnableBlocks(t, "../..")
	if len(blocks) < 4 {
		t.Fatalf("found %d runnable doc blocks; README.md and docs/quickstart.md alone have 4", len(blocks))
	}
	// The banner hands over the README's own commands.
	var inReadme []string
	for _, c := range commands(blocks[0].text) {
		inReadme = append(inReadme, strings.TrimSpace(strings.SplitN(c, " #", 2)[0]))
	}
	if !strings.HasPrefix(blocks[0].where, "README.md:") || strings.Join(inReadme, "\n") != strings.Join(pasted, "\n") {
		t.Fatalf("the banner's commands are not the README's:\nbanner:\n%s\n%s:\n%s",
			strings.Join(pasted, "\n"), blocks[0].where, strings.Join(inReadme, "\n"))
	}
	for _, b := range blocks {
		// Line by line, each in a shell of its own, so that every command's
		// status counts (set -e passes over the left side of an &&).
		for _, line := range commands(b.text) {
			if b.operator {
				line = "export FLUXVM_AGENT_TOKEN=" + operator + "\n" + line
			}
			sh(b.where, line)
		}
		// Each block cleans up after itself, so the next finds the demo
		// tenant's quota free.
		if list, _ := fluxctl("fleet", "vms", "-o", "json"); strings.Contains(list, `"id"`) {
			t.Fatalf("%s leaves VMs behind:\n%s", b.where, list)
		}
	}
}

// commands splits a shell block into its commands: one a line, a line
// ending in a backslash joined with the next, blank lines and comments
// left out.
func commands(block string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(block, "\n") {
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		if c := strings.TrimSpace(cur); c != "" && !strings.HasPrefix(c, "#") {
			out = append(out, c)
		}
		cur = ""
	}
	return out
}

// withoutFluxVMEnv drops what would point fluxctl elsewhere than the
// banner's export line says.
func withoutFluxVMEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CENTRAL_URL=") && !strings.HasPrefix(kv, "FLUXVM_") {
			out = append(out, kv)
		}
	}
	return out
}

// docBlock is a shell block of the docs marked runnable: the line before
// its fence is <!-- runnable --> (run with the demo tenant's token) or
// <!-- runnable: operator --> (with the operator's).
type docBlock struct {
	where    string // file:line of the fence
	text     string
	operator bool
}

// runnableBlocks finds the runnable blocks of README.md and docs/, in file
// order.
func runnableBlocks(t *testing.T, repo string) []docBlock {
	t.Helper()
	files := []string{filepath.Join(repo, "README.md")}
	err := filepath.WalkDir(filepath.Join(repo, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			mark := strings.TrimSpace(lines[i])
			if mark != "<!-- runnable -->" && mark != "<!-- runnable: operator -->" {
				continue
			}
			if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
				t.Fatalf("%s:%d: a runnable mark must stand right above a ```sh fence", f, i+1)
			}
			b := docBlock{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(f, repo+"/"), i+2), operator: strings.Contains(mark, "operator")}
			j := i + 2
			for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
				b.text += lines[j] + "\n"
			}
			if j == len(lines) {
				t.Fatalf("%s: the block never closes", b.where)
			}
			out = append(out, b)
			i = j
		}
	}
	return out
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
	for {
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
			case strings.HasPrefix(line, "Ctrl-C stops FluxVM"): // the end of the banner
				return url, tenant, lines, seen
			}
		case <-deadline:
			t.Fatalf("make dev printed no URL and tokens within 5 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
}
