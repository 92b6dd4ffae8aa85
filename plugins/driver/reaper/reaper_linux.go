//go:build linux

package reaper

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var once sync.Once

// Start makes this process a child subreaper and reaps adopted children that
// have exited. It only reaps session leaders (VM processes are started with
// Setsid), never this process's own children started through os/exec without
// Setsid, whose Wait would otherwise fail. Calling it twice is harmless.
func Start() error {
	var err error
	once.Do(func() {
		if err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return
		}
		sig := make(chan os.Signal, 8)
		signal.Notify(sig, syscall.SIGCHLD)
		go func() {
			tick := time.NewTicker(2 * time.Second)
			for {
				select {
				case <-sig:
				case <-tick.C:
				}
				ReapAdopted()
			}
		}()
	})
	return err
}

// ReapAdopted reaps every exited child of this process that leads its own
// session, and returns their pids.
func ReapAdopted() []int {
	var reaped []int
	self := os.Getpid()
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(self) + "/task/*/children")
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				continue
			}
			state, session, ok := stat(pid)
			if !ok || state != "Z" || session != pid {
				continue
			}
			var ws unix.WaitStatus
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
				reaped = append(reaped, pid)
			}
		}
	}
	return reaped
}

// stat reads a process's state and session id from /proc/PID/stat.
func stat(pid int) (state string, session int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// The command name is in parentheses and may hold spaces: fields start
	// after the last ')'. Then: state ppid pgrp session ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return "", 0, false
	}
	session, err = strconv.Atoi(f[3])
	if err != nil {
		return "", 0, false
	}
	return f[0], session, true
}
