package fleet

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the joining side: a central that joins another's fleet,
// polls its owner, and leaves.

// ownerError wraps what the owner answered or why it did not.
func ownerError(what string, err error) error {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("%w refused to %s: %d %s", ErrOwner, what, ae.Status, ae.Message)
	}
	return fmt.Errorf("%w did not answer (%s): %v", ErrOwner, what, err)
}

// OwnerStatus is the HTTP status the owner answered with (0: none).
func OwnerStatus(err error) int {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// Join redeems an owner's invite from this central. The code it returns is
// computed here from the invite and the nonce made here; the owner
// computes the same from what the redeem carried. Nothing is admitted until
// the owner approves and ConfirmJoin is called with the owner's code.
func (s *Service) Join(ctx context.Context, req sdk.FleetJoinRequest) (*sdk.FleetMembership, error) {
	if err := CheckURL("owner_url", req.OwnerURL); err != nil || req.OwnerURL == "" {
		return nil, fmt.Errorf("%w: owner_url: the owner central's http(s) URL", ErrInvalid)
	}
	if err := CheckURL("url", req.URL); err != nil {
		return nil, err
	}
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	norm, ok := NormalizeInvite(req.Invite)
	if !ok {
		return nil, fmt.Errorf("%w: invite: the 16 characters the owner's invite shows (ABCD-EFGH-IJKL-MNOP)", ErrInvalid)
	}
	var cur membership
	if _, err := s.get(ctx, s.membershipKey(), &cur); err == nil {
		return nil, fmt.Errorf("%w: this central is already %s the fleet of %s: a central is in at most one fleet (leave first: fluxctl fleet leave)",
			ErrConflict, map[bool]string{true: "in", false: "joining"}[cur.State == sdk.PairingJoined], cur.OwnerURL)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ms, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Kind == sdk.PairCentral {
			return nil, fmt.Errorf("%w: this central owns a fleet with member %s: an owner with members cannot join another fleet (remove them first)", ErrConflict, m.Name)
		}
	}
	nonce := NewNonce()
	c, err := s.owner(req.OwnerURL, "")
	if err != nil {
		return nil, fmt.Errorf("%w: owner_url: %v", ErrInvalid, err)
	}
	reply, err := c.RedeemInvite(ctx, sdk.FleetRedeemRequest{Invite: req.Invite, Nonce: nonce, Kind: sdk.PairCentral, Name: req.Name, URL: req.URL})
	if err != nil {
		if OwnerStatus(err) == http.StatusNotFound {
			return nil, fmt.Errorf("%w: the owner knows no such invite: it is wrong, expired (15 minutes) or used already; if you did not use it, someone else did: tell the owner to reject the request they see", ErrNotFound)
		}
		return nil, ownerError("redeem the invite", err)
	}
	m := membership{State: sdk.FedJoining, OwnerURL: req.OwnerURL, Name: req.Name, URL: req.URL, Nonce: nonce,
		Code: Code(norm, nonce), ExpiresAt: reply.ExpiresAt}
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.membershipKey()), "=", 0)).
		Then(clientv3.OpPut(s.membershipKey(), mustJSON(m))).Commit()
	if err != nil {
		return nil, fmt.Errorf("store the join: %w", err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: another join started meanwhile", ErrConflict)
	}
	s.log.Info("joining a fleet: compare the codes with the owner", "owner", m.OwnerURL, "name", m.Name)
	return s.wire(&m), nil
}

// ConfirmJoin is this side's word that the owner's screen shows code: it
// must be the code computed here, and then the owner is asked to admit this
// central. Before the owner approved it answers pending (ErrPending).
func (s *Service) ConfirmJoin(ctx context.Context, code string) (*sdk.FleetMembership, error) {
	c, ok := NormalizeCode(code)
	if !ok {
		return nil, fmt.Errorf("%w: code: the six digits the owner's screen shows", ErrInvalid)
	}
	var m membership
	rev, err := s.get(ctx, s.membershipKey(), &m)
	if errors.Is(err, ErrNotFound) || err == nil && m.State != sdk.FedJoining {
		return nil, fmt.Errorf("%w: this central is not joining a fleet (fluxctl fleet join OWNER_URL INVITE)", ErrConflict)
	} else if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(c), []byte(m.Code)) != 1 {
		return nil, fmt.Errorf("%w: the owner's code %s is not this central's %s: someone else redeemed the invite; cancel (fluxctl fleet leave) and tell the owner to reject",
			ErrConflict, ShowCode(c), ShowCode(m.Code))
	}
	oc, err := s.owner(m.OwnerURL, "")
	if err != nil {
		return nil, err
	}
	var poll string
	if m.URL != "" {
		poll = store.NewToken(sdk.OwnerPollPrefix)
	}
	res, err := oc.ConfirmPairingWith(ctx, sdk.FleetPairingConfirm{Nonce: m.Nonce, PollToken: poll})
	if err != nil {
		if OwnerStatus(err) == http.StatusNotFound {
			_, _ = s.kv.Delete(ctx, s.membershipKey())
			return nil, fmt.Errorf("%w: the owner rejected this join, or it expired: ask for a new invite", ErrNotFound)
		}
		return nil, ownerError("confirm the join", err)
	}
	if res.State != sdk.PairingAdmitted {
		return s.wire(&m), ErrPending
	}
	if res.Credential == "" || res.MemberID == "" {
		return nil, fmt.Errorf("%w admitted this central without a credential", ErrOwner)
	}
	m.State, m.Token, m.MemberID, m.JoinedAt, m.Nonce = sdk.PairingJoined, res.Credential, res.MemberID, s.now().UTC(), ""
	if poll != "" {
		m.PollSHA256 = hash(poll)
	}
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.membershipKey()), "=", rev)).
		Then(clientv3.OpPut(s.membershipKey(), mustJSON(m))).Commit()
	if err != nil || !resp.Succeeded {
		return nil, fmt.Errorf("store the fleet token (the owner admitted this central; remove it there and pair again): %v", err)
	}
	s.log.Info("joined the fleet", "owner", m.OwnerURL, "member", m.MemberID)
	// The owner's egress floor at once, not at the next poll: a tenant VM
	// launched meanwhile would miss it.
	if err := s.PollFloor(ctx); err != nil {
		s.log.Warn("cannot fetch the fleet's egress floor yet: the next poll tries again", "error", err)
	}
	return s.wire(&m), nil
}

// ErrPending is a confirm before the owner approved: ask again.
var ErrPending = errors.New("the owner has not approved yet")

// LeaveFleet ends this central's membership (or abandons a join). The
// owner is told when this central is a member; a removed member, or an
// owner that does not answer, does not keep it in: the membership ends
// here either way, and the error says what the owner did not hear.
func (s *Service) LeaveFleet(ctx context.Context) (*sdk.FleetMembership, error) {
	var m membership
	if _, err := s.get(ctx, s.membershipKey(), &m); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: this central is in no fleet", ErrNotFound)
		}
		return nil, err
	}
	var told error
	if m.State == sdk.PairingJoined {
		if c, err := s.owner(m.OwnerURL, m.Token); err == nil {
			if err := c.LeaveOwner(ctx); err != nil && OwnerStatus(err) != http.StatusForbidden && OwnerStatus(err) != http.StatusUnauthorized {
				told = ownerError("hear that this central left", err)
			}
		}
	}
	// The owner's egress floor goes with the membership: it is lifted here.
	if _, err := s.kv.Txn(ctx).Then(clientv3.OpDelete(s.membershipKey()), clientv3.OpDelete(s.floorKey())).Commit(); err != nil {
		return nil, fmt.Errorf("forget the membership: %w", err)
	}
	s.log.Info("left the fleet", "owner", m.OwnerURL)
	return s.wire(&m), told
}

// Poll is a member's report to its owner: this central's site goes up, the
// fleet view comes back. A 401 or 403 is recorded (the badge then reads
// stopped); the membership is kept until the operator leaves.
func (s *Service) Poll(ctx context.Context) error {
	var m membership
	rev, err := s.get(ctx, s.membershipKey(), &m)
	if errors.Is(err, ErrNotFound) || err == nil && m.State != sdk.PairingJoined {
		return nil
	} else if err != nil {
		return err
	}
	site, err := s.local(ctx)
	if err != nil {
		return fmt.Errorf("read this central's nodes: %w", err)
	}
	now := s.now().UTC()
	m.LastTry = now
	c, err := s.owner(m.OwnerURL, m.Token)
	var view *sdk.FleetView
	if err == nil {
		view, err = c.ReportToOwner(ctx, site)
	}
	if err != nil {
		m.LastError, m.LastStatus = err.Error(), OwnerStatus(err)
	} else {
		m.LastPoll, m.LastError, m.LastStatus, m.Sites = now, "", 0, view.Sites
	}
	if _, perr := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.membershipKey()), "=", rev)).
		Then(clientv3.OpPut(s.membershipKey(), mustJSON(m))).Commit(); perr != nil {
		return fmt.Errorf("record the poll: %w", perr)
	}
	return err
}

// PollMembers is the owner's side of the fleet view: it reads the site of
// every member central that gave a URL, with the poll token that member
// gave. A member that does not answer keeps its last site; its badge
// follows from when it was last heard from.
func (s *Service) PollMembers(ctx context.Context) error {
	ms, err := s.Members(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if m.Kind != sdk.PairCentral || m.URL == "" || m.PollToken == "" {
			continue
		}
		c, err := s.owner(m.URL, m.PollToken)
		var site *sdk.FleetSite
		if err == nil {
			site, err = c.FleetSiteOf(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("poll member %s: %w", m.Name, err))
			continue
		}
		if len(site.Nodes) > MaxSiteNodes {
			errs = append(errs, fmt.Errorf("member %s reports %d nodes: at most %d", m.Name, len(site.Nodes), MaxSiteNodes))
			continue
		}
		var cur Member
		rev, err := s.get(ctx, s.memberKey(m.ID), &cur)
		if err != nil {
			continue // removed meanwhile
		}
		now := s.now().UTC()
		site.Member, site.CheckedAt = cur.Name, now
		cur.Site, cur.LastSeen = site, now
		if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.memberKey(cur.ID)), "=", rev)).
			Then(clientv3.OpPut(s.memberKey(cur.ID), mustJSON(cur))).Commit(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Site is this central's own site, as a member answers its owner's poll.
func (s *Service) Site(ctx context.Context) (sdk.FleetSite, error) {
	site, err := s.local(ctx)
	if err != nil {
		return site, err
	}
	var m membership
	if _, err := s.get(ctx, s.membershipKey(), &m); err == nil {
		site.Member = m.Name
	}
	site.CheckedAt = s.now().UTC()
	return site, nil
}

// Run polls every interval until ctx ends (on the leader): a member
// reports to its owner and fetches its egress floor, an owner reads its
// members' sites.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = PollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.Poll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot report to the fleet's owner", "error", err)
		}
		if err := s.PollFloor(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot fetch the fleet's egress floor: the last one fetched stays in force", "error", err)
		}
		if err := s.PollMembers(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot read a member's site", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) wire(m *membership) *sdk.FleetMembership {
	out := &sdk.FleetMembership{State: m.State, OwnerURL: m.OwnerURL, Name: m.Name, MemberID: m.MemberID, Health: s.membershipHealth(m)}
	if m.State == sdk.FedJoining {
		out.Code = m.Code
	}
	if !m.JoinedAt.IsZero() {
		j := m.JoinedAt
		out.JoinedAt = &j
	}
	return out
}
