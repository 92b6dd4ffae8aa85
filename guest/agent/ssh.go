package agent

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// SSH server set-up in the guest. The image carries Debian's OpenSSH server; the agent
// gives each VM its own host key at boot, starts sshd, and installs the keys a launch
// carried for the image's login (fluxvm-guest ssh-keys USER, run by the node agent).

// Where the SSH server's files live in the guest.
const (
	SSHDPath       = "/usr/sbin/sshd"
	SSHHostKeyPath = "/etc/ssh/ssh_host_ed25519_key"
)

// Limits of what ssh-keys accepts; the APIs refuse more before a launch (sdk).
const (
	maxAuthorizedKeys = 16
	maxKeyLine        = 8 << 10
)

// sshUserRE is a login InstallAuthorizedKeys creates: what useradd accepts by default.
var sshUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// WriteHostKey writes a new ed25519 host key to path (OpenSSH's private key format,
// mode 0600) and its public half to path+".pub", unless path exists already. It is
// written in Go rather than by ssh-keygen -A, which would also make an RSA key: seconds
// of arithmetic under TCG at every first boot.
func WriteHostKey(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	const comment = "fluxvm-host"
	blob := sshString(nil, []byte("ssh-ed25519"))
	blob = sshString(blob, pub)

	var check [4]byte
	if _, err := rand.Read(check[:]); err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	// openssh-key-v1, unencrypted (PROTOCOL.key in OpenSSH's sources).
	var sec []byte
	sec = append(sec, check[:]...)
	sec = append(sec, check[:]...)
	sec = sshString(sec, []byte("ssh-ed25519"))
	sec = sshString(sec, pub)
	sec = sshString(sec, priv) // seed followed by the public key, 64 bytes
	sec = sshString(sec, []byte(comment))
	for i := byte(1); len(sec)%8 != 0; i++ {
		sec = append(sec, i)
	}
	key := []byte("openssh-key-v1\x00")
	key = sshString(key, []byte("none"))
	key = sshString(key, []byte("none"))
	key = sshString(key, nil)
	key = binary.BigEndian.AppendUint32(key, 1)
	key = sshString(key, blob)
	key = sshString(key, sec)

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	if err := os.WriteFile(path+".pub", []byte("ssh-ed25519 "+base64.StdEncoding.EncodeToString(blob)+" "+comment+"\n"), 0o644); err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ssh host key: %w", err)
	}
	return nil
}

// sshdWait bounds how long WaitSSHD waits for the SSH server to listen.
const sshdWait = 60 * time.Second

// WaitSSHD waits until the image's SSH server accepts connections on port 22 (at most
// a minute), so that a VM whose keys were just installed takes ssh once the node calls
// it ready: the agent starts sshd in the background, and under TCG it may need a few
// seconds after the agent answered. An image without sshd returns at once.
func WaitSSHD() error {
	if _, err := os.Stat(SSHDPath); err != nil {
		return nil
	}
	deadline := time.Now().Add(sshdWait)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:22", time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the SSH server does not accept connections on port 22 after %s (see /var/log/sshd.log): %w", sshdWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sshString(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// InstallAuthorizedKeys makes root/home/USER/.ssh/authorized_keys hold exactly the
// keys read from r (one per line; blank lines and # comments are dropped), owned by
// user, whom it adds to root/etc/passwd and root/etc/group first when missing (home
// /home/USER, shell /bin/sh, the first free id from 1000). root is "/" in a guest.
func InstallAuthorizedKeys(root, user string, r io.Reader) error {
	if !sshUserRE.MatchString(user) {
		return fmt.Errorf("ssh keys: %q is not a valid login (1-32 lowercase letters, digits, '_' or '-')", user)
	}
	var keys []string
	sc := bufio.NewScanner(io.LimitReader(r, (maxAuthorizedKeys+1)*(maxKeyLine+1)))
	sc.Buffer(make([]byte, 0, 4096), maxKeyLine+1)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if len(strings.Fields(l)) < 2 {
			return fmt.Errorf("ssh keys: line %q is not an OpenSSH public key", clip(l))
		}
		keys = append(keys, l)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ssh keys: read: %w (at most %d keys of %d bytes)", err, maxAuthorizedKeys, maxKeyLine)
	}
	if len(keys) > maxAuthorizedKeys {
		return fmt.Errorf("ssh keys: %d keys; at most %d", len(keys), maxAuthorizedKeys)
	}
	uid, gid, home, err := ensureUser(root, user)
	if err != nil {
		return fmt.Errorf("ssh keys: %w", err)
	}
	dir := filepath.Join(root, home, ".ssh")
	for _, d := range []string{filepath.Join(root, home), dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("ssh keys: %w", err)
		}
		// sshd's StrictModes refuses keys under a directory others may write.
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("ssh keys: %w", err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("ssh keys: %w", err)
		}
	}
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(k + "\n")
	}
	path := filepath.Join(dir, "authorized_keys")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("ssh keys: %w", err)
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		return fmt.Errorf("ssh keys: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ssh keys: %w", err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// ensureUser finds user in root/etc/passwd, or adds it (and a group of the same name),
// and returns its ids and home.
func ensureUser(root, user string) (uid, gid int, home string, err error) {
	passwd := filepath.Join(root, "etc/passwd")
	b, err := os.ReadFile(passwd)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, "", err
	}
	used := map[int]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) < 7 {
			continue
		}
		u, _ := strconv.Atoi(f[2])
		g, _ := strconv.Atoi(f[3])
		if f[0] == user {
			return u, g, f[5], nil
		}
		used[u], used[g] = true, true
	}
	groupFile := filepath.Join(root, "etc/group")
	gb, err := os.ReadFile(groupFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, "", err
	}
	for _, l := range strings.Split(string(gb), "\n") {
		if f := strings.Split(l, ":"); len(f) >= 3 {
			g, _ := strconv.Atoi(f[2])
			used[g] = true
		}
	}
	id := 1000
	for used[id] {
		id++
	}
	home = "/home/" + user
	// "*" in the password field: no password can log in, and OpenSSH (which treats
	// only a "!" prefix as a locked account) still takes keys.
	if err := appendLine(passwd, fmt.Sprintf("%s:*:%d:%d::%s:/bin/sh", user, id, id, home), 0o644); err != nil {
		return 0, 0, "", err
	}
	if err := appendLine(groupFile, fmt.Sprintf("%s:x:%d:", user, id), 0o644); err != nil {
		return 0, 0, "", err
	}
	return id, id, home, nil
}

func appendLine(path, line string, mode os.FileMode) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	b = append(b, line+"\n"...)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
