package benchstat

import (
	"os"
	"runtime"
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
