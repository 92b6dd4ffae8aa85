package benchstat

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestProcessCPUCountsTheWorkOfThisProcess(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Half a second of CPU on two goroutines (two threads when GOMAXPROCS allows).
	done := make(chan struct{})
	for range 2 {
		go func() {
			end := time.Now().Add(250 * time.Millisecond)
			x := 0
			for time.Now().Before(end) {
				x++
			}
			runtime.KeepAlive(x)
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// At least the 250 ms of one spinning goroutine (both, with two cores free); the
	// loops cannot have run on more CPU than 2 x 250 ms plus the test's own bits.
	if got := after - before; got < 200*time.Millisecond || got > 2*time.Second {
		t.Fatalf("ProcessCPU grew by %v across 2 x 250 ms of spinning; want between 200 ms and 2 s", got)
	}
	all, err := ProcessesCPU(os.Getpid(), os.Getpid())
	if err != nil || all < 2*after {
		t.Fatalf("ProcessesCPU(self, self) = %v, %v; want at least twice %v", all, err, after)
	}
}

func TestProcessCPUOfAProcessThatIsNotThere(t *testing.T) {
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Fatal("ProcessCPU of a pid that cannot exist: no error")
	}
}

func TestTreeCPUCountsAChildProcess(t *testing.T) {
	// A child (this test binary again) that spins for 300 ms of CPU, then waits to be read.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BENCHSTAT_SPIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	kids, err := Children(os.Getpid())
	if err != nil || !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("Children(self) = %v, %v; want the child %d among them", kids, err, cmd.Process.Pid)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		self, err := ProcessCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		tree, err := TreeCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if tree-self >= 250*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TreeCPU(self) = %v, ProcessCPU(self) = %v: the child's 300 ms of spinning does not show", tree, self)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := TreeCPU(1 << 30); err == nil {
		t.Fatal("TreeCPU of a pid that cannot exist: no error")
	}
}

// TestMain runs the child of TestTreeCPUCountsAChildProcess when BENCHSTAT_SPIN is set: it
// spins for 300 ms and then sleeps until killed. Otherwise it runs the tests.
func TestMain(m *testing.M) {
	if os.Getenv("BENCHSTAT_SPIN") != "" {
		end := time.Now().Add(300 * time.Millisecond)
		x := 0
		for time.Now().Before(end) {
			x++
		}
		runtime.KeepAlive(x)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestResidentMiBSeesMemoryThisProcessTouches(t *testing.T) {
	before, err := ResidentMiB(os.Getpid())
	if err != nil || before <= 0 {
		t.Fatalf("ResidentMiB(self) = %v, %v; want a positive size", before, err)
	}
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = 1 // touched, so resident
	}
	after, err := ResidentMiB(os.Getpid())
	if err != nil || after-before < 48 {
		t.Fatalf("ResidentMiB after touching 64 MiB = %v (before %v), %v; want at least 48 MiB more", after, before, err)
	}
	runtime.KeepAlive(held)
	if _, err := ResidentMiB(1 << 30); err == nil {
		t.Fatal("ResidentMiB of a pid that cannot exist: no error")
	}
}
