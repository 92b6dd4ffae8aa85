//go:build linux

package qemu

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

func validHandle(t testing.TB) *pb.Handle {
	t.Helper()
	h, err := encodeHandle("vm-1", handleState{
		PID: 4242, Workspace: "/var/lib/fluxvm/vms/vm-1", QMPSocket: "/var/lib/fluxvm/vms/vm-1/qmp.sock",
		UUID: "6f1c1c7e-1111-4222-8333-444455556666", StartedAt: 1, QEMUBinary: "qemu-system-x86_64",
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandleRoundTrips(t *testing.T) {
	h := validHandle(t)
	if h.Version != handleVersion || h.Driver != "qemu" || h.VmId != "vm-1" {
		t.Fatalf("handle header = %v", h)
	}
	st, err := decodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != 4242 || st.Workspace != "/var/lib/fluxvm/vms/vm-1" || st.UUID != "6f1c1c7e-1111-4222-8333-444455556666" {
		t.Errorf("decoded state = %+v", st)
	}
}

func TestDecodeHandleRefusesForeignNewerAndCorruptHandles(t *testing.T) {
	stateWith := func(f func(m map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(validHandle(t).State, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name    string
		edit    func(h *pb.Handle)
		want    error
		mention string
	}{
		{"newer version", func(h *pb.Handle) { h.Version = 2 }, driver.ErrState, "handle version 2 is newer than this qemu driver reads (1); upgrade the plugin"},
		{"other driver", func(h *pb.Handle) { h.Driver = "vz" }, driver.ErrState, `"vz"`},
		{"no version", func(h *pb.Handle) { h.Version = 0 }, driver.ErrInvalid, "no version"},
		{"garbage state", func(h *pb.Handle) { h.State = []byte("\x00garbage{") }, driver.ErrInvalid, "corrupt"},
		{"empty state", func(h *pb.Handle) { h.State = nil }, driver.ErrInvalid, "corrupt"},
		{"unknown state field", func(h *pb.Handle) { h.State = stateWith(func(m map[string]any) { m["extra"] = 1 }) }, driver.ErrInvalid, "extra"},
		{"relative workspace", func(h *pb.Handle) { h.State = stateWith(func(m map[string]any) { m["workspace"] = "vms/vm-1" }) }, driver.ErrInvalid, "workspace"},
		{"other vm's workspace", func(h *pb.Handle) {
			h.State = stateWith(func(m map[string]any) { m["workspace"] = "/var/lib/fluxvm/vms/vm-2" })
		}, driver.ErrInvalid, "workspace"},
		{"unclean workspace", func(h *pb.Handle) {
			h.State = stateWith(func(m map[string]any) { m["workspace"] = "/var/lib/fluxvm/../../etc/vm-1" })
		}, driver.ErrInvalid, "workspace"},
		{"no uuid", func(h *pb.Handle) { h.State = stateWith(func(m map[string]any) { delete(m, "uuid") }) }, driver.ErrInvalid, "uuid"},
		{"bad vm id", func(h *pb.Handle) { h.VmId = "../vm-1" }, driver.ErrInvalid, "vm id"},
		{"trailing data", func(h *pb.Handle) { h.State = append(h.State, []byte(" {}")...) }, driver.ErrInvalid, "trailing"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			h := validHandle(t)
			c.edit(h)
			_, err := decodeHandle(h)
			if !errors.Is(err, c.want) {
				t.Fatalf("decodeHandle = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
	if _, err := decodeHandle(nil); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("decodeHandle(nil) = %v, want ErrInvalid", err)
	}
}

// FuzzDecodeHandle checks that no handle bytes crash the decoder and that
// whatever it accepts is safe to act on.
func FuzzDecodeHandle(f *testing.F) {
	h := validHandle(f)
	f.Add(h.Version, h.Driver, h.VmId, h.State)
	f.Add(uint32(2), "qemu", "vm-1", h.State)
	f.Add(uint32(1), "qemu", "vm-1", []byte(`{"workspace":"/x/vm-1","uuid":"u","pid":-1}`))
	f.Add(uint32(1), "qemu", "vm-1", []byte("\x00garbage{"))
	f.Fuzz(func(t *testing.T, version uint32, drv, id string, state []byte) {
		st, err := decodeHandle(&pb.Handle{Version: version, Driver: drv, VmId: id, State: state})
		if err != nil {
			if !errors.Is(err, driver.ErrInvalid) && !errors.Is(err, driver.ErrState) {
				t.Fatalf("error of no contract kind: %v", err)
			}
			return
		}
		if drv != "qemu" || version < 1 || version > handleVersion {
			t.Fatalf("accepted driver %q version %d", drv, version)
		}
		if !idPattern.MatchString(id) || !strings.HasSuffix(st.Workspace, "/"+id) || st.UUID == "" || st.PID < 0 {
			t.Fatalf("accepted unsafe state %+v for id %q", st, id)
		}
	})
}
