package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
)

// errNoRoom is a placement whose chosen nodes kept filling up (or going)
// under concurrent creates, try after try.
var errNoRoom = errors.New("no node kept room under concurrent creates")

// placeAndReserve places a VM with the scheduler and reserves its room (the
// tenant's quota and the node's capacity, in one etcd transaction), placing
// again, up to placeTries times, when the node it chose filled up or went
// since the fleet snapshot. keep, when set, limits the nodes considered. rr
// is the reservation to make; its Node is set on each try. The errors are the
// scheduler's (*scheduler.NoPlacementError), the store's (*store.QuotaError,
// store.ErrInvalid for a disabled tenant, ...) and errNoRoom, which wraps the
// last capacity error. Creates, drains and warm pools all place through here.
func (s *Server) placeAndReserve(ctx context.Context, req scheduler.Request, pol store.Policy, rr store.ReserveRequest,
	keep func(*store.Node) bool) (scheduler.Decision, *store.Node, *store.Reservation, error) {
	var last error
	for try := 0; try < placeTries; try++ {
		stored, nodes, err := s.snapshot(ctx)
		if err != nil {
			return scheduler.Decision{}, nil, nil, fmt.Errorf("read the fleet: %w", err)
		}
		if keep != nil {
			var ks []store.Node
			var kn []scheduler.Node
			for i := range stored {
				if keep(&stored[i]) {
					ks, kn = append(ks, stored[i]), append(kn, nodes[i])
				}
			}
			stored, nodes = ks, kn
		}
		d, err := scheduler.Place(nodes, req, schedulerPolicy(pol), scheduler.BinPack)
		if err != nil {
			return d, nil, nil, err
		}
		var node *store.Node
		for i := range stored {
			if stored[i].Name == d.Node {
				node = &stored[i]
			}
		}
		rr.Node = d.Node
		res, err := s.opts.Store.Reserve(ctx, rr)
		var qe *store.QuotaError
		switch {
		case err == nil:
			return d, node, res, nil
		case errors.As(err, &qe):
			return d, node, nil, err
		case errors.Is(err, store.ErrNoCapacity), errors.Is(err, store.ErrNotFound):
			last = err // the node filled up or went since the snapshot: place again
		default:
			return d, node, nil, err
		}
	}
	return scheduler.Decision{}, nil, nil, fmt.Errorf("%w: %w", errNoRoom, last)
}
