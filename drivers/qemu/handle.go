//go:build linux

package qemu

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// driverName is the name this driver goes by, in handles and in HCL.
const driverName = "qemu"

// handleVersion is the handle format this driver writes; it reads 1..handleVersion.
const handleVersion = 1

// idPattern is what VM ids look like (the contract's rule).
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// handleState is the JSON inside Handle.state (version 1).
type handleState struct {
	PID        int    `json:"pid"`
	Workspace  string `json:"workspace"`
	QMPSocket  string `json:"qmp_socket"`
	UUID       string `json:"uuid"`
	StartedAt  int64  `json:"started_at_unix_nano"`
	QEMUBinary string `json:"qemu_binary"`
}

// encodeHandle makes the handle the agent persists after StartVM.
func encodeHandle(id string, st handleState) (*pb.Handle, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return &pb.Handle{Version: handleVersion, Driver: driverName, VmId: id, State: data}, nil
}

// decodeHandle checks a handle and returns its state. A handle of another
// driver or a newer version is ErrState; bytes that are not a valid state are
// ErrInvalid.
func decodeHandle(h *pb.Handle) (handleState, error) {
	var st handleState
	if h == nil {
		return st, driver.Errorf(driver.ErrInvalid, "no handle given")
	}
	if h.Driver != driverName {
		return st, driver.Errorf(driver.ErrState, "handle of vm %q was written by driver %q, not %q", h.VmId, h.Driver, driverName)
	}
	if h.Version > handleVersion {
		return st, driver.Errorf(driver.ErrState,
			"handle version %d is newer than this qemu driver reads (%d); upgrade the plugin", h.Version, handleVersion)
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
	case st.UUID == "":
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: no uuid", h.VmId)
	case st.PID < 0:
		return st, driver.Errorf(driver.ErrInvalid, "handle of vm %s: corrupt state: pid %d", h.VmId, st.PID)
	}
	return st, nil
}
