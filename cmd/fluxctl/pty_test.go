package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// The tests in main_test.go and fleet_test.go run fluxctl in-process and
// only pretend its streams are terminals. These run the built binary, on a
// real pseudo-terminal and piped, so what decides "terminal or not" is the
// same golang.org/x/term check a user's shell meets.

// ptyTimeout bounds one fluxctl run and each wait for its output.
const ptyTimeout = 30 * time.Second

// buildFluxctl compiles this package into dir and returns the binary.
func buildFluxctl(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "fluxctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build fluxctl: %v\n%s", err, out)
	}
	return bin
}

// fluxctlEnv points fluxctl at central with token, as a user who exported
// them would; later entries win over the test's own environment.
func fluxctlEnv(f *fleettest.Fleet, token string) []string {
	return append(os.Environ(), envCentral+"="+f.URL, envFleetToken+"="+token, "TERM=xterm")
}

// onPTY is one fluxctl run with stdin, stdout and stderr on the slave side
// of a 120x40 pseudo-terminal; the test holds the master.
type onPTY struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	exited chan struct{} // closed when the process has been waited for
	copied chan struct{} // closed when the master gave EOF (EIO) or failed

	mu      sync.Mutex
	out     bytes.Buffer
	readErr error
}

func startOnPTY(t *testing.T, bin string, env []string, args ...string) *onPTY {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 120, Rows: 40})
	if err != nil {
		t.Fatalf("start fluxctl %s on a pty: %v", strings.Join(args, " "), err)
	}
	r := &onPTY{t: t, cmd: cmd, master: master, exited: make(chan struct{}), copied: make(chan struct{})}
	go func() {
		defer close(r.copied)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			// Linux answers EIO, not EOF, once no process holds the
			// slave side open: that is the end of the output.
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EIO) {
				r.readErr = err
			}
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = cmd.Process.Kill()
			<-r.exited
		}
		_ = master.Close()
	})
	return r
}

// output is what the terminal showed so far, without the "\r" the pty puts
// before every "\n".
func (r *onPTY) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.ReplaceAll(r.out.String(), "\r", "")
}

// waitFor waits until the terminal shows want.
func (r *onPTY) waitFor(want string) {
	r.t.Helper()
	deadline := time.Now().Add(ptyTimeout)
	for !strings.Contains(r.output(), want) {
		select {
		case <-r.exited:
			r.t.Fatalf("fluxctl %s exited before showing %q; the terminal showed:\n%s", r.args(), want, r.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("fluxctl %s did not show %q within %v; the terminal showed:\n%s", r.args(), want, ptyTimeout, r.output())
		}
	}
}

// typeLine types s and Enter, which a terminal sends as "\r".
func (r *onPTY) typeLine(s string) {
	r.t.Helper()
	if _, err := r.master.Write([]byte(s + "\r")); err != nil {
		r.t.Fatalf("type %q into fluxctl %s: %v", s, r.args(), err)
	}
}

// wait waits for fluxctl to exit and for the terminal to have shown all it
// wrote, and returns that and the exit code.
func (r *onPTY) wait() (string, int) {
	r.t.Helper()
	select {
	case <-r.exited:
	case <-time.After(ptyTimeout):
		r.t.Fatalf("fluxctl %s still running after %v; the terminal showed:\n%s", r.args(), ptyTimeout, r.output())
	}
	select {
	case <-r.copied:
	case <-time.After(ptyTimeout):
		r.t.Fatalf("fluxctl %s exited but its terminal never reached EOF; it showed:\n%s", r.args(), r.output())
	}
	r.mu.Lock()
	err := r.readErr
	r.mu.Unlock()
	if err != nil {
		r.t.Fatalf("read fluxctl %s's terminal: %v; it showed:\n%s", r.args(), err, r.output())
	}
	return r.output(), r.cmd.ProcessState.ExitCode()
}

func (r *onPTY) args() string { return strings.Join(r.cmd.Args[1:], " ") }

// runPiped runs fluxctl with stdout and stderr into buffers and stdin from
// /dev/null, as in a script.
func runPiped(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ptyTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run fluxctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func TestFluxctlBinaryOnARealTerminalAndPiped(t *testing.T) {
	bin := buildFluxctl(t, t.TempDir())
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")

	t.Run("a terminal gets confirmations, tables, hints and a prompt before rm", func(t *testing.T) {
		_, token := f.Tenant(t, "tty", nil)
		env := fluxctlEnv(f, token)
		fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}

		out, code := startOnPTY(t, bin, env, "fleet", "launch", "web-1", "--image", "debian-minimal").wait()
		if code != 0 || !strings.Contains(out, "✓ Launched web-1 on "+f.Node+" (debian-minimal, 1 vCPU, 256 MiB)") ||
			!strings.Contains(out, "\nnext: fluxctl fleet logs web-1\n") {
			t.Fatalf("fleet launch on a terminal: exit %d, want 0 with a ✓ line and next:; the terminal showed:\n%s", code, out)
		}

		out, code = startOnPTY(t, bin, env, "fleet", "vms").wait()
		var header, web1 []string
		for line := range strings.SplitSeq(out, "\n") {
			switch fields := strings.Fields(line); {
			case len(fields) > 0 && fields[0] == "NAME":
				header = fields
			case len(fields) > 0 && fields[0] == "web-1":
				web1 = fields
			}
		}
		if code != 0 || json.Valid([]byte(out)) ||
			!reflect.DeepEqual(header, []string{"NAME", "STATE", "AGENT", "NODE", "VCPUS", "MEMORY", "AGE"}) ||
			len(web1) < 4 || web1[3] != f.Node {
			t.Fatalf("fleet vms on a terminal: exit %d, want 0 and a table with a NAME header and a web-1 row on %s; the terminal showed:\n%s",
				code, f.Node, out)
		}

		for _, c := range []struct {
			what      string
			env       []string
			args      []string
			msg, hint string
		}{
			{"an unknown VM", env, []string{"fleet", "rm", "nope", "-y"},
				`error: no vm "nope"`, "\nhint: fluxctl fleet vms lists your VMs"},
			{"an unknown token", fluxctlEnv(f, "fvt_nope"), []string{"fleet", "vms"},
				"error: invalid token", "\nhint: central does not know this token: check --token or " + envFleetToken},
		} {
			out, code := startOnPTY(t, bin, c.env, c.args...).wait()
			if code != 1 || !strings.Contains(out, c.msg) || !strings.Contains(out, c.hint) {
				t.Fatalf("%s (fluxctl %s) on a terminal: exit %d, want 1 with %q and %q; the terminal showed:\n%s",
					c.what, strings.Join(c.args, " "), code, c.msg, c.hint, out)
			}
		}

		// rm without -y asks; n keeps the VM. The terminal echoes the
		// answer after the question.
		r := startOnPTY(t, bin, env, "fleet", "rm", "web-1")
		r.waitFor("[y/N] ")
		r.typeLine("n")
		out, code = r.wait()
		if code != 1 || !strings.Contains(out, "delete vm web-1 (") ||
			!strings.Contains(out, "[y/N] n\nerror: nothing done\nhint: answer y to go ahead, or pass -y\n") {
			t.Fatalf("fleet rm web-1 answered n: exit %d, want 1 after the question; the terminal showed:\n%s", code, out)
		}
		if _, err := fc.FindVM(t.Context(), "web-1"); err != nil {
			t.Fatalf("web-1 after answering n: %v; the terminal showed:\n%s", err, out)
		}

		r = startOnPTY(t, bin, env, "fleet", "rm", "web-1")
		r.waitFor("[y/N] ")
		r.typeLine("y")
		out, code = r.wait()
		if code != 0 || !strings.Contains(out, "[y/N] y\n✓ Deleted vm web-1 (") {
			t.Fatalf("fleet rm web-1 answered y: exit %d, want 0 and a ✓ line; the terminal showed:\n%s", code, out)
		}
		list, err := fc.ListVMs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range list.VMs {
			if v.Name == "web-1" {
				t.Fatalf("web-1 is still listed after answering y (%s, %s); the terminal showed:\n%s", v.ID, v.State, out)
			}
		}
	})

	t.Run("piped, fleet vms prints the API's JSON value, re-indented", func(t *testing.T) {
		_, token := f.Tenant(t, "piped", nil)
		env := fluxctlEnv(f, token)
		fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		// Ready VMs, so nothing in the list changes between the two reads;
		// one with the optional fields (labels, expires_at) set.
		for _, req := range []sdk.FleetCreateVMRequest{
			{Name: "api-1", Image: "debian-minimal", Labels: map[string]string{"job": "7", "team": "cli"}, TTLSeconds: 3600},
			{Name: "api-2", Image: "debian-minimal"},
		} {
			if _, err := fc.LaunchAndWait(t.Context(), req, 100*time.Millisecond); err != nil {
				t.Fatalf("launch %s: %v", req.Name, err)
			}
		}
		get := func() []byte {
			t.Helper()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.URL+"/fleet/vms", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /fleet/vms: %d %v\n%s", resp.StatusCode, err, body)
			}
			return body
		}

		before := get()
		stdout, stderr, code := runPiped(t, bin, env, "fleet", "vms")
		if after := get(); !bytes.Equal(before, after) {
			t.Fatalf("GET /fleet/vms changed while fluxctl ran, so there is nothing to compare with:\n%s\n%s", before, after)
		}
		if code != 0 || stderr != "" {
			t.Fatalf("fleet vms piped: exit %d, want 0 and nothing on stderr\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}

		// The contract is the API's JSON value: every field and value, none
		// added or dropped. fluxctl decodes the reply into the SDK's types
		// and prints it indented by two spaces; central writes it compact.
		var api, printed any
		for _, d := range []struct {
			what string
			data []byte
			into *any
		}{{"GET /fleet/vms", before, &api}, {"fluxctl fleet vms", []byte(stdout), &printed}} {
			dec := json.NewDecoder(bytes.NewReader(d.data))
			dec.UseNumber()
			if err := dec.Decode(d.into); err != nil {
				t.Fatalf("%s is not JSON (%v):\n%s", d.what, err, d.data)
			}
		}
		if vms, _ := api.(map[string]any)["vms"].([]any); len(vms) != 2 {
			t.Fatalf("GET /fleet/vms lists %d VMs, want api-1 and api-2:\n%s", len(vms), before)
		}
		if !reflect.DeepEqual(api, printed) {
			t.Fatalf("fleet vms piped is not the API's JSON value\nGET /fleet/vms:\n%s\nfluxctl printed:\n%s", before, stdout)
		}
		// Byte for byte it is the reply re-indented: same key order, same
		// number and time formats. (Central escapes <, > and & in strings
		// and fluxctl does not; nothing here contains them.)
		var indented bytes.Buffer
		if err := json.Indent(&indented, before, "", "  "); err != nil {
			t.Fatal(err)
		}
		if indented.String() != stdout {
			t.Fatalf("fleet vms piped is not GET /fleet/vms re-indented\nGET /fleet/vms, indented:\n%s\nfluxctl printed:\n%s", indented.String(), stdout)
		}
	})
}
