package link

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCredentialIsWrittenMode0600AndReadBack: the state dir's credential
// file is 0600 from the start and reads back whole; a missing file is "not
// enrolled", a damaged one an error that says to enroll again.
func TestCredentialIsWrittenMode0600AndReadBack(t *testing.T) {
	dir := t.TempDir()
	if c, err := LoadCredential(dir); c != nil || err != nil {
		t.Fatalf("no file: %+v %v", c, err)
	}
	want := &Credential{CentralURL: "http://127.0.0.1:7799", Node: "n1", MemberID: "mem-1", Credential: "fvn_secret", EnrolledAt: time.Now().UTC().Truncate(time.Second)}
	if err := SaveCredential(dir, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CredentialFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	got, err := LoadCredential(dir)
	if err != nil || *got != *want {
		t.Fatalf("read back %+v %v, want %+v", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, CredentialFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCredential(dir); err == nil || !strings.Contains(err.Error(), "enroll again") {
		t.Fatalf("damaged file: %v", err)
	}
}

// FuzzLoadCredential: whatever the file holds, loading it returns a
// credential with a secret or an error, and never panics.
func FuzzLoadCredential(f *testing.F) {
	f.Add([]byte(`{"central_url": "http://c", "node": "n", "credential": "fvn_x"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, CredentialFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadCredential(dir)
		if err == nil && (c == nil || c.Credential == "") {
			t.Fatalf("%q loaded as %+v without an error", data, c)
		}
	})
}
