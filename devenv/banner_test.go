package devenv

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

func TestFitToTheNode(t *testing.T) {
	for _, c := range []struct {
		total sdk.Resources
		want  sdk.Quotas
	}{
		{sdk.Resources{VCPUs: 2, MemoryMiB: 20000}, sdk.Quotas{MaxVMs: 2, MaxVCPUs: 2, MaxMemoryMiB: 8192}},
		{sdk.Resources{VCPUs: 64, MemoryMiB: 1 << 20}, demoQuota},
		{sdk.Resources{VCPUs: 16, MemoryMiB: 1536}, sdk.Quotas{MaxVMs: 3, MaxVCPUs: 8, MaxMemoryMiB: 1536}},
		{sdk.Resources{VCPUs: 0, MemoryMiB: 100}, sdk.Quotas{MaxVMs: 1, MaxVCPUs: 1, MaxMemoryMiB: 512}},
	} {
		if got := fitTo(demoQuota, c.total); got != c.want {
			t.Errorf("fitTo(%+v) = %+v, want %+v", c.total, got, c.want)
		}
	}
}

// TestBannerLinesPasteIntoASh: the export line the banner prints is valid
// sh that sets what fluxctl reads, even for a directory with a space or a
// quote in its name.
func TestBannerLinesPasteIntoASh(t *testing.T) {
	b := banner{central: "http://127.0.0.1:7799", tenant: "fvt_abc", fluxctlDir: "/tmp/it's a dir/bin", vm: "web-1", image: "debian-minimal"}
	out, err := exec.Command("sh", "-c", b.export(b.tenant)+`; printf '%s\n' "$PATH" "$CENTRAL_URL" "$FLUXVM_AGENT_TOKEN"`).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", b.export(b.tenant), err, out)
	}
	lines := strings.Split(string(out), "\n")
	if !strings.HasPrefix(lines[0], "/tmp/it's a dir/bin:") || lines[1] != b.central || lines[2] != "fvt_abc" {
		t.Fatalf("after the export line: %q", lines)
	}
	try := strings.Join(b.try(), "\n")
	for _, want := range []string{"fluxctl fleet launch web-1 --image debian-minimal --wait", "fluxctl fleet run web-1 -- uname -a", "fluxctl fleet rm web-1 -y"} {
		if !strings.Contains(try, want) {
			t.Errorf("the commands to try lack %q:\n%s", want, try)
		}
	}
	b.sim = true
	if strings.Contains(strings.Join(b.try(), "\n"), "run web-1") {
		t.Errorf("with sim, which runs no guest, the banner still offers fleet run")
	}
}
