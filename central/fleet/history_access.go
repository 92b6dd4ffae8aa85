package fleet

import (
	"context"
	"errors"

	"github.com/fluxvm/fluxvm/sdk"
)

// JoinedMembership is this central's membership once joined, for the
// history push (central/history): the owner's id for this central, the
// owner's URL and the fleet-scoped token presented to it. ok is false when
// this central is in no fleet or still joining.
func (s *Service) JoinedMembership(ctx context.Context) (memberID, ownerURL, token string, ok bool, err error) {
	var m membership
	if _, err := s.get(ctx, s.membershipKey(), &m); errors.Is(err, ErrNotFound) {
		return "", "", "", false, nil
	} else if err != nil {
		return "", "", "", false, err
	}
	if m.State != sdk.PairingJoined {
		return "", "", "", false, nil
	}
	return m.MemberID, m.OwnerURL, m.Token, true, nil
}
