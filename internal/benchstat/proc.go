package benchstat

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TreeCPU is ProcessCPU summed over pids and every process descended from them (a node
// agent and its driver plugins, say), as the process table stands at the call.
func TreeCPU(pids ...int) (time.Duration, error) {
	children, err := childTable()
	if err != nil {
		return 0, err
	}
	var all []int
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		all = append(all, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range pids {
		walk(pid)
	}
	var sum time.Duration
	for _, pid := range all {
		d, err := ProcessCPU(pid)
		if err != nil {
			if slices.Contains(pids, pid) {
				return 0, err
			}
			continue // a descendant that ended meanwhile
		}
		sum += d
	}
	return sum, nil
}

// Children lists the live processes whose parent is pid.
func Children(pid int) ([]int, error) {
	children, err := childTable()
	return children[pid], err
}

// childTable maps each live process's parent pid to its pids, from /proc/<pid>/stat.
func childTable() (map[int][]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended since the listing
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
		// the fields after it start past the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children, nil
}

// ResidentMiB is the resident memory of process pid (VmRSS in /proc/<pid>/status), in MiB.
func ResidentMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: VmRSS %q: %w", pid, v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("process %d has no VmRSS (a kernel thread, or it has ended)", pid)
}
