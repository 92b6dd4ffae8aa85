package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Membership is what the pusher needs of this central's place in a fleet.
type Membership struct {
	// MemberID is the owner's id for this central: consent and drain state
	// are kept under it, so a new membership starts with neither.
	MemberID string
	OwnerURL string
	// Token is the fleet-scoped token this central presents to the owner.
	Token string
}

// PusherOptions configure the member's side.
type PusherOptions struct {
	Store *store.Store
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger hclog.Logger
	// Membership is this central's joined membership (nil, nil: none).
	Membership func(ctx context.Context) (*Membership, error)
	// Owner makes the client calling the owner (nil: sdk.NewFleetClient).
	Owner func(ownerURL, token string) (*sdk.FleetClient, error)
	// Activity is a finished VM's activity records, sent as its payload (nil: none).
	Activity func(ctx context.Context, e store.LedgerEntry) []byte
	// TenantName names a tenant by id for the row ("" for the operator's VMs).
	TenantName func(ctx context.Context, id string) string
}

// Pusher drains this central's finished VM ledger rows to its owner.
type Pusher struct {
	st       *store.Store
	kv       clientv3.KV
	prefix   string
	now      func() time.Time
	log      hclog.Logger
	member   func(ctx context.Context) (*Membership, error)
	owner    func(ownerURL, token string) (*sdk.FleetClient, error)
	activity func(ctx context.Context, e store.LedgerEntry) []byte
	tenant   func(ctx context.Context, id string) string
	// draining serializes this central's drains: two at once would send
	// the same unacknowledged rows twice (harmless at the owner, but waste).
	draining sync.Mutex
	// kick asks Run for a drain now (consent was just given).
	kick chan struct{}
}

// pushState is the drain's record for one membership.
type pushState struct {
	Consent   bool      `json:"consent"`
	ConsentAt time.Time `json:"consent_at,omitzero"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	LastDrain time.Time `json:"last_drain,omitzero"`
}

// refusal is a row the owner refused on Count drains.
type refusal struct {
	Fingerprint string `json:"fingerprint"`
	Count       int    `json:"count"`
	Reason      string `json:"reason"`
	VM          string `json:"vm"`
}

// NeverSent is what a member's history push never carries.
var NeverSent = []string{
	"running VMs (a row goes once its VM finished)",
	"disks, memory, snapshots, volumes and anything inside a guest",
	"console output, screens, exec commands and their output",
	"tokens, API keys, SSH keys, secrets and VM specs",
	"tenants' e-mail addresses and invoices",
}

// NewPusher makes the member's side.
func NewPusher(opts PusherOptions) *Pusher {
	p := &Pusher{st: opts.Store, kv: opts.Store.Client(), prefix: opts.Store.Prefix() + "history/push/", now: opts.Now,
		log: opts.Logger, member: opts.Membership, owner: opts.Owner, activity: opts.Activity, tenant: opts.TenantName,
		kick: make(chan struct{}, 1)}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	if p.owner == nil {
		p.owner = func(u, token string) (*sdk.FleetClient, error) {
			return sdk.NewFleetClient(u, sdk.WithUserAgent("fluxvm-central"), sdk.WithToken(token))
		}
	}
	if p.activity == nil {
		p.activity = func(context.Context, store.LedgerEntry) []byte { return nil }
	}
	if p.tenant == nil {
		p.tenant = func(_ context.Context, id string) string { return id }
	}
	return p
}

func (p *Pusher) stateKey(m string) string        { return p.prefix + m + "/state" }
func (p *Pusher) ackKey(m, row string) string     { return p.prefix + m + "/acked/" + row }
func (p *Pusher) refusedKey(m, row string) string { return p.prefix + m + "/refused/" + row }
func (p *Pusher) payKey(m, sha string) string     { return p.prefix + m + "/payloads/" + sha }

// membership is the joined membership, or ErrNoFleet. Drain state of any
// earlier membership is dropped: consent belongs to the membership.
func (p *Pusher) membership(ctx context.Context) (*Membership, error) {
	m, err := p.member(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the membership: %w", err)
	}
	g, gerr := p.kv.Get(ctx, p.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if gerr == nil {
		stale := map[string]bool{}
		for _, kv := range g.Kvs {
			id, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), p.prefix), "/")
			if m == nil || id != m.MemberID {
				stale[id] = true
			}
		}
		for id := range stale {
			_, _ = p.kv.Delete(ctx, p.prefix+id+"/", clientv3.WithPrefix())
		}
	}
	if m == nil {
		return nil, ErrNoFleet
	}
	return m, nil
}

func (p *Pusher) loadState(ctx context.Context, m string) (pushState, error) {
	var s pushState
	g, err := p.kv.Get(ctx, p.stateKey(m))
	if err != nil {
		return s, fmt.Errorf("read the history push state: %w", err)
	}
	if len(g.Kvs) == 0 {
		return pushState{State: sdk.HistoryConsentRequired, Reason: "history push is off until this central's operator consents (fluxctl fleet sync --preview, then --enable)"}, nil
	}
	return s, json.Unmarshal(g.Kvs[0].Value, &s)
}

func (p *Pusher) saveState(ctx context.Context, m string, s pushState) error {
	if _, err := p.kv.Put(ctx, p.stateKey(m), mustJSON(s)); err != nil {
		return fmt.Errorf("record the history push state: %w", err)
	}
	return nil
}

// item is one finished row ready to go.
type item struct {
	row         sdk.HistoryRow
	payload     []byte
	fingerprint string
	// bytes is the row's and its payload's size; size bounds what they
	// take in a request (a payload byte JSON-escaped is up to six).
	bytes, size int
}

type ledgerState struct {
	acked   map[string]string
	refused map[string]refusal
	payAck  map[string]bool
}

func (p *Pusher) readLedgerState(ctx context.Context, m string) (*ledgerState, error) {
	g, err := p.kv.Get(ctx, p.prefix+m+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the history push state: %w", err)
	}
	ls := &ledgerState{acked: map[string]string{}, refused: map[string]refusal{}, payAck: map[string]bool{}}
	for _, kv := range g.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), p.prefix+m+"/")
		switch kind, id, _ := strings.Cut(rest, "/"); kind {
		case "acked":
			ls.acked[id] = string(kv.Value)
		case "refused":
			var r refusal
			if json.Unmarshal(kv.Value, &r) == nil {
				ls.refused[id] = r
			}
		case "payloads":
			ls.payAck[id] = true
		}
	}
	return ls, nil
}

// finished is every finished ledger row as it would be sent.
func (p *Pusher) finished(ctx context.Context) ([]item, error) {
	es, err := p.st.ListEntries(ctx, func(e *store.LedgerEntry) bool { return !e.Running() })
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	out := make([]item, 0, len(es))
	for _, e := range es {
		r := sdk.HistoryRow{ID: e.ID, Node: e.Node, VM: e.Name, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, GuestOS: e.GuestOS,
			Image: e.Image, StartedAt: e.StartedAt.UTC(), EndedAt: e.EndedAt.UTC(), EndReason: e.EndReason}
		if e.Tenant != "" {
			r.Tenant = p.tenant(ctx, e.Tenant)
		}
		it := item{payload: p.activity(ctx, e)}
		if len(it.payload) > sdk.HistoryMaxPayloadBytes {
			it.payload = nil // the Activity source bounds it; a larger one is not sent
		}
		if len(it.payload) > 0 {
			r.Activity = sum(it.payload)
		}
		it.row = r
		b := mustJSON(r)
		it.fingerprint = sum([]byte(b))
		// JSON may escape a payload byte as six: bound the batch by that.
		it.size = len(b) + 6*len(it.payload) + 128
		it.bytes = len(b) + len(it.payload)
		out = append(out, it)
	}
	return out, nil
}

// retired says whether the owner refused this version of the row too often.
func retired(ls *ledgerState, it item) bool {
	r, ok := ls.refused[it.row.ID]
	return ok && r.Fingerprint == it.fingerprint && r.Count >= sdk.HistoryMaxRefusals
}

// Preview is what the push would send, and what it never sends.
func (p *Pusher) Preview(ctx context.Context) (*sdk.HistoryPreview, error) {
	m, err := p.membership(ctx)
	if err != nil {
		return nil, err
	}
	return p.preview(ctx, m)
}

func (p *Pusher) preview(ctx context.Context, m *Membership) (*sdk.HistoryPreview, error) {
	items, err := p.finished(ctx)
	if err != nil {
		return nil, err
	}
	ls, err := p.readLedgerState(ctx, m.MemberID)
	if err != nil {
		return nil, err
	}
	pv := &sdk.HistoryPreview{NeverSent: NeverSent}
	for _, it := range items {
		pv.Rows++
		pv.Bytes += int64(it.bytes)
		if len(it.payload) > 0 {
			pv.Payloads++
		}
		switch {
		case retired(ls, it):
			pv.Retired++
		case ls.acked[it.row.ID] != it.fingerprint:
			pv.UnsentRows++
			pv.UnsentBytes += int64(it.bytes)
		}
	}
	return pv, nil
}

// Status is where the push stands.
func (p *Pusher) Status(ctx context.Context) (*sdk.HistorySyncStatus, error) {
	m, err := p.membership(ctx)
	if errors.Is(err, ErrNoFleet) {
		return &sdk.HistorySyncStatus{State: sdk.HistoryConsentRequired, Reason: "this central is in no fleet: join one first (fluxctl fleet join)", Retired: []sdk.HistoryRetired{}}, nil
	} else if err != nil {
		return nil, err
	}
	return p.status(ctx, m)
}

func (p *Pusher) status(ctx context.Context, m *Membership) (*sdk.HistorySyncStatus, error) {
	s, err := p.loadState(ctx, m.MemberID)
	if err != nil {
		return nil, err
	}
	ls, err := p.readLedgerState(ctx, m.MemberID)
	if err != nil {
		return nil, err
	}
	out := &sdk.HistorySyncStatus{State: s.State, Reason: s.Reason, Consent: s.Consent, Owner: m.OwnerURL, Acked: int64(len(ls.acked)), Retired: []sdk.HistoryRetired{}}
	if !s.LastDrain.IsZero() {
		t := s.LastDrain
		out.LastDrain = &t
	}
	for id, r := range ls.refused {
		if r.Count >= sdk.HistoryMaxRefusals {
			out.Retired = append(out.Retired, sdk.HistoryRetired{Row: id, VM: r.VM, Reason: r.Reason})
		}
	}
	return out, nil
}

// SetConsent turns the push on (the status then carries the preview the
// operator agreed to) or off. Off stops the next drain.
func (p *Pusher) SetConsent(ctx context.Context, on bool) (*sdk.HistorySyncStatus, error) {
	m, err := p.membership(ctx)
	if err != nil {
		return nil, err
	}
	s, err := p.loadState(ctx, m.MemberID)
	if err != nil {
		return nil, err
	}
	s.Consent = on
	if on {
		s.ConsentAt = p.now().UTC()
		if s.State == sdk.HistoryConsentRequired {
			s.State, s.Reason = sdk.HistoryIdle, "waiting for the first drain"
		}
	} else {
		s.State, s.Reason = sdk.HistoryConsentRequired, "this central's operator turned history push off (fluxctl fleet sync --enable turns it on)"
	}
	if err := p.saveState(ctx, m.MemberID, s); err != nil {
		return nil, err
	}
	p.log.Info("history push consent", "enabled", on, "owner", m.OwnerURL)
	if on {
		select { // Run drains right away (on the leader)
		case p.kick <- struct{}{}:
		default:
		}
	}
	out, err := p.status(ctx, m)
	if err != nil {
		return nil, err
	}
	if on {
		out.Preview, err = p.preview(ctx, m)
	}
	return out, err
}

// Drain sends every finished row the owner has not acknowledged, in
// batches of at most sdk.HistoryMaxBatchRows rows and
// sdk.HistoryMaxBatchBytes, payloads before the rows naming them,
// recording what the owner acknowledged after every batch. A background
// drain (manual false) does nothing after a 401 or 403; a manual one tries
// again.
func (p *Pusher) Drain(ctx context.Context, manual bool) (*sdk.HistorySyncStatus, error) {
	p.draining.Lock()
	defer p.draining.Unlock()
	m, err := p.membership(ctx)
	if err != nil {
		return nil, err
	}
	s, err := p.loadState(ctx, m.MemberID)
	if err != nil {
		return nil, err
	}
	if !s.Consent {
		return nil, fmt.Errorf("%w until this central's operator consents", ErrConsent)
	}
	if !manual && (s.State == sdk.HistoryUnauthorized || s.State == sdk.HistoryRemoved) {
		return p.status(ctx, m)
	}
	s.State, s.Reason = p.drain(ctx, m)
	s.LastDrain = p.now().UTC()
	// Consent may have been withdrawn meanwhile: keep that word.
	if cur, err := p.loadState(ctx, m.MemberID); err == nil && !cur.Consent {
		s = cur
	}
	if err := p.saveState(ctx, m.MemberID, s); err != nil {
		return nil, err
	}
	return p.status(ctx, m)
}

// drain runs one drain and says the state it left.
func (p *Pusher) drain(ctx context.Context, m *Membership) (state, reason string) {
	items, err := p.finished(ctx)
	if err != nil {
		return sdk.HistoryError, err.Error()
	}
	ls, err := p.readLedgerState(ctx, m.MemberID)
	if err != nil {
		return sdk.HistoryError, err.Error()
	}
	var todo []item
	for _, it := range items {
		if ls.acked[it.row.ID] != it.fingerprint && !retired(ls, it) {
			todo = append(todo, it)
		}
	}
	c, err := p.owner(m.OwnerURL, m.Token)
	if err != nil {
		return sdk.HistoryError, "owner URL: " + err.Error()
	}
	sent := 0
	for len(todo) > 0 {
		n, size := 0, 0
		for n < len(todo) && n < sdk.HistoryMaxBatchRows && (n == 0 || size+todo[n].size <= sdk.HistoryMaxBatchBytes-4096) {
			size += todo[n].size
			n++
		}
		// Consent withdrawn mid-drain stops it before the next batch.
		if s, err := p.loadState(ctx, m.MemberID); err == nil && !s.Consent {
			return sdk.HistoryConsentRequired, "consent withdrawn during a drain"
		}
		if err := p.send(ctx, c, m, ls, todo[:n]); err != nil {
			return failure(err)
		}
		sent += n
		todo = todo[n:]
	}
	return sdk.HistorySynced, fmt.Sprintf("the owner holds every finished row (%d sent in this drain)", sent)
}

// failure turns an owner's answer that stops a drain into a state.
func failure(err error) (string, string) {
	var ae *sdk.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return sdk.HistoryUnauthorized, "the owner does not know this central's fleet token: pair again (" + ae.Message + ")"
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
		return sdk.HistoryRemoved, "the owner removed this central from the fleet (" + ae.Message + ")"
	case errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests:
		return sdk.HistoryError, "the owner answered " + ae.Error()
	case errors.As(err, &ae):
		return sdk.HistoryBackoff, "the owner answered " + ae.Error() + "; the next drain tries again"
	case errors.Is(err, errLocal):
		return sdk.HistoryError, err.Error()
	}
	return sdk.HistoryBackoff, "the owner did not answer: " + err.Error() + "; the next drain tries again"
}

var errLocal = errors.New("this central's store")

// refused reports an owner's refusal of a batch (400 or 409).
func refusedBy(err error) (string, bool) {
	var ae *sdk.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusConflict) {
		return ae.Message, true
	}
	return "", false
}

// send pushes one batch: its payloads the owner has not acknowledged, then
// its rows. A refused batch is split in halves until the row causing it
// stands alone; that row's refusal is counted and the rest go on. An error
// returned stops the drain.
func (p *Pusher) send(ctx context.Context, c *sdk.FleetClient, m *Membership, ls *ledgerState, batch []item) error {
	var pays []sdk.HistoryPayload
	for _, it := range batch {
		if len(it.payload) > 0 && !ls.payAck[it.row.Activity] {
			pays = append(pays, sdk.HistoryPayload{SHA256: it.row.Activity, Data: string(it.payload)})
		}
	}
	if len(pays) > 0 {
		if _, err := c.PushHistoryPayloads(ctx, sdk.HistoryPayloadBatch{Payloads: pays}); err != nil {
			return err
		}
		ops := make([]clientv3.Op, 0, len(pays))
		for _, py := range pays {
			ops = append(ops, clientv3.OpPut(p.payKey(m.MemberID, py.SHA256), ""))
			ls.payAck[py.SHA256] = true
		}
		if _, err := p.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("%w: record acknowledged payloads: %v", errLocal, err)
		}
	}
	rows := make([]sdk.HistoryRow, len(batch))
	for i, it := range batch {
		rows[i] = it.row
	}
	_, err := c.PushHistoryRows(ctx, sdk.HistoryRowBatch{Rows: rows})
	if reason, ok := refusedBy(err); ok {
		if len(batch) == 1 {
			return p.refuse(ctx, m, ls, batch[0], reason)
		}
		half := len(batch) / 2
		if err := p.send(ctx, c, m, ls, batch[:half]); err != nil {
			return err
		}
		return p.send(ctx, c, m, ls, batch[half:])
	}
	if err != nil {
		return err
	}
	// Acknowledged: recorded before the next batch goes.
	ops := make([]clientv3.Op, 0, 2*len(batch))
	for _, it := range batch {
		ops = append(ops, clientv3.OpPut(p.ackKey(m.MemberID, it.row.ID), it.fingerprint))
		if _, ok := ls.refused[it.row.ID]; ok {
			ops = append(ops, clientv3.OpDelete(p.refusedKey(m.MemberID, it.row.ID)))
			delete(ls.refused, it.row.ID)
		}
		ls.acked[it.row.ID] = it.fingerprint
	}
	for len(ops) > 0 {
		n := min(len(ops), 100)
		if _, err := p.kv.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("%w: record acknowledged rows: %v", errLocal, err)
		}
		ops = ops[n:]
	}
	return nil
}

// refuse counts a drain's refusal of a row standing alone.
func (p *Pusher) refuse(ctx context.Context, m *Membership, ls *ledgerState, it item, reason string) error {
	r := ls.refused[it.row.ID]
	if r.Fingerprint != it.fingerprint {
		r = refusal{Fingerprint: it.fingerprint}
	}
	r.Count++
	r.Reason, r.VM = reason, it.row.VM
	if len(r.Reason) > 512 {
		r.Reason = r.Reason[:512]
	}
	ls.refused[it.row.ID] = r
	ops := []clientv3.Op{clientv3.OpPut(p.refusedKey(m.MemberID, it.row.ID), mustJSON(r))}
	if it.row.Activity != "" {
		// The owner may have dropped the payload (retention): upload it again next time.
		ops = append(ops, clientv3.OpDelete(p.payKey(m.MemberID, it.row.Activity)))
		delete(ls.payAck, it.row.Activity)
	}
	if _, err := p.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("%w: record a refused row: %v", errLocal, err)
	}
	if r.Count >= sdk.HistoryMaxRefusals {
		p.log.Warn("the owner refused a history row three times: retired until it changes", "vm", it.row.VM, "reason", r.Reason)
	}
	return nil
}

// Run drains every interval, and right after consent was given on this
// central, while ctx lives (on the leader); a drain without consent or
// membership does nothing.
func (p *Pusher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Drain(ctx, false); err != nil && !errors.Is(err, ErrNoFleet) && !errors.Is(err, ErrConsent) && ctx.Err() == nil {
			p.log.Warn("history push", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}
