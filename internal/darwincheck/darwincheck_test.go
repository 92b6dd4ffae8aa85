package darwincheck

import (
	"bufio"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wantLines returns the lines of file marked with a "// want:" comment.
func wantLines(t *testing.T, file string) map[int]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if _, after, ok := strings.Cut(sc.Text(), "// want: "); ok {
			want[n] = after
		}
	}
	return want
}

func TestCheckReportsEachVZMisuseWithFileAndLine(t *testing.T) {
	report, err := Check(t.Context(), ".", "./testdata/misuse")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := filepath.Abs("testdata/misuse/misuse.go")
	want := wantLines(t, file)
	if len(want) != 3 {
		t.Fatalf("the fixture marks %d mistakes, want 3 (wrong type, missing method, wrong number of results)", len(want))
	}
	// What go/types says for each kind of mistake, so a report that names
	// the right line for the wrong reason fails too.
	says := map[string]string{
		"int where uint is needed":       "as uint value",
		"VirtualMachine has no Reboot":   "has no field or method Reboot",
		"RequestStop returns two values": "returns 2 values",
	}
	got := map[int]string{}
	for _, p := range report.Problems {
		if p.File != file {
			t.Errorf("problem reported in %s, not the fixture: %v", p.File, p)
			continue
		}
		got[p.Line] = p.Message
	}
	for line, what := range want {
		msg, ok := got[line]
		if !ok {
			t.Errorf("misuse.go:%d (%s) was not reported; reports: %v", line, what, report.Problems)
			continue
		}
		if !strings.Contains(msg, says[what]) {
			t.Errorf("misuse.go:%d (%s) reported as %q, want it to say %q", line, what, msg, says[what])
		}
	}
	if len(got) != len(want) {
		t.Errorf("reported lines %v, want exactly the marked ones %v", got, want)
	}
}

func TestCheckFindsNothingInCorrectVZUse(t *testing.T) {
	report, err := Check(t.Context(), ".", "./testdata/fine")
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) != 0 {
		t.Errorf("problems in correct code: %v", report.Problems)
	}
	if len(report.Files) != 1 {
		t.Errorf("checked files %v, want fine.go: the darwin && arm64 && cgo build tag must select it", report.Files)
	}
}

// The vz driver and its host process (fluxvm-agent vz-host) against vz's
// real API, as a Mac builds them: what `make check-darwin` runs.
func TestVZDriverAndHostProcessTypeCheckForDarwin(t *testing.T) {
	report, err := Check(t.Context(), "../..", "./drivers/vz/...", "./cmd/fluxvm-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range report.Problems {
		t.Errorf("%v", p)
	}
	var names []string
	for _, f := range report.Files {
		names = append(names, filepath.Base(f))
	}
	for _, want := range []string{"machine_darwin.go", "install_darwin.go", "clone_darwin.go", "hostmain.go"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s was not checked (checked: %v)", want, names)
		}
	}
	if slices.Contains(names, "platform_other.go") {
		t.Error("platform_other.go was checked: the stub's build tag lets it into darwin/arm64 cgo builds")
	}
}

// The agent, fluxctl and the guest agent build for macOS on Apple silicon
// without cgo, as CI builds them.
func TestCommandsCrossBuildForDarwinArm64(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go is not on PATH (scripts/go.sh installs it): %v", err)
	}
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out+"/", "./cmd/...")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOOS="+GOOS, "GOARCH="+GOARCH, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build ./cmd/...: %v\n%s", err, b)
	}
	for _, name := range []string{"fluxvm-agent", "fluxctl", "fluxvm-guest"} {
		f, err := macho.Open(filepath.Join(out, name))
		if err != nil {
			t.Errorf("%s: not a Mach-O binary: %v", name, err)
			continue
		}
		if f.Cpu != macho.CpuArm64 {
			t.Errorf("%s is for %v, want arm64", name, f.Cpu)
		}
		f.Close()
	}
}
