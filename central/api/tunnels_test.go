package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
)

// tnEchoServer is a host TCP server that echoes: the "guest port" a sim
// node forwards to.
func tnEchoServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// tnCentral is a central with an activity log and its tunnel loop
// running, serving over HTTP.
func tnCentral(t testing.TB) (url string, log *audit.Log) {
	t.Helper()
	return tnCentralAt(t, nil)
}

// tnCentralAt is tnCentral on a clock the test moves (nil: time.Now).
func tnCentralAt(t testing.TB, now func() time.Time) (url string, log *audit.Log) {
	t.Helper()
	log, err := audit.Open(audit.Options{Dir: fxTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	srv := api.New(api.Options{Store: fxStore(t, nil), FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Activity: log, Now: now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.TunnelLoop(ctx) }()
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { cancel(); <-done; hs.Close() })
	return hs.URL, log
}

// tnEcho sends data through c and checks that the same comes back.
func tnEcho(t testing.TB, c io.ReadWriter, data []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the echo differs from what was sent")
	}
}

func apiStatus(err error) int {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// TestTunnelEndToEndThroughCentralAndNode: a tenant's tunnel goes client
// -> central -> node (sim driver) -> a host TCP server standing in for the
// guest's port 22, and the bytes come back whole; it is listed with its
// traffic, another tenant can neither list, close nor open it (404), a
// read-only key and a port outside the policy are 403, the
// max_per_tenant+1-th is 429, an open tunnel to a VM that stops ends at
// the next 30 s re-check (central's clock moved) saying so, a stopped VM
// is the node's 409, and the activity log has OPEN 101 and CLOSE with the
// bytes each way and why.
func TestTunnelEndToEndThroughCentralAndNode(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	url, activity := tnCentralAt(t, clock.now)
	images, img := fxImages(t)
	echo := tnEchoServer(t)
	startFxNode(t, "sim-1", url, images, 8, 8192, fmt.Sprintf(`    port_forwards = { "22" = %q }`, echo))
	fxWaitUp(t, url, "sim-1")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, tokA := fxTenant(t, url, "acme", nil)
	_, tokB := fxTenant(t, url, "bravo", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "web-1", "image": "tiny"}, http.StatusCreated, &vm)
	var roKey sdk.APIKeyWithToken
	fxMust(t, "POST", url+"/fleet/tenants/me/keys", tokA, map[string]any{"name": "ro", "read_only": true}, http.StatusCreated, &roKey)
	client := func(tok string) *sdk.FleetClient {
		c, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := client(tokA), client(tokB)
	path := "/fleet/vms/sim-1/" + vm.VM.ID + "/tunnel"
	ctx := t.Context()

	c, err := a.DialWebSocket(ctx, path+"?port=22")
	if err != nil {
		t.Fatalf("open the tunnel: %v", err)
	}
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	tnEcho(t, c, data)

	var list sdk.TunnelList
	fxMust(t, "GET", url+"/fleet/tunnels", tokA, nil, http.StatusOK, &list)
	if len(list.Tunnels) != 1 || list.Tunnels[0].BytesToVM != 3<<20 || list.Tunnels[0].VMName != "web-1" || list.Tunnels[0].Port != 22 || list.Limits.MaxPerTenant != 20 {
		t.Fatalf("GET /fleet/tunnels = %+v", list)
	}
	id := list.Tunnels[0].ID
	fxMust(t, "GET", url+"/fleet/tunnels", tokB, nil, http.StatusOK, &list)
	if len(list.Tunnels) != 0 {
		t.Fatalf("another tenant lists %+v", list.Tunnels)
	}
	fxMust(t, "DELETE", url+"/fleet/tunnels/"+id, tokB, nil, http.StatusNotFound, nil)
	if _, err := b.DialWebSocket(ctx, path); apiStatus(err) != http.StatusNotFound {
		t.Fatalf("another tenant's tunnel to acme's VM: %v, want 404", err)
	}
	if _, err := client(roKey.Token).DialWebSocket(ctx, path); apiStatus(err) != http.StatusForbidden {
		t.Fatalf("read-only key: %v, want 403", err)
	}
	if _, err := a.DialWebSocket(ctx, path+"?port=80"); apiStatus(err) != http.StatusForbidden {
		t.Fatalf("port 80 (outside the policy): %v, want 403", err)
	}

	var pol sdk.Policy
	fxMust(t, "GET", url+"/fleet/policy", fxToken, nil, http.StatusOK, &pol)
	pol.Tunnels.MaxPerTenant = 1
	fxMust(t, "PUT", url+"/fleet/policy", fxToken, pol, http.StatusOK, nil)
	if _, err := a.DialWebSocket(ctx, path); apiStatus(err) != http.StatusTooManyRequests {
		t.Fatalf("the second tunnel with max_per_tenant 1: %v, want 429", err)
	}

	fxMust(t, "DELETE", url+"/fleet/tunnels/"+id, tokA, nil, http.StatusNoContent, nil)
	if _, err := io.Copy(io.Discard, c); err == nil || !bytes.Contains([]byte(err.Error()), []byte("closed by the tenant")) {
		t.Fatalf("the closed tunnel's client read %v, want the reason", err)
	}

	pol.Tunnels.MaxPerTenant = 20
	fxMust(t, "PUT", url+"/fleet/policy", fxToken, pol, http.StatusOK, nil)
	open, err := a.DialWebSocket(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	tnEcho(t, open, []byte("before the stop"))
	fxMust(t, "POST", url+"/fleet/vms/sim-1/"+vm.VM.ID+"/stop", tokA, nil, http.StatusOK, nil)
	clock.advance(30 * time.Second)
	_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, open); err == nil || !bytes.Contains([]byte(err.Error()), []byte("the VM is stopped")) {
		t.Fatalf("a tunnel to a VM that stopped read %v, want the reason", err)
	}
	if _, err := a.DialWebSocket(ctx, path); apiStatus(err) != http.StatusConflict {
		t.Fatalf("a stopped VM: %v, want the node's 409", err)
	}

	var opens, closes []sdk.Event
	fxWait(t, "the CLOSE event", 10*time.Second, func() bool {
		opens, closes = nil, nil
		for _, e := range activity.Recent(100, "") {
			switch e.Method {
			case "OPEN":
				opens = append(opens, e)
			case "CLOSE":
				closes = append(closes, e)
			}
		}
		return len(closes) == 2
	})
	// Newest first.
	if closes[0].Tunnel == nil || closes[0].Tunnel.Reason != "the VM is stopped" {
		t.Fatalf("the last CLOSE %+v", closes[0])
	}
	end := closes[1].Tunnel
	if end == nil || end.BytesToVM != 3<<20 || end.BytesFromVM != 3<<20 || end.Reason != "closed by the tenant" || closes[1].Actor != "acme" || closes[1].Target != "web-1" {
		t.Fatalf("CLOSE = %+v %+v", closes[1], end)
	}
	statuses := map[int]int{}
	for _, e := range opens {
		statuses[e.Status]++
	}
	// 101 twice; 403 read-only key and port 80; 429; 409 from the node.
	if statuses[101] != 2 || statuses[403] != 2 || statuses[429] != 1 || statuses[409] != 1 {
		t.Fatalf("OPEN statuses %v", statuses)
	}
}

// BenchmarkTunnelRelay measures bytes through a tunnel (client -> central
// -> node -> a host TCP echo server as a sim VM's guest port and back)
// against the same bytes through a direct loopback TCP connection to the
// same server, interleaved in one run (alternating which goes first), and
// reports both throughputs and their ratio round by round, each as a median
// with its p10–p90.
func BenchmarkTunnelRelay(b *testing.B) {
	url, _ := tnCentral(b)
	images, img := fxImages(b)
	echo := tnEchoServer(b)
	node := startFxNode(b, "sim-1", url, images, 8, 8192, fmt.Sprintf(`    port_forwards = { "22" = %q }`, echo))
	fxWaitUp(b, url, "sim-1")
	fxMust(b, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, tok := fxTenant(b, url, "acme", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(b, "POST", url+"/fleet/vms", tok, map[string]any{"name": "bench", "image": "tiny"}, http.StatusCreated, &vm)
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
	if err != nil {
		b.Fatal(err)
	}
	tun, err := fc.DialWebSocket(b.Context(), "/fleet/vms/sim-1/"+vm.VM.ID+"/tunnel")
	if err != nil {
		b.Fatal(err)
	}
	defer tun.Close()
	direct, err := net.Dial("tcp", echo)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	const chunk = 8 << 20
	data, back := make([]byte, chunk), make([]byte, 64<<10)
	_, _ = rand.Read(data)
	// Every process the bytes pass through: this one (client, central, echo
	// server) and the node agent.
	pids := []int{os.Getpid(), node.cmd.Process.Pid}
	// roundTrip sends chunk bytes and reads them back, concurrently, and
	// returns the time and the CPU those processes spent meanwhile.
	roundTrip := func(c io.ReadWriter) (time.Duration, time.Duration) {
		cpu0, err := benchstat.ProcessesCPU(pids...)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		go func() { _, _ = c.Write(data) }()
		// Read with a buffer as large as a relay hop's message (io.Discard
		// would read 8 KiB at a time), so that neither path pays for small reads.
		for got := 0; got < chunk; {
			n, err := c.Read(back)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		wall := time.Since(start)
		cpu1, err := benchstat.ProcessesCPU(pids...)
		if err != nil {
			b.Fatal(err)
		}
		return wall, cpu1 - cpu0
	}
	type path struct{ mibps, cores, cpuPerMiB []float64 }
	var viaTunnel, viaDirect path
	round := func(p *path, c io.ReadWriter) {
		wall, cpu := roundTrip(c)
		const mib = float64(chunk) / (1 << 20)
		p.mibps = append(p.mibps, mib/wall.Seconds())
		p.cores = append(p.cores, cpu.Seconds()/wall.Seconds())
		p.cpuPerMiB = append(p.cpuPerMiB, cpu.Seconds()*1000/mib)
	}
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := range b.N {
		benchstat.Interleave(i, func() { round(&viaTunnel, tun) }, func() { round(&viaDirect, direct) })
	}
	b.StopTimer()
	// What this machine's cores allow: at the tunnel's CPU per MiB, all of
	// them busy would carry cores/cpuPerMiB MiB/s; against the direct rate
	// of the same round, that is the highest tunnel/direct they permit.
	// And what they would permit to a relay with no cost of its own: the
	// tunnel's bytes cross three TCP connections (client-central, the node's
	// channel, node-guest port), each both ways, where the direct bytes cross
	// one; at the direct path's CPU per MiB for each, that is at most
	// cores/(3 x direct cores busy) of the direct rate.
	cores := float64(runtime.NumCPU())
	var bound, bound3 []float64
	for i := range viaTunnel.cpuPerMiB {
		bound = append(bound, cores*1000/viaTunnel.cpuPerMiB[i]/viaDirect.mibps[i])
		bound3 = append(bound3, cores/(3*viaDirect.cores[i]))
	}
	ts, ds, rs := benchstat.Of(viaTunnel.mibps), benchstat.Of(viaDirect.mibps), benchstat.Ratios(viaTunnel.mibps, viaDirect.mibps)
	benchstat.Report(b, ts, "tunnel-MiB/s")
	benchstat.Report(b, ds, "direct-MiB/s")
	benchstat.Report(b, rs, "tunnel/direct")
	tc, dc := benchstat.Of(viaTunnel.cores), benchstat.Of(viaDirect.cores)
	tm, dm := benchstat.Of(viaTunnel.cpuPerMiB), benchstat.Of(viaDirect.cpuPerMiB)
	bs, b3 := benchstat.Of(bound), benchstat.Of(bound3)
	benchstat.Report(b, tc, "tunnel-cores")
	benchstat.Report(b, dc, "direct-cores")
	benchstat.Report(b, tm, "tunnel-cpu-ms/MiB")
	benchstat.Report(b, dm, "direct-cpu-ms/MiB")
	benchstat.Report(b, bs, "cpu-bound-tunnel/direct")
	benchstat.Report(b, b3, "three-connection-bound")
	b.Logf("8 MiB each way per round: through the tunnel, MiB/s: %v; direct, MiB/s: %v; tunnel/direct round by round %v", ts, ds, rs)
	b.Logf("CPU of this process and the node agent: tunnel %v cores busy, %v CPU-ms per MiB; direct %v cores busy, %v CPU-ms per MiB; "+
		"at the tunnel's CPU per MiB this machine's %d cores allow at most %v of the direct rate, and a relay costing nothing beyond its three TCP connections at most %v",
		tc, tm, dc, dm, runtime.NumCPU(), bs, b3)
}

// BenchmarkTunnel20Memory opens 20 tunnels and runs all of them at full
// speed at once, and reports how much the process's Go memory (heap and
// stacks in use, after a GC) grew from before they opened to while they
// run, as the median of the rounds with its p10–p90 (no baseline). The
// process holds central and the 20 clients' ends too, so the figure bounds
// central's share from above.
func BenchmarkTunnel20Memory(b *testing.B) {
	url, _ := tnCentral(b)
	images, img := fxImages(b)
	echo := tnEchoServer(b)
	startFxNode(b, "sim-1", url, images, 8, 8192, fmt.Sprintf(`    port_forwards = { "22" = %q }`, echo))
	fxWaitUp(b, url, "sim-1")
	fxMust(b, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, tok := fxTenant(b, url, "acme", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(b, "POST", url+"/fleet/vms", tok, map[string]any{"name": "bench", "image": "tiny"}, http.StatusCreated, &vm)
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
	if err != nil {
		b.Fatal(err)
	}
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	const n, each = 20, 16 << 20
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	var grown []float64 // MiB of each round
	b.ResetTimer()
	for range b.N {
		before := inUse()
		var wg sync.WaitGroup
		var peak atomic.Uint64
		errs := make(chan error, n)
		for range n {
			c, err := fc.DialWebSocket(b.Context(), "/fleet/vms/sim-1/"+vm.VM.ID+"/tunnel")
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() {
					for sent := 0; sent < each; sent += len(data) {
						if _, err := c.Write(data); err != nil {
							return
						}
					}
				}()
				if _, err := io.CopyN(io.Discard, c, each); err != nil {
					errs <- err
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for running := true; running; {
			select {
			case <-done:
				running = false
			case <-time.After(20 * time.Millisecond):
				if m := inUse(); m > peak.Load() {
					peak.Store(m)
				}
			}
		}
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		grown = append(grown, float64(int64(peak.Load())-int64(before))/(1<<20))
	}
	b.StopTimer()
	b.SetBytes(n * each)
	g := benchstat.Of(grown)
	benchstat.Report(b, g, "MiB-grown")
	b.Logf("Go memory grown with 20 tunnels at full speed, MiB: %v", g)
}
