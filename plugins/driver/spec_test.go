package driver

import (
	"testing"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/proto"
)

// TestStoredSpecsOfBothVersionsDecode reads a spec as a version 2 driver
// writes it and as a version 1 driver wrote it (string enums), so that VMs
// created before an upgrade are recovered after it; what is neither fails.
func TestStoredSpecsOfBothVersionsDecode(t *testing.T) {
	want := &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: "/img", Vcpus: 1, MemoryMib: 256,
		Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER, Mac: "52:54:00:00:00:01"}}
	v2, err := MarshalSpecJSON(want)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data string
		want *pb.VMSpec
	}{
		{"version 2", string(v2), want},
		{"version 1", `{"id":"vm-1","guestOs":"linux","image":"/img","vcpus":"1","memoryMib":"256","network":{"mode":"user","mac":"52:54:00:00:00:01"}}`, want},
		{"version 1, no network mode", `{"id":"vm-2","guestOs":"macos","network":{}}`,
			&pb.VMSpec{Id: "vm-2", GuestOs: pb.GuestOS_GUEST_OS_MACOS, Network: &pb.Network{}}},
		{"version 1, proto field names", `{"id":"vm-3","guest_os":"linux","network":{"mode":"none"}}`,
			&pb.VMSpec{Id: "vm-3", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}}},
	}
	for _, c := range cases {
		got, err := UnmarshalSpecJSON([]byte(c.data))
		if err != nil || !proto.Equal(got, c.want) {
			t.Errorf("%s: UnmarshalSpecJSON = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []string{`{"guestOs":"plan9"}`, `{"network":{"mode":"bridge"}}`, `{"colour":"red"}`, `not json`} {
		if got, err := UnmarshalSpecJSON([]byte(bad)); err == nil {
			t.Errorf("UnmarshalSpecJSON(%s) = %v, want an error", bad, got)
		}
	}
}
