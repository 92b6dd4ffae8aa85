package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The members of tenants' teams (docs/identity.md). Keys, next to those in crud.go:
//
//	P team-members/<tenant>/<email>               TeamMember
//
// A tenant's members are read and written together: every change compares the whole prefix
// as read, so the limit of members and "a tenant that has an owner keeps one" hold however
// many centrals change one team at once. Deleting a tenant deletes its members with it.

// Bounds of members; schemas/fleet-openapi.yaml gives the same (a test holds them together).
const (
	MaxMembersPerTenant = 500
	MaxEmailLen         = 254
)

// ErrLastOwner refuses a change that would leave a tenant that has an owner without one.
var ErrLastOwner = errors.New("the tenant's last owner")

// emailRE is the form of an email the store keeps: one '@', something on both sides, no
// spaces, no '/' (it is a key segment and a path segment), lowercase.
var emailRE = regexp.MustCompile(`^[a-z0-9!#$%&'*+=?^_{|}~.-]+@[a-z0-9-]+(\.[a-z0-9-]+)+$`)

// NormalEmail is email as members are matched: trimmed and lowercase.
func NormalEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// CheckEmail refuses an email the store would not keep (after NormalEmail).
func CheckEmail(email string) error {
	if len(email) > MaxEmailLen || !emailRE.MatchString(email) {
		return fmt.Errorf("%w: email %q: use an address such as alex@example.com, at most %d characters",
			ErrInvalid, jsonapi.Echo(email), MaxEmailLen)
	}
	return nil
}

// CheckRole refuses a role that is none of sdk.Roles.
func CheckRole(r sdk.Role) error {
	if r.Rank() == 0 {
		return fmt.Errorf("%w: role %q: use viewer, member, admin or owner", ErrInvalid, jsonapi.Echo(string(r)))
	}
	return nil
}

// TeamMember is a tenant's member as the store keeps it: the member the API shows (sdk.Member)
// and whose team it is.
type TeamMember struct {
	sdk.Member
	Tenant string `json:"tenant"`
}

// Validate checks what the store relies on.
func (m *TeamMember) Validate() error {
	if err := CheckEmail(m.Email); err != nil {
		return err
	}
	if err := CheckRole(m.Role); err != nil {
		return err
	}
	return checkName("tenant id", m.Tenant)
}

func (s *Store) teamPrefix(tenant string) string           { return s.prefix + "team-members/" + tenant + "/" }
func (s *Store) teamMemberKey(tenant, email string) string { return s.teamPrefix(tenant) + email }

// AddTeamMember stores a new member of m.Tenant in one transaction that compares what it read:
// the tenant exists, the email is not yet a member, and no member appeared since they were
// counted. Errors: ErrNotFound (no such tenant), ErrExists (already a member), a *QuotaError
// with Field "members" (the tenant has MaxMembersPerTenant).
func (s *Store) AddTeamMember(ctx context.Context, m *TeamMember) error {
	m.Email = NormalEmail(m.Email)
	if err := m.Validate(); err != nil {
		return err
	}
	what := "add member " + m.Email
	tk, mp, key := s.tenantKey(m.Tenant), s.teamPrefix(m.Tenant), s.teamMemberKey(m.Tenant, m.Email)
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Txn(ctx).Then(
			clientv3.OpGet(tk, clientv3.WithKeysOnly()), clientv3.OpGet(mp, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(key, clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		tkvs := r.Responses[0].GetResponseRange().Kvs
		switch n := r.Responses[1].GetResponseRange().Count; {
		case len(tkvs) == 0:
			return false, fmt.Errorf("%s: tenant %s: %w", what, m.Tenant, ErrNotFound)
		case r.Responses[2].GetResponseRange().Count > 0:
			return false, fmt.Errorf("%s: %w", what, ErrExists)
		case n >= MaxMembersPerTenant:
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: "members", Limit: MaxMembersPerTenant, Used: n, Asked: 1})
		}
		w, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, []readKey{{tk, tkvs[0].ModRevision}, {key, 0}}, mp)...).Then(
			clientv3.OpPut(key, mustJSON(m)),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return w.Succeeded, nil
	})
}

// ListTeam reads a tenant's members, by email.
func (s *Store) ListTeam(ctx context.Context, tenant string) ([]TeamMember, error) {
	ms, err := listJSON[TeamMember](ctx, s, s.teamPrefix(tenant))
	if err != nil {
		return nil, fmt.Errorf("list the members of tenant %s: %w", tenant, err)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Email < ms[j].Email })
	return ms, nil
}

// GetTeamMember reads a tenant's member by email (matched lowercase).
func (s *Store) GetTeamMember(ctx context.Context, tenant, email string) (*TeamMember, error) {
	email = NormalEmail(email)
	if CheckEmail(email) != nil {
		return nil, fmt.Errorf("get member: %w", ErrNotFound)
	}
	m, _, err := getJSON[TeamMember](ctx, s, s.teamMemberKey(tenant, email))
	if err != nil {
		return nil, fmt.Errorf("get member %s: %w", email, err)
	}
	return m, nil
}

// ChangeTeamMember changes a tenant's member by email with change, or removes them when change
// returns remove, in one transaction that compares the team as read. change sees the member
// as stored; an error from it is returned as it is. A change that would leave a tenant that
// had an owner without one is refused with ErrLastOwner. It returns the member as changed
// (as they were, when removed). Errors: ErrNotFound (no such member), ErrLastOwner.
func (s *Store) ChangeTeamMember(ctx context.Context, tenant, email string, change func(m *TeamMember) (remove bool, err error)) (*TeamMember, error) {
	email = NormalEmail(email)
	if CheckEmail(email) != nil {
		return nil, fmt.Errorf("change member: %w", ErrNotFound)
	}
	what, mp, key := "change member "+email, s.teamPrefix(tenant), s.teamMemberKey(tenant, email)
	var out *TeamMember
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, mp, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		var m *TeamMember
		owners := 0
		// Every member read is compared, not only the prefix: an owner removed meanwhile
		// leaves no key under the prefix to compare, and this decision counts owners.
		read := make([]readKey, 0, len(r.Kvs))
		for _, kv := range r.Kvs {
			read = append(read, readKey{string(kv.Key), kv.ModRevision})
			var x TeamMember
			if err := json.Unmarshal(kv.Value, &x); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			if x.Role == sdk.RoleOwner {
				owners++
			}
			if string(kv.Key) == key {
				m = &x
			}
		}
		if m == nil {
			return false, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		was := m.Role
		remove, err := change(m)
		if err != nil {
			return false, err
		}
		m.Email, m.Tenant = email, tenant
		if err := m.Validate(); err != nil {
			return false, err
		}
		if was == sdk.RoleOwner && owners == 1 && (remove || m.Role != sdk.RoleOwner) {
			return false, fmt.Errorf("%s: %w", what, ErrLastOwner)
		}
		op := clientv3.OpPut(key, mustJSON(m))
		if remove {
			op = clientv3.OpDelete(key)
		}
		w, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, read, mp)...).Then(op).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		out = m
		return w.Succeeded, nil
	})
	return out, err
}
