package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetMembersAgainstARealCentral: the operator adds a tenant's first
// owner, the tenant adds and re-roles people with its primary token, the
// list is a table of email, role, last sign-in and who added them, the last
// owner is kept with central's hint, a key changes nothing, and member-rm
// asks on a terminal.
func TestFleetMembersAgainstARealCentral(t *testing.T) {
	f := fleettest.Start(t)
	_, token := f.Tenant(t, "acme", nil)
	tenant, op := fleetCLI(f, token), fleetCLI(f, f.OperatorToken)
	key := decode[sdk.APIKeyWithToken](t, "keys create", tenant.run(t, "fleet", "keys", "create", "ci").ok(t, "keys create").stdout)

	op.tty().run(t, "fleet", "member-add", "Olga@Example.com", "--role", "owner", "--tenant", "acme").ok(t, "operator adds the owner").
		has(t, "member-add", "✓ Added olga@example.com as owner", "adding someone sends nothing")
	m := decode[sdk.Member](t, "member-add", tenant.run(t, "fleet", "member-add", "ada@example.com", "--role", "viewer").ok(t, "member-add").stdout)
	if m.Email != "ada@example.com" || m.Role != sdk.RoleViewer || m.AddedBy != "token" {
		t.Fatalf("member-add printed %+v", m)
	}
	tenant.tty().run(t, "fleet", "member-role", "ada@example.com", "admin").ok(t, "member-role").has(t, "member-role", "ada@example.com is now admin")

	list := tenant.tty().run(t, "fleet", "members").ok(t, "members").stdout
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "EMAIL ROLE LAST SIGN IN ADDED BY" ||
		!regexp.MustCompile(`^ada@example.com\s+admin\s+never\s+token$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^olga@example.com\s+owner\s+never\s+operator$`).MatchString(lines[2]) {
		t.Fatalf("fleet members printed:\n%s", list)
	}

	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"the last owner demoted", tenant, []string{"fleet", "member-role", "olga@example.com", "viewer"}, "last owner", "owner first"},
		{"the last owner removed", tenant, []string{"fleet", "member-rm", "olga@example.com", "-y"}, "last owner", "owner first"},
		{"a key adding", fleetCLI(f, key.Token), []string{"fleet", "member-add", "eve@example.com", "--role", "viewer"}, "cannot add, change or remove members", "primary token (fvt_)"},
		{"an unknown role", tenant, []string{"fleet", "member-add", "eve@example.com", "--role", "root"}, `no role "root"`, "viewer, member, admin and owner"},
		{"not an email", tenant, []string{"fleet", "member-add", "eve", "--role", "viewer"}, "email", "alex@example.com"},
		{"twice", tenant, []string{"fleet", "member-add", "ADA@example.com", "--role", "viewer"}, "already a member", "change their role"},
		{"nobody", tenant, []string{"fleet", "member-rm", "nobody@example.com", "-y"}, "no member nobody@example.com", "fluxctl fleet members"},
		{"the operator without --tenant", op, []string{"fleet", "members"}, "the operator has no team of its own", "fluxctl fleet tenant list"},
		{"member-rm piped without -y", tenant, []string{"fleet", "member-rm", "ada@example.com"}, "without confirmation", "member-rm ada@example.com -y"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}

	asked := tenant.tty()
	asked.stdin = "y\n"
	r := asked.run(t, "fleet", "member-rm", "ada@example.com").ok(t, "member-rm answered yes")
	if !strings.Contains(r.stderr, "remove ada@example.com from the team?") || !strings.Contains(r.stdout, "✓ Removed ada@example.com") {
		t.Fatalf("member-rm on a terminal: stdout %q stderr %q", r.stdout, r.stderr)
	}
	ms := decode[sdk.MemberList](t, "members", op.run(t, "fleet", "members", "--tenant", "acme").ok(t, "operator's members").stdout)
	if len(ms.Members) != 1 || ms.Members[0].Email != "olga@example.com" {
		t.Fatalf("the operator lists %+v", ms.Members)
	}
}

// TestActivityNamesThePersonOfASession: an event made in a console session
// shows the person's email as WHO (cut to the column) and whole as USER
// with -o wide; a key's event stays TENANT/KEY.
func TestActivityNamesThePersonOfASession(t *testing.T) {
	cols := eventColumns(nil)
	cell := func(name string, e sdk.Event) string {
		for _, c := range cols {
			if c.name == name {
				return c.value(&e)
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	session := sdk.Event{Who: "tenant:t-1", Actor: "acme", User: "alex@example.com", Status: 200}
	if got := cell("who", session); got != "alex@example.…" {
		t.Fatalf("who of a session's event: %q", got)
	}
	if got := cell("user", session); got != "alex@example.com" {
		t.Fatalf("user of a session's event: %q", got)
	}
	if got := cell("who", sdk.Event{Who: "tenant:t-1", Actor: "acme", Key: "ci", Status: 200}); got != "acme/ci" {
		t.Fatalf("who of a key's event: %q", got)
	}
}
