package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/tunneltest"
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

// TestTunnelStdioRelaysAndSaysWhyCentralEndedIt: tunnel-stdio carries
// stdin to the guest port and the answer to stdout; when central ends the
// tunnel (here: closed with tunnels close), it exits 1 with central's reason
// and what to do.
func TestTunnelStdioRelaysAndSaysWhyCentralEndedIt(t *testing.T) {
	guest, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	const token = "fvt_stdio"
	srv := tunneltest.Start(t, tunneltest.Options{Token: token, Route: func(node, id string, port int) tunneltest.Target {
		return tunneltest.Target{Addr: guest.Addr().String(), VMName: "web-1"}
	}})
	c := cli{env: map[string]string{envCentral: srv.URL, envFleetToken: token}}

	inR, inW := io.Pipe()
	out := &syncBuffer{}
	errb := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		a := &app{stdin: inR, stdout: out, stderr: errb, getenv: func(k string) string { return c.env[k] }}
		done <- a.run(t.Context(), []string{"fleet", "tunnel-stdio", "node-1/vm-1", "22"})
	}()
	if _, err := inW.Write([]byte("hello through the tunnel\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); out.String() == "" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if out.String() != "hello through the tunnel\n" {
		t.Fatalf("stdout = %q; want the echo", out.String())
	}
	list := c.run(t, "fleet", "tunnels", "-o", "json").ok(t, "tunnels -o json").stdout
	tl := decode[sdk.TunnelList](t, "tunnels", list)
	if len(tl.Tunnels) != 1 || tl.Tunnels[0].BytesToVM != 25 || tl.Tunnels[0].BytesFromVM != 25 {
		t.Fatalf("tunnels -o json = %s; want one tunnel with 25 bytes each way", list)
	}
	c.run(t, "fleet", "tunnels", "close", tl.Tunnels[0].ID).ok(t, "tunnels close")
	select {
	case code := <-done:
		r := result{out.String(), errb.String(), code}
		r.refused(t, "tunnel-stdio closed by central", "central ended the tunnel: closed by the tenant", "fluxctl fleet tunnels close")
	case <-time.After(10 * time.Second):
		t.Fatal("tunnel-stdio still runs after central ended its tunnel")
	}
	inW.Close()
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
