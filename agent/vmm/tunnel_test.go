package vmm

import (
	"net/netip"
	"testing"
)

// TestForwardableRefusesAddressesNoDriverForwardGives: the node connects
// for a tunnel to a driver's loopback listener or a private guest address,
// never to an unspecified, multicast or link-local one (cloud metadata
// lives at 169.254.169.254), nor to port 0.
func TestForwardableRefusesAddressesNoDriverForwardGives(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:40000":        true,
		"[::1]:40000":            true,
		"10.0.2.15:22":           true,
		"192.168.64.3:22":        true,
		"0.0.0.0:22":             false,
		"[::]:22":                false,
		"224.0.0.1:22":           false,
		"[ff02::1]:22":           false,
		"169.254.169.254:80":     false,
		"[fe80::1]:22":           false,
		"[::ffff:169.254.1.1]:1": false,
		"127.0.0.1:0":            false,
	} {
		if got := forwardable(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("forwardable(%s) = %v, want %v", addr, got, want)
		}
	}
}
