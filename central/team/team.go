// Package team manages the people of each tenant's team and their roles:
// who may add, re-role and remove whom. The store keeps the limit of members
// and a tenant's last owner; this package adds the rule that only owners
// make, change or remove owners.
package team

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Store is what team needs of central's store.
type Store interface {
	// AddTeamMember stores a new member within the tenant's limit (see store.AddTeamMember).
	AddTeamMember(ctx context.Context, m *store.TeamMember) error
	// ListTeam reads a tenant's members, by email.
	ListTeam(ctx context.Context, tenant string) ([]store.TeamMember, error)
	// ChangeTeamMember changes or removes a member, keeping a tenant's last owner.
	ChangeTeamMember(ctx context.Context, tenant, email string, change func(m *store.TeamMember) (bool, error)) (*store.TeamMember, error)
}

// ErrOwnersOnly refuses an admin making, changing or removing an owner.
var ErrOwnersOnly = errors.New("only an owner makes, changes or removes an owner")

// ErrNotAllowed refuses a caller whose role may not change the team (below admin).
var ErrNotAllowed = errors.New("only an admin or an owner changes the team")

// Actor is who changes the team: the role they act with (the operator and a
// tenant's primary token act as owners) and how the team's records name
// them (sdk.Member.AddedBy).
type Actor struct {
	Role sdk.Role
	Name string
}

// Service manages teams. It is safe for concurrent use.
type Service struct {
	st  Store
	now func() time.Time
	log hclog.Logger
}

// New makes a Service over st with the clock now.
func New(st Store, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, now: now, log: log}
}

func (a Actor) may(roles ...sdk.Role) error {
	if a.Role.Rank() < sdk.RoleAdmin.Rank() {
		return ErrNotAllowed
	}
	for _, r := range roles {
		if r == sdk.RoleOwner && a.Role != sdk.RoleOwner {
			return ErrOwnersOnly
		}
	}
	return nil
}

// opError wraps what the caller does not branch on.
func opError(op string, err error) error {
	switch {
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrQuota),
		errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrLastOwner), errors.Is(err, ErrOwnersOnly), errors.Is(err, ErrNotAllowed):
		return err
	}
	return &store.OpError{Op: op, Err: err}
}

// Add makes req.Email a member of tenant with req.Role. Errors:
// ErrNotAllowed, ErrOwnersOnly, store.ErrInvalid (the email or role),
// store.ErrExists, store.ErrQuota, store.ErrNotFound (no such tenant); any
// other as a *store.OpError.
func (s *Service) Add(ctx context.Context, tenant string, by Actor, req sdk.AddMemberRequest) (*store.TeamMember, error) {
	if err := by.may(req.Role); err != nil {
		return nil, err
	}
	m := &store.TeamMember{Member: sdk.Member{Email: store.NormalEmail(req.Email), Role: req.Role, AddedBy: by.Name, AddedAt: s.now().UTC()}, Tenant: tenant}
	if err := s.st.AddTeamMember(ctx, m); err != nil {
		return nil, opError("add member "+m.Email, err)
	}
	s.log.Info("member added", "tenant", tenant, "role", m.Role, "by", by.Name)
	return m, nil
}

// List returns a tenant's members, by email.
func (s *Service) List(ctx context.Context, tenant string) ([]store.TeamMember, error) {
	ms, err := s.st.ListTeam(ctx, tenant)
	if err != nil {
		return nil, &store.OpError{Op: "list members", Err: err}
	}
	return ms, nil
}

// SetRole gives a member another role. Errors: as for Add, and
// store.ErrLastOwner (the tenant's last owner demoted).
func (s *Service) SetRole(ctx context.Context, tenant string, by Actor, email string, role sdk.Role) (*store.TeamMember, error) {
	if err := store.CheckRole(role); err != nil {
		return nil, err
	}
	m, err := s.st.ChangeTeamMember(ctx, tenant, email, func(m *store.TeamMember) (bool, error) {
		if err := by.may(m.Role, role); err != nil {
			return false, err
		}
		m.Role = role
		return false, nil
	})
	if err != nil {
		return nil, opError("change the role of a member", err)
	}
	s.log.Info("member role changed", "tenant", tenant, "role", role, "by", by.Name)
	return m, nil
}

// Remove takes a member out of a tenant. Errors: ErrNotAllowed,
// ErrOwnersOnly, store.ErrNotFound, store.ErrLastOwner.
func (s *Service) Remove(ctx context.Context, tenant string, by Actor, email string) (*store.TeamMember, error) {
	m, err := s.st.ChangeTeamMember(ctx, tenant, email, func(m *store.TeamMember) (bool, error) {
		return true, by.may(m.Role)
	})
	if err != nil {
		return nil, opError(fmt.Sprintf("remove a member of tenant %s", tenant), err)
	}
	s.log.Info("member removed", "tenant", tenant, "by", by.Name)
	return m, nil
}
