package main

import (
	"encoding/csv"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
	"sigs.k8s.io/yaml"
)

// TestEveryListCommandPrintsCSVYAMLAndTheColumnsAsked drives each command
// that lists through the one renderer against a real central: -c picks
// columns on a terminal and in CSV, -o yaml is the API's answer, an unknown
// column is refused with the valid ones, and IDs show only with -o wide.
func TestEveryListCommandPrintsCSVYAMLAndTheColumnsAsked(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	tenantID, token := f.Tenant(t, "acme", map[string]int64{"max_leased_hosts": 1})
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)
	node := cli{env: map[string]string{envNode: f.NodeURL, envToken: f.OperatorToken}}

	// Something in every list: a lease, a VM on the leased node, a pool, a
	// drain that keeps the VM (the node is leased: --force).
	l := decode[sdk.Lease](t, "lease create", tenant.run(t, "fleet", "lease", "create").ok(t, "lease create").stdout)
	vm := decode[sdk.FleetCreateVMResponse](t, "launch", tenant.run(t, "fleet", "launch", "web-1", "--image", "debian-minimal").ok(t, "launch").stdout)
	tenant.run(t, "fleet", "pools", "create", "ci", "--image", "debian-minimal", "--size", "0").ok(t, "pools create")
	key := decode[sdk.APIKeyWithToken](t, "keys create", tenant.run(t, "fleet", "keys", "create", "ci-key").ok(t, "keys create").stdout)
	tenant.run(t, "fleet", "member-add", "alex@example.com", "--role", "owner").ok(t, "member-add")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		// The node's record has the VM from its next heartbeat.
		if n := decode[sdk.FleetNode](t, "node", op.run(t, "fleet", "node", f.Node).ok(t, "node").stdout); len(n.VMs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node never reported the VM")
		}
	}
	op.run(t, "fleet", "drain", f.Node, "--force", "--wait").ok(t, "drain")

	for _, c := range []struct {
		name string
		cli  cli
		args []string
		// pick is a -c; want a cell the picked columns show.
		pick, want string
		// hidden is an ID the table shows only with -o wide.
		hidden string
	}{
		{"vm list", node, []string{"vm", "list"}, "name,state,guest", "web-1", vm.VM.ID},
		{"fleet vms", tenant, []string{"fleet", "vms"}, "name,node,state", "web-1", vm.VM.ID},
		{"fleet vms tenants", op, []string{"fleet", "vms"}, "name,tenant,tenant-id", "acme", vm.VM.ID},
		{"fleet vms images", op, []string{"fleet", "vms"}, "name,image", "debian-minimal", vm.VM.ID},
		{"fleet nodes", op, []string{"fleet", "nodes"}, "name,state,free-vcpus", f.Node, ""},
		{"fleet node", op, []string{"fleet", "node", f.Node}, "name,tenant,state", "acme", vm.VM.ID},
		{"fleet capacity", op, []string{"fleet", "capacity"}, "node,free-vcpus,macos-slots", "", ""},
		{"fleet images", tenant, []string{"fleet", "images"}, "name,guest,memory", "debian-minimal", ""},
		{"fleet tenant list", op, []string{"fleet", "tenant", "list"}, "name,state,id", "acme", tenantID},
		{"fleet keys", tenant, []string{"fleet", "keys"}, "name,access,last-used", "ci-key", key.Key.ID},
		{"fleet keys of a tenant", op, []string{"fleet", "keys", "--tenant", "acme"}, "name,expires,id", key.Key.ID, key.Key.ID},
		{"fleet members", tenant, []string{"fleet", "members"}, "email,role,added-by", "alex@example.com", ""},
		{"fleet members of a tenant", op, []string{"fleet", "members", "--tenant", "acme"}, "email,last-sign-in", "alex@example.com", ""},
		{"fleet activity", op, []string{"fleet", "activity"}, "who,action,result,tenant-id", "acme", tenantID},
		{"fleet lease list", op, []string{"fleet", "lease", "list"}, "id,node,tenant", "acme", tenantID},
		{"fleet lease", tenant, []string{"fleet", "lease"}, "node,state,ends", l.Node, ""},
		{"fleet pools", op, []string{"fleet", "pools"}, "name,owner,size", "acme", tenantID},
		{"fleet pools status", tenant, []string{"fleet", "pools", "status", "ci"}, "member,node,state", "", ""},
		{"fleet drain-status", op, []string{"fleet", "drain-status", f.Node}, "vm,tenant,action", "kept", vm.VM.ID},
		{"fleet rebalance-plan", op, []string{"fleet", "rebalance-plan"}, "vm,from,to", "", ""},
		{"fleet usage", op, []string{"fleet", "usage"}, "tenant,vms,leases", "acme", tenantID},
		{"fleet bill", tenant, []string{"fleet", "bill"}, "description,amount", "", ""},
		{"fleet bill of every tenant", op, []string{"fleet", "bill"}, "tenant,total", "acme", tenantID},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := func(more ...string) []string { return append(slices.Clone(c.args), more...) }
			picked := strings.Split(c.pick, ",")

			// CSV: a header of the picked names, then a record of as many
			// cells per row.
			out := c.cli.run(t, args("-o", "csv", "-c", c.pick)...).ok(t, "-o csv -c").stdout
			recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil || len(recs) == 0 || !slices.Equal(recs[0], picked) {
				t.Fatalf("-o csv -c %s printed %q (%v), want a header of %v", c.pick, out, err, picked)
			}
			if c.want != "" && !slices.ContainsFunc(recs[1:], func(r []string) bool { return slices.Contains(r, c.want) }) {
				t.Fatalf("-o csv -c %s has no cell %q:\n%s", c.pick, c.want, out)
			}

			// On a terminal, -c shows those columns, headed as the table
			// heads them (a list without rows says so instead).
			r := c.cli.tty().run(t, args("-c", c.pick)...).ok(t, "-c")
			for _, p := range picked {
				if len(recs) > 1 {
					r.has(t, "-c "+c.pick, strings.ToUpper(strings.ReplaceAll(p, "-", " ")))
				}
			}
			if c.want != "" {
				r.has(t, "-c "+c.pick, c.want)
			}

			// YAML is the API's answer, with JSON's field names.
			y := c.cli.run(t, args("-o", "yaml")...).ok(t, "-o yaml").stdout
			asJSON, err := yaml.YAMLToJSON([]byte(y))
			if err != nil {
				t.Fatalf("-o yaml is not YAML (%v):\n%s", err, y)
			}
			fromYAML := decode[map[string]any](t, "-o yaml", string(asJSON))
			fromJSON := decode[map[string]any](t, "-o json", c.cli.run(t, args("-o", "json")...).ok(t, "-o json").stdout)
			if k, want := slices.Sorted(maps.Keys(fromYAML)), slices.Sorted(maps.Keys(fromJSON)); !slices.Equal(k, want) {
				t.Fatalf("-o yaml has the fields %v, -o json %v", k, want)
			}

			r = c.cli.run(t, args("-c", picked[0]+",nope", "-o", "table")...)
			r.refused(t, "-c nope", `unknown column "nope"`, "the columns are ")
			if !strings.Contains(r.stderr, " "+picked[0]+",") {
				t.Fatalf("-c nope: the hint does not list %s:\n%s", picked[0], r.stderr)
			}

			if c.hidden != "" {
				if out := c.cli.tty().run(t, args()...).ok(t, "table").stdout; strings.Contains(out, c.hidden) {
					t.Fatalf("the table shows the ID %s; it belongs in -o wide:\n%s", c.hidden, out)
				}
				c.cli.tty().run(t, args("-o", "wide")...).ok(t, "-o wide").has(t, "-o wide", c.hidden)
			}
		})
	}

	// The acceptance line, to the letter: a VM's name, node and state.
	out := tenant.run(t, "fleet", "vms", "-o", "csv", "-c", "name,node,state").ok(t, "vms csv").stdout
	if want := "name,node,state\nweb-1," + f.Node + ",running\n"; out != want {
		t.Fatalf("fleet vms -o csv -c name,node,state printed %q, want %q", out, want)
	}
	// Without -c, CSV has the table's columns.
	out = op.run(t, "fleet", "images", "-o", "csv").ok(t, "images csv").stdout
	if !strings.HasPrefix(out, "name,guest,vcpus,memory,ssh-user,description\ndebian-minimal,linux,") {
		t.Fatalf("fleet images -o csv printed %q", out)
	}

	// Refused before anything is sent: CSV of what is no list, -c with
	// JSON (piped, without -o), an unknown format.
	op.run(t, "fleet", "tenant", "get", "acme", "-o", "csv").refused(t, "csv of a tenant", "prints no table", "-o yaml")
	op.run(t, "fleet", "vms", "-c", "name").refused(t, "-c piped", "-c picks the columns", "add -o table or -o csv")
	op.run(t, "fleet", "vms", "-o", "xml").refused(t, "-o xml", `unknown output format "xml"`, "-o csv")
	// YAML is for every command, not only lists.
	got := op.run(t, "fleet", "tenant", "get", "acme", "-o", "yaml").ok(t, "tenant get -o yaml").stdout
	var tn sdk.Tenant
	if err := yaml.Unmarshal([]byte(got), &tn); err != nil || tn.ID != tenantID || !strings.Contains(got, "max_leased_hosts: 1") {
		t.Fatalf("tenant get -o yaml printed %q (%v)", got, err)
	}
	// -c completes column names after a comma.
	comp := op.run(t, "__complete", "fleet", "vms", "-c", "name,no").ok(t, "complete -c").stdout
	if !strings.Contains(comp, "name,node\n") {
		t.Fatalf("completion of -c name,no: %q", comp)
	}
	// The JSON of a list stays the API's.
	var list sdk.FleetVMList
	if err := json.Unmarshal([]byte(tenant.run(t, "fleet", "vms").ok(t, "vms").stdout), &list); err != nil || len(list.VMs) != 1 {
		t.Fatalf("fleet vms piped: %+v, %v", list, err)
	}
}
