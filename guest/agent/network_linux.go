package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// configureNetwork applies cfg with the guest's `ip` (busybox in our image): it keeps
// the agent small, and the handful of commands run once per boot.
func (s *Server) configureNetwork(ctx context.Context, cfg *protocol.NetworkConfig) error {
	ip, err := ipCommand()
	if err != nil {
		return err
	}
	for _, ifc := range cfg.Interfaces {
		name, err := interfaceByMAC(ifc.MAC)
		if err != nil {
			return err
		}
		cmds := [][]string{}
		if ifc.MTU > 0 {
			cmds = append(cmds, []string{"link", "set", "dev", name, "mtu", strconv.Itoa(ifc.MTU)})
		}
		cmds = append(cmds, []string{"link", "set", "dev", name, "up"}, []string{"addr", "flush", "dev", name})
		for _, a := range ifc.Addresses {
			if _, _, err := net.ParseCIDR(a); err != nil {
				return fmt.Errorf("interface %s: address %q is not in CIDR form (like 10.0.2.15/24)", ifc.MAC, a)
			}
			cmds = append(cmds, []string{"addr", "add", a, "dev", name})
		}
		if ifc.Gateway != "" {
			if net.ParseIP(ifc.Gateway) == nil {
				return fmt.Errorf("interface %s: gateway %q is not an IP address", ifc.MAC, ifc.Gateway)
			}
			cmds = append(cmds, []string{"route", "replace", "default", "via", ifc.Gateway, "dev", name})
		}
		for _, c := range cmds {
			if _, err := s.run(ctx, append(ip, c...)...); err != nil {
				return fmt.Errorf("configure %s (%s): %w", name, ifc.MAC, err)
			}
		}
	}
	if len(cfg.DNS) > 0 {
		var b strings.Builder
		for _, d := range cfg.DNS {
			if net.ParseIP(d) == nil {
				return fmt.Errorf("DNS server %q is not an IP address", d)
			}
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		if err := writeFileAtomic("/etc/resolv.conf", []byte(b.String())); err != nil {
			return err
		}
	}
	if cfg.Hostname != "" {
		if err := setHostname(cfg.Hostname); err != nil {
			return err
		}
	}
	return nil
}

// setHostname sets the kernel hostname and /etc/hostname.
func setHostname(name string) error {
	if !validHostname(name) {
		return fmt.Errorf("hostname %q is not valid (letters, digits, '-' and '.', at most 64 characters)", name)
	}
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	return writeFileAtomic("/etc/hostname", []byte(name+"\n"))
}

func validHostname(name string) bool {
	if len(name) == 0 || len(name) > 64 || name[0] == '-' || name[0] == '.' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func ipCommand() ([]string, error) {
	if p, err := lookPath("ip", execEnv(nil)); err == nil {
		return []string{p}, nil
	}
	if _, err := os.Stat("/bin/busybox"); err == nil {
		return []string{"/bin/busybox", "ip"}, nil
	}
	return nil, fmt.Errorf("no ip command in %s and no /bin/busybox", protocol.DefaultExecPath)
}

// interfaceByMAC finds the interface whose address is mac, reading sysfs.
func interfaceByMAC(mac string) (string, error) {
	want, err := net.ParseMAC(mac)
	if err != nil {
		return "", fmt.Errorf("interface MAC %q: %w", mac, err)
	}
	paths, _ := filepath.Glob("/sys/class/net/*/address")
	var seen []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		name := filepath.Base(filepath.Dir(p))
		got, err := net.ParseMAC(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if got.String() == want.String() {
			return name, nil
		}
		seen = append(seen, name+"="+got.String())
	}
	return "", fmt.Errorf("no interface with MAC %s (found: %s)", want, strings.Join(seen, ", "))
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
