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

// ModulesFile lists the kernel modules PID 1 loads before it opens the agent port:
// what the port needs (virtio transports, virtio_console). One per line, in order.
const ModulesFile = "/etc/fluxvm/modules"

// LateModulesFile lists the modules PID 1 loads right after the agent announced
// itself (disk, network), in the same format; exec and network requests wait for them.
const LateModulesFile = "/etc/fluxvm/modules.late"

const (
	portWait    = 10 * time.Second       // how long the port may take to show up before we complain
	eofRetry    = 50 * time.Millisecond  // pause when the host side is not connected
	portPoll    = 10 * time.Millisecond  // how often to look for the port without uevents
	portRecheck = 100 * time.Millisecond // how often to look anyway while waiting for uevents
	serveRetry  = 500 * time.Millisecond // pause before reopening a failed port
)

// RunInit does what PID 1 of the FluxVM initramfs must: mount the kernel file systems,
// let kernel errors reach the console, load the modules the agent port needs, reap
// orphans, then serve the host on the agent port for ever. Right after the first ready
// message it loads the other modules and brings up lo (Setup); requests that need them
// wait; then it starts the image's SSH server. In a VM with a display it then loads the display drivers and writes a banner on
// the screen. It only returns on a fatal error.
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
	if _, err := raiseConsoleLevel(printkFile); err != nil {
		logf("%v", err)
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	display := kernelParam(string(cmdline), protocol.DisplayParam)
	mods := findModules()
	if err := mods.load(ModulesFile); err != nil {
		// Without them the port may never show up; waitForPort says so.
		logf("%v", err)
	}
	var srv *Server
	reaper := NewReaper()
	setup := NewSetup(func() error {
		var errs []error
		if err := linkUp("lo"); err != nil {
			errs = append(errs, fmt.Errorf("bring up lo: %w", err))
		}
		if err := mods.load(LateModulesFile); err != nil {
			errs = append(errs, err)
		}
		if err := LinkDisks("/sys/block", "/dev"); err != nil {
			errs = append(errs, err)
		}
		err := errors.Join(errs...)
		if err != nil {
			logf("%v", err)
		}
		// sshd binds to every address: it need not wait for the network's set-up.
		go runSSHD(reaper, logf)
		if display {
			// After what commands need, and without holding them up: the screen
			// is for people, who can wait the moment it takes.
			go showConsole(mods, srv.Info(), logf)
		}
		return err
	})

	go reaper.Run(ctx)
	srv = NewServer(Options{
		Logf:          logf,
		PowerOff:      func() error { unix.Sync(); return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF) },
		Reboot:        func() error { unix.Sync(); return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART) },
		ManageNetwork: true,
		Reaper:        reaper,
		Setup:         setup,
		LinkDisks:     func() error { return LinkDisks("/sys/block", "/dev") },
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

// moduleTree is the running kernel's module directory and its modules by name.
type moduleTree struct {
	root   string
	byName map[string]string
}

// findModules indexes the .ko files under /lib/modules/<running release>.
func findModules() moduleTree {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	t := moduleTree{root: filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:])), byName: map[string]string{}}
	_ = filepath.WalkDir(t.root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			t.byName[moduleName(p)] = p
		}
		return nil
	})
	return t
}

// load loads the modules a list file names, in order; a line is a module name or a
// path relative to the module tree. A missing list file is no error. It goes on past
// a module that fails and returns every failure.
func (t moduleTree) load(list string) error {
	b, err := os.ReadFile(list)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read module list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path := t.byName[moduleName(line)]
		if strings.Contains(line, "/") {
			path = filepath.Join(t.root, line)
		}
		if path == "" {
			errs = append(errs, fmt.Errorf("load module %s: not found under %s", line, t.root))
			continue
		}
		if err := loadModule(path); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("load module %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
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
// The port shows up a little after virtio_console has loaded (the host announces it,
// then its name), so wait: woken by the kernel's uevents where we can listen to them,
// by polling otherwise. Complain after portWait but keep looking, since an init that
// gives up takes the guest down.
func waitForPort(ctx context.Context, logf func(string, ...any)) string {
	// Listening starts before the first look, so no event between the two is lost.
	events := listenUevents()
	defer events.close()
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
		if ctx.Err() != nil {
			return ""
		}
		events.wait()
	}
}

// uevents is a socket on the kernel's device events (NETLINK_KOBJECT_UEVENT), or -1
// when none could be opened.
type uevents int

func listenUevents() uevents {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return -1
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return -1
	}
	return uevents(fd)
}

// wait returns when device events arrived (it discards them: the caller looks at
// sysfs again) or after portRecheck; without a socket it sleeps portPoll.
func (u uevents) wait() {
	if u < 0 {
		time.Sleep(portPoll)
		return
	}
	fds := []unix.PollFd{{Fd: int32(u), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, int(portRecheck/time.Millisecond))
	buf := make([]byte, 8<<10)
	for {
		if _, _, err := unix.Recvfrom(int(u), buf, 0); err != nil {
			return
		}
	}
}

func (u uevents) close() {
	if u >= 0 {
		unix.Close(int(u))
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
