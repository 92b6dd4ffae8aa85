package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteHostKeyMakesAKeyOpenSSHReads: the key the agent writes in Go is
// one the real ssh-keygen reads (and derives the same public key from), and
// a second call keeps the first key.
func TestWriteHostKeyMakesAKeyOpenSSHReads(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen not found: apt-get install openssh-client")
	}
	path := filepath.Join(t.TempDir(), "etc/ssh/ssh_host_ed25519_key")
	if err := WriteHostKey(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode = %v, %v; want 0600", st.Mode(), err)
	}
	out, err := exec.Command("ssh-keygen", "-y", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen -y: %v: %s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	derived, written := strings.Fields(string(out)), strings.Fields(string(pub))
	if len(derived) < 2 || len(written) < 2 || derived[0] != "ssh-ed25519" || derived[1] != written[1] {
		t.Fatalf("ssh-keygen derives %q from the key; the .pub says %q", out, pub)
	}
	before, _ := os.ReadFile(path)
	if err := WriteHostKey(path); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("a second WriteHostKey replaced the host key; it must keep it")
	}
}

// TestInstallAuthorizedKeysAddsTheUserAndReplacesTheKeys: a missing login is
// added (passwd, group, home) with the modes sshd's StrictModes wants; a
// second install replaces the keys rather than appending; an existing
// login keeps its entry; bad logins and too many keys are refused.
func TestInstallAuthorizedKeysAddsTheUserAndReplacesTheKeys(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nusers:x:1000:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const k1, k2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA1 one@x", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA2 two@x"
	if err := InstallAuthorizedKeys(root, "admin", strings.NewReader("# a comment\n\n"+k1+"\n"+k2+"\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	// 1000 is taken by a group: the next free id.
	if !strings.HasSuffix(string(b), "\nadmin:*:1001:1001::/home/admin:/bin/sh\n") {
		t.Fatalf("passwd:\n%s", b)
	}
	if g, _ := os.ReadFile(filepath.Join(root, "etc/group")); !strings.HasSuffix(string(g), "\nadmin:x:1001:\n") {
		t.Fatalf("group:\n%s", g)
	}
	ak := filepath.Join(root, "home/admin/.ssh/authorized_keys")
	for path, mode := range map[string]os.FileMode{filepath.Join(root, "home/admin"): 0o700, filepath.Dir(ak): 0o700, ak: 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %o", path, st.Mode(), err, mode)
		}
	}
	if got, _ := os.ReadFile(ak); string(got) != k1+"\n"+k2+"\n" {
		t.Errorf("authorized_keys = %q", got)
	}
	if err := InstallAuthorizedKeys(root, "admin", strings.NewReader(k2+"\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(ak); string(got) != k2+"\n" {
		t.Errorf("after a second install authorized_keys = %q; want only the new key", got)
	}
	if b2, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); strings.Count("\n"+string(b2), "\nadmin:") != 1 {
		t.Errorf("admin added twice:\n%s", b2)
	}
	// An existing login keeps its home.
	if err := InstallAuthorizedKeys(root, "root", strings.NewReader(k1)); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "root/.ssh/authorized_keys")); string(got) != k1+"\n" {
		t.Errorf("root's authorized_keys = %q", got)
	}

	var many strings.Builder
	for range maxAuthorizedKeys + 1 {
		many.WriteString(k1 + "\n")
	}
	for _, tc := range []struct {
		user, keys, says string
	}{
		{"../etc", k1, "not a valid login"},
		{"Admin", k1, "not a valid login"},
		{"admin", "hello\n", "not an OpenSSH public key"},
		{"admin", many.String(), "at most 16"},
		{"admin", "ssh-rsa " + strings.Repeat("A", maxKeyLine+10), "at most 16 keys of 8192 bytes"},
	} {
		err := InstallAuthorizedKeys(root, tc.user, strings.NewReader(tc.keys))
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("InstallAuthorizedKeys(%q, %.20q) = %v; want an error saying %q", tc.user, tc.keys, err, tc.says)
		}
	}
	if got, _ := os.ReadFile(ak); string(got) != k2+"\n" {
		t.Errorf("a refused install changed authorized_keys: %q", got)
	}
}
