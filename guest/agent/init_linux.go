package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// ModulesFile lists the kernel modules PID 1 loads, one per line, in order.
const ModulesFile = "/etc/fluxvm/modules"

const (
	portWait      = 10 * time.Second       // how long the port may take to show up before we complain
	eofRetry      = 50 * time.Millisecond  // pause when the host side is not connected
	portPollEvery = 10 * time.Millisecond  // virtio devices probe asynchronously
	serveRetry    = 500 * time.Millisecond // pause before reopening a failed port
)

// RunInit does what PID 1 of the FluxVM initramfs must: mount the kernel file systems,
// load the virtio modules, reap orphans, bring up lo, then serve the host on the agent
// port for ever. It only returns on a fatal error.
func RunInit(ctx context.Context) error {
	mountAll()
	console, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		console = os.Stderr
	} else {
		// Go's panics and our children's inherited stderr land on the serial console.
		_ = unix.Dup3(int(console.Fd()), 1, 0)
		_ = unix.Dup3(int(console.Fd()), 2, 0)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(console, "fluxvm-guest: "+format+"\n", args...)
	}
	os.Setenv("PATH", protocol.DefaultExecPath)
	os.Setenv("HOME", "/")
	if b, err := os.ReadFile("/etc/hostname"); err == nil {
		if name := strings.TrimSpace(string(b)); name != "" {
			if err := unix.Sethostname([]byte(name)); err != nil {
				logf("set hostname %q: %v", name, err)
			}
		}
	}
	if err := linkUp("lo"); err != nil {
		logf("bring up lo: %v", err)
	}
	loadModules(logf)

	reaper := NewReaper()
	go reaper.Run(ctx)
	srv := NewServer(Options{
		Logf:          logf,
		PowerOff:      func() error { unix.Sync(); return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF) },
		Reboot:        func() error { unix.Sync(); return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART) },
		ManageNetwork: true,
		Reaper:        reaper,
	})
	for ctx.Err() == nil {
		path := waitForPort(ctx, logf)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			logf("open agent port %s: %v", path, err)
			time.Sleep(serveRetry)
			continue
		}
		fmt.Fprintln(console, protocol.ReadyLine)
		err = srv.Serve(ctx, &retryEOF{rw: f})
		f.Close()
		logf("agent port %s: %v; reopening", path, err)
		time.Sleep(serveRetry)
	}
	return ctx.Err()
}

// RunPort serves on path without any PID 1 duty, for testing the agent as a normal
// process: a unix socket is dialled and served until it closes; anything else (a
// virtio port, a FIFO) is opened and served for ever. Shutdown exits the process.
func RunPort(ctx context.Context, path string, logf func(string, ...any)) error {
	srv := NewServer(Options{
		Logf:     logf,
		PowerOff: func() error { logf("shutdown requested; exiting"); os.Exit(0); return nil },
	})
	if fi, err := os.Stat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		conn, err := net.Dial("unix", path)
		if err != nil {
			return fmt.Errorf("dial agent socket %s: %w", path, err)
		}
		defer conn.Close()
		return srv.Serve(ctx, conn)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open agent port: %w", err)
	}
	defer f.Close()
	return srv.Serve(ctx, &retryEOF{rw: f})
}

// retryEOF reads a virtio-serial port, which returns EOF while the host side is not
// connected: wait and read again rather than give up or spin.
type retryEOF struct{ rw io.ReadWriter }

func (r *retryEOF) Read(p []byte) (int, error) {
	for {
		n, err := r.rw.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		time.Sleep(eofRetry)
	}
}

func (r *retryEOF) Write(p []byte) (int, error) { return r.rw.Write(p) }

func mountAll() {
	for _, m := range []struct {
		src, dir, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			// No console yet: the kernel's own console (if /dev/console was in the
			// initramfs) is our stderr.
			fmt.Fprintf(os.Stderr, "fluxvm-guest: mount %s on %s: %v\n", m.fstype, m.dir, err)
		}
	}
}

// loadModules loads the modules named in ModulesFile, in order, from the running
// kernel's module tree. A line is a module name or a path relative to that tree.
func loadModules(logf func(string, ...any)) {
	b, err := os.ReadFile(ModulesFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logf("read %s: %v", ModulesFile, err)
		}
		return
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	root := filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]))
	byName := map[string]string{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			byName[moduleName(p)] = p
		}
		return nil
	})
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path := byName[moduleName(line)]
		if strings.Contains(line, "/") {
			path = filepath.Join(root, line)
		}
		if path == "" {
			logf("load module %s: not found under %s", line, root)
			continue
		}
		if err := loadModule(path); err != nil && !errors.Is(err, unix.EEXIST) {
			logf("load module %s: %v", path, err)
		}
	}
}

func moduleName(p string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".ko"), "-", "_")
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.FinitModule(int(f.Fd()), "", 0)
}

// waitForPort finds the /dev node of the virtio-serial port named protocol.PortName.
// The device appears once virtio_console has probed, so poll; complain after portWait
// but keep looking, since an init that gives up takes the guest down.
func waitForPort(ctx context.Context, logf func(string, ...any)) string {
	deadline := time.Now().Add(portWait)
	warned := false
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != protocol.PortName {
				continue
			}
			dev := filepath.Join("/dev", filepath.Base(filepath.Dir(n)))
			if _, err := os.Stat(dev); err == nil {
				return dev
			}
		}
		if !warned && time.Now().After(deadline) {
			logf("no virtio-serial port named %s after %s (is the virtserialport device configured?); still waiting", protocol.PortName, portWait)
			warned = true
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(portPollEvery):
		}
	}
}

// linkUp sets IFF_UP on an interface with the classic ioctl: no netlink code needed.
func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
