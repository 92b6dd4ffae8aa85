package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

// cli runs fluxctl in-process, the way main does, with buffers for its
// streams and an environment of its own.
type cli struct {
	env   map[string]string
	stdin string
	// Terminal pretends these streams are terminals.
	stdinTTY, stdoutTTY, stderrTTY bool
}

type result struct {
	stdout, stderr string
	code           int
}

func (c cli) run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{
		stdin: strings.NewReader(c.stdin), stdout: &out, stderr: &errb,
		stdinTTY: c.stdinTTY, stdoutTTY: c.stdoutTTY, stderrTTY: c.stderrTTY,
		getenv: func(k string) string { return c.env[k] },
	}
	code := a.run(t.Context(), args)
	return result{out.String(), errb.String(), code}
}

// nodeCLI is fluxctl pointed at node through the environment, as a user
// with FLUXVM_NODE and FLUXVM_NODE_TOKEN exported would run it.
func nodeCLI(node *nodetest.Node) cli {
	return cli{env: map[string]string{envNode: node.URL, envToken: node.AdminToken}}
}

func (r result) ok(t *testing.T, what string) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	return r
}

// refused checks an exit 1 with "error: …msg…" and "hint: …hint…" on stderr.
func (r result) refused(t *testing.T, what, msg, hint string) {
	t.Helper()
	if r.code != 1 {
		t.Fatalf("%s: exit %d, want 1\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "error: ") || !strings.HasPrefix(lines[1], "hint: ") {
		t.Fatalf("%s: stderr is not an error line and a hint line:\n%s", what, r.stderr)
	}
	if !strings.Contains(lines[0], msg) || !strings.Contains(lines[1], hint) {
		t.Fatalf("%s: stderr\n%s\nwant %q in the error and %q in the hint", what, r.stderr, msg, hint)
	}
}

func decode[T any](t *testing.T, what, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: stdout is not JSON (%v):\n%s", what, err, s)
	}
	return v
}

func TestVMCommandsDriveAVMOnARealNode(t *testing.T) {
	node := nodetest.Start(t)
	piped := nodeCLI(node) // stdout is not a terminal: JSON

	// Created and waited for: the JSON is the API's VM, ready.
	r := piped.run(t, "vm", "create", "web-1", "--image", node.Image, "--display", "--vcpus", "2",
		"--memory-mib", "256", "--ttl", "8h", "--label", "team=cli", "--label", "tier=web", "--wait")
	r.ok(t, "create --wait")
	vm := decode[sdk.VM](t, "create", r.stdout)
	if vm.Name != "web-1" || !vm.AgentReady || vm.VCPUs != 2 || vm.MemoryMiB != 256 || vm.Labels["tier"] != "web" || vm.ExpiresAt == nil {
		t.Fatalf("created %+v", vm)
	}
	if r.stderr != "" {
		t.Fatalf("create wrote to stderr when not on a terminal: %q", r.stderr)
	}

	list := decode[struct {
		VMs []sdk.VM `json:"vms"`
	}](t, "list", piped.run(t, "vm", "list").ok(t, "list").stdout)
	if len(list.VMs) != 1 || list.VMs[0].ID != vm.ID {
		t.Fatalf("list = %+v", list)
	}
	got := decode[sdk.VM](t, "get", piped.run(t, "vm", "get", vm.ID).ok(t, "get by id").stdout)
	if got.Name != "web-1" || got.Attributes["simulated"] != "true" {
		t.Fatalf("get = %+v", got)
	}

	for _, step := range []struct{ verb, state string }{
		{"pause", sdk.StatePaused}, {"resume", sdk.StateRunning},
		{"stop", sdk.StateStopped}, {"start", sdk.StateRunning}, {"restart", sdk.StateRunning},
	} {
		v := decode[sdk.VM](t, step.verb, piped.run(t, "vm", step.verb, "web-1").ok(t, step.verb).stdout)
		if v.State != step.state {
			t.Fatalf("%s: state %s, want %s", step.verb, v.State, step.state)
		}
	}

	logs := piped.run(t, "vm", "logs", "web-1", "--lines", "2").ok(t, "logs")
	if n := strings.Count(logs.stdout, "\n"); n != 2 || !strings.Contains(logs.stdout, "vm "+vm.ID) {
		t.Fatalf("logs --lines 2 printed %d lines:\n%s", n, logs.stdout)
	}

	shot := filepath.Join(t.TempDir(), "out.png")
	piped.run(t, "vm", "screenshot", "web-1", "-f", shot, "--max-width", "320").ok(t, "screenshot")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("screenshot file is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w == 0 || w > 320 {
		t.Fatalf("screenshot is %d pixels wide, want 1 to 320", w)
	}

	// The simulator runs no guest: exec fails with the node's reason and
	// hint, and exit code 1.
	piped.run(t, "vm", "exec", "web-1", "--", "uname", "-a").refused(t, "exec on sim", "cannot run commands", "capability")

	// Piped, rm needs -y.
	piped.run(t, "vm", "rm", "web-1").refused(t, "rm without -y", "without confirmation", "-y")
	piped.run(t, "vm", "get", "web-1").ok(t, "get after a refused rm")
	r = piped.run(t, "vm", "rm", "web-1", "-y").ok(t, "rm -y")
	if r.stdout != "" {
		t.Fatalf("rm -y piped printed %q; JSON mode prints nothing for a 204", r.stdout)
	}
	piped.run(t, "vm", "get", "web-1").refused(t, "get after rm", `no VM "web-1"`, "fluxctl vm list")
}

func TestTerminalOutputIsTablesConfirmationsAndNextSteps(t *testing.T) {
	node := nodetest.Start(t)
	term := nodeCLI(node)
	term.stdinTTY, term.stdoutTTY, term.stderrTTY = true, true, true

	r := term.run(t, "vm", "list").ok(t, "empty list")
	if !strings.Contains(r.stdout, "no VMs on node") || !strings.Contains(r.stdout, "next: fluxctl vm create") {
		t.Fatalf("empty list on a terminal:\n%s", r.stdout)
	}

	r = term.run(t, "vm", "create", "web-1", "--image", node.Image, "--display", "--wait").ok(t, "create")
	if !strings.HasPrefix(r.stdout, "✓ created vm web-1 (vm-") || !strings.Contains(r.stdout, "on node test-node") {
		t.Fatalf("create on a terminal:\n%s", r.stdout)
	}
	// The sim driver cannot exec, so the next step is one it can do.
	if !strings.Contains(r.stdout, "\nnext: fluxctl vm screenshot web-1 -f web-1.png\n") {
		t.Fatalf("create on a terminal names no runnable next step:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "waiting for the guest agent of web-1") || !strings.HasSuffix(r.stderr, "\r\033[K") {
		t.Fatalf("--wait on a terminal showed no progress line, or did not clear it: %q", r.stderr)
	}

	table := term.run(t, "vm", "list").ok(t, "list").stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[0] != "NAME" || strings.Fields(lines[1])[0] != "web-1" {
		t.Fatalf("list table:\n%s", table)
	}
	if strings.Contains(table, "vm-") {
		t.Fatalf("the narrow table shows IDs:\n%s", table)
	}
	wide := term.run(t, "vm", "list", "-o", "wide").ok(t, "list wide").stdout
	for _, want := range []string{"ID", "DRIVER", "IMAGE", "vm-", "sim", node.Image, "simulated=true"} {
		if !strings.Contains(wide, want) {
			t.Fatalf("wide table has no %q:\n%s", want, wide)
		}
	}
	// -o json on a terminal still prints the API's JSON.
	decode[struct{ VMs []sdk.VM }](t, "list -o json", term.run(t, "vm", "list", "-o", "json").ok(t, "list json").stdout)

	get := term.run(t, "vm", "get", "web-1").ok(t, "get").stdout
	for _, want := range []string{"name", "web-1", "state", "running", "guest agent", "ready", "attributes"} {
		if !strings.Contains(get, want) {
			t.Fatalf("get on a terminal has no %q:\n%s", want, get)
		}
	}
	r = term.run(t, "vm", "pause", "web-1").ok(t, "pause")
	if r.stdout != "✓ paused vm web-1 (paused)\nnext: fluxctl vm resume web-1\n" {
		t.Fatalf("pause on a terminal: %q", r.stdout)
	}

	// rm asks first; anything but y keeps the VM.
	term.stdin = "n\n"
	r = term.run(t, "vm", "rm", "web-1")
	prompt, rest, _ := strings.Cut(r.stderr, "[y/N] ")
	if !strings.HasPrefix(prompt, "delete vm web-1 (vm-") {
		t.Fatalf("rm on a terminal asked %q", prompt)
	}
	r.stderr = rest // what the terminal shows after the answer's newline
	r.refused(t, "rm answered n", "nothing deleted", "-y")
	if r := term.run(t, "vm", "get", "web-1"); r.code != 0 {
		t.Fatal("rm deleted the VM although the answer was n")
	}
	term.stdin = "y\n"
	r = term.run(t, "vm", "rm", "web-1").ok(t, "rm answered y")
	if r.stdout != "✓ deleted vm web-1\n" {
		t.Fatalf("rm on a terminal printed %q", r.stdout)
	}
}

func TestRefusedCallsExplainWhatToDo(t *testing.T) {
	node := nodetest.Start(t)
	withToken := func(tok string) cli {
		c := nodeCLI(node)
		c.env[envToken] = tok
		return c
	}
	withToken("not-a-token").run(t, "vm", "list").refused(t, "bad token", "invalid token", "--token")
	withToken("").run(t, "vm", "list").refused(t, "no token", "invalid token", envToken)
	// --token wins over the environment.
	withToken("not-a-token").run(t, "vm", "list", "--token", node.AdminToken).ok(t, "--token over env")
	withToken(node.ReadOnlyToken).run(t, "vm", "create", "x", "--image", node.Image).
		refused(t, "read-only token", "read-only", "admin token")
	nodeCLI(node).run(t, "vm", "create", "x", "--image", "/etc/hostname").refused(t, "image outside the allowed dirs", "/etc/hostname", "")

	closed := nodetest.ClosedURL(t)
	nodeCLI(node).run(t, "vm", "list", "--node", closed).refused(t, "unreachable node", "unreachable", "--node")
	// A bare host:port is taken as http://host:port.
	nodeCLI(node).run(t, "vm", "list", "--node", strings.TrimPrefix(node.URL, "http://")).ok(t, "--node without scheme")
}

func TestCommandLineMistakesShowUsage(t *testing.T) {
	// None of these reach a node: the environment points at nothing.
	c := cli{env: map[string]string{envNode: "http://127.0.0.1:1"}}
	cases := []struct {
		name      string
		args      []string
		msg, hint string
	}{
		{"get without a name", []string{"vm", "get"}, "one VM name", "usage: fluxctl vm get NAME"},
		{"create without image", []string{"vm", "create", "x"}, "--image", "usage: fluxctl vm create"},
		{"bad label", []string{"vm", "create", "x", "--image", "/i", "--label", "novalue"}, "KEY=VALUE", "usage:"},
		{"tenant network without subnet", []string{"vm", "create", "x", "--image", "/i", "--network", "tenant", "--tenant", "acme"}, "--subnet CIDR", "usage:"},
		{"exec without command", []string{"vm", "exec", "x"}, "the command to run", "usage: fluxctl vm exec"},
		{"unknown flag", []string{"vm", "list", "--bogus"}, "unknown flag: --bogus", "fluxctl vm list --help"},
		{"unknown output", []string{"vm", "list", "-o", "xml"}, `"xml"`, "-o json"},
		{"misspelt command", []string{"vm", "lsit"}, `unknown command "lsit"`, "did you mean fluxctl vm list?"},
		{"screenshot to a terminal", []string{"vm", "screenshot", "x"}, "terminal", "-f x.png"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.stdoutTTY = tc.name == "screenshot to a terminal"
			c.run(t, tc.args...).refused(t, tc.name, tc.msg, tc.hint)
		})
	}
}

func TestCompletionOffersVMNamesFromTheNode(t *testing.T) {
	node := nodetest.Start(t)
	c := nodeCLI(node)
	for _, name := range []string{"web-1", "web-2", "db-1"} {
		c.run(t, "vm", "create", name, "--image", node.Image).ok(t, "create "+name)
	}
	r := c.run(t, "__complete", "vm", "get", "we").ok(t, "complete")
	if !strings.Contains(r.stdout, "web-1\trunning") || !strings.Contains(r.stdout, "web-2") || strings.Contains(r.stdout, "db-1") {
		t.Fatalf("completions for 'vm get we':\n%s", r.stdout)
	}
	// rm takes several names and does not offer one already given.
	r = c.run(t, "__complete", "vm", "rm", "web-1", "").ok(t, "complete rm")
	if strings.Contains(r.stdout, "web-1") || !strings.Contains(r.stdout, "db-1") {
		t.Fatalf("completions for 'vm rm web-1 ':\n%s", r.stdout)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out := c.run(t, "completion", shell).ok(t, shell).stdout; !strings.Contains(out, "fluxctl") {
			t.Fatalf("completion %s printed no script", shell)
		}
	}
}

// guestImage is the guest image `make guest-image` builds.
func guestImage(t *testing.T) string {
	dir := os.Getenv("FLUXVM_IMAGE_DIR")
	if dir == "" {
		dir = "/var/cache/fluxvm/images/debian-minimal"
	}
	if _, err := os.Stat(filepath.Join(dir, "fluxvm-image.json")); err != nil {
		t.Fatalf("no guest image in %s (run make guest-image): %v", dir, err)
	}
	return dir
}

func TestExecRunsInARealGuestAndExitsWithItsCode(t *testing.T) {
	node := nodetest.Start(t, nodetest.WithQEMU(guestImage(t)))
	c := nodeCLI(node)
	c.run(t, "vm", "create", "g1", "--image", node.Image, "--memory-mib", "256", "--network", "none", "--wait", "--wait-timeout", "3m").ok(t, "create qemu vm")

	r := c.run(t, "vm", "exec", "g1", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if r.code != 3 || r.stdout != "to-stdout\n" || r.stderr != "to-stderr\n" {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q; want 3, the guest's stdout and stderr as they were", r.code, r.stdout, r.stderr)
	}

	c.stdin = "line one\nline two\n"
	r = c.run(t, "vm", "exec", "g1", "--stdin", "-e", "GREETING=hi", "--timeout", "30s", "--", "sh", "-c", `echo "$GREETING"; wc -l`)
	r.ok(t, "exec --stdin")
	if fields := strings.Fields(r.stdout); len(fields) != 2 || fields[0] != "hi" || fields[1] != "2" {
		t.Fatalf("exec --stdin -e printed %q, want hi and 2 lines counted", r.stdout)
	}

	// -o json gives the whole result and still the exit code.
	r = c.run(t, "vm", "exec", "g1", "-o", "json", "--", "false")
	res := decode[sdk.ExecResult](t, "exec -o json", r.stdout)
	if r.code != 1 || res.ExitCode != 1 {
		t.Fatalf("exec -o json false: exit %d, result %+v", r.code, res)
	}

	term := c
	term.stdoutTTY = true
	r = term.run(t, "vm", "get", "g1", "-o", "wide").ok(t, "get qemu vm")
	if !strings.Contains(r.stdout, "pid=") {
		t.Fatalf("get of a qemu VM shows no pid attribute:\n%s", r.stdout)
	}
	c.run(t, "vm", "rm", "g1", "-y").ok(t, "rm qemu vm")
}

func TestShortDurations(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {0, "0s"}, {59 * time.Second, "59s"}, {61 * time.Second, "1m"},
		{time.Hour, "1h"}, {119*time.Minute + 30*time.Second, "1h59m"}, {8*time.Hour + 30*time.Minute, "8h"},
		{47 * time.Hour, "47h"}, {50 * time.Hour, "2d"},
	} {
		if got := short(c.d); got != c.want {
			t.Errorf("short(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
