package driver

import (
	"encoding/json"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/encoding/protojson"
)

// MarshalSpecJSON encodes a spec for a driver's own records in its VM
// workspace (protojson), so that any later plugin process can read it back
// with UnmarshalSpecJSON.
func MarshalSpecJSON(spec *pb.VMSpec) ([]byte, error) {
	return protojson.Marshal(spec)
}

// UnmarshalSpecJSON decodes a spec that MarshalSpecJSON encoded, by this
// contract version or by version 1. Version 1 spelled guest_os and
// network.mode as strings ("linux", "user"); VMs created then still run after
// an upgrade, and their driver must read their records to recover them.
func UnmarshalSpecJSON(data []byte) (*pb.VMSpec, error) {
	spec := &pb.VMSpec{}
	err := protojson.Unmarshal(data, spec)
	if err == nil {
		return spec, nil
	}
	v1, ok := fromV1Spec(data)
	if !ok {
		return nil, err
	}
	spec = &pb.VMSpec{}
	if err2 := protojson.Unmarshal(v1, spec); err2 != nil {
		return nil, err // the first error: the spec is not one of version 1 either
	}
	return spec, nil
}

// fromV1Spec rewrites a version 1 spec's string enums to version 2's enum
// names; false when there was nothing of version 1 to rewrite.
func fromV1Spec(data []byte) ([]byte, bool) {
	var spec map[string]json.RawMessage
	if json.Unmarshal(data, &spec) != nil {
		return nil, false
	}
	changed := false
	rewrite := func(obj map[string]json.RawMessage, field string, enum func(string) (string, bool)) {
		var s string
		if json.Unmarshal(obj[field], &s) != nil {
			return
		}
		if name, ok := enum(s); ok {
			obj[field], _ = json.Marshal(name)
			changed = true
		}
	}
	guestOS := func(s string) (string, bool) {
		v, ok := base.ParseEnum[pb.GuestOS](s)
		return v.String(), ok
	}
	mode := func(s string) (string, bool) {
		if s == "" {
			return pb.NetworkMode_NETWORK_MODE_UNSPECIFIED.String(), true
		}
		v, ok := base.ParseEnum[pb.NetworkMode](s)
		return v.String(), ok
	}
	for _, f := range []string{"guestOs", "guest_os"} {
		rewrite(spec, f, guestOS)
	}
	var network map[string]json.RawMessage
	if json.Unmarshal(spec["network"], &network) == nil && network != nil {
		rewrite(network, "mode", mode)
		spec["network"], _ = json.Marshal(network)
	}
	if !changed {
		return nil, false
	}
	out, err := json.Marshal(spec)
	return out, err == nil
}
