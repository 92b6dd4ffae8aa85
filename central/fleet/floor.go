package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file is the fleet's egress floor on a member central: the owner's
// floor, fetched with the fleet token on the poll loop and kept in etcd so
// it outlives a restart and an owner that does not answer. Holding tenant
// networks to it (and this central's own egress to tightening it only) is
// central/overlays' job; this file only keeps what the owner said.

// floorRecord is the owner's floor as this member last fetched it.
type floorRecord struct {
	OwnerURL string `json:"owner_url"`
	// Egress is the floor the owner last answered (nil: none yet).
	Egress    *sdk.EgressPolicy `json:"egress,omitempty"`
	FetchedAt time.Time         `json:"fetched_at,omitzero"`
	// LastTry is the last fetch; LastError why it failed (since FetchedAt).
	LastTry   time.Time `json:"last_try,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

func (s *Service) floorKey() string { return s.prefix + "fleet-floor" }

// PollFloor fetches the owner's egress floor with this member's fleet
// token and records it. A failed fetch keeps the floor last fetched and
// records why; an owner that answers 403 has removed this central, and
// the floor is lifted (a removed member is in no fleet whose floor
// applies). A central in no fleet does nothing.
func (s *Service) PollFloor(ctx context.Context) error {
	r, err := s.kv.Get(ctx, s.membershipKey())
	if err != nil {
		return fmt.Errorf("read the membership: %w", err)
	}
	if len(r.Kvs) == 0 {
		return nil
	}
	var m membership
	if err := json.Unmarshal(r.Kvs[0].Value, &m); err != nil {
		return fmt.Errorf("decode the membership: %w", err)
	}
	if m.State != sdk.PairingJoined {
		return nil
	}
	// The record is written only while this membership (the one read
	// here) lasts: a leave meanwhile deletes both, and stays so.
	same := clientv3.Compare(clientv3.CreateRevision(s.membershipKey()), "=", r.Kvs[0].CreateRevision)

	var cur floorRecord
	if _, err := s.get(ctx, s.floorKey(), &cur); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	now := s.now().UTC()
	c, err := s.owner(m.OwnerURL, m.Token)
	var f *sdk.FleetFloor
	if err == nil {
		f, err = c.OwnerFloor(ctx)
	}
	if err == nil {
		if cerr := sdk.CheckEgressPolicy(&f.Egress); cerr != nil {
			err = fmt.Errorf("%w sent a malformed egress floor: %v", ErrOwner, cerr)
		}
	}
	if OwnerStatus(err) == http.StatusForbidden {
		if _, derr := s.kv.Txn(ctx).If(same).Then(clientv3.OpDelete(s.floorKey())).Commit(); derr != nil {
			return fmt.Errorf("lift the fleet's egress floor: %w", derr)
		}
		if cur.Egress != nil {
			s.log.Warn("removed from the fleet: its egress floor is lifted", "owner", m.OwnerURL)
		}
		return ownerError("send its egress floor", err)
	}
	if cur.OwnerURL != m.OwnerURL {
		cur = floorRecord{OwnerURL: m.OwnerURL}
	}
	cur.LastTry = now
	if err != nil {
		if !errors.Is(err, ErrOwner) {
			err = ownerError("send its egress floor", err)
		}
		cur.LastError = err.Error()
	} else {
		cur.Egress, cur.FetchedAt, cur.LastError = &f.Egress, now, ""
	}
	if _, perr := s.kv.Txn(ctx).If(same).Then(clientv3.OpPut(s.floorKey(), mustJSON(cur))).Commit(); perr != nil {
		return fmt.Errorf("record the fleet's egress floor: %w", perr)
	}
	return err
}

// FloorPolicy is the owner's floor in force on this member: nil when this
// central is in no fleet, was removed, or has not fetched one yet.
func (s *Service) FloorPolicy(ctx context.Context) (*sdk.EgressPolicy, error) {
	var cur floorRecord
	if _, err := s.get(ctx, s.floorKey(), &cur); errors.Is(err, ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return cur.Egress, nil
}

// FleetEgress is the owner's floor as GET /fleet/policy shows it on a
// member: when it was fetched, how old it is and the last error (nil when
// there is no fleet floor here). Effective and Overridden are the
// caller's to fill (central/overlays decides them).
func (s *Service) FleetEgress(ctx context.Context) (*sdk.FleetEgress, error) {
	var cur floorRecord
	if _, err := s.get(ctx, s.floorKey(), &cur); errors.Is(err, ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	out := &sdk.FleetEgress{OwnerURL: cur.OwnerURL, Floor: cur.Egress, LastError: cur.LastError}
	if !cur.FetchedAt.IsZero() {
		at := cur.FetchedAt
		out.FetchedAt = &at
		out.AgeSeconds = int64(max(s.now().Sub(at), 0) / time.Second)
	}
	if !cur.LastTry.IsZero() {
		at := cur.LastTry
		out.LastTry = &at
	}
	return out, nil
}
