package team

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// TestWhoMayChangeWhom walks the rules on a real etcd: below admin nobody
// changes the team, an admin changes everyone but owners and makes no owner,
// an owner does everything, and the last owner stays.
func TestWhoMayChangeWhom(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	now := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	svc := New(st, func() time.Time { return now }, hclog.NewNullLogger())
	acme := storetest.Tenant(t, st, "acme")
	owner := Actor{Role: sdk.RoleOwner, Name: "operator"}
	admin := Actor{Role: sdk.RoleAdmin, Name: "ada@example.com"}
	add := func(by Actor, email string, role sdk.Role) error {
		_, err := svc.Add(ctx, acme.ID, by, sdk.AddMemberRequest{Email: email, Role: role})
		return err
	}
	if m, err := svc.Add(ctx, acme.ID, owner, sdk.AddMemberRequest{Email: "Olga@Example.com", Role: sdk.RoleOwner}); err != nil ||
		m.Email != "olga@example.com" || m.AddedBy != "operator" || !m.AddedAt.Equal(now) {
		t.Fatalf("the first owner: %+v, %v", m, err)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"a viewer adds", add(Actor{Role: sdk.RoleViewer, Name: "v@example.com"}, "x@example.com", sdk.RoleViewer), ErrNotAllowed},
		{"a member adds", add(Actor{Role: sdk.RoleMember, Name: "m@example.com"}, "x@example.com", sdk.RoleViewer), ErrNotAllowed},
		{"an admin adds an owner", add(admin, "x@example.com", sdk.RoleOwner), ErrOwnersOnly},
		{"an admin adds an admin", add(admin, "adam@example.com", sdk.RoleAdmin), nil},
		{"a bad role", add(owner, "y@example.com", "root"), store.ErrInvalid},
		{"a bad email", add(owner, "not-an-email", sdk.RoleViewer), store.ErrInvalid},
		{"twice", add(owner, "ADAM@example.com", sdk.RoleViewer), store.ErrExists},
	} {
		if !errors.Is(c.err, c.want) && (c.want != nil || c.err != nil) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := svc.SetRole(ctx, acme.ID, admin, "olga@example.com", sdk.RoleViewer); !errors.Is(err, ErrOwnersOnly) {
		t.Errorf("an admin demotes an owner: %v", err)
	}
	if _, err := svc.SetRole(ctx, acme.ID, admin, "adam@example.com", sdk.RoleOwner); !errors.Is(err, ErrOwnersOnly) {
		t.Errorf("an admin promotes to owner: %v", err)
	}
	if _, err := svc.Remove(ctx, acme.ID, admin, "olga@example.com"); !errors.Is(err, ErrOwnersOnly) {
		t.Errorf("an admin removes an owner: %v", err)
	}
	if _, err := svc.SetRole(ctx, acme.ID, owner, "olga@example.com", sdk.RoleAdmin); !errors.Is(err, store.ErrLastOwner) {
		t.Errorf("the last owner demoted: %v", err)
	}
	if _, err := svc.SetRole(ctx, acme.ID, owner, "adam@example.com", "root"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a bad role: %v", err)
	}
	if m, err := svc.SetRole(ctx, acme.ID, admin, "adam@example.com", sdk.RoleViewer); err != nil || m.Role != sdk.RoleViewer {
		t.Errorf("an admin demotes an admin: %+v, %v", m, err)
	}
	if m, err := svc.SetRole(ctx, acme.ID, owner, "adam@example.com", sdk.RoleOwner); err != nil || m.Role != sdk.RoleOwner {
		t.Errorf("an owner makes an owner: %+v, %v", m, err)
	}
	if _, err := svc.Remove(ctx, acme.ID, owner, "olga@example.com"); err != nil {
		t.Errorf("an owner removes one of two owners: %v", err)
	}
	if _, err := svc.Remove(ctx, acme.ID, owner, "adam@example.com"); !errors.Is(err, store.ErrLastOwner) {
		t.Errorf("the last owner removed: %v", err)
	}
	if _, err := svc.Remove(ctx, acme.ID, owner, "nobody@example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("nobody removed: %v", err)
	}
	ms, err := svc.List(ctx, acme.ID)
	if err != nil || len(ms) != 1 || ms[0].Email != "adam@example.com" {
		t.Fatalf("left: %+v, %v", ms, err)
	}
}
