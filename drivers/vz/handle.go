package vz

import (
	"bytes"
	"encoding/json"
	"path/filepath"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// driverName is the name this driver goes by, in handles and in HCL.
const driverName = "vz"

// handleVersion is the handle format this driver writes; it reads 1..handleVersion.
const handleVersion = 1

// handleState is the JSON inside Handle.state (version 1). The socket and
// instance identify the run; the pid is only for people and for a kill when
// the socket is gone, never for identity.
type handleState struct {
	Workspace string `json:"workspace"`
	Socket    string `json:"socket"`
	Instance  string `json:"instance"`
	PID       int    `json:"pid"`
	StartedAt int64  `json:"started_at_unix_nano"`
}

// encodeHandle makes the handle the agent persists after StartVM.
func encodeHandle(id string, st handleState) (*pb.Handle, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return &pb.Handle{Version: handleVersion, Driver: driverName, VmId: id, State: data}, nil
}

// decodeHandle checks a handle and returns its state: ErrState for another
// driver's or a newer version's, ErrInvalid for bytes that are not a state of
// this VM's workspace.
func decodeHandle(h *pb.Handle) (handleState, error) {
	var st handleState
	if h == nil {
		return st, driver.Errorf(driver.ErrInvalid, "no handle given")
	}
	if h.Driver != driverName {
		return st, driver.Errorf(driver.ErrState, "handle of vm %q was written by driver %q, not %q", h.VmId, h.Driver, driverName)
	}
	if h.Version > handleVersion {
		return st, driver.Errorf(driver.ErrState, "handle version %d is newer than this vz driver reads (1 to %d); upgrade the plugin", h.Version, handleVersion)
	}
	if h.Version < 1 {
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %q has no version", h.VmId)
	}
	if !idPattern.MatchString(h.VmId) {
		return st, driver.Errorf(driver.ErrInvalid, "handle names an invalid vm id %q", h.VmId)
	}
	dec := json.NewDecoder(bytes.NewReader(h.State))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: %v", h.VmId, err)
	}
	if dec.More() {
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: trailing data", h.VmId)
	}
	switch {
	case st.Workspace == "" || !filepath.IsAbs(st.Workspace) || filepath.Clean(st.Workspace) != st.Workspace:
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: workspace %q is not a clean absolute path", h.VmId, st.Workspace)
	case filepath.Base(st.Workspace) != h.VmId:
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: workspace %q is not that vm's", h.VmId, st.Workspace)
	case st.Socket != filepath.Join(st.Workspace, socketName):
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: socket %q is not in the vm's workspace", h.VmId, st.Socket)
	case len(st.Instance) != 32:
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: instance %q is not a host-process instance", h.VmId, st.Instance)
	case st.PID < 0:
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: pid %d", h.VmId, st.PID)
	}
	return st, nil
}
