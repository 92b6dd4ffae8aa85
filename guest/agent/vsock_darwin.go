package agent

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	powerOffCommand = []string{"/sbin/shutdown", "-h", "now"}
	rebootCommand   = []string{"/sbin/shutdown", "-r", "now"}
)

// macOS's virtio-vsock address family and address (<sys/vsock.h>); the
// syscall packages know neither, so bind and accept are called directly.
const (
	afVSOCK      = 40
	vmaddrCIDAny = 0xFFFFFFFF
)

type sockaddrVM struct {
	Len       uint8
	Family    uint8
	Reserved1 uint16
	Port      uint32
	CID       uint32
}

// listenVsock listens on port for any CID.
func listenVsock(port uint32) (*vsockListener, error) {
	fd, err := unix.Socket(afVSOCK, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	sa := sockaddrVM{Len: uint8(unsafe.Sizeof(sockaddrVM{})), Family: afVSOCK, Port: port, CID: vmaddrCIDAny}
	//lint:ignore SA1019 libSystem's bind takes a sockaddr; x/sys/unix has no wrapper for AF_VSOCK's
	if _, _, errno := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); errno != 0 {
		unix.Close(fd)
		return nil, errno
	}
	if err := unix.Listen(fd, 4); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &vsockListener{fd: fd}, nil
}

// Accept waits for the next connection (with no peer address: unix.Accept
// would refuse the unknown family).
func (l *vsockListener) Accept() (*os.File, error) {
	//lint:ignore SA1019 unix.Accept refuses AF_VSOCK's peer address; accept without one
	nfd, _, errno := unix.Syscall(unix.SYS_ACCEPT, uintptr(l.fd), 0, 0)
	if errno != 0 {
		return nil, errno
	}
	unix.CloseOnExec(int(nfd))
	return os.NewFile(nfd, "vsock"), nil
}

// Close stops listening.
func (l *vsockListener) Close() error { return unix.Close(l.fd) }
