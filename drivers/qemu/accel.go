//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// accelVerdict is which accelerator VMs use, and why.
type accelVerdict struct {
	Accel  string `json:"accel"`  // "kvm" or "tcg"
	Reason string `json:"reason"` // for people
	Key    string `json:"key"`    // what the verdict depends on (see accelKey)
}

// probeDeadline bounds the KVM probe guest. A working KVM runs it in
// milliseconds, TCG in under 0.1 s; the nested KVM found on our CI machines
// writes memory at ~2 MB/s and needs 7 s.
const probeDeadline = 3 * time.Second

// probeCode is the probe guest, assembled from testdata/accelprobe.S (see
// TestAccelProbeMatchesSource). Placed at the start of a 64 KiB BIOS image it
// goes from real mode through protected mode and paging into long mode,
// writing a stage letter to the debug console (port 0xe9) at each step
// (R T P G L K), then fills 16 MiB with rep stosb, checks it, and exits QEMU
// through isa-debug-exit with status 65. The memory fill is what tells a
// usable KVM from the broken nested one: the latter gets through every mode
// switch and then crawls, so a kernel never gets past clearing its BSS.
var probeCode = []byte{
	0xfa, 0xba, 0xe9, 0x00, 0xb0, 0x52, 0xee, 0x31, 0xc0, 0x8e, 0xd8, 0x8e,
	0xc0, 0xbf, 0x00, 0x10, 0xb9, 0x00, 0x0c, 0x66, 0x31, 0xc0, 0xfc, 0x66,
	0xf3, 0xab, 0x66, 0xc7, 0x06, 0x00, 0x10, 0x03, 0x20, 0x00, 0x00, 0x66,
	0xc7, 0x06, 0x00, 0x20, 0x03, 0x30, 0x00, 0x00, 0xbf, 0x00, 0x30, 0x66,
	0xb8, 0x83, 0x00, 0x00, 0x00, 0x66, 0x89, 0x05, 0x66, 0x05, 0x00, 0x00,
	0x20, 0x00, 0x83, 0xc7, 0x08, 0x81, 0xff, 0x00, 0x40, 0x72, 0xee, 0xb0,
	0x54, 0xee, 0x2e, 0x66, 0x0f, 0x01, 0x16, 0xf8, 0x00, 0x0f, 0x20, 0xc0,
	0x66, 0x83, 0xc8, 0x01, 0x0f, 0x22, 0xc0, 0x66, 0xea, 0x63, 0x00, 0x0f,
	0x00, 0x08, 0x00, 0x66, 0xb8, 0x10, 0x00, 0x8e, 0xd8, 0x8e, 0xc0, 0x8e,
	0xd0, 0xb0, 0x50, 0xee, 0x0f, 0x20, 0xe0, 0x83, 0xc8, 0x20, 0x0f, 0x22,
	0xe0, 0xb8, 0x00, 0x10, 0x00, 0x00, 0x0f, 0x22, 0xd8, 0xb9, 0x80, 0x00,
	0x00, 0xc0, 0x0f, 0x32, 0x0d, 0x00, 0x01, 0x00, 0x00, 0x0f, 0x30, 0x66,
	0xba, 0xe9, 0x00, 0x0f, 0x20, 0xc0, 0x0d, 0x00, 0x00, 0x00, 0x80, 0x0f,
	0x22, 0xc0, 0xb0, 0x47, 0xee, 0xea, 0xa8, 0x00, 0x0f, 0x00, 0x18, 0x00,
	0xb0, 0x4c, 0xee, 0x48, 0xc7, 0xc7, 0x00, 0x00, 0x00, 0x01, 0x48, 0xc7,
	0xc1, 0x00, 0x00, 0x00, 0x01, 0xb0, 0x5a, 0xf3, 0xaa, 0x48, 0xc7, 0xc7,
	0xf0, 0xff, 0xff, 0x01, 0x80, 0x3f, 0x5a, 0x75, 0x07, 0xb0, 0x4b, 0xee,
	0xb0, 0x20, 0xe6, 0xf4, 0xf4, 0xeb, 0xfd, 0x8d, 0x74, 0x26, 0x00, 0x90,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00,
	0x00, 0x9a, 0xcf, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x92, 0xcf, 0x00,
	0xff, 0xff, 0x00, 0x00, 0x00, 0x9a, 0xaf, 0x00, 0x1f, 0x00, 0xd8, 0x00,
	0x0f, 0x00,
}

// probeExitStatus is QEMU's exit status when the probe guest finished:
// isa-debug-exit exits with (value << 1) | 1 and the guest writes 0x20.
const probeExitStatus = 0x41

// probeBIOS returns the 64 KiB firmware image holding probeCode at its start
// (mapped at 0xF0000) and a far jump to it at the reset vector.
func probeBIOS() []byte {
	const size = 64 << 10
	b := bytes.Repeat([]byte{0xf4}, size) // hlt everywhere else
	copy(b, probeCode)
	copy(b[size-16:], []byte{0xea, 0x00, 0x00, 0x00, 0xf0}) // ljmp 0xf000:0x0000
	return b
}

// probeStages names how far the probe got, by its last debug-console letter.
var probeStages = map[byte]string{
	'R': "ran real-mode code but stalled before protected mode",
	'T': "built page tables but stalled entering protected mode",
	'P': "entered protected mode but stalled enabling paging",
	'G': "enabled paging but stalled entering long mode",
	'L': "entered long mode but could not fill 16 MiB of memory in time (guest memory access is too slow)",
	'K': "finished but QEMU did not exit",
}

// accelKey says what an accelerator verdict depends on: the QEMU build, the
// host kernel and the machine type.
func accelKey(qemuVersion, machine string) string {
	var u unix.Utsname
	release := "unknown"
	if unix.Uname(&u) == nil {
		release = unix.ByteSliceToString(u.Release[:])
	}
	return fmt.Sprintf("qemu %s; kernel %s; machine %s", qemuVersion, release, machine)
}

// loadAccelVerdict reads a cached verdict; ok is false when there is none for key.
func loadAccelVerdict(path, key string) (accelVerdict, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return accelVerdict{}, false
	}
	var v accelVerdict
	if json.Unmarshal(data, &v) != nil || v.Key != key || (v.Accel != "kvm" && v.Accel != "tcg") {
		return accelVerdict{}, false
	}
	return v, true
}

// saveAccelVerdict caches a verdict, atomically, mode 0600.
func saveAccelVerdict(path string, v accelVerdict) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// probeKVM boots the probe guest under KVM and reports whether KVM is usable
// and why (or why not).
func probeKVM(ctx context.Context, qemuBinary, machine string) (bool, string) {
	if err := unix.Access("/dev/kvm", unix.R_OK|unix.W_OK); err != nil {
		return false, fmt.Sprintf("/dev/kvm is not usable (%v); using TCG", err)
	}
	dir, err := os.MkdirTemp("", "fluxvm-kvm-probe-")
	if err != nil {
		return false, fmt.Sprintf("cannot make a probe directory: %v; using TCG", err)
	}
	defer os.RemoveAll(dir)
	bios := filepath.Join(dir, "probe.bin")
	if err := os.WriteFile(bios, probeBIOS(), 0o600); err != nil {
		return false, fmt.Sprintf("cannot write the probe firmware: %v; using TCG", err)
	}
	trace := filepath.Join(dir, "stages")
	ctx, cancel := context.WithTimeout(ctx, probeDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemuBinary,
		"-M", machine, "-accel", "kvm", "-m", "64", "-nodefaults", "-no-user-config", "-display", "none",
		"-bios", bios,
		"-chardev", "file,id=stages,path="+trace,
		"-device", "isa-debugcon,chardev=stages,iobase=0xe9",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=4")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// The probe must not outlive a plugin killed while it runs; as a session
	// leader it is then reaped by the agent's reaper like any orphaned VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	stages, _ := os.ReadFile(trace)
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == probeExitStatus && bytes.HasSuffix(stages, []byte("K")) {
		return true, fmt.Sprintf("a probe guest ran through real, protected and long mode and filled 16 MiB under KVM in %s", took)
	}
	if ctx.Err() != nil {
		how := "did not start"
		if len(stages) > 0 {
			how = probeStages[stages[len(stages)-1]]
		}
		return false, fmt.Sprintf("a probe guest under KVM %s within %s; using TCG", how, probeDeadline)
	}
	msg := strings.TrimSpace(lastLine(stderr.String()))
	if msg == "" && err != nil {
		msg = err.Error()
	}
	return false, fmt.Sprintf("QEMU could not run a probe guest under KVM (%s); using TCG", msg)
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
