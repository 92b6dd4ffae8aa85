package sim

import (
	"context"
	"net/netip"
	"strconv"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

// checkPortForward checks one port_forwards entry: a guest port and the
// host address ("ip:port", an IP literal) that stands in for it.
func checkPortForward(port, addr string) error {
	p, err := strconv.Atoi(port)
	if err != nil || driver.CheckGuestPort(p) != nil {
		return driver.Errorf(driver.ErrInvalid, "sim config: port_forwards key %q is not a TCP port (1-65535)", port)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() == 0 {
		return driver.Errorf(driver.ErrInvalid, "sim config: port_forwards[%q] = %q is not an ip:port address such as 127.0.0.1:2222", port, addr)
	}
	return nil
}

// ForwardPort answers the host address the configuration's port_forwards
// gives for guestPort. A simulated VM has no guest, so the operator (or a
// test) serves its ports from the host; a port with no entry cannot be
// reached, and says how to make it reachable.
func (d *Driver) ForwardPort(_ context.Context, id string, guestPort int) (string, error) {
	if err := driver.CheckGuestPort(guestPort); err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return "", err
	}
	if v.rec.State != stateRunning {
		return "", driver.Errorf(driver.ErrState, "sim: vm %s is %s, not running: its ports cannot be reached", id, v.rec.State)
	}
	addr, ok := d.cfg.PortForwards[strconv.Itoa(guestPort)]
	if !ok {
		return "", driver.Errorf(driver.ErrState, "sim: a simulated VM has no guest; port %d is reachable only when the sim driver's port_forwards config maps it to a host server", guestPort)
	}
	return addr, nil
}
