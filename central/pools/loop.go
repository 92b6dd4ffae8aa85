package pools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

// The pool loop (leader only).

// inflightKey names a pool in Service.inflight.
func inflightKey(tenant, pool string) string {
	return tenant + "/" + pool
}

func (s *Service) isInflight(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.inflight[id]
	return ok
}

func (s *Service) done(id string) {
	s.mu.Lock()
	delete(s.inflight, id)
	s.mu.Unlock()
}

// Loop keeps every pool at its target until ctx ends: a pass every
// interval (DefaultEvery when 0) and at once after a claim or a change
// made through this central. Only the leader runs it, with a fenced
// context (store.Fenced).
func (s *Service) Loop(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("pool loop", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// Reconcile is one pass of the pool loop over every pool: members that
// answered become warm, stale ones go, pools being deleted are finished, and
// missing members are started (their creation runs on in the background).
func (s *Service) Reconcile(ctx context.Context) error {
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range pools {
		if err := s.reconcilePool(ctx, &pools[i]); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", pools[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Service) reconcilePool(ctx context.Context, pool *store.Pool) error {
	if pool.Deleting {
		_, err := s.finishDelete(ctx, pool)
		return err
	}
	ms, err := s.st.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return err
	}
	now := s.now()
	live := 0 // warm, booting or being created
	var warm []store.PoolMember
	for _, m := range ms {
		switch {
		case s.isInflight(m.ID):
			live++
		case m.State == store.MemberClaimed:
			if now.Sub(m.ClaimedAt) >= DemandWindow {
				_ = s.st.DeleteMember(ctx, pool.Tenant, pool.Name, m.ID)
			}
		case m.State == store.MemberRetiring:
			s.retire(ctx, &m)
		case m.State == store.MemberCreating && time.Since(m.CreatedAt) > nodecall.CreateTimeout:
			// A central that led before us died creating it.
			s.markRetiring(ctx, &m, []string{store.MemberCreating})
		case m.State == store.MemberCreating:
			live++
		case m.State == store.MemberBooting:
			// Created by an earlier leader: watch it here.
			live++
			s.watchBooting(ctx, pool, m)
		case m.State == store.MemberWarm && pool.Mode == ModeSnapshot:
			// A saved template's entry ended when it was saved; a
			// template gone from its node shows in the next claim.
			live++
		case m.State == store.MemberWarm:
			if e, err := s.st.GetEntry(ctx, m.EntryID); err == nil && !e.Running() {
				// The VM went (deleted on its node, or by its owner).
				s.markRetiring(ctx, &m, []string{store.MemberWarm})
				continue
			}
			live++
			warm = append(warm, m)
		}
	}
	// Members this central started creating whose record is not written
	// yet are live too: without them a pass racing a create would start
	// another.
	listed := make(map[string]bool, len(ms))
	for _, m := range ms {
		listed[m.ID] = true
	}
	key := inflightKey(pool.Tenant, pool.Name)
	s.mu.Lock()
	for id, k := range s.inflight {
		if k == key && !listed[id] {
			live++
		}
	}
	s.mu.Unlock()
	want := target(pool, recentClaims(ms, now))
	if pool.Mode == ModeSnapshot {
		want = snapshotTarget(pool)
	}
	for i := 0; live > want && i < len(warm); i++ {
		// Shrink: retire the youngest warm members.
		m := warm[len(warm)-1-i]
		if s.markRetiring(ctx, &m, []string{store.MemberWarm}) {
			live--
		}
	}
	for ; live < want; live++ {
		id := "pool-" + pool.Name + "-" + randHex(4)
		s.mu.Lock()
		s.inflight[id] = key
		s.mu.Unlock()
		go s.createMember(context.WithoutCancel(ctx), *pool, id)
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// markRetiring moves a member from one of the states in from to retiring
// and deletes its VM; false when a claim (or another pass) got there first.
func (s *Service) markRetiring(ctx context.Context, m *store.PoolMember, from []string) bool {
	got, err := s.st.UpdateMember(ctx, m.Tenant, m.Pool, m.ID, from, func(x *store.PoolMember) { x.State = store.MemberRetiring })
	if err != nil {
		return false
	}
	s.retire(ctx, got)
	return true
}

// retire deletes a retiring member's VM on its node, ends its ledger
// entry and forgets it. A node that does not answer keeps it retiring for
// the next pass.
func (s *Service) retire(ctx context.Context, m *store.PoolMember) {
	if m.Node != "" {
		n, err := s.st.GetNode(ctx, m.Node)
		if err == nil {
			id := m.VMID
			if id == "" {
				id = m.ID // created under its name; its id was never recorded
			}
			if _, err := s.nodes.Delete(ctx, n, id); err != nil {
				s.log.Warn("delete a retired pool vm; retrying next pass", "pool", m.Pool, "vm", id, "node", m.Node, "error", err)
				return
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return
		}
	}
	if m.EntryID != "" {
		if _, err := s.st.EndEntry(ctx, m.EntryID, "deleted", s.now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("end the ledger entry of a retired pool vm", "entry", m.EntryID, "error", err)
			return
		}
	}
	_ = s.st.DeleteMember(ctx, m.Tenant, m.Pool, m.ID)
}

// finishDelete retires every member not handed out and removes the pool
// once none is left; done reports whether it is gone.
func (s *Service) finishDelete(ctx context.Context, pool *store.Pool) (bool, error) {
	ms, err := s.st.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return false, err
	}
	left := 0
	for _, m := range ms {
		switch {
		case m.State == store.MemberClaimed:
			continue
		case m.State == store.MemberRetiring:
			s.retire(ctx, &m)
		case s.isInflight(m.ID):
			left++ // a later pass retires it once its creation ends
		default:
			s.markRetiring(ctx, &m, []string{store.MemberCreating, store.MemberBooting, store.MemberWarm})
		}
	}
	rest, err := s.st.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return false, err
	}
	for _, m := range rest {
		if m.State != store.MemberClaimed {
			left++
		}
	}
	if left > 0 {
		return false, nil
	}
	return true, s.st.RemovePool(ctx, pool.Tenant, pool.Name)
}

// createMember boots one member: placement on the pool's kind of node,
// reservation, the node's create, the ledger entry, then waiting for the
// guest agent. Failures are written to the pool (blocked) for its status.
func (s *Service) createMember(ctx context.Context, pool store.Pool, id string) {
	defer s.done(id)
	blocked := func(why string) {
		if pool.Blocked == why {
			return
		}
		_, _ = s.st.UpdatePool(ctx, pool.Tenant, pool.Name, func(p *store.Pool) error {
			if p.Blocked != why {
				p.Blocked, p.BlockedSince = why, s.now().UTC()
			}
			return nil
		})
	}
	node, res, why := s.reserve(ctx, &pool)
	if res == nil {
		blocked(why)
		return
	}
	release := func() { _ = s.st.Release(ctx, res) }
	m := &store.PoolMember{ID: id, Pool: pool.Name, Tenant: pool.Tenant, Node: node.Name, State: store.MemberCreating,
		CreatedAt: s.now().UTC(), Central: s.st.ID()}
	if err := s.st.CreateMember(ctx, m); err != nil {
		release()
		s.log.Warn("record a pool member", "pool", pool.Name, "error", err)
		return
	}
	im, err := s.st.GetImage(ctx, pool.Image)
	if err != nil {
		release()
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		blocked(fmt.Sprintf("image %s: %v", pool.Image, err))
		return
	}
	spec := sdk.CreateVMRequest{Name: id, Image: im.Image, GuestOS: pool.GuestOS, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		Tenant: pool.Tenant, Labels: map[string]string{Label: pool.Name}}
	if pool.Mode == ModeSnapshot {
		// No tenant stamp: once saved its ledger entry ends (a stopped
		// template holds no vCPU or memory), and the reconciler adopts
		// only stamped VMs. Its copies, which inherit the stamp, are
		// the claimer's by their ledger entries, like a shared pool's.
		spec.DriverConfig, spec.Tenant = templateConfig, ""
	}
	vm, err := s.nodes.Create(ctx, node, spec)
	if err != nil {
		release()
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		blocked(fmt.Sprintf("node %s could not create a vm: %v", node.Name, err))
		return
	}
	entry, err := s.st.Commit(ctx, res, store.LedgerEntry{VMID: vm.ID, Name: vm.Name, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		GuestOS: pool.GuestOS, Image: pool.Image, StartedAt: s.now().UTC()})
	if err != nil {
		release()
		m.VMID = vm.ID
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		s.log.Warn("record the ledger entry of a pool vm; deleting it", "pool", pool.Name, "vm", vm.ID, "error", err)
		return
	}
	got, err := s.st.UpdateMember(ctx, pool.Tenant, pool.Name, id, []string{store.MemberCreating}, func(x *store.PoolMember) {
		x.VMID, x.EntryID, x.State = vm.ID, entry.ID, store.MemberBooting
	})
	if err != nil {
		// The pool is being deleted (or the member was retired): the VM goes.
		m.VMID, m.EntryID, m.State = vm.ID, entry.ID, store.MemberRetiring
		s.retire(ctx, m)
		return
	}
	if pool.Blocked != "" {
		blocked("")
	}
	s.waitWarm(ctx, node, got, pool.Mode == ModeSnapshot)
}

// watchBooting takes over a booting member this central did not create.
func (s *Service) watchBooting(ctx context.Context, pool *store.Pool, m store.PoolMember) {
	s.mu.Lock()
	if _, ok := s.inflight[m.ID]; ok {
		s.mu.Unlock()
		return
	}
	s.inflight[m.ID] = inflightKey(pool.Tenant, pool.Name)
	s.mu.Unlock()
	go func() {
		defer s.done(m.ID)
		n, err := s.st.GetNode(ctx, m.Node)
		if err != nil {
			return
		}
		s.waitWarm(context.WithoutCancel(ctx), n, &m, pool.Mode == ModeSnapshot)
	}()
}

// waitWarm waits for a booting member's guest agent and makes it warm; one
// that does not answer in readyTimeout (or stops) is retired. A snapshot
// pool's template is saved and stopped first.
func (s *Service) waitWarm(ctx context.Context, node *store.Node, m *store.PoolMember, template bool) {
	nc, err := s.nodes.Client(node)
	if err != nil {
		return
	}
	left := readyTimeout - time.Since(m.CreatedAt)
	wctx, cancel := context.WithTimeout(ctx, max(left, time.Second))
	_, err = nc.WaitReady(wctx, m.VMID, 50*time.Millisecond)
	cancel()
	if err != nil {
		s.log.Warn("pool vm did not become ready; deleting it", "pool", m.Pool, "vm", m.ID, "error", err)
		s.markRetiring(ctx, m, []string{store.MemberBooting})
		return
	}
	if template {
		if err := s.saveTemplate(ctx, nc, m); err != nil {
			s.log.Warn("pool template could not be saved; deleting it", "pool", m.Pool, "vm", m.ID, "error", err)
			_, _ = s.st.UpdatePool(ctx, m.Tenant, m.Pool, func(p *store.Pool) error {
				p.Blocked, p.BlockedSince = "node "+node.Name+": "+err.Error(), s.now().UTC()
				return nil
			})
			s.markRetiring(ctx, m, []string{store.MemberBooting})
			return
		}
	}
	if _, err := s.st.UpdateMember(ctx, m.Tenant, m.Pool, m.ID, []string{store.MemberBooting}, func(x *store.PoolMember) {
		x.State, x.ReadyAt = store.MemberWarm, s.now().UTC()
	}); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("mark a pool vm warm", "pool", m.Pool, "vm", m.ID, "error", err)
	}
}

// reserve places one member and reserves room for it: a tenant's pool on
// the hosts it leases (if it leases any, else on unleased nodes), against
// its quota; a shared pool on unleased nodes, as the operator. It returns
// why not when nothing could be reserved.
func (s *Service) reserve(ctx context.Context, pool *store.Pool) (*store.Node, *store.Reservation, string) {
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return nil, nil, "cannot read the policy"
	}
	macOS := pool.GuestOS == store.GuestMacOS
	req := scheduler.Request{Tenant: pool.Tenant, GuestOS: pool.GuestOS, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB, NodeSelector: pool.NodeSelector}
	// A tenant that leases hosts keeps its pool on them; otherwise pools
	// live on unleased nodes.
	stored, _, err := s.place.Snapshot(ctx)
	if err != nil {
		return nil, nil, "cannot read the fleet"
	}
	leases := false
	for i := range stored {
		leases = leases || pool.Tenant != "" && stored[i].LeasedBy == pool.Tenant
	}
	keep := func(n *store.Node) bool {
		if leases {
			return n.LeasedBy == pool.Tenant
		}
		return n.LeasedBy == ""
	}
	_, node, res, err := s.place.PlaceAndReserve(ctx, req, pol, store.ReserveRequest{Tenant: pool.Tenant, VCPUs: pool.VCPUs,
		MemoryMiB: pool.MemoryMiB, MacOS: macOS, ExclusiveLeases: pol.ExclusiveLeasedHosts,
		RequireLease: pol.RequireLeaseForMacOS && macOS && pool.Tenant != ""}, keep)
	var np *scheduler.NoPlacementError
	var qe *store.QuotaError
	switch {
	case err == nil:
		return node, res, ""
	case errors.As(err, &np):
		return nil, nil, np.Summary
	case errors.As(err, &qe):
		return nil, nil, "tenant quota: " + qe.Error()
	default:
		return nil, nil, err.Error()
	}
}
