package api_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
)

// Snapshot-mode warm pools with a real central, an embedded etcd and a real
// QEMU node.

func guestImageDir(t testing.TB) string {
	dir := os.Getenv("FLUXVM_IMAGE_DIR")
	if dir == "" {
		dir = "/var/cache/fluxvm/images/debian-minimal"
	}
	if _, err := os.Stat(filepath.Join(dir, "fluxvm-image.json")); err != nil {
		t.Fatalf("no guest image in %s (run make guest-image): %v", dir, err)
	}
	return dir
}

// rssMiB is a process's resident memory, in whole MiB.
func rssMiB(t testing.TB, pid string) int64 {
	t.Helper()
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("pid %q: %v", pid, err)
	}
	mib, err := benchstat.ResidentMiB(n)
	if err != nil {
		t.Fatal(err)
	}
	return int64(mib)
}

// qemusUnder lists the pids of the live processes working in a directory
// under dir. (A QEMU started ahead that a copy took keeps its command line,
// which names its first workspace, but its working directory moved with the
// workspace, to the copy's.)
func qemusUnder(t testing.TB, dir string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || !strings.HasPrefix(cwd, dir+"/") {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(stat), ") Z ") {
			continue // a zombie
		}
		pids = append(pids, e.Name())
	}
	return pids
}

// allocatedMiB is what a file takes on disk.
func allocatedMiB(t testing.TB, path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512 >> 20
}

// snapshotPool makes a tenant's snapshot pool of size on a QEMU node and
// waits for its saved template.
func snapshotPool(t testing.TB, size int) (c *fxCentral, n *fxNode, tok string, stop func(), status func() pxStatus) {
	dir := guestImageDir(t)
	st := fxStore(t, nil)
	c = newFxCentral(t, st)
	n = startQemuFxNode(t, "qemu-1", c.url, dir)
	fxWaitUp(t, c.url, n.name)
	fxMust(t, "PUT", c.url+"/fleet/images/guest", fxToken, map[string]any{"guest_os": "linux", "image": dir, "vcpus": 1, "memory_mib": 256},
		http.StatusCreated, nil)
	_, tok = fxTenant(t, c.url, "snap", nil)
	var created sdk.Pool
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "snap", "image": "guest", "size": size, "mode": "snapshot"},
		http.StatusCreated, &created)
	if created.Mode != "snapshot" {
		t.Fatalf("created pool has mode %q, want snapshot", created.Mode)
	}
	stop = pxLoop(c)
	status = func() pxStatus {
		var s pxStatus
		fxMust(t, "GET", c.url+"/fleet/pools/snap/status", tok, nil, http.StatusOK, &s)
		return s
	}
	fxWait(t, "the pool's template saved", 4*time.Minute, func() bool {
		s := status()
		if s.Blocked != "" {
			t.Fatalf("pool blocked: %s", s.Blocked)
		}
		return s.Warm == 1
	})
	return c, n, tok, stop, status
}

// TestSnapshotPoolHoldsOneSavedGuestAndClaimsResumeIt: a snapshot pool of 5
// keeps one member, its template, saved and stopped (no QEMU process, its
// RAM in a file on disk) rather than five running VMs, and once claimed two
// QEMUs waiting for the next claims, holding no guest; launches take copies
// that run on from the saved guest (up since before the launch: resumed, not booted),
// answer at once, are the claimer's, and outlive the pool's deletion.
func TestSnapshotPoolHoldsOneSavedGuestAndClaimsResumeIt(t *testing.T) {
	c, n, tok, stop, status := snapshotPool(t, 5)
	defer stop()

	var list0 sdk.VMList
	fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list0)
	vms := list0.VMs
	if len(vms) != 1 || vms[0].State != sdk.StateStopped || vms[0].Attributes["pid"] != "" {
		t.Fatalf("the node holds %d vms (%+v), want the pool's one template, stopped and without a process", len(vms), vms)
	}
	templ := vms[0]
	ramFile := filepath.Join(templ.Attributes["workspace"], "snap-pool-template.ram")

	var st struct {
		Mode    string `json:"mode"`
		Members []sdk.PoolMember
	}
	fxMust(t, "GET", c.url+"/fleet/pools/snap/status", tok, nil, http.StatusOK, &st)
	if st.Mode != "snapshot" || len(st.Members) != 1 {
		t.Fatalf("status: mode %q, %d members; want snapshot and the one template", st.Mode, len(st.Members))
	}

	var rss int64
	var copies []pxCreated
	for i := range 2 {
		start := time.Now()
		var out pxCreated
		fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": fmt.Sprintf("job-%d", i), "image": "guest"}, http.StatusCreated, &out)
		took := time.Since(start)
		if out.FromPool != "snap" || !out.VM.AgentReady || out.VM.State != sdk.StateRunning {
			t.Fatalf("launch %d: %+v; want a running, ready copy from pool snap", i, out)
		}
		// A resumed guest has been up since the template booted: longer
		// than the launch has existed. A booted one could not be.
		var res sdk.ExecResult
		fxMust(t, "POST", n.url+"/v1/vms/"+out.VM.ID+"/exec", n.admin, map[string]any{"command": []string{"cat", "/proc/uptime"}},
			http.StatusOK, &res)
		age := time.Since(start)
		up, err := strconv.ParseFloat(strings.Fields(res.Stdout)[0], 64)
		if err != nil {
			t.Fatalf("uptime %q: %v", res.Stdout, err)
		}
		t.Logf("claim %d answered ready in %v; its guest has been up %.2f s, the launch exists since %.2f s", i, took, up, age.Seconds())
		if up < age.Seconds()+0.5 {
			t.Errorf("copy %d has been up %.2f s, no longer than its launch (%.2f s): it booted instead of resuming", i, up, age.Seconds())
		}
		rss += rssMiB(t, out.VM.Attributes["pid"])
		copies = append(copies, out)
	}
	ram := allocatedMiB(t, ramFile)
	// After a claim the driver starts the next two copies' QEMUs ahead, each
	// waiting for the saved state: QEMU's own memory, no guest
	// (drivers/qemu/spare.go).
	spares := filepath.Join(filepath.Dir(filepath.Dir(templ.Attributes["workspace"])), "spares")
	var waiting []string
	fxWait(t, "two QEMUs started ahead for the next claims", time.Minute, func() bool {
		waiting = qemusUnder(t, spares)
		return len(waiting) == 2
	})
	var spare int64
	for _, pid := range waiting {
		held := rssMiB(t, pid)
		if held > rss/2 {
			t.Errorf("a QEMU waiting for the next claim holds %d MiB, as much as a resumed copy (%d MiB for two): it holds a guest", held, rss)
		}
		spare += held
	}
	t.Logf("snapshot pool of 5: 1 saved guest (%s, stopped: 0 MiB resident), its RAM file %d MiB on disk, and two QEMUs waiting for the next claims' state (%d MiB resident between them); two resumed copies hold %d MiB resident",
		templ.Name, ram, spare, rss)
	if s := status(); s.Warm != 1 || s.Target != 1 {
		t.Errorf("after two claims the pool has %d warm members and target %d, want its template still, and 1", s.Warm, s.Target)
	}

	// A copy is the claimer's: its fleet view lists it.
	var list struct{ VMs []struct{ ID string } }
	fxMust(t, "GET", c.url+"/fleet/vms", tok, nil, http.StatusOK, &list)
	seen := 0
	for _, v := range list.VMs {
		for _, cp := range copies {
			if v.ID == cp.VM.ID {
				seen++
			}
		}
	}
	if seen != 2 {
		t.Errorf("the tenant sees %d of its 2 copies in GET /fleet/vms", seen)
	}

	stop()
	fxMust(t, "DELETE", c.url+"/fleet/pools/snap", tok, nil, http.StatusNoContent, nil)
	fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list0)
	if len(list0.VMs) != 2 {
		t.Errorf("after the pool's deletion the node holds %d vms, want the 2 copies", len(list0.VMs))
	}
	fxWait(t, "the QEMUs started ahead ended with their pool", 30*time.Second, func() bool { return len(qemusUnder(t, spares)) == 0 })
	for _, cp := range copies {
		fxMust(t, "DELETE", c.url+"/fleet/vms/"+cp.Node+"/"+cp.VM.ID, tok, nil, http.StatusNoContent, nil)
	}
}

func TestSnapshotPoolModeIsChecked(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	_, img := fxImages(t)
	fxMust(t, "PUT", c.url+"/fleet/images/guest", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256},
		http.StatusCreated, nil)
	_, tok := fxTenant(t, c.url, "modes", nil)
	code, body := fxCall(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "p", "image": "guest", "size": 1, "mode": "frozen"})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "mode") {
		t.Fatalf("mode frozen: %d %s, want 400 about the mode", code, body)
	}
	var p sdk.Pool
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "r", "image": "guest", "size": 0}, http.StatusCreated, &p)
	if p.Mode != "running" {
		t.Fatalf("a pool made without a mode has mode %q, want running", p.Mode)
	}
}

// BenchmarkSnapshotPoolClaimVsCold measures, through central and with the
// same image and size, interleaved: a launch served by a snapshot pool (a
// copy of its saved guest resumed) and a cold launch (a boot), each to the
// guest agent's answer, alternating which goes first. It reports both
// medians and claim/cold round by round, each with its p10–p90 (goal ≤ 0.15).
func BenchmarkSnapshotPoolClaimVsCold(b *testing.B) {
	c, n, tok, stop, _ := snapshotPool(b, 5)
	defer stop()
	launch := func(name string, body map[string]any) (time.Duration, pxCreated) {
		start := time.Now()
		var out pxCreated
		fxMust(b, "POST", c.url+"/fleet/vms", tok, body, http.StatusCreated, &out)
		for !out.VM.AgentReady {
			time.Sleep(10 * time.Millisecond)
			fxMust(b, "GET", n.url+"/v1/vms/"+out.VM.ID, n.admin, nil, http.StatusOK, &out.VM)
			if time.Since(start) > 3*time.Minute {
				b.Fatalf("%s not ready within 3 minutes", name)
			}
		}
		return time.Since(start), out
	}
	del := func(out pxCreated) {
		b.StopTimer()
		fxMust(b, "DELETE", c.url+"/fleet/vms/"+out.Node+"/"+out.VM.ID, tok, nil, http.StatusNoContent, nil)
		fxWait(b, "a free vcpu", 30*time.Second, func() bool { return fxNodeState(b, c.url, n.name).Capacity.Free.VCPUs >= 1 })
		b.StartTimer()
	}
	var claims, cold []time.Duration
	b.ResetTimer()
	for i := range b.N {
		claim := func() {
			d, out := launch("claim", map[string]any{"name": fmt.Sprintf("claim-%d", i), "image": "guest"})
			if out.FromPool != "snap" {
				b.Fatalf("launch %d did not come from the pool: %+v", i, out)
			}
			claims = append(claims, d)
			del(out)
		}
		boot := func() {
			// A label keeps a launch out of pools.
			d, out := launch("cold", map[string]any{"name": fmt.Sprintf("cold-%d", i), "image": "guest", "labels": map[string]string{"bench": "cold"}})
			if out.FromPool != "" {
				b.Fatalf("cold launch %d came from the pool", i)
			}
			cold = append(cold, d)
			del(out)
		}
		benchstat.Interleave(i, claim, boot)
	}
	b.StopTimer()
	mw, mc := benchstat.Seconds(claims), benchstat.Seconds(cold)
	ratio := benchstat.RatiosOfSeconds(claims, cold)
	benchstat.Report(b, mw, "claim-s")
	benchstat.Report(b, mc, "cold-s")
	benchstat.Report(b, ratio, "claim/cold")
	b.Logf("to agent ready, s: snapshot-pool claim %v; cold launch %v; claim/cold round by round %v (goal ≤ 0.15)", mw, mc, ratio)
	stop()
	fxCall(b, "DELETE", c.url+"/fleet/pools/snap", tok, nil)
}
