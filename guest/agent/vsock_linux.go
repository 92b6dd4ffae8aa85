package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

var (
	powerOffCommand = []string{"poweroff"}
	rebootCommand   = []string{"reboot"}
)

// listenVsock listens on port for any CID.
func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &vsockListener{fd: fd}, nil
}

// Accept waits for the next connection.
func (l *vsockListener) Accept() (*os.File, error) {
	nfd, _, err := unix.Accept4(l.fd, unix.SOCK_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), "vsock"), nil
}

// Close stops listening.
func (l *vsockListener) Close() error { return unix.Close(l.fd) }
