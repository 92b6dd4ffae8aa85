// Command fluxvm-guest is the FluxVM guest agent. In the FluxVM initramfs it is /init
// (PID 1); with -port it serves one port as an ordinary process, for testing; with
// -vsock it serves a virtio-vsock port as a service of a vz guest (macOS or Linux).
// `fluxvm-guest ssh-keys USER` (the node agent runs it in the guest, as /init) makes
// the keys on its standard input USER's authorized SSH keys, adding USER when missing,
// and returns once the SSH server accepts connections. `fluxvm-guest settle` returns
// once the guest has finished starting (its set-up done, since an exec waits for it,
// and the SSH server accepting connections): a warm pool saves its template then, so
// the copies it resumes do not each redo the rest of the start.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/fluxvm/fluxvm/guest/agent"
)

func main() {
	port := flag.String("port", "", "serve this agent port (a virtio-serial device or a unix socket) without PID 1 duties")
	version := flag.Bool("version", false, "print the agent version and exit")
	vsock := flag.Uint("vsock", 0, "serve this virtio-vsock port (1024 for the vz driver) as a service, in a macOS or Linux guest")
	flag.Parse()
	if *version {
		fmt.Println(agent.Version)
		return
	}
	ctx := context.Background()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "fluxvm-guest: "+format+"\n", args...) }
	var err error
	switch {
	case os.Getpid() != 1 && flag.Arg(0) == "ssh-keys":
		if flag.NArg() != 2 {
			err = fmt.Errorf("usage: fluxvm-guest ssh-keys USER <authorized_keys")
			break
		}
		if err = agent.InstallAuthorizedKeys("/", flag.Arg(1), os.Stdin); err == nil {
			err = agent.WaitSSHD()
		}
	case os.Getpid() != 1 && flag.Arg(0) == "settle":
		err = agent.WaitSSHD()
	case *vsock != 0:
		if *vsock > 1<<32-1 {
			err = fmt.Errorf("-vsock %d is not a vsock port", *vsock)
			break
		}
		err = agent.RunVsock(ctx, uint32(*vsock), logf)
	case *port != "":
		err = agent.RunPort(ctx, *port, logf)
	case os.Getpid() == 1:
		err = agent.RunInit(ctx)
	default:
		err = fmt.Errorf("not running as PID 1; pass -port PATH to serve an agent port as a normal process")
	}
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}
