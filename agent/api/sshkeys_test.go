package api

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestCreateChecksSSHKeysWithHintsAndAcceptsGoodOnes: the node applies the
// same rule as central (sdk.CheckSSHAuthorizedKeys), with a 400 and a hint,
// and nothing is created; good keys and a login are accepted (the sim
// driver runs no guest to install them in: the QEMU tests in guest/image and
// cmd/fluxctl show them installed).
func TestCreateChecksSSHKeysWithHintsAndAcceptsGoodOnes(t *testing.T) {
	e := newEnv(t, nil)
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0b3Bz me@laptop"
	many := make([]string, sdk.MaxSSHAuthorizedKeys+1)
	for i := range many {
		many[i] = key
	}
	for _, c := range []struct {
		name      string
		fields    map[string]any
		errHas    string
		hintHas   string
		specValid bool // the spec's bounds let it through; the server's rule refuses it
	}{
		{"not a key", map[string]any{"ssh_authorized_keys": []string{"my password"}}, "is not an OpenSSH public key", "id_ed25519.pub", true},
		{"options before the key", map[string]any{"ssh_authorized_keys": []string{`command="id" ` + key}}, "is not an OpenSSH public key", "ssh-ed25519", true},
		{"two lines in one entry", map[string]any{"ssh_authorized_keys": []string{key + "\n" + key}}, "spans several lines", "one key per entry", true},
		{"too many keys", map[string]any{"ssh_authorized_keys": many}, "ssh_authorized_keys", "", false},
		{"a bad login", map[string]any{"ssh_authorized_keys": []string{key}, "ssh_user": "Admin"}, "not a valid login", "lowercase", false},
		{"keys for a macOS guest", map[string]any{"ssh_authorized_keys": []string{key}, "guest_os": "macos"}, "macOS guest", "Linux image", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			r := map[string]any{"name": "keyed", "image": e.image, "vcpus": 1, "memory_mib": 128}
			for k, v := range c.fields {
				r[k] = v
			}
			out := e.call(req{method: "POST", path: "/v1/vms", token: adminToken, body: jsonBody(r)})
			if out.status != 400 {
				t.Fatalf("status %d, want 400; body %s", out.status, out.body)
			}
			if (out.specErr == nil) != c.specValid {
				t.Fatalf("the spec says of this request: %v; want valid=%v", out.specErr, c.specValid)
			}
			eb := out.errorBody(t)
			if !strings.Contains(eb.Error, c.errHas) || !strings.Contains(eb.Hint, c.hintHas) || eb.Hint == "" {
				t.Fatalf("error body %+v, want error with %q and a hint with %q", eb, c.errHas, c.hintHas)
			}
			if vms := e.list(); len(vms) != 0 {
				t.Fatalf("VMs after the refused create: %+v", vms)
			}
		})
	}
	e.t = t
	vm := e.create("keyed", `, "ssh_authorized_keys": ["`+key+`"], "ssh_user": "debian"`)
	if vm.Name != "keyed" {
		t.Fatalf("create with a key = %+v", vm)
	}
}
