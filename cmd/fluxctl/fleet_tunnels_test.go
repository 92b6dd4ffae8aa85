package main

import (
	"net"
	"testing"
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
