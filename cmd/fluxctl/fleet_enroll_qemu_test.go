package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/agent/link"
	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestEnrolledNodeRunsAQEMUGuestAndItsCredentialReadsNothingElse: a node
// enrolls by pairing (fluxvm-agent node enroll, both codes compared), with
// no operator token in its config; central places a tenant's real QEMU VM
// on it and runs a command in it through the node's channel; and the
// node's credential, tried on every route of central's access table, opens
// only its own heartbeat and channel: nothing of another node or tenant.
func TestEnrolledNodeRunsAQEMUGuestAndItsCredentialReadsNothingElse(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	f := fleettest.Start(t, fleettest.WithQEMU(image.DefaultDir()), fleettest.WithEnrollment())
	if f.EnrollCodes[0] == "" || f.EnrollCodes[0] != f.EnrollCodes[1] {
		t.Fatalf("codes compared at enrollment: node %q, central %q", f.EnrollCodes[0], f.EnrollCodes[1])
	}
	cfg, err := os.ReadFile(f.NodeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), f.OperatorToken) {
		t.Fatalf("the enrolled node's config holds the operator's token:\n%s", cfg)
	}
	credPath := filepath.Join(f.NodeStateDir, link.CredentialFile)
	fi, err := os.Stat(credPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the node's credential file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	cred, err := link.LoadCredential(f.NodeStateDir)
	if err != nil || !strings.HasPrefix(cred.Credential, sdk.NodeCredentialPrefix) {
		t.Fatalf("credential: %+v %v", cred, err)
	}

	op := fleetCLI(f, f.OperatorToken)
	peers := op.tty().run(t, "fleet", "peers").ok(t, "peers").stdout
	if !strings.Contains(peers, "node-1") || !strings.Contains(peers, "node") {
		t.Fatalf("fleet peers does not list the enrolled node:\n%s", peers)
	}
	n := decode[sdk.FleetNode](t, "node", op.run(t, "fleet", "node", f.Node).ok(t, "node").stdout)
	if !n.Enrolled {
		t.Fatalf("central does not mark %s enrolled: %+v", f.Node, n)
	}

	f.CatalogImage(t, "debian-minimal")
	_, tokenA := f.Tenant(t, "acme", nil)
	idB, tokenB := f.Tenant(t, "globex", nil)
	a, b := fleetCLI(f, tokenA), fleetCLI(f, tokenB)
	vmA := decode[sdk.FleetCreateVMResponse](t, "launch", a.run(t, "fleet", "launch", "a-1", "--image", "debian-minimal", "--wait", "--wait-timeout", "3m").ok(t, "launch a-1").stdout)
	if vmA.Node != f.Node {
		t.Fatalf("a-1 placed on %q", vmA.Node)
	}
	if r := a.run(t, "fleet", "run", "a-1", "--", "uname", "-s").ok(t, "run uname"); !strings.Contains(r.stdout, "Linux") {
		t.Fatalf("uname -s in the guest printed %q", r.stdout)
	}
	vmB := decode[sdk.FleetCreateVMResponse](t, "launch", b.run(t, "fleet", "launch", "b-1", "--image", "debian-minimal").ok(t, "launch b-1").stdout)

	// Every route of the table, filled once with this node's own objects
	// (its name, tenant A's VM) and once with others' (another node, tenant
	// B's VM and id).
	own := map[string]string{"name": f.Node, "node": f.Node, "id": vmA.VM.ID, "key": "k", "email": "a@example.com", "ticket": "t"}
	other := map[string]string{"name": "node-2", "node": f.Node, "id": vmB.VM.ID, "key": "k", "email": "b@example.com", "ticket": "t"}
	otherTenant := map[string]string{"name": idB, "node": f.Node, "id": idB, "key": "k", "email": "b@example.com", "ticket": "t"}
	refused := 0
	for _, rt := range api.Routes() {
		if rt.Access == api.Public {
			continue
		}
		for _, vars := range []map[string]string{own, other, otherTenant} {
			if rt.NodeOwn && vars["name"] == f.Node {
				continue // its heartbeat and channel: the running node uses them
			}
			path := rt.Path
			for k, v := range vars {
				path = strings.ReplaceAll(path, "{"+k+"}", v)
			}
			hr, err := http.NewRequest(rt.Method, f.URL+path, strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			hr.Header.Set("Authorization", "Bearer "+cred.Credential)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				t.Fatalf("%s %s: %v", rt.Method, path, err)
			}
			var body struct{ Error string }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			refused++
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s with the node's credential: %d %q, want 403", rt.Method, path, resp.StatusCode, body.Error)
			}
		}
	}
	if refused < 3*100 {
		t.Fatalf("only %d calls tried", refused)
	}
	a.run(t, "fleet", "rm", "a-1", "-y").ok(t, "rm a-1")
	b.run(t, "fleet", "rm", "b-1", "-y").ok(t, "rm b-1")
}
