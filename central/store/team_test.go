package store

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

func testMember(tenant *Tenant, email string, role sdk.Role) *TeamMember {
	return &TeamMember{Member: sdk.Member{Email: email, Role: role, AddedBy: "operator", AddedAt: time.Now().UTC()}, Tenant: tenant.ID}
}

// TestAddTeamMemberStopsAtTheLimitAcrossTwoCentrals: with 495 members, 20
// adds at once through two stores on one etcd make exactly 5 more.
func TestAddTeamMemberStopsAtTheLimitAcrossTwoCentrals(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	peer := openPeer(t, s, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	for i := range MaxMembersPerTenant - 5 {
		if err := s.AddTeamMember(ctx, testMember(acme, fmt.Sprintf("p%d@example.com", i), sdk.RoleViewer)); err != nil {
			t.Fatal(err)
		}
	}
	var made, refused atomic.Int32
	atOnce(20, s, peer, func(i int, st *Store) {
		err := st.AddTeamMember(ctx, testMember(acme, fmt.Sprintf("burst%d@example.com", i), sdk.RoleMember))
		var qe *QuotaError
		switch {
		case err == nil:
			made.Add(1)
		case errors.As(err, &qe) && qe.Field == "members" && qe.Limit == MaxMembersPerTenant:
			refused.Add(1)
		default:
			t.Errorf("add %d: %v", i, err)
		}
	})
	ms, err := s.ListTeam(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if made.Load() != 5 || refused.Load() != 15 || len(ms) != MaxMembersPerTenant {
		t.Fatalf("made %d, refused %d, the tenant holds %d; want 5, 15 and %d", made.Load(), refused.Load(), len(ms), MaxMembersPerTenant)
	}
}

// TestTeamMemberEmailIsLowercaseAndChecked: an email is kept lowercase and
// found in any case; one that is not an address, or too long, is refused;
// the same person twice is ErrExists; a tenant that does not exist is
// ErrNotFound.
func TestTeamMemberEmailIsLowercaseAndChecked(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	if err := s.AddTeamMember(ctx, testMember(acme, " Alex@Example.COM ", sdk.RoleAdmin)); err != nil {
		t.Fatal(err)
	}
	m, err := s.GetTeamMember(ctx, acme.ID, "ALEX@example.com")
	if err != nil || m.Email != "alex@example.com" || m.Role != sdk.RoleAdmin {
		t.Fatalf("get: %+v, %v", m, err)
	}
	if err := s.AddTeamMember(ctx, testMember(acme, "alex@EXAMPLE.com", sdk.RoleViewer)); !errors.Is(err, ErrExists) {
		t.Fatalf("the same person again: %v, want ErrExists", err)
	}
	long := strings.Repeat("a", MaxEmailLen-len("@example.com")+1) + "@example.com"
	for _, bad := range []string{"", "alex", "alex@", "@example.com", "a/b@example.com", "a b@example.com", "alex@example", long} {
		if err := s.AddTeamMember(ctx, testMember(acme, bad, sdk.RoleViewer)); !errors.Is(err, ErrInvalid) {
			t.Errorf("email %q: %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.AddTeamMember(ctx, testMember(acme, "bo@example.com", "root")); !errors.Is(err, ErrInvalid) {
		t.Errorf("role root: %v, want ErrInvalid", err)
	}
	if err := s.AddTeamMember(ctx, &TeamMember{Member: sdk.Member{Email: "bo@example.com", Role: sdk.RoleViewer}, Tenant: "t-nobody"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such tenant: %v, want ErrNotFound", err)
	}
}

// TestTheLastOwnerStaysAcrossTwoCentrals: of two owners removed at once
// through two centrals, one goes and the other is refused as the last owner;
// the last owner can be neither demoted nor removed, and once another
// owner exists, can.
func TestTheLastOwnerStaysAcrossTwoCentrals(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	peer := openPeer(t, s, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	for _, e := range []string{"a@example.com", "b@example.com"} {
		if err := s.AddTeamMember(ctx, testMember(acme, e, sdk.RoleOwner)); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(*TeamMember) (bool, error) { return true, nil }
	var removed, last atomic.Int32
	atOnce(2, s, peer, func(i int, st *Store) {
		_, err := st.ChangeTeamMember(ctx, acme.ID, []string{"a@example.com", "b@example.com"}[i], remove)
		switch {
		case err == nil:
			removed.Add(1)
		case errors.Is(err, ErrLastOwner):
			last.Add(1)
		default:
			t.Errorf("remove %d: %v", i, err)
		}
	})
	ms, err := s.ListTeam(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if removed.Load() != 1 || last.Load() != 1 || len(ms) != 1 || ms[0].Role != sdk.RoleOwner {
		t.Fatalf("removed %d, refused %d, left %+v; want one owner left", removed.Load(), last.Load(), ms)
	}
	owner := ms[0].Email
	demote := func(m *TeamMember) (bool, error) { m.Role = sdk.RoleAdmin; return false, nil }
	if _, err := s.ChangeTeamMember(ctx, acme.ID, owner, demote); !errors.Is(err, ErrLastOwner) {
		t.Fatalf("demote the last owner: %v, want ErrLastOwner", err)
	}
	if _, err := s.ChangeTeamMember(ctx, acme.ID, owner, remove); !errors.Is(err, ErrLastOwner) {
		t.Fatalf("remove the last owner: %v, want ErrLastOwner", err)
	}
	if err := s.AddTeamMember(ctx, testMember(acme, "c@example.com", sdk.RoleOwner)); err != nil {
		t.Fatal(err)
	}
	if m, err := s.ChangeTeamMember(ctx, acme.ID, owner, demote); err != nil || m.Role != sdk.RoleAdmin {
		t.Fatalf("demote one of two owners: %+v, %v", m, err)
	}
	if _, err := s.ChangeTeamMember(ctx, acme.ID, "nobody@example.com", remove); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove nobody: %v, want ErrNotFound", err)
	}
	// Deleting the tenant deletes its team.
	if err := s.DeleteTenant(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	if ms, err := s.ListTeam(ctx, acme.ID); err != nil || len(ms) != 0 {
		t.Fatalf("after the tenant's delete: %+v, %v", ms, err)
	}
}
