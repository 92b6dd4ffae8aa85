package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetTunnelCommandLineMistakesSayWhatToDo: arguments fleet ssh,
// port-forward, tunnel-stdio and tunnels cannot use are refused with the
// usage before anything is sent (central's address here answers nothing).
func TestFleetTunnelCommandLineMistakesSayWhatToDo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := cli{env: map[string]string{envCentral: "http://" + addr, envFleetToken: "fvt_x"}}
	for _, tc := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"fleet", "ssh"}, "takes a VM ([USER@]VM)", "usage: fluxctl fleet ssh [USER@]VM [-- SSH-ARGS...]"},
		{[]string{"fleet", "ssh", "web-1", "uname"}, "put ssh's options and the remote command after --", "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "ssh", "--", "uname"}, "takes a VM", "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "ssh", "@web-1"}, `"@web-1" is not USER@VM`, "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "ssh", "admin@"}, `"admin@" is not USER@VM`, "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "ssh", "a;rm -rf ~@web-1"}, `is not USER@VM`, "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "ssh", "--print-config", "web-1", "--", "-v"}, "--print-config prints a config block", "usage: fluxctl fleet ssh"},
		{[]string{"fleet", "tunnel-stdio", "node-1/abc"}, "takes NODE/ID and PORT, got 1", "usage: fluxctl fleet tunnel-stdio NODE/ID PORT"},
		{[]string{"fleet", "tunnel-stdio", "web-1", "22"}, `"web-1" is not NODE/ID`, "usage: fluxctl fleet tunnel-stdio"},
		{[]string{"fleet", "tunnel-stdio", "node-1/", "22"}, `"node-1/" is not NODE/ID`, "usage: fluxctl fleet tunnel-stdio"},
		{[]string{"fleet", "tunnel-stdio", "node-1/abc", "0"}, `port "0" is not a TCP port (1-65535)`, "usage: fluxctl fleet tunnel-stdio"},
		{[]string{"fleet", "tunnel-stdio", "node-1/abc", "65536"}, `port "65536" is not a TCP port`, "usage: fluxctl fleet tunnel-stdio"},
		{[]string{"fleet", "tunnel-stdio", "node-1/abc", "ssh"}, `port "ssh" is not a TCP port`, "usage: fluxctl fleet tunnel-stdio"},
		{[]string{"fleet", "port-forward", "web-1"}, "takes a VM and LOCAL:REMOTE, got 1", "usage: fluxctl fleet port-forward VM LOCAL:REMOTE"},
		{[]string{"fleet", "port-forward", "web-1", "8080"}, `"8080" is not LOCAL:REMOTE`, "usage: fluxctl fleet port-forward"},
		{[]string{"fleet", "port-forward", "web-1", "8080:0"}, `"8080:0" is not LOCAL:REMOTE`, "usage: fluxctl fleet port-forward"},
		{[]string{"fleet", "port-forward", "web-1", "http:80"}, `"http:80" is not LOCAL:REMOTE`, "usage: fluxctl fleet port-forward"},
		{[]string{"fleet", "port-forward", "web-1", "8080:80", "--address", "my-laptop"}, `--address "my-laptop" is not an IP address`, "usage: fluxctl fleet port-forward"},
		{[]string{"fleet", "tunnels", "close"}, "takes one tunnel ID, got 0", "usage: fluxctl fleet tunnels close ID"},
		{[]string{"fleet", "tunnels", "clsoe", "tun_1"}, `unknown command "clsoe"`, "did you mean fluxctl fleet tunnels close?"},
		// Past the arguments, a central that does not answer is named as such.
		{[]string{"fleet", "tunnel-stdio", "node-1/abc", "22"}, "central at http://" + addr + " is unreachable", "is central running"},
		{[]string{"fleet", "tunnels"}, "is unreachable", "is central running"},
	} {
		c.run(t, tc.args...).refused(t, tc.args[1]+" "+tc.args[len(tc.args)-1], tc.msg, tc.hint)
	}
}

// TestFleetSSHWithoutAnSSHClientSaysWhatToInstall: without ssh on PATH,
// fleet ssh says so before it asks central anything.
func TestFleetSSHWithoutAnSSHClientSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c := cli{env: map[string]string{envCentral: "http://127.0.0.1:1", envFleetToken: "fvt_x"}}
	c.run(t, "fleet", "ssh", "web-1").refused(t, "no ssh", "ssh (the OpenSSH client) is not installed", "apt-get install openssh-client")
}

// echoServer is a TCP echo server on this host: the guest port a sim
// node's port_forwards reaches.
func echoServer(t *testing.T) string {
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
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// tunnelVM starts a real central and a sim node on a unix socket (central
// reaches it through its channel only) whose guest port 22 is an echo
// server, and launches web-1 for tenant acme: its VM and token.
func tunnelVM(t *testing.T) (*fleettest.Fleet, *sdk.FleetVM, string) {
	t.Helper()
	f := fleettest.Start(t, fleettest.WithSimPortForwards(map[string]string{"22": echoServer(t)}))
	f.CatalogImage(t, "tiny")
	_, token := f.Tenant(t, "acme", nil)
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.CreateVM(t.Context(), sdk.FleetCreateVMRequest{Name: "web-1", Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	vm, err := fc.FindVM(t.Context(), "web-1")
	if err != nil {
		t.Fatal(err)
	}
	return f, vm, token
}

// stdioSession is a running fluxctl fleet tunnel-stdio.
type stdioSession struct {
	in       *io.PipeWriter
	out, err *syncBuffer
	done     chan int
}

func startTunnelStdio(t *testing.T, c cli, target string) *stdioSession {
	t.Helper()
	inR, inW := io.Pipe()
	s := &stdioSession{in: inW, out: &syncBuffer{}, err: &syncBuffer{}, done: make(chan int, 1)}
	go func() {
		a := &app{stdin: inR, stdout: s.out, stderr: s.err, getenv: func(k string) string { return c.env[k] }}
		s.done <- a.run(t.Context(), []string{"fleet", "tunnel-stdio", target, "22"})
	}()
	t.Cleanup(func() { inW.Close() })
	return s
}

// echo writes line and waits for stdout to hold want.
func (s *stdioSession) echo(t *testing.T, line, want string) {
	t.Helper()
	if _, err := s.in.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.out.String() != want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if s.out.String() != want {
		t.Fatalf("stdout = %q; want %q (stderr %q)", s.out.String(), want, s.err.String())
	}
}

// ended waits for tunnel-stdio to exit.
func (s *stdioSession) ended(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case code := <-s.done:
		return result{s.out.String(), s.err.String(), code}
	case <-time.After(within):
		t.Fatalf("tunnel-stdio still runs %v later", within)
	}
	return result{}
}

// TestTunnelStdioRelaysAndSaysWhyCentralEndedIt: tunnel-stdio carries
// stdin to the guest port (through a real central and the node's channel)
// and the answer to stdout; when central ends the tunnel (here: closed with
// tunnels close), it exits 1 with central's reason and what to do.
func TestTunnelStdioRelaysAndSaysWhyCentralEndedIt(t *testing.T) {
	f, vm, token := tunnelVM(t)
	c := fleetCLI(f, token)
	s := startTunnelStdio(t, c, vm.Node+"/"+vm.ID)
	s.echo(t, "hello through the tunnel\n", "hello through the tunnel\n")
	var tl sdk.TunnelList
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list := c.run(t, "fleet", "tunnels", "-o", "json").ok(t, "tunnels -o json").stdout
		tl = decode[sdk.TunnelList](t, "tunnels", list)
		if len(tl.Tunnels) != 1 || tl.Tunnels[0].BytesFromVM == 25 && tl.Tunnels[0].BytesToVM == 25 || time.Now().After(deadline) {
			break
		}
	}
	if len(tl.Tunnels) != 1 || tl.Tunnels[0].BytesToVM != 25 || tl.Tunnels[0].BytesFromVM != 25 || tl.Tunnels[0].VMName != "web-1" {
		t.Fatalf("tunnels -o json = %+v; want one tunnel to web-1 with 25 bytes each way", tl)
	}
	c.run(t, "fleet", "tunnels", "close", tl.Tunnels[0].ID).ok(t, "tunnels close")
	s.ended(t, 10*time.Second).refused(t, "tunnel-stdio closed by central", "central ended the tunnel: closed by the tenant", "fluxctl fleet tunnels close")
}

// TestCentralKilledAndRestartedEndsTunnelsAndTheNodeComesBack is the
// acceptance line "central SIGKILLed and restarted: the node reconnects
// within 5 s, open tunnels end with a reason, new ones work": a
// tunnel-stdio session is open through a real central to a node on a unix
// socket; central is SIGKILLed, so no close message is sent, and
// tunnel-stdio exits at once saying central closed the connection and to
// connect again; central restarts on its state, the node's channel is back
// within 5 s (a tunnel opens and carries bytes, which only the channel can
// do) and a new session works.
func TestCentralKilledAndRestartedEndsTunnelsAndTheNodeComesBack(t *testing.T) {
	f, vm, token := tunnelVM(t)
	c := fleetCLI(f, token)
	target := vm.Node + "/" + vm.ID
	s := startTunnelStdio(t, c, target)
	s.echo(t, "before\n", "before\n")

	f.KillCentral(t)
	r := s.ended(t, 5*time.Second)
	r.refused(t, "tunnel-stdio when central was killed", "central closed the connection", "connect again")
	t.Logf("tunnel-stdio when central was killed:\n%s", r.stderr)
	if !strings.Contains(r.stderr, "without saying why") {
		t.Errorf("tunnel-stdio does not say central gave no reason:\n%s", r.stderr)
	}

	restart := time.Now()
	f.RestartCentral(t)
	up := time.Now()
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	var back time.Duration
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		conn, err := fc.DialTunnel(ctx, vm.Node, vm.ID, 22)
		cancel()
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, werr := conn.Write([]byte("ping"))
			got := make([]byte, 4)
			_, rerr := io.ReadFull(conn, got)
			conn.Close()
			if werr == nil && rerr == nil && string(got) == "ping" {
				back = time.Since(up)
				break
			}
			err = errors.Join(werr, rerr)
		}
		if time.Since(up) > 5*time.Second {
			t.Fatalf("no tunnel through the node's channel within 5 s of central's restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the node's channel carried a tunnel %v after central answered again (%v after it was started again)",
		back.Round(time.Millisecond), time.Since(restart).Round(time.Millisecond))
	n, err := fc.ListVMs(t.Context())
	if err != nil || len(n.VMs) != 1 || n.VMs[0].Unreachable || len(n.UnreachableNodes) != 0 {
		t.Fatalf("after the restart GET /fleet/vms = %+v, %v; want web-1, reachable", n, err)
	}
	s2 := startTunnelStdio(t, c, target)
	s2.echo(t, "after\n", "after\n")
	s2.in.Close()
	if r := s2.ended(t, 10*time.Second); r.code != 0 {
		t.Errorf("tunnel-stdio after stdin ended: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestFleetSSHRefusesNamesUnfitForACommandLine: fleet ssh puts the VM's
// name, node and ID into a ProxyCommand that a shell runs and into a config
// block; a server that answers with others (not central, or a broken one)
// is refused rather than obeyed.
func TestFleetSSHRefusesNamesUnfitForACommandLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fleet/vms" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(sdk.FleetVMList{VMs: []sdk.FleetVM{{Node: "n1;touch /tmp/pwned", VM: sdk.VM{ID: "vm-1", Name: "web-1"}}}})
	}))
	defer srv.Close()
	c := cli{env: map[string]string{envCentral: srv.URL, envFleetToken: "fvt_x"}}
	c.run(t, "fleet", "ssh", "--print-config", "web-1").refused(t, "a node name with a shell command", `central named the VM with "n1;touch /tmp/pwned"`, "is --central the right server?")
}
