package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Snapshot mode (docs/warm-pools.md): the pool keeps one member, its
// template, which the loop boots with its RAM in a file (the QEMU driver's
// memory_file), saves as a memory snapshot once its agent answers, and
// stops. A warm template is a stopped VM: no QEMU, no RAM held, only the
// saved RAM file and device state on its node's disk. A claim clones the
// template with resume_memory: the copy runs on from the saved moment
// (copy-on-write over the RAM file) and answers in a fraction of a boot.
// The template is never handed out.

// templateTag is the template's memory snapshot.
const templateTag = "pool-template"

// templateConfig is the driver config a template is created with.
var templateConfig = json.RawMessage(`{"memory_file": true}`)

// claimTimeout bounds a snapshot claim's clone and its wait for the agent.
const claimTimeout = 2 * time.Minute

// guestSettleCommand returns once the FluxVM guest has finished starting
// (cmd/fluxvm-guest: the agent is the initramfs's /init), at most
// settleTimeoutSeconds later.
var guestSettleCommand = []string{"/init", "settle"}

const settleTimeoutSeconds = 70

// snapshotTarget is how many members a snapshot pool keeps: its template,
// unless the pool was emptied (size 0).
func snapshotTarget(p *store.Pool) int {
	return min(p.Size, 1)
}

// saveTemplate turns a booted template into a saved one: a memory
// snapshot, then a stop. It reports why not.
func (s *Service) saveTemplate(ctx context.Context, nc *sdk.NodeClient, m *store.PoolMember) error {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	// Saved once the guest has finished starting (the agent answers before
	// its SSH server is up, which takes over a second of its CPU under TCG):
	// otherwise every copy would redo the rest of the start, while it should
	// be answering its claimer. An image whose agent cannot say is saved
	// as it is.
	if res, err := nc.Exec(ctx, m.VMID, sdk.ExecRequest{Command: sdk.Command{Argv: guestSettleCommand}, TimeoutSeconds: settleTimeoutSeconds}); err != nil || res.ExitCode != 0 {
		s.log.Debug("pool template: cannot tell that the guest has finished starting; saving it as it is", "pool", m.Pool, "vm", m.ID, "error", err)
	}
	if _, err := nc.SnapshotVM(ctx, m.VMID, sdk.SnapshotRequest{Tag: templateTag, Memory: true}); err != nil {
		return fmt.Errorf("save the template: %w", err)
	}
	if _, err := nc.StopVM(ctx, m.VMID, 10*time.Second); err != nil {
		return fmt.Errorf("stop the saved template: %w", err)
	}
	// Stopped, it holds no vCPU or memory: its room and the tenant's
	// quota are free for the copies.
	if m.EntryID != "" {
		if _, err := s.st.EndEntry(ctx, m.EntryID, "saved", s.now()); err != nil {
			return fmt.Errorf("end the saved template's ledger entry: %w", err)
		}
	}
	return nil
}

// claimSnapshot serves a launch from a snapshot pool: a copy of its saved
// template, reserved on the template's node against the claimer's quota,
// resumed and answering. nil (no error) when it cannot now: the launch
// boots a VM instead.
func (s *Service) claimSnapshot(ctx context.Context, pool store.Pool, req ClaimRequest) *Claimed {
	ms, err := s.st.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return nil
	}
	var tmpl *store.PoolMember
	for i := range ms {
		if ms[i].State == store.MemberWarm {
			tmpl = &ms[i]
			break
		}
	}
	if tmpl == nil {
		return nil
	}
	node, err := s.st.GetNode(ctx, tmpl.Node)
	if err != nil {
		return nil
	}
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return nil
	}
	res, err := s.st.Reserve(ctx, store.ReserveRequest{Tenant: req.Tenant, Node: node.Name, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		ExclusiveLeases: pol.ExclusiveLeasedHosts && req.Tenant != ""})
	if err != nil {
		var qe *store.QuotaError
		var ce *store.CapacityError
		if !errors.As(err, &qe) && !errors.As(err, &ce) {
			s.log.Warn("reserve a copy of a pool's template; booting instead", "pool", pool.Name, "error", err)
		}
		return nil // a cold launch says which quota or why no room
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	release := func() { _ = s.st.Release(ctx, res) }
	nc, err := s.nodes.Client(node)
	if err != nil {
		release()
		return nil
	}
	name := "pool-" + pool.Name + "-" + randHex(4)
	vm, err := nc.CloneVM(ctx, tmpl.VMID, sdk.CloneRequest{Name: name, Snapshot: templateTag, ResumeMemory: true,
		Labels: map[string]string{Label: pool.Name}})
	if err != nil {
		release()
		s.log.Warn("resume a copy of a pool's template; booting instead", "pool", pool.Name, "node", node.Name, "error", err)
		var ae *sdk.APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusConflict) {
			// The template (or its snapshot) is gone or unusable: the
			// loop saves a new one.
			s.markRetiring(ctx, tmpl, []string{store.MemberWarm})
			s.Kick()
		}
		return nil
	}
	entry, err := s.st.Commit(ctx, res, store.LedgerEntry{VMID: vm.ID, Name: vm.Name, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		GuestOS: pool.GuestOS, Image: pool.Image, StartedAt: s.now().UTC()})
	if err != nil {
		// Adopted by the reconciler from its tenant stamp, like a launch's.
		s.log.Error("record the ledger entry of a pool copy; the reconciler will adopt it", "pool", pool.Name, "vm", vm.Name, "error", err)
		release()
	}
	now := s.now().UTC()
	m := store.PoolMember{ID: vm.Name, Pool: pool.Name, Tenant: pool.Tenant, Node: node.Name, VMID: vm.ID,
		State: store.MemberClaimed, CreatedAt: now, ClaimedAt: now, ClaimedBy: req.Tenant}
	if entry != nil {
		m.EntryID = entry.ID
	}
	// Kept for the demand window, like a running pool's claims, so the
	// status shows what was handed out; recorded while the copy's guest
	// resumes, off the claim's path.
	if err := s.st.CreateMember(ctx, &m); err != nil {
		s.log.Warn("record a pool copy", "pool", pool.Name, "vm", vm.Name, "error", err)
	}
	// The node holds its answer until the copy's agent answers (no polling:
	// polling every 10 ms took the CPU the resuming guest needed on a small
	// host); 100 ms is the pause only if it answers not ready.
	if got, err := nc.WaitReady(ctx, vm.ID, 100*time.Millisecond); err == nil {
		vm = got
	} else {
		s.log.Warn("a resumed pool copy does not answer yet", "pool", pool.Name, "vm", vm.Name, "error", err)
	}
	return &Claimed{Pool: pool, Member: m, VM: vm}
}
