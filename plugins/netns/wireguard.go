//go:build linux

package netns

import (
	"bufio"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
)

// The kernel here may have no WireGuard module, so an overlay's tunnel is
// wireguard-go in user space: one process per overlay device
// (`fluxvm-agent plugin netns-wireguard DEVICE`), started by the plugin in
// its own session so that it outlives the plugin process, as QEMU outlives
// the driver. It owns the TUN device; deleting the link ends it. It is
// configured through WireGuard's own configuration protocol (UAPI) on an
// abstract unix socket, which belongs to the network namespace, so two nodes
// in two namespaces of one host never see each other's.

// uapiSocket is the abstract socket of a device's process.
func uapiSocket(dev string) string { return "@fluxvm-wireguard-" + dev }

// RunWireGuard is the main of `fluxvm-agent plugin netns-wireguard DEVICE`:
// it makes the TUN device, serves the configuration protocol, prints "ready"
// on its standard output, and returns when the device goes.
func RunWireGuard(args []string) int {
	if len(args) != 1 || !strings.HasPrefix(args[0], wgPrefix) {
		fmt.Fprintf(os.Stderr, "usage: fluxvm-agent plugin netns-wireguard %sXXXXXXXXXX (the netns plugin starts it)\n", wgPrefix)
		return 2
	}
	name := args[0]
	tdev, err := tun.CreateTUN(name, device.DefaultMTU)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wireguard %s: make the tun device: %v\n", name, err)
		return 1
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "wireguard "+name+": "))
	l, err := net.Listen("unix", uapiSocket(name))
	if err != nil {
		dev.Close()
		fmt.Fprintf(os.Stderr, "wireguard %s: listen for configuration: %v\n", name, err)
		return 1
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	fmt.Println("ready")
	<-dev.Wait()
	l.Close()
	return 0
}

// startWireGuard starts the device's process and waits until it serves.
func startWireGuard(dev, logDir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "plugin", "netns-wireguard", dev)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if logDir != "" {
		if f, err := os.OpenFile(logDir+"/wireguard-"+dev+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			defer f.Close()
			cmd.Stderr = f
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start wireguard for %s: %w", dev, err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	go func() { _ = cmd.Wait() }() // reaped when it ends, plugin alive or not
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			return fmt.Errorf("wireguard for %s did not start: %v", dev, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("wireguard for %s did not start within 10 s", dev)
	}
}

// uapi sends one request of the configuration protocol ("get=1\n\n" or
// "set=1\n...\n") and returns the reply's key=value lines without errno.
func uapi(dev, req string) ([][2]string, error) {
	c, err := net.DialTimeout("unix", uapiSocket(dev), 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("reach wireguard of %s: %w", dev, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if !strings.HasSuffix(req, "\n\n") {
		req += "\n"
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return nil, fmt.Errorf("configure wireguard of %s: %w", dev, err)
	}
	var out [][2]string
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, "=")
		if k == "errno" {
			if v != "0" {
				return nil, fmt.Errorf("wireguard of %s refused the configuration (errno %s)", dev, v)
			}
			return out, nil
		}
		out = append(out, [2]string{k, v})
	}
	return nil, fmt.Errorf("wireguard of %s: no answer: %v", dev, sc.Err())
}

// A key is a Curve25519 key of 32 bytes: people and the contract see it in
// base64, the configuration protocol in hex.
type key [32]byte

func newPrivateKey() (key, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return key{}, err
	}
	return key(k.Bytes()), nil
}

func (k key) public() key {
	priv, err := ecdh.X25519().NewPrivateKey(k[:])
	if err != nil {
		return key{} // 32 bytes are always a valid X25519 key
	}
	return key(priv.PublicKey().Bytes())
}

func (k key) isZero() bool   { return k == key{} }
func (k key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }
func (k key) hex() string    { return hex.EncodeToString(k[:]) }
func parseKey(s string) (key, bool) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return key{}, false
	}
	return key(b), true
}

func parseHexKey(s string) key {
	var k key
	b, err := hex.DecodeString(s)
	if err == nil && len(b) == 32 {
		copy(k[:], b)
	}
	return k
}
