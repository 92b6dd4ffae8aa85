package reaper

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReapsAdoptedSessionLeaders orphans a session-leading grandchild (the
// way a dead plugin orphans its VMs) and checks that, once it exits, it is
// reaped instead of lingering as a zombie.
func TestReapsAdoptedSessionLeaders(t *testing.T) {
	if err := Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	// The shell starts `setsid sleep` in the background, prints its pid and
	// exits at once, orphaning it to us.
	out, err := exec.Command("sh", "-c", "setsid sleep 0.3 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, ok := stat(pid); !ok {
			return // reaped: no /proc entry left
		}
		if time.Now().After(deadline) {
			state, _, _ := stat(pid)
			t.Fatalf("orphan %d still has a /proc entry (state %s) 10s after it ended", pid, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeavesOwnChildrenAlone checks that a child started through os/exec
// (not a session leader) is left for its own Wait.
func TestLeavesOwnChildrenAlone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // it has exited and is a zombie now
	if reaped := ReapAdopted(); slices.Contains(reaped, cmd.Process.Pid) {
		t.Fatalf("ReapAdopted reaped our own child %d", cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("Wait on our own child: %v", err)
	}
}
