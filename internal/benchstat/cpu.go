package benchstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcessCPU is the CPU time the process pid has run so far, summed over its live threads
// from the kernel's scheduler statistics (/proc/<pid>/task/*/schedstat, nanoseconds), which
// are exact where /proc/<pid>/stat counts 10 ms ticks: a benchmark round of a few
// milliseconds can be charged its CPU. Threads that have ended are not counted; Go reuses its
// threads, so across a round that loses nothing in practice. Linux only.
func ProcessCPU(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("process %d: no /proc/%d/task/*/schedstat (not Linux, or the process ended)", pid, pid)
	}
	var sum time.Duration
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread ended between the listing and the read
			}
			return 0, err
		}
		first, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a run time in nanoseconds", f, b)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// ProcessesCPU is ProcessCPU summed over pids.
func ProcessesCPU(pids ...int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}
