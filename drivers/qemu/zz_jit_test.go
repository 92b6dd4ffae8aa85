//go:build linux

package qemu

import (
	"os"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

func TestZZJit(t *testing.T) {
	img := image.DefaultDir()
	d := newTestDriver(t, t.TempDir(), `{"machine": "microvm"}`)
	ctx := context.Background()
	spec := &pb.VMSpec{Id: "tmpl", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 256,
		Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}, DriverConfigJson: []byte(`{"memory_file": true}`)}
	d.CreateVM(ctx, spec)
	defer d.DestroyVM(context.Background(), spec.Id, true)
	d.StartVM(ctx, spec.Id)
	d.WaitReady(ctx, spec.Id)
	if os.Getenv("RS_SETTLE") == "exec" {
		s := time.Now()
		out := guestOutput(ctx, t, d, spec.Id, "i=0; while ! grep -q ':0016 ' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.05; i=$((i+1)); done; echo $i")
		t.Logf("settled in %v (%s polls)", time.Since(s), strings.TrimSpace(out))
	}
	if os.Getenv("RS_SETTLE") == "sleep" {
		time.Sleep(3 * time.Second)
	}
	d.SnapshotVM(ctx, spec.Id, "warm", true)
	d.StopVM(ctx, spec.Id, 10*time.Second)
	jit := func(id string) string {
		v, _ := d.lookup(id)
		m, _ := v.monitor(ctx)
		var out string
		m.run(ctx, "human-monitor-command", map[string]any{"command-line": "info jit"}, &out)
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "TB count") {
				return strings.Fields(l)[2]
			}
		}
		return out
	}
	var res []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("c%d", i)
		d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: id, ResumeMemory: true})
		s := time.Now()
		d.StartVM(ctx, id)
		st := time.Since(s)
		j1 := jit(id)
		d.WaitReady(ctx, id)
		res = append(res, fmt.Sprintf("start %v tb %s ready %v tb %s", st.Round(time.Millisecond), j1, time.Since(s).Round(time.Millisecond), jit(id)))
		d.DestroyVM(context.Background(), id, true)
	}
	for _, r := range res {
		t.Log(r)
	}
}
