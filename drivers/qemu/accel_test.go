//go:build linux

package qemu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestAccelProbeMatchesSource reassembles testdata/accelprobe.S and compares
// it with the bytes the driver embeds.
func TestAccelProbeMatchesSource(t *testing.T) {
	for _, tool := range []string{"as", "ld"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed; it reassembles the probe: apt-get install binutils (make deps does)", tool)
		}
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "p.o"), filepath.Join(dir, "p.bin")
	if out, err := exec.Command("as", "--32", "-o", obj, "testdata/accelprobe.S").CombinedOutput(); err != nil {
		t.Fatalf("as: %v\n%s", err, out)
	}
	if out, err := exec.Command("ld", "-m", "elf_i386", "-Ttext", "0", "--oformat", "binary", "-o", bin, obj).CombinedOutput(); err != nil {
		t.Fatalf("ld: %v\n%s", err, out)
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, probeCode) {
		t.Errorf("probeCode is out of date with testdata/accelprobe.S (%d bytes assembled, %d embedded)", len(got), len(probeCode))
	}
}

// TestProbeGuestFinishesUnderTCG runs the probe guest under TCG, where it
// must pass every stage: a probe that fails everywhere would never pick KVM.
func TestProbeGuestFinishesUnderTCG(t *testing.T) {
	qemuBin := requireQEMU(t)
	bios := filepath.Join(t.TempDir(), "probe.bin")
	if err := os.WriteFile(bios, probeBIOS(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, machine := range []string{machineMicrovm, machinePC} {
		t.Run(machine, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "stages")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := exec.CommandContext(ctx, qemuBin, "-M", machine, "-accel", "tcg", "-m", "64", "-nodefaults",
				"-no-user-config", "-display", "none", "-bios", bios,
				"-chardev", "file,id=stages,path="+trace, "-device", "isa-debugcon,chardev=stages,iobase=0xe9",
				"-device", "isa-debug-exit,iobase=0xf4,iosize=4").Run()
			stages, _ := os.ReadFile(trace)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != probeExitStatus || string(stages) != "RTPGLK" {
				t.Fatalf("probe under TCG: %v, stages %q; want exit %d after RTPGLK", err, stages, probeExitStatus)
			}
		})
	}
}

// TestProbeKVMGivesAVerdictWithAReason runs the real probe: on hosts with a
// working KVM it says kvm, elsewhere tcg, and always why, within its deadline.
func TestProbeKVMGivesAVerdictWithAReason(t *testing.T) {
	qemuBin := requireQEMU(t)
	start := time.Now()
	ok, reason := probeKVM(context.Background(), qemuBin, machineMicrovm)
	took := time.Since(start)
	t.Logf("kvm usable: %v (%s) in %v", ok, reason, took)
	if reason == "" {
		t.Error("the probe gave no reason")
	}
	if took > probeDeadline+2*time.Second {
		t.Errorf("the probe took %v, its deadline is %v", took, probeDeadline)
	}
}

func TestAccelVerdictCacheIsKeyed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accel.json")
	v := accelVerdict{Accel: "tcg", Reason: "test", Key: accelKey("7.2.22", machineMicrovm)}
	if err := saveAccelVerdict(path, v); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if got, ok := loadAccelVerdict(path, v.Key); !ok || got != v {
		t.Errorf("load = %+v, %v; want %+v", got, ok, v)
	}
	if _, ok := loadAccelVerdict(path, accelKey("8.0.0", machineMicrovm)); ok {
		t.Error("a verdict for another QEMU version was reused")
	}
	if _, ok := loadAccelVerdict(path, accelKey("7.2.22", machinePC)); ok {
		t.Error("a verdict for another machine type was reused")
	}
}

func requireQEMU(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils")
	}
	return p
}
