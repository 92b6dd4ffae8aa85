package vmm

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// Target is where the node connects for a tunnel or a screen: a guest
// port's host address or a VM's VNC socket, with the VM's name for logs.
type Target struct {
	VMID, VMName string
	// Address is "ip:port" (ForwardPort) or a unix socket path (VNCSocket).
	Address string
}

// running returns a VM's record, its driver and its live status, refusing
// (409) a VM that is not running.
func (m *Manager) running(ctx context.Context, idOrName, what string) (string, driver.Driver, *pb.VMStatus, error) {
	rec, err := m.get(idOrName)
	if err != nil {
		return "", nil, nil, err
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return "", nil, nil, driverErr(err, "%s of vm %s", what, rec.Name)
	}
	st, err := d.InspectVM(ctx, rec.ID)
	if err != nil {
		return "", nil, nil, driverErr(err, "%s of vm %s", what, rec.Name)
	}
	if st.GetState() != pb.VMState_VM_STATE_RUNNING {
		return "", nil, nil, fail(driver.ErrState, "start the VM (POST /v1/vms/{id}/start) and try again",
			"vm %s is %s, not running: its %s cannot be reached", rec.Name, stateWord(st.GetState()), what)
	}
	return rec.Name, d, st, nil
}

func stateWord(s pb.VMState) string {
	switch s {
	case pb.VMState_VM_STATE_CREATED:
		return "created"
	case pb.VMState_VM_STATE_PAUSED:
		return "paused"
	case pb.VMState_VM_STATE_STOPPED:
		return "stopped"
	}
	return "in an unknown state"
}

// ForwardPort returns the host address of a running VM's guest TCP port,
// as its driver forwards it, or, for a VM in its tenant's network, the
// guest's own address there (the node is on the tenant's bridge through the
// gateway address). The node connects to nothing else for a tunnel; an
// address no driver forward would give (unspecified, multicast, link-local,
// where cloud metadata services live) is refused, and so is a tenant
// guest's address outside the tenant's subnet or on loopback.
func (m *Manager) ForwardPort(ctx context.Context, idOrName string, port int) (Target, error) {
	if err := driver.CheckGuestPort(port); err != nil {
		return Target{}, fail(driver.ErrInvalid, "give ?port= a TCP port, 1 to 65535 (22 for SSH)", "port %d is not a TCP port", port)
	}
	name, d, st, err := m.running(ctx, idOrName, "guest port")
	if err != nil {
		return Target{}, err
	}
	if rec, err := m.get(st.GetId()); err == nil {
		var req sdk.CreateVMRequest
		_ = json.Unmarshal(rec.Spec, &req)
		if req.Network == networkTenant {
			return m.tenantTarget(ctx, rec.ID, name, req, port)
		}
	}
	addr, err := d.ForwardPort(ctx, st.GetId(), port)
	if errors.Is(err, driver.ErrUnsupported) {
		return Target{}, fail(driver.ErrState, "run the VM with a driver that claims the port_forward capability (GET /v1/health lists them)",
			"this driver cannot forward guest ports (vm %s)", name)
	}
	if err != nil {
		return Target{}, driverErr(err, "forward port %d of vm %s", port, name)
	}
	ap, perr := netip.ParseAddrPort(addr)
	if perr != nil || !forwardable(ap) {
		m.log.Error("driver answered an address the node does not connect to", "vm", name, "port", port, "address", addr)
		return Target{}, fail(driver.ErrState, "the driver plugin is at fault; its log may say more",
			"the driver gave no usable address for port %d of vm %s", port, name)
	}
	return Target{VMID: st.GetId(), VMName: name, Address: addr}, nil
}

// forwardable reports whether the node may connect to ap for a tunnel. A
// driver's own forward is a host listener (loopback) or the guest on a
// network only this host routes; never an unspecified, multicast or
// link-local address, nor port 0.
func forwardable(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap()
	return ap.Port() != 0 && a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() &&
		!a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() && !a.IsInterfaceLocalMulticast()
}

// VNCSocket returns the VNC socket of a running VM with a graphical
// console, as its driver reports it (attribute "vnc_socket"); 409 with the
// reason when it has none.
func (m *Manager) VNCSocket(ctx context.Context, idOrName string) (Target, error) {
	name, _, st, err := m.running(ctx, idOrName, "screen")
	if err != nil {
		return Target{}, err
	}
	sock := st.GetAttributes()["vnc_socket"]
	if sock == "" {
		return Target{}, fail(driver.ErrState, "only QEMU VMs created with a display have a graphical console (VNC); GET /v1/vms/{id}/screenshot works for the others that have a screen",
			"vm %s has no graphical console (VNC)", name)
	}
	return Target{VMID: st.GetId(), VMName: name, Address: sock}, nil
}

// tenantTarget is the address of a tenant VM's guest port: its address in
// the tenant's network, as the network plugin reports it, checked against
// the subnet the VM was created in.
func (m *Manager) tenantTarget(ctx context.Context, id, name string, req sdk.CreateVMRequest, port int) (Target, error) {
	a, err := m.guestAddress(ctx, id, req)
	if err != nil {
		return Target{}, err
	}
	subnet, _ := netip.ParsePrefix(req.Subnet) // validate checked it
	ap := netip.AddrPortFrom(a.Addr(), uint16(port))
	if !forwardable(ap) || a.Addr().IsLoopback() || !subnet.Contains(a.Addr()) {
		m.log.Error("network plugin answered an address the node does not connect to", "vm", name, "address", a, "subnet", req.Subnet)
		return Target{}, fail(driver.ErrState, "the network plugin is at fault; its log may say more",
			"the network plugin gave no usable address for vm %s", name)
	}
	return Target{VMID: id, VMName: name, Address: ap.String()}, nil
}
