package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetKeysMakeListAndRevokeAgainstARealCentral: a tenant makes a key
// (printed once with the warning), lists its keys as a table with access,
// last use and expiry, and uses the key as itself; the key cannot make one,
// a read-only key cannot change anything, and each refusal says what to
// do; revoke asks on a terminal and the key is refused from then on; the
// operator does the same for a tenant with --tenant.
func TestFleetKeysMakeListAndRevokeAgainstARealCentral(t *testing.T) {
	f := fleettest.Start(t)
	_, token := f.Tenant(t, "acme", nil)
	tenant, op := fleetCLI(f, token), fleetCLI(f, f.OperatorToken)

	r := tenant.tty().run(t, "fleet", "keys", "create", "ci-github").ok(t, "keys create")
	m := regexp.MustCompile(`(?m)^  key  (fvk_[A-Za-z0-9_-]{43})$`).FindStringSubmatch(r.stdout)
	if m == nil || !strings.HasPrefix(r.stdout, "✓ Created API key ci-github (full access, expires ") ||
		!strings.Contains(r.stdout, "! Store this key now: it is shown only this once") {
		t.Fatalf("keys create printed:\n%s", r.stdout)
	}
	key := m[1]
	ro := decode[sdk.APIKeyWithToken](t, "keys create --read-only",
		tenant.run(t, "fleet", "keys", "create", "grafana", "--read-only", "--expires-days", "0").ok(t, "create read-only").stdout)
	if !ro.Key.ReadOnly || !ro.Key.ExpiresAt.IsZero() || !strings.HasPrefix(ro.Token, sdk.APIKeyPrefix) {
		t.Fatalf("keys create --read-only --expires-days 0 = %+v", ro)
	}

	// The key is the tenant, and lists the keys.
	withKey, readOnly := fleetCLI(f, key), fleetCLI(f, ro.Token)
	withKey.run(t, "fleet", "tenant", "me").ok(t, "tenant me with a key")
	list := withKey.tty().run(t, "fleet", "keys").ok(t, "keys as a table").stdout
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ACCESS LAST USED EXPIRES" ||
		!regexp.MustCompile(`^ci-github\s+full\s+\d+s ago\s+\d{4}-\d\d-\d\d \d\d:\d\d$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^grafana\s+read-only\s+never\s+never$`).MatchString(lines[2]) || strings.Contains(list, ro.Key.ID) {
		t.Fatalf("fleet keys printed:\n%s", list)
	}
	withKey.tty().run(t, "fleet", "keys", "-o", "wide").ok(t, "keys -o wide").has(t, "-o wide", "ID", ro.Key.ID, "CREATED")

	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"a key making a key", withKey, []string{"fleet", "keys", "create", "more"}, "cannot create or revoke keys", "primary token (fvt_)"},
		{"a read-only key changing something", readOnly, []string{"fleet", "budget", "5"}, "is read-only", "primary token"},
		{"a name taken", tenant, []string{"fleet", "keys", "create", "grafana"}, "already has a key named grafana", "pick another name"},
		{"a name of an ID's form", tenant, []string{"fleet", "keys", "create", "key-0123456789abcdef"}, "form of a key id", "not of an id's form"},
		{"expiry past ten years", tenant, []string{"fleet", "keys", "create", "x", "--expires-days", "3651"}, "expires_days", "Limits"},
		{"an unknown key", tenant, []string{"fleet", "keys", "revoke", "nope", "-y"}, "no key nope", "fluxctl fleet keys lists the keys"},
		{"the operator without --tenant", op, []string{"fleet", "keys"}, "the operator has no API keys of its own", "fluxctl fleet tenant list"},
		{"a tenant naming a tenant", tenant, []string{"fleet", "keys", "--tenant", "acme"}, "this route is for the operator", "leave --tenant out"},
		{"revoke piped without -y", tenant, []string{"fleet", "keys", "revoke", "grafana"}, "without confirmation", "fluxctl fleet keys revoke grafana -y"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}

	// The activity log says which key was refused the change.
	act := tenant.tty().run(t, "fleet", "activity").ok(t, "activity").stdout
	if !regexp.MustCompile(`(?m)acme/grafana\s+set the budget of\s+refused 403$`).MatchString(act) {
		t.Fatalf("fleet activity does not name the read-only key:\n%s", act)
	}
	tenant.tty().run(t, "fleet", "activity", "-o", "wide").ok(t, "activity -o wide").has(t, "activity -o wide", "KEY")

	// On a terminal revoke asks; yes revokes, and the key is refused at once.
	asked := tenant.tty()
	asked.stdin = "y\n"
	r = asked.run(t, "fleet", "keys", "revoke", "ci-github").ok(t, "revoke answered yes")
	if !strings.Contains(r.stderr, "revoke API key ci-github?") || !strings.Contains(r.stdout, "✓ Revoked API key ci-github") {
		t.Fatalf("revoke on a terminal: stdout %q stderr %q", r.stdout, r.stderr)
	}
	withKey.run(t, "fleet", "tenant", "me").refused(t, "a revoked key", "invalid token", "revoked or expired API key")

	// The operator, for a tenant: make, list, revoke by ID.
	made := decode[sdk.APIKeyWithToken](t, "operator's keys create",
		op.run(t, "fleet", "keys", "create", "deploy", "--tenant", "acme").ok(t, "operator create").stdout)
	keys := decode[sdk.APIKeyList](t, "operator's keys", op.run(t, "fleet", "keys", "--tenant", "acme").ok(t, "operator list").stdout)
	if len(keys.Keys) != 2 || keys.Keys[0].Name != "deploy" || keys.Keys[1].Name != "grafana" {
		t.Fatalf("the operator lists %+v", keys.Keys)
	}
	if r := op.run(t, "fleet", "keys", "revoke", made.Key.ID, "--tenant", "acme", "-y").ok(t, "operator revoke"); r.stdout != "" {
		t.Fatalf("revoke -y piped printed %q", r.stdout)
	}
	fleetCLI(f, made.Token).run(t, "fleet", "vms").refused(t, "the operator's revoked key", "invalid token", "")
}
