package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// Thresholds of the member badge: a member silent for DegradedAfter reads
// degraded, for StoppedAfter stopped.
const (
	DegradedAfter = 3 * PollInterval
	StoppedAfter  = 30 * time.Minute
)

// Health is a member's badge as the owner sees it, from the last time the
// member called (a member central's report, an enrolled node's heartbeat).
// The worst problem wins; there is one reason and one thing to do.
func Health(m Member, now time.Time, nodeState string) sdk.MemberHealth {
	if m.LastSeen.IsZero() {
		return sdk.MemberHealth{Badge: sdk.HealthNotChecked, Reason: "Not checked yet",
			Action: map[string]string{sdk.PairCentral: "wait for its first report (every 30 s)", sdk.PairNode: "start the node agent with its enrolled state dir"}[m.Kind]}
	}
	silent := now.Sub(m.LastSeen)
	mins := int(silent / time.Minute)
	switch {
	case silent >= StoppedAfter:
		return sdk.MemberHealth{Badge: sdk.HealthStopped, Reason: fmt.Sprintf("No report for %d min", mins), Action: silentAction(m.Kind)}
	case silent >= DegradedAfter:
		return sdk.MemberHealth{Badge: sdk.HealthDegraded, Reason: fmt.Sprintf("No report for %d min", max(mins, 1)), Action: silentAction(m.Kind)}
	case m.Kind == sdk.PairNode && nodeState == "down":
		return sdk.MemberHealth{Badge: sdk.HealthDegraded, Reason: "Node marked down", Action: "check the node agent on that machine"}
	}
	return sdk.MemberHealth{Badge: sdk.HealthOK}
}

func silentAction(kind string) string {
	if kind == sdk.PairNode {
		return "the machine may be off or asleep, or its agent stopped"
	}
	return "the member central may be down, asleep, or unable to reach this one"
}

// membershipHealth is this central's own badge as a member: the owner's
// last answer to its poll.
func (s *Service) membershipHealth(m *membership) sdk.MemberHealth {
	switch {
	case m.State != sdk.PairingJoined:
		return sdk.MemberHealth{Badge: sdk.HealthNotChecked, Reason: "Joining: waiting for both sides to agree",
			Action: "read code " + ShowCode(m.Code) + " to the owner; confirm with the code their screen shows"}
	case m.LastStatus == http.StatusForbidden:
		return sdk.MemberHealth{Badge: sdk.HealthStopped, Reason: "Removed from the fleet", Action: "re-pair this central with a new invite, or leave"}
	case m.LastStatus == http.StatusUnauthorized:
		return sdk.MemberHealth{Badge: sdk.HealthStopped, Reason: "Token revoked", Action: "re-pair this central"}
	case m.LastPoll.IsZero() && m.LastError == "":
		return sdk.MemberHealth{Badge: sdk.HealthNotChecked, Reason: "Not checked yet", Action: "wait for the first report to the owner (every 30 s)"}
	}
	since := m.LastPoll
	if since.IsZero() {
		since = m.JoinedAt
	}
	if silent := s.now().Sub(since); m.LastError != "" && silent >= DegradedAfter {
		badge := sdk.HealthDegraded
		if silent >= StoppedAfter {
			badge = sdk.HealthStopped
		}
		return sdk.MemberHealth{Badge: badge, Reason: fmt.Sprintf("Owner not answering for %d min", int(silent/time.Minute)),
			Action: "check that the owner's URL is reachable from here"}
	}
	return sdk.MemberHealth{Badge: sdk.HealthOK}
}

// View is GET /fleet/federation: this central's role, its members with
// their badges (nodeState gives an enrolled node's state in this central),
// its membership, and the fleet view.
func (s *Service) View(ctx context.Context, nodeState func(name string) string) (*sdk.Federation, error) {
	out := &sdk.Federation{Role: sdk.FedAlone, Members: []sdk.FleetMember{}, Sites: []sdk.FleetSite{}}
	var m membership
	if _, err := s.get(ctx, s.membershipKey(), &m); err == nil {
		out.Membership = s.wire(&m)
		out.Role = sdk.FedMember
		if m.State != sdk.PairingJoined {
			out.Role = sdk.FedJoining
		}
		out.Sites = append(out.Sites, m.Sites...)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ms, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	for _, mem := range ms {
		w := sdk.FleetMember{ID: mem.ID, Kind: mem.Kind, Name: mem.Name, URL: mem.URL, JoinedAt: mem.JoinedAt}
		if !mem.LastSeen.IsZero() {
			ls := mem.LastSeen
			w.LastSeen = &ls
		}
		state := ""
		if mem.Kind == sdk.PairNode && nodeState != nil {
			state = nodeState(mem.Name)
		}
		w.Health = Health(mem, now, state)
		out.Members = append(out.Members, w)
		if mem.Kind == sdk.PairCentral && out.Role == sdk.FedAlone {
			out.Role = sdk.FedOwner
		}
	}
	if out.Role == sdk.FedOwner {
		sites, err := s.ownerSites(ctx)
		if err != nil {
			return nil, err
		}
		out.Sites = sites
	}
	return out, nil
}

// PlacementNote names, for a VM this central cannot place, the fleet's
// member site with the most room, since launching on another member is not
// built yet: the reason says where it could have gone. "" without one.
func (s *Service) PlacementNote(ctx context.Context) string {
	v, err := s.View(ctx, nil)
	if err != nil || len(v.Sites) == 0 {
		return ""
	}
	best, bestUp := "", -1
	for _, site := range v.Sites {
		if site.Member == "owner" && v.Role == sdk.FedOwner || v.Membership != nil && site.Member == v.Membership.Name {
			continue // this central
		}
		up := 0
		for _, n := range site.Nodes {
			if n.State == "up" {
				up++
			}
		}
		if up > bestUp {
			best, bestUp = site.Member, up
		}
	}
	if best == "" || bestUp <= 0 {
		return ""
	}
	return fmt.Sprintf("fleet member %s has %d node(s) up, but launching on another member is not built yet", best, bestUp)
}
