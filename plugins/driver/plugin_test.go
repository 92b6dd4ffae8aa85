package driver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// TestLaunchFailsClearlyWithoutHang starts binaries that are not FluxVM
// plugins: each must fail with an error that says so, well within the
// start timeout and never by hanging.
func TestLaunchFailsClearlyWithoutHang(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name    string
		cmd     *exec.Cmd
		wantMsg string
	}{
		{"exits at once", exec.Command(script("exit", "exit 1")), "handshake"},
		{"prints garbage", exec.Command(script("garbage", "echo 'hello, I am not a plugin'; sleep 30")), "handshake"},
		{"wrong protocol version", exec.Command(script("oldproto", "echo '1|99|unix|/tmp/x.sock|grpc|'; sleep 30")), "handshake"},
		{"newer protocol version", exec.Command(script("newproto", "echo '1|4|unix|/tmp/x.sock|grpc|'; sleep 30")), "upgrade this agent"},
		{"never answers", exec.Command(script("silent", "sleep 30")), "handshake"},
		{"missing binary", exec.Command(filepath.Join(dir, "does-not-exist")), "handshake"},
		// A real go-plugin process that speaks contract version 1 only.
		{"contract version 1 plugin", exec.Command(buildTestPlugin(t, "v1plugin")), "it speaks driver contract version 1, and this agent speaks versions 2 to 3"},
		// A plugin of this contract that does not say it is a driver.
		{"plugin of no type", exec.Command(buildTestPlugin(t, "typeless")), "not a driver"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			start := time.Now()
			p, err := Launch(context.Background(), LaunchConfig{Cmd: c.cmd, StartTimeout: 3 * time.Second})
			if err == nil {
				p.Kill()
				t.Fatal("Launch succeeded, want an error")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("error %q does not mention %q", err, c.wantMsg)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Launch took %v to fail", d)
			}
		})
	}
}

// buildTestPlugin compiles testdata/NAME. (drivertest.Build does the same
// for other packages, but drivertest imports this one.)
func buildTestPlugin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/%s: %v\n%s", name, err, out)
	}
	return bin
}

// TestVersion2PluginStillWorks launches a plugin that speaks contract
// version 2 only: the handshake settles on 2, and the plugin runs a VM
// through the RPCs both versions share, claiming no snapshots or clones.
func TestVersion2PluginStillWorks(t *testing.T) {
	p, err := Launch(context.Background(), LaunchConfig{Cmd: exec.Command(buildTestPlugin(t, "v2plugin"))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if v := p.Version(); v != 2 {
		t.Fatalf("negotiated contract version %d, want 2", v)
	}
	ctx := t.Context()
	img := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: []byte(`{}`), Agent: &basepb.AgentContext{StateDir: t.TempDir()}}); err != nil {
		t.Fatal(err)
	}
	caps, err := p.Capabilities(ctx)
	if err != nil || !caps.Pause || caps.DiskSnapshots || caps.MemorySnapshots || caps.Clones {
		t.Fatalf("capabilities = %v, %v; want pause and nothing of version 3", caps, err)
	}
	spec := &pb.VMSpec{Id: "old", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 128}
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if err := p.PauseVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if err := p.DestroyVM(ctx, spec.Id, true); err != nil {
		t.Fatal(err)
	}
}
