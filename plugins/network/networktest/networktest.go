// Package networktest is the conformance suite for FluxVM network plugins. A
// plugin's own test calls Run with a Harness that launches the plugin as a
// real process; the suite then checks the base service and every RPC of the
// network contract, including a plugin killed and started again.
package networktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/base/basetest"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

// Harness tells the suite how to run the plugin under test.
type Harness struct {
	// Launch starts a new plugin process. The suite kills plugin processes
	// to test recovery, so each call must start a fresh one, where the
	// earlier ones made their networks (the same network namespace).
	Launch func(t testing.TB) *network.Plugin
	// Config is the plugin's configuration, as JSON, for SetConfig ("{}" if
	// nil).
	Config []byte
	// StateDir is handed to SetConfig; the suite makes a temporary one if
	// empty. Every process the suite launches gets the same one.
	StateDir string
	// Subnet returns the n-th subnet (n from 0 to 9) the suite may give
	// tenants: distinct, not overlapping, each with room for 8 guests.
	Subnet func(n int) string
}

// LaunchCommand returns a Harness.Launch that runs the given command as the
// plugin, logs its output through the test and kills it when the test ends.
func LaunchCommand(name string, args ...string) func(t testing.TB) *network.Plugin {
	return func(t testing.TB) *network.Plugin {
		t.Helper()
		logger := hclog.New(&hclog.LoggerOptions{Name: filepath.Base(name), Level: hclog.Debug, Output: basetest.LogWriter(t)})
		p, err := network.Launch(context.Background(), network.LaunchConfig{Cmd: exec.Command(name, args...), Logger: logger})
		if err != nil {
			t.Fatalf("launch plugin %s: %v", name, err)
		}
		t.Cleanup(p.Kill)
		return p
	}
}

type suite struct {
	h    Harness
	caps *pb.CapabilitiesResponse
}

// Run checks the plugin against the contract.
func Run(t *testing.T, h Harness) {
	if h.Launch == nil || h.Subnet == nil {
		t.Fatal("networktest: Harness.Launch and Harness.Subnet are required")
	}
	if h.StateDir == "" {
		h.StateDir = t.TempDir()
	}
	if h.Config == nil {
		h.Config = []byte("{}")
	}
	s := &suite{h: h}
	p := s.launch(t)
	info, err := p.PluginInfo(t.Context())
	if err != nil {
		t.Fatalf("PluginInfo: %v", err)
	}
	if s.caps, err = p.Capabilities(t.Context()); err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	t.Logf("network plugin %s %s, capabilities: %v", info.Name, info.Version, s.caps)

	t.Run("PluginInfoNamesNetworkAndVersion", func(t *testing.T) {
		basetest.CheckInfo(t, info, basepb.PluginType_PLUGIN_TYPE_NETWORK, network.APIVersion)
	})
	t.Run("CapabilitiesAreKnown", s.testCapabilities)
	t.Run("ConfigSchemaIsWellFormed", func(t *testing.T) { basetest.CheckSchema(t, s.launch(t)) })
	t.Run("SetConfigRefusesBadConfig", func(t *testing.T) { basetest.CheckBadConfig(t, s.h.Launch(t), s.h.StateDir) })
	t.Run("EnsureNetworkRefusesBadRequests", s.testBadNetworks)
	t.Run("EnsureNetworkIsIdempotentAndExclusive", s.testEnsure)
	t.Run("CreateInterfaceRefusesBadRequests", s.testBadInterfaces)
	t.Run("InterfaceLifecycle", s.testLifecycle)
	if s.caps.AssignsAddresses {
		t.Run("ParallelCreatesGetDistinctAddresses", s.testParallel)
	}
	t.Run("InterfacesSurvivePluginKill", s.testRecovery)
}

// launch starts a plugin process and configures it.
func (s *suite) launch(t *testing.T) *network.Plugin {
	t.Helper()
	p := s.h.Launch(t)
	if err := p.SetConfig(t.Context(), &basepb.SetConfigRequest{
		ConfigJson: s.h.Config,
		Agent:      &basepb.AgentContext{StateDir: s.h.StateDir, NodeName: "networktest", LogLevel: basepb.LogLevel_LOG_LEVEL_DEBUG},
	}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return p
}

// id makes a tenant or VM id unique to this run.
func id(short string) string {
	return short + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

func (s *suite) testCapabilities(t *testing.T) {
	if len(s.caps.InterfaceKinds) == 0 {
		t.Error("interface_kinds lists no kind")
	}
	for _, k := range s.caps.InterfaceKinds {
		if base.EnumName(k) == "" {
			t.Errorf("interface_kinds lists %v, which is not a kind of the contract", k)
		}
	}
}

func (s *suite) testBadNetworks(t *testing.T) {
	p := s.launch(t)
	good := s.h.Subnet(0)
	prefix := netip.MustParsePrefix(good)
	for _, n := range []*pb.TenantNetwork{
		{Tenant: "", Subnet: good},
		{Tenant: "a/b", Subnet: good},
		{Tenant: "../x", Subnet: good},
		{Tenant: strings.Repeat("t", 65), Subnet: good},
		{Tenant: id("bad"), Subnet: ""},
		{Tenant: id("bad"), Subnet: "nonsense"},
		{Tenant: id("bad"), Subnet: prefix.Addr().Next().String() + "/" + strconv.Itoa(prefix.Bits())}, // a host address
	} {
		if _, err := p.EnsureNetwork(t.Context(), n); !errors.Is(err, network.ErrInvalid) {
			t.Errorf("EnsureNetwork(%v) = %v, want ErrInvalid", n, err)
		}
	}
	if _, err := p.EnsureNetwork(t.Context(), nil); !errors.Is(err, network.ErrInvalid) {
		t.Errorf("EnsureNetwork(nil) = %v, want ErrInvalid", err)
	}
	if err := p.DeleteNetwork(t.Context(), "a/b"); !errors.Is(err, network.ErrInvalid) {
		t.Errorf("DeleteNetwork(a/b) = %v, want ErrInvalid", err)
	}
	if err := p.DeleteNetwork(t.Context(), id("never")); err != nil {
		t.Errorf("DeleteNetwork of a tenant with no network = %v, want success", err)
	}
}

func (s *suite) testEnsure(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	a, b := id("ta"), id("tb")
	n := &pb.TenantNetwork{Tenant: a, Subnet: s.h.Subnet(1)}
	t.Cleanup(func() { _ = p.DeleteNetwork(context.Background(), a) })
	first, err := p.EnsureNetwork(ctx, n)
	if err != nil {
		t.Fatalf("EnsureNetwork: %v", err)
	}
	prefix := netip.MustParsePrefix(n.Subnet)
	if first.Tenant != a || first.Subnet != n.Subnet || first.Gateway != prefix.Addr().Next().String() || first.Device == "" {
		t.Errorf("EnsureNetwork(%v) = %v: want the tenant, the subnet, its first host as gateway and a device", n, first)
	}
	again, err := p.EnsureNetwork(ctx, n)
	if err != nil || !proto.Equal(first, again) {
		t.Errorf("EnsureNetwork again = %v, %v; want the same %v", again, err, first)
	}
	if _, err := p.EnsureNetwork(ctx, &pb.TenantNetwork{Tenant: a, Subnet: s.h.Subnet(2)}); !errors.Is(err, network.ErrState) {
		t.Errorf("EnsureNetwork of %s with another subnet = %v, want ErrState", a, err)
	}
	t.Cleanup(func() { _ = p.DeleteNetwork(context.Background(), b) })
	if _, err := p.EnsureNetwork(ctx, &pb.TenantNetwork{Tenant: b, Subnet: n.Subnet}); !errors.Is(err, network.ErrState) {
		t.Errorf("EnsureNetwork of %s with %s's subnet = %v, want ErrState", b, a, err)
	}
	if err := p.DeleteNetwork(ctx, a); err != nil {
		t.Fatalf("DeleteNetwork: %v", err)
	}
	if err := p.DeleteNetwork(ctx, a); err != nil {
		t.Errorf("DeleteNetwork twice: %v", err)
	}
}

func (s *suite) testBadInterfaces(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	tenant := id("tbad")
	n := &pb.TenantNetwork{Tenant: tenant, Subnet: s.h.Subnet(3)}
	t.Cleanup(func() { _ = p.DeleteNetwork(context.Background(), tenant) })
	prefix := netip.MustParsePrefix(n.Subnet)
	outside := netip.MustParsePrefix(s.h.Subnet(4)).Addr().Next().Next()
	for _, c := range []struct {
		name string
		req  *pb.CreateInterfaceRequest
	}{
		{"no network", &pb.CreateInterfaceRequest{VmId: "vm"}},
		{"no vm id", &pb.CreateInterfaceRequest{Network: n}},
		{"unsafe vm id", &pb.CreateInterfaceRequest{Network: n, VmId: "../vm"}},
		{"address outside the subnet", &pb.CreateInterfaceRequest{Network: n, VmId: "vm", Address: outside.String()}},
		{"the gateway's address", &pb.CreateInterfaceRequest{Network: n, VmId: "vm", Address: prefix.Addr().Next().String()}},
		{"the network address", &pb.CreateInterfaceRequest{Network: n, VmId: "vm", Address: prefix.Addr().String()}},
		{"not an address", &pb.CreateInterfaceRequest{Network: n, VmId: "vm", Address: "vm.example"}},
		{"an address with a prefix length", &pb.CreateInterfaceRequest{Network: n, VmId: "vm", Address: prefix.Addr().Next().Next().String() + "/24"}},
	} {
		if _, err := p.CreateInterface(ctx, c.req); !errors.Is(err, network.ErrInvalid) {
			t.Errorf("CreateInterface with %s = %v, want ErrInvalid", c.name, err)
		}
	}
	ref := &pb.InterfaceRef{Tenant: tenant, VmId: "vm"}
	if ok, err := p.InterfaceExists(ctx, ref); ok || err != nil {
		t.Errorf("after refused creates, InterfaceExists = %v, %v; want false", ok, err)
	}
	if l, err := p.ListInterfaces(ctx); err != nil || len(mine(l, tenant)) != 0 {
		t.Errorf("after refused creates, ListInterfaces = %v, %v; want none of tenant %s", l, err, tenant)
	}
	if _, err := p.InterfaceDetails(ctx, ref); !errors.Is(err, network.ErrNotFound) {
		t.Errorf("InterfaceDetails of no interface = %v, want ErrNotFound", err)
	}
	for _, bad := range []*pb.InterfaceRef{{Tenant: tenant}, {VmId: "vm"}, {Tenant: "a b", VmId: "vm"}} {
		if _, err := p.InterfaceDetails(ctx, bad); !errors.Is(err, network.ErrInvalid) {
			t.Errorf("InterfaceDetails(%v) = %v, want ErrInvalid", bad, err)
		}
		if err := p.DeleteInterface(ctx, bad); !errors.Is(err, network.ErrInvalid) {
			t.Errorf("DeleteInterface(%v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// mine keeps the interfaces of tenant.
func mine(l []*pb.Interface, tenant string) []*pb.Interface {
	var out []*pb.Interface
	for _, i := range l {
		if i.GetRef().GetTenant() == tenant {
			out = append(out, i)
		}
	}
	return out
}

// checkInterface checks what CreateInterface or InterfaceDetails returned
// for ref in network n.
func checkInterface(t *testing.T, i *pb.Interface, ref *pb.InterfaceRef, n *pb.TenantNetwork) netip.Addr {
	t.Helper()
	prefix := netip.MustParsePrefix(n.Subnet)
	if !proto.Equal(i.GetRef(), ref) || base.EnumName(i.GetKind()) == "" || i.GetDevice() == "" {
		t.Errorf("interface %v: want ref %v, a known kind and a device", i, ref)
	}
	mac, err := net.ParseMAC(i.GetMac())
	if err != nil || len(mac) != 6 || mac[0]&1 != 0 {
		t.Errorf("interface %v: mac %q is not a unicast Ethernet address", ref, i.GetMac())
	}
	addr, err := netip.ParsePrefix(i.GetAddress())
	if err != nil || addr.Bits() != prefix.Bits() || !prefix.Contains(addr.Addr()) {
		t.Errorf("interface %v: address %q is not in %s with its prefix length", ref, i.GetAddress(), prefix)
	}
	gw := prefix.Addr().Next()
	if i.GetGateway() != gw.String() || i.GetSubnet() != n.Subnet || addr.Addr() == gw {
		t.Errorf("interface %v: gateway %q, subnet %q, address %q; want gateway %s, subnet %s and another address", ref, i.GetGateway(), i.GetSubnet(), i.GetAddress(), gw, n.Subnet)
	}
	return addr.Addr()
}

func (s *suite) testLifecycle(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	tenant := id("tlife")
	n := &pb.TenantNetwork{Tenant: tenant, Subnet: s.h.Subnet(5)}
	prefix := netip.MustParsePrefix(n.Subnet)
	given := prefix.Addr().Next().Next().Next().Next() // the fourth host
	refA, refB := &pb.InterfaceRef{Tenant: tenant, VmId: "vm-a"}, &pb.InterfaceRef{Tenant: tenant, VmId: "vm-b"}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = p.DeleteInterface(ctx, refA)
		_ = p.DeleteInterface(ctx, refB)
		_ = p.DeleteNetwork(ctx, tenant)
	})
	a, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: refA.VmId, Address: given.String()})
	if err != nil {
		t.Fatalf("CreateInterface with an address: %v", err)
	}
	if got := checkInterface(t, a, refA, n); got != given {
		t.Errorf("CreateInterface with address %s made %s", given, got)
	}
	if _, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: refA.VmId}); !errors.Is(err, network.ErrExists) {
		t.Errorf("CreateInterface for a VM with one = %v, want ErrExists", err)
	}
	if _, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: "vm-c", Address: given.String()}); !errors.Is(err, network.ErrExists) {
		t.Errorf("CreateInterface with a taken address = %v, want ErrExists", err)
	}
	var b *pb.Interface
	if s.caps.AssignsAddresses {
		if b, err = p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: refB.VmId}); err != nil {
			t.Fatalf("CreateInterface without an address: %v", err)
		}
	} else {
		if _, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: refB.VmId}); !errors.Is(err, network.ErrInvalid) {
			t.Errorf("CreateInterface without an address from a plugin that does not assign them = %v, want ErrInvalid", err)
		}
		if b, err = p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: refB.VmId, Address: given.Next().String()}); err != nil {
			t.Fatalf("CreateInterface: %v", err)
		}
	}
	if got := checkInterface(t, b, refB, n); got == given {
		t.Errorf("vm-b got vm-a's address %s", got)
	}
	if a.Mac == b.Mac || a.Device == b.Device {
		t.Errorf("two VMs share a MAC or a device: %v, %v", a, b)
	}
	for _, want := range []*pb.Interface{a, b} {
		ok, err := p.InterfaceExists(ctx, want.Ref)
		if !ok || err != nil {
			t.Errorf("InterfaceExists(%v) = %v, %v; want true", want.Ref, ok, err)
		}
		got, err := p.InterfaceDetails(ctx, want.Ref)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("InterfaceDetails(%v) = %v, %v; want what create returned, %v", want.Ref, got, err, want)
		}
	}
	if l, err := p.ListInterfaces(ctx); err != nil || len(mine(l, tenant)) != 2 {
		t.Errorf("ListInterfaces = %v, %v; want the 2 of tenant %s", l, err, tenant)
	}
	if err := p.DeleteNetwork(ctx, tenant); !errors.Is(err, network.ErrState) {
		t.Errorf("DeleteNetwork with interfaces left = %v, want ErrState", err)
	}
	for _, ref := range []*pb.InterfaceRef{refA, refB} {
		if err := p.DeleteInterface(ctx, ref); err != nil {
			t.Fatalf("DeleteInterface(%v): %v", ref, err)
		}
		if ok, err := p.InterfaceExists(ctx, ref); ok || err != nil {
			t.Errorf("after delete, InterfaceExists(%v) = %v, %v; want false", ref, ok, err)
		}
		if _, err := p.InterfaceDetails(ctx, ref); !errors.Is(err, network.ErrNotFound) {
			t.Errorf("after delete, InterfaceDetails(%v) = %v; want ErrNotFound", ref, err)
		}
		if err := p.DeleteInterface(ctx, ref); err != nil {
			t.Errorf("DeleteInterface twice: %v", err)
		}
	}
	// The freed address can be given again.
	if _, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: "vm-c", Address: given.String()}); err != nil {
		t.Errorf("CreateInterface with a freed address: %v", err)
	}
	if err := p.DeleteInterface(ctx, &pb.InterfaceRef{Tenant: tenant, VmId: "vm-c"}); err != nil {
		t.Error(err)
	}
	if err := p.DeleteNetwork(ctx, tenant); err != nil {
		t.Errorf("DeleteNetwork after its interfaces: %v", err)
	}
}

func (s *suite) testParallel(t *testing.T) {
	p := s.launch(t)
	tenant := id("tpar")
	n := &pb.TenantNetwork{Tenant: tenant, Subnet: s.h.Subnet(7)}
	const count = 8
	made := make([]*pb.Interface, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for k := range count {
		wg.Go(func() {
			made[k], errs[k] = p.CreateInterface(t.Context(), &pb.CreateInterfaceRequest{Network: n, VmId: fmt.Sprintf("vm-%d", k)})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, i := range made {
			if i != nil {
				_ = p.DeleteInterface(context.Background(), i.Ref)
			}
		}
		_ = p.DeleteNetwork(context.Background(), tenant)
	})
	seen := map[string]string{}
	for k, i := range made {
		if errs[k] != nil {
			t.Fatalf("CreateInterface vm-%d, one of %d at once: %v", k, count, errs[k])
		}
		for _, v := range []string{i.Address, i.Mac, i.Device} {
			if other, ok := seen[v]; ok {
				t.Errorf("%s and %s both got %s", other, i.Ref.VmId, v)
			}
			seen[v] = i.Ref.VmId
		}
	}
}

func (s *suite) testRecovery(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	tenant := id("trec")
	n := &pb.TenantNetwork{Tenant: tenant, Subnet: s.h.Subnet(6)}
	var made []*pb.Interface
	for k, vm := range []string{"vm-1", "vm-2", "vm-3"} {
		i, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: vm, Address: s.address(n, k)})
		if err != nil {
			t.Fatalf("CreateInterface %s: %v", vm, err)
		}
		made = append(made, i)
	}
	KillPlugin(t, p)

	p = s.launch(t)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, i := range made {
			_ = p.DeleteInterface(ctx, i.Ref)
		}
		_ = p.DeleteNetwork(ctx, tenant)
	})
	for _, want := range made {
		got, err := p.InterfaceDetails(ctx, want.Ref)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("after a plugin kill, InterfaceDetails(%v) = %v, %v; want %v", want.Ref, got, err, want)
		}
	}
	if l, err := p.ListInterfaces(ctx); err != nil || len(mine(l, tenant)) != len(made) {
		t.Errorf("after a plugin kill, ListInterfaces = %v, %v; want the %d of tenant %s", l, err, len(made), tenant)
	}
	// A new VM gets an address none of the earlier ones has.
	if s.caps.AssignsAddresses {
		i, err := p.CreateInterface(ctx, &pb.CreateInterfaceRequest{Network: n, VmId: "vm-4"})
		if err != nil {
			t.Fatalf("CreateInterface after a plugin kill: %v", err)
		}
		for _, m := range made {
			if m.Address == i.Address || m.Mac == i.Mac {
				t.Errorf("after a plugin kill, vm-4 got %s and %s, as %s has", i.Address, i.Mac, m.Ref.VmId)
			}
		}
		made = append(made, i)
	}
	for _, i := range made {
		if err := p.DeleteInterface(ctx, i.Ref); err != nil {
			t.Errorf("DeleteInterface(%v) after a plugin kill: %v", i.Ref, err)
		}
	}
	if err := p.DeleteNetwork(ctx, tenant); err != nil {
		t.Errorf("DeleteNetwork after a plugin kill: %v", err)
	}
}

// address is "" for a plugin that assigns addresses (it must pick), else
// the k-th guest address of n (counting from 0, after the gateway).
func (s *suite) address(n *pb.TenantNetwork, k int) string {
	if s.caps.AssignsAddresses {
		return ""
	}
	a := netip.MustParsePrefix(n.Subnet).Addr().Next().Next()
	for range k {
		a = a.Next()
	}
	return a.String()
}

// KillPlugin ends the plugin process with SIGKILL, the way a crash would,
// and waits until it is gone.
func KillPlugin(t testing.TB, p *network.Plugin) {
	t.Helper()
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", p.Pid(), err)
	}
	for deadline := time.Now().Add(10 * time.Second); !p.Exited(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed plugin did not exit")
		}
	}
}
