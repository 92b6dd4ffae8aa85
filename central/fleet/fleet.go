// Package fleet pairs centrals into a fleet and enrolls nodes into a
// central: single-use invites, six-digit confirmation codes both sides
// compute, the scoped credential minted once both sides agreed, leave and
// remove with tombstones, and the fleet view members share. State lives in
// central's etcd; time comes from an injected clock.
package fleet

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// InviteTTL is how long an invite may be redeemed, and how long a
	// redeemed request waits for both sides.
	InviteTTL = 15 * time.Minute
	// MaxTombstones is how many removals are remembered.
	MaxTombstones = 256
	// MaxPending bounds invites and requests outstanding at once.
	MaxPending = 64
	// MaxMembers bounds a fleet's members (centrals and enrolled nodes).
	MaxMembers = 4096
	// PollInterval is how often a member reports to its owner.
	PollInterval = 30 * time.Second
	// MaxSiteNodes bounds the nodes one site reports.
	MaxSiteNodes = 4096
)

// Conditions callers branch on.
var (
	// ErrNotFound is an invite, request or member that does not exist, has
	// expired or was used: callers answer all alike (404).
	ErrNotFound = errors.New("not found")
	// ErrUnknown is a credential nobody holds (401).
	ErrUnknown = errors.New("unknown credential")
	// ErrRemoved is a credential of a member the owner removed (403).
	ErrRemoved = errors.New("removed from the fleet")
	// ErrConflict is a state that forbids the change (409).
	ErrConflict = errors.New("conflict")
	// ErrInvalid is bad input (400).
	ErrInvalid = errors.New("invalid")
	// ErrLimit is too many invites, requests or members (429).
	ErrLimit = errors.New("limit reached")
	// ErrOwner is the owner refusing or not answering a member's call (502
	// unless the error says otherwise).
	ErrOwner = errors.New("the owner central")
)

// Member is a member central or an enrolled node as the owner keeps it.
type Member struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
	// CredentialSHA256 is the hash of the credential handed over once.
	CredentialSHA256 string         `json:"credential_sha256"`
	JoinedAt         time.Time      `json:"joined_at"`
	LastSeen         time.Time      `json:"last_seen,omitzero"`
	Site             *sdk.FleetSite `json:"site,omitempty"`
	// PollToken is what the owner presents to read a member central's site
	// at its URL (the member keeps its hash): a credential the owner uses,
	// kept as given, and good for that one read-only route.
	PollToken string `json:"poll_token,omitempty"`
}

// KindOwner is the kind of the principal an owner's poll token makes on
// the member it polls.
const KindOwner = "owner"

type invite struct {
	Kind      string    `json:"kind"`
	ExpiresAt time.Time `json:"expires_at"`
}

type request struct {
	sdk.FleetPairingRequest
	NonceSHA256 string `json:"nonce_sha256"`
}

type tombstone struct {
	MemberID         string    `json:"member_id"`
	Name             string    `json:"name"`
	CredentialSHA256 string    `json:"credential_sha256"`
	RemovedAt        time.Time `json:"removed_at"`
}

// membership is this central's place in another's fleet. Token is the
// fleet-scoped token it presents to the owner: a credential it uses, so
// it is kept as given (etcd is central's own state, as the node keeps its
// credential in its state dir).
type membership struct {
	State     string    `json:"state"`
	OwnerURL  string    `json:"owner_url"`
	Name      string    `json:"name"`
	URL       string    `json:"url,omitempty"`
	Nonce     string    `json:"nonce"`
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	MemberID  string    `json:"member_id,omitempty"`
	Token     string    `json:"token,omitempty"`
	// PollSHA256 is the hash of the poll token this central gave its owner.
	PollSHA256 string    `json:"poll_sha256,omitempty"`
	JoinedAt   time.Time `json:"joined_at,omitzero"`
	// LastPoll is the last report the owner answered; LastError and
	// LastStatus the last that failed (since then).
	LastPoll   time.Time       `json:"last_poll,omitzero"`
	LastTry    time.Time       `json:"last_try,omitzero"`
	LastError  string          `json:"last_error,omitempty"`
	LastStatus int             `json:"last_status,omitempty"`
	Sites      []sdk.FleetSite `json:"sites,omitempty"`
}

// Options configure a Service.
type Options struct {
	Store *store.Store
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger hclog.Logger
	// LocalSite is this central's own nodes and VM counts, for the fleet view.
	LocalSite func(ctx context.Context) (sdk.FleetSite, error)
	// Owner makes the client a member uses to call its owner (tests may
	// give their own transport); nil: sdk.NewFleetClient.
	Owner func(ownerURL, token string) (*sdk.FleetClient, error)
}

// Service is the fleet of one central: its members if it owns one, its
// membership if it joined one. Safe for concurrent use.
type Service struct {
	kv     clientv3.KV
	prefix string
	now    func() time.Time
	log    hclog.Logger
	local  func(ctx context.Context) (sdk.FleetSite, error)
	owner  func(ownerURL, token string) (*sdk.FleetClient, error)
}

// New makes the Service.
func New(opts Options) *Service {
	s := &Service{kv: opts.Store.Client(), prefix: opts.Store.Prefix() + "federation/", now: opts.Now, log: opts.Logger,
		local: opts.LocalSite, owner: opts.Owner}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.local == nil {
		s.local = func(context.Context) (sdk.FleetSite, error) { return sdk.FleetSite{}, nil }
	}
	if s.owner == nil {
		s.owner = func(u, token string) (*sdk.FleetClient, error) {
			opts := []sdk.Option{sdk.WithUserAgent("fluxvm-central")}
			if token != "" {
				opts = append(opts, sdk.WithToken(token))
			}
			return sdk.NewFleetClient(u, opts...)
		}
	}
	return s
}

func (s *Service) inviteKey(h string) string   { return s.prefix + "invites/" + h }
func (s *Service) requestKey(id string) string { return s.prefix + "requests/" + id }
func (s *Service) nonceKey(h string) string    { return s.prefix + "nonces/" + h }
func (s *Service) memberKey(id string) string  { return s.prefix + "members/" + id }
func (s *Service) credKey(h string) string     { return s.prefix + "credentials/" + h }
func (s *Service) tombKey(h string) string     { return s.prefix + "tombstones/" + h }
func (s *Service) nodeNameKey(n string) string { return s.prefix + "node-names/" + n }
func (s *Service) membershipKey() string       { return s.prefix + "membership" }
func (s *Service) list(ctx context.Context, sub string) (*clientv3.GetResponse, error) {
	return s.kv.Get(ctx, s.prefix+sub, clientv3.WithPrefix())
}

func (s *Service) get(ctx context.Context, key string, v any) (int64, error) {
	r, err := s.kv.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", strings.TrimPrefix(key, s.prefix), err)
	}
	if len(r.Kvs) == 0 {
		return 0, ErrNotFound
	}
	if err := json.Unmarshal(r.Kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", strings.TrimPrefix(key, s.prefix), err)
	}
	return r.Kvs[0].ModRevision, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own records always encode
	}
	return string(b)
}

func validPollToken(t string) bool {
	return strings.HasPrefix(t, sdk.OwnerPollPrefix) && len(t) >= 40 && len(t) <= 64
}

func newID(prefix string) string { return prefix + hash(NewNonce())[:16] }

// CheckName is the rule for a joiner's name: a node's name, or the name a
// member central is listed under.
func CheckName(name string) error {
	if !store.ValidName(name) {
		return fmt.Errorf("%w: name %q: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, clip(name))
	}
	return nil
}

// CheckURL accepts an http(s) base URL without query or fragment ("" too).
func CheckURL(what, u string) error {
	if u == "" {
		return nil
	}
	p, err := url.Parse(u)
	if len(u) > 512 || err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" || p.User != nil {
		return fmt.Errorf("%w: %s %q is not an http(s) base URL", ErrInvalid, what, clip(u))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func checkKind(kind string) error {
	if kind != sdk.PairCentral && kind != sdk.PairNode {
		return fmt.Errorf("%w: kind %q: %q (a central joins) or %q (a node enrolls)", ErrInvalid, clip(kind), sdk.PairCentral, sdk.PairNode)
	}
	return nil
}

// CreateInvite mints a single-use invite of kind; only its SHA-256 is
// kept. A central that is itself a member (or joining) of another fleet
// cannot invite centrals: one central is in at most one fleet.
func (s *Service) CreateInvite(ctx context.Context, kind string) (*sdk.FleetInvite, error) {
	if err := checkKind(kind); err != nil {
		return nil, err
	}
	if kind == sdk.PairCentral {
		var m membership
		if _, err := s.get(ctx, s.membershipKey(), &m); err == nil {
			return nil, fmt.Errorf("%w: this central is in the fleet of %s: a member cannot invite centrals (a central is in at most one fleet)", ErrConflict, m.OwnerURL)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	now := s.now().UTC()
	if n, err := s.dropExpired(ctx, now); err != nil {
		return nil, err
	} else if n >= MaxPending {
		return nil, fmt.Errorf("%w: %d invites and requests are outstanding: approve, reject or let them expire (15 minutes)", ErrLimit, n)
	}
	code := NewInvite()
	norm, _ := NormalizeInvite(code)
	inv := invite{Kind: kind, ExpiresAt: now.Add(InviteTTL)}
	if _, err := s.kv.Put(ctx, s.inviteKey(hash(norm)), mustJSON(inv)); err != nil {
		return nil, fmt.Errorf("store the invite: %w", err)
	}
	return &sdk.FleetInvite{Invite: code, Kind: kind, ExpiresAt: inv.ExpiresAt,
		Note: "shown once: central keeps only its SHA-256; it works once, for 15 minutes"}, nil
}

// dropExpired deletes expired invites and requests and counts what is left.
func (s *Service) dropExpired(ctx context.Context, now time.Time) (int, error) {
	left := 0
	for _, sub := range []string{"invites/", "requests/"} {
		r, err := s.list(ctx, sub)
		if err != nil {
			return 0, fmt.Errorf("list %s: %w", sub, err)
		}
		for _, kv := range r.Kvs {
			var v struct {
				ExpiresAt   time.Time `json:"expires_at"`
				NonceSHA256 string    `json:"nonce_sha256"`
			}
			if json.Unmarshal(kv.Value, &v) == nil && now.Before(v.ExpiresAt) {
				left++
				continue
			}
			ops := []clientv3.Op{clientv3.OpDelete(string(kv.Key))}
			if v.NonceSHA256 != "" {
				ops = append(ops, clientv3.OpDelete(s.nonceKey(v.NonceSHA256)))
			}
			if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).Then(ops...).Commit(); err != nil {
				return 0, fmt.Errorf("drop an expired invite or request: %w", err)
			}
		}
	}
	return left, nil
}

// Redeem is the joiner's first call: the invite is consumed whoever
// redeems it, and a request appears for the owner with the code computed
// from the invite and the joiner's nonce. An invalid, expired or used
// invite is ErrNotFound, all alike.
func (s *Service) Redeem(ctx context.Context, req sdk.FleetRedeemRequest) (*sdk.FleetRedeemReply, error) {
	norm, ok := NormalizeInvite(req.Invite)
	if !ok {
		return nil, ErrNotFound
	}
	if !ValidNonce(req.Nonce) {
		return nil, fmt.Errorf("%w: nonce: 64 lowercase hex digits the joiner made for this pairing", ErrInvalid)
	}
	if err := checkKind(req.Kind); err != nil {
		return nil, err
	}
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	if err := CheckURL("url", req.URL); err != nil {
		return nil, err
	}
	if req.Kind == sdk.PairNode && req.URL != "" {
		return nil, fmt.Errorf("%w: an enrolling node sends no url: central reaches it through its channel", ErrInvalid)
	}
	now := s.now().UTC()
	ik := s.inviteKey(hash(norm))
	var inv invite
	rev, err := s.get(ctx, ik, &inv)
	if err != nil {
		return nil, err
	}
	if !now.Before(inv.ExpiresAt) || inv.Kind != req.Kind {
		if !now.Before(inv.ExpiresAt) {
			_, _ = s.kv.Delete(ctx, ik)
		}
		return nil, ErrNotFound
	}
	nh := hash(req.Nonce)
	r := request{FleetPairingRequest: sdk.FleetPairingRequest{ID: newID("pr-"), Kind: req.Kind, Name: req.Name, URL: req.URL,
		Code: Code(norm, req.Nonce), State: sdk.RequestPending, CreatedAt: now, ExpiresAt: now.Add(InviteTTL)}, NonceSHA256: nh}
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(ik), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(s.nonceKey(nh)), "=", 0)).
		Then(clientv3.OpDelete(ik), clientv3.OpPut(s.requestKey(r.ID), mustJSON(r)), clientv3.OpPut(s.nonceKey(nh), r.ID)).Commit()
	if err != nil {
		return nil, fmt.Errorf("redeem the invite: %w", err)
	}
	if !resp.Succeeded {
		return nil, ErrNotFound // redeemed by someone else a moment ago
	}
	s.log.Info("invite redeemed: a pairing request waits for approval", "kind", r.Kind, "name", r.Name, "request", r.ID)
	return &sdk.FleetRedeemReply{RequestID: r.ID, ExpiresAt: r.ExpiresAt}, nil
}

// Requests lists the pairing requests that have not expired, oldest first.
func (s *Service) Requests(ctx context.Context) ([]sdk.FleetPairingRequest, error) {
	if _, err := s.dropExpired(ctx, s.now().UTC()); err != nil {
		return nil, err
	}
	r, err := s.list(ctx, "requests/")
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	out := []sdk.FleetPairingRequest{}
	for _, kv := range r.Kvs {
		var q request
		if json.Unmarshal(kv.Value, &q) == nil {
			out = append(out, q.FleetPairingRequest)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// NormalizeCode takes a code as typed ("123 456", "123456").
func NormalizeCode(code string) (string, bool) {
	if len(code) > 16 {
		return "", false
	}
	c := strings.NewReplacer(" ", "", "-", "").Replace(code)
	return c, ValidCode(c)
}

// Approve is the owner's word that the joiner's screen shows code. A code
// that differs from the request's is refused (ErrConflict): someone else's
// machine redeemed the invite, and the request should be rejected.
func (s *Service) Approve(ctx context.Context, id, code string) (*sdk.FleetPairingRequest, error) {
	c, ok := NormalizeCode(code)
	if !ok {
		return nil, fmt.Errorf("%w: code: the six digits the joining machine shows", ErrInvalid)
	}
	var q request
	rev, err := s.get(ctx, s.requestKey(id), &q)
	if err != nil {
		return nil, err
	}
	if !s.now().Before(q.ExpiresAt) {
		return nil, ErrNotFound
	}
	if subtle.ConstantTimeCompare([]byte(c), []byte(q.Code)) != 1 {
		return nil, fmt.Errorf("%w: the code %s differs from this request's: do not approve; reject it and mint a new invite", ErrConflict, ShowCode(c))
	}
	if q.Kind == sdk.PairNode {
		if r, err := s.kv.Get(ctx, s.nodeNameKey(q.Name)); err != nil {
			return nil, fmt.Errorf("look up node %s: %w", q.Name, err)
		} else if len(r.Kvs) > 0 {
			return nil, fmt.Errorf("%w: node %s is enrolled already: remove it first (fluxctl fleet remove %s)", ErrConflict, q.Name, string(r.Kvs[0].Value))
		}
	}
	q.State = sdk.RequestApproved
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.requestKey(id)), "=", rev)).
		Then(clientv3.OpPut(s.requestKey(id), mustJSON(q))).Commit()
	if err != nil {
		return nil, fmt.Errorf("approve request %s: %w", id, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: request %s changed meanwhile: list the requests again", ErrConflict, id)
	}
	s.log.Info("pairing request approved; waiting for the joiner to confirm", "kind", q.Kind, "name", q.Name, "request", id)
	return &q.FleetPairingRequest, nil
}

// Reject drops a request; the joiner's next confirm finds nothing.
func (s *Service) Reject(ctx context.Context, id string) error {
	var q request
	if _, err := s.get(ctx, s.requestKey(id), &q); err != nil {
		return err
	}
	if _, err := s.kv.Txn(ctx).Then(clientv3.OpDelete(s.requestKey(id)), clientv3.OpDelete(s.nonceKey(q.NonceSHA256))).Commit(); err != nil {
		return fmt.Errorf("reject request %s: %w", id, err)
	}
	s.log.Info("pairing request rejected", "kind", q.Kind, "name", q.Name, "request", id)
	return nil
}

// Confirm is the joiner's word that the codes match, with its nonce as the
// credential. Before the owner approved it answers pending; after, the
// member comes into being with its credential, returned this once and kept
// only as a hash. A rejected, expired or unknown pairing is ErrNotFound.
func (s *Service) Confirm(ctx context.Context, nonce string, pollToken ...string) (*sdk.FleetPairingResult, error) {
	if !ValidNonce(nonce) {
		return nil, ErrNotFound
	}
	nh := hash(nonce)
	r, err := s.kv.Get(ctx, s.nonceKey(nh))
	if err != nil {
		return nil, fmt.Errorf("look up the pairing: %w", err)
	}
	if len(r.Kvs) == 0 {
		return nil, ErrNotFound
	}
	id := string(r.Kvs[0].Value)
	var q request
	rev, err := s.get(ctx, s.requestKey(id), &q)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	switch {
	case !now.Before(q.ExpiresAt):
		return nil, ErrNotFound
	case q.State == sdk.RequestPending:
		return &sdk.FleetPairingResult{State: sdk.PairingPending, Note: "the owner has not approved yet: read code " + ShowCode(q.Code) + " to them, and confirm again"}, nil
	}
	if n, err := s.countMembers(ctx); err != nil {
		return nil, err
	} else if n >= MaxMembers {
		return nil, fmt.Errorf("%w: the fleet has %d members", ErrLimit, n)
	}
	prefix := sdk.FleetTokenPrefix
	if q.Kind == sdk.PairNode {
		prefix = sdk.NodeCredentialPrefix
	}
	cred := store.NewToken(prefix)
	m := Member{ID: newID("mem-"), Kind: q.Kind, Name: q.Name, URL: q.URL, CredentialSHA256: hash(cred), JoinedAt: now}
	if len(pollToken) > 0 && q.Kind == sdk.PairCentral && q.URL != "" && validPollToken(pollToken[0]) {
		m.PollToken = pollToken[0]
	}
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.requestKey(id)), "=", rev)}
	ops := []clientv3.Op{clientv3.OpDelete(s.requestKey(id)), clientv3.OpDelete(s.nonceKey(nh)),
		clientv3.OpPut(s.memberKey(m.ID), mustJSON(m)), clientv3.OpPut(s.credKey(m.CredentialSHA256), m.ID)}
	if m.Kind == sdk.PairNode {
		conds = append(conds, clientv3.Compare(clientv3.CreateRevision(s.nodeNameKey(m.Name)), "=", 0))
		ops = append(ops, clientv3.OpPut(s.nodeNameKey(m.Name), m.ID))
	}
	resp, err := s.kv.Txn(ctx).If(conds...).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("admit %s: %w", m.Name, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: the pairing changed meanwhile (another confirm, or node %s enrolled by another pairing)", ErrConflict, m.Name)
	}
	s.log.Info("admitted to the fleet: both sides agreed", "kind", m.Kind, "name", m.Name, "member", m.ID)
	return &sdk.FleetPairingResult{State: sdk.PairingAdmitted, MemberID: m.ID, Credential: cred,
		Note: "handed over this once: central keeps only its SHA-256"}, nil
}

func (s *Service) countMembers(ctx context.Context) (int64, error) {
	r, err := s.kv.Get(ctx, s.prefix+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count members: %w", err)
	}
	return r.Count, nil
}

// touchEvery is how often, at most, a member's last_seen is written.
const touchEvery = 5 * time.Second

// Authenticate finds the member a credential (fleet token or node
// credential) belongs to: ErrRemoved for one the owner removed (among the
// last MaxTombstones), ErrUnknown for any other that works no more or
// never did. It notes when the member was last seen.
func (s *Service) Authenticate(ctx context.Context, credential string) (*Member, error) {
	h := hash(credential)
	if strings.HasPrefix(credential, sdk.OwnerPollPrefix) {
		var m membership
		if _, err := s.get(ctx, s.membershipKey(), &m); errors.Is(err, ErrNotFound) {
			return nil, ErrUnknown
		} else if err != nil {
			return nil, err
		}
		if m.State != sdk.PairingJoined || m.PollSHA256 == "" || subtle.ConstantTimeCompare([]byte(h), []byte(m.PollSHA256)) != 1 {
			return nil, ErrUnknown
		}
		return &Member{ID: KindOwner, Kind: KindOwner, Name: KindOwner, URL: m.OwnerURL}, nil
	}
	r, err := s.kv.Txn(ctx).Then(clientv3.OpGet(s.credKey(h)), clientv3.OpGet(s.tombKey(h))).Commit()
	if err != nil {
		return nil, fmt.Errorf("look up a fleet credential: %w", err)
	}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var m Member
		rev, err := s.get(ctx, s.memberKey(string(kvs[0].Value)), &m)
		if errors.Is(err, ErrNotFound) {
			return nil, ErrUnknown
		} else if err != nil {
			return nil, err
		}
		if now := s.now().UTC(); now.Sub(m.LastSeen) >= touchEvery {
			m.LastSeen = now
			_, _ = s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.memberKey(m.ID)), "=", rev)).
				Then(clientv3.OpPut(s.memberKey(m.ID), mustJSON(m))).Commit()
		}
		return &m, nil
	}
	if len(r.Responses[1].GetResponseRange().Kvs) > 0 {
		return nil, ErrRemoved
	}
	return nil, ErrUnknown
}

// Members lists the members, by name.
func (s *Service) Members(ctx context.Context) ([]Member, error) {
	r, err := s.list(ctx, "members/")
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make([]Member, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var m Member
		if json.Unmarshal(kv.Value, &m) == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].ID < out[j].ID
	})
	return out, nil
}

// Member finds a member by id, or by name when no id matches.
func (s *Service) Member(ctx context.Context, idOrName string) (*Member, error) {
	var m Member
	if _, err := s.get(ctx, s.memberKey(idOrName), &m); err == nil {
		return &m, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ms, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ms {
		if ms[i].Name == idOrName {
			return &ms[i], nil
		}
	}
	return nil, ErrNotFound
}

// Remove ends a membership from the owner's side: the credential stops
// working at once, and a tombstone (the member's id and the credential's
// hash, the newest MaxTombstones kept) makes its next call a 403 "removed
// from the fleet" rather than a 401.
func (s *Service) Remove(ctx context.Context, idOrName string) (*Member, error) {
	return s.end(ctx, idOrName, true)
}

// Leave ends a membership from the member's side (its own fleet token):
// no tombstone is left.
func (s *Service) Leave(ctx context.Context, memberID string) (*Member, error) {
	return s.end(ctx, memberID, false)
}

func (s *Service) end(ctx context.Context, idOrName string, tomb bool) (*Member, error) {
	m, err := s.Member(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	ops := []clientv3.Op{clientv3.OpDelete(s.memberKey(m.ID)), clientv3.OpDelete(s.credKey(m.CredentialSHA256))}
	if m.Kind == sdk.PairNode {
		ops = append(ops, clientv3.OpDelete(s.nodeNameKey(m.Name)))
	}
	if tomb {
		ops = append(ops, clientv3.OpPut(s.tombKey(m.CredentialSHA256),
			mustJSON(tombstone{MemberID: m.ID, Name: m.Name, CredentialSHA256: m.CredentialSHA256, RemovedAt: s.now().UTC()})))
	}
	if _, err := s.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
		return nil, fmt.Errorf("remove %s: %w", m.Name, err)
	}
	if tomb {
		if err := s.trimTombstones(ctx); err != nil {
			return nil, err
		}
		s.log.Info("member removed from the fleet", "kind", m.Kind, "name", m.Name, "member", m.ID)
	} else {
		s.log.Info("member left the fleet", "kind", m.Kind, "name", m.Name, "member", m.ID)
	}
	return m, nil
}

// trimTombstones keeps the newest MaxTombstones.
func (s *Service) trimTombstones(ctx context.Context) error {
	r, err := s.list(ctx, "tombstones/")
	if err != nil {
		return fmt.Errorf("list tombstones: %w", err)
	}
	if len(r.Kvs) <= MaxTombstones {
		return nil
	}
	kvs := r.Kvs
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].CreateRevision > kvs[j].CreateRevision })
	for _, kv := range kvs[MaxTombstones:] {
		if _, err := s.kv.Delete(ctx, string(kv.Key)); err != nil {
			return fmt.Errorf("drop an old tombstone: %w", err)
		}
	}
	return nil
}

// Refresh swaps a member's credential for a new one, the old revoked in the
// same transaction. A removed or departed member cannot: its credential no
// longer authenticates, and no member record is left to refresh.
func (s *Service) Refresh(ctx context.Context, memberID string) (string, error) {
	var m Member
	rev, err := s.get(ctx, s.memberKey(memberID), &m)
	if err != nil {
		return "", err
	}
	prefix := sdk.FleetTokenPrefix
	if m.Kind == sdk.PairNode {
		prefix = sdk.NodeCredentialPrefix
	}
	cred := store.NewToken(prefix)
	old := m.CredentialSHA256
	m.CredentialSHA256 = hash(cred)
	resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.memberKey(m.ID)), "=", rev)).
		Then(clientv3.OpDelete(s.credKey(old)), clientv3.OpPut(s.credKey(m.CredentialSHA256), m.ID), clientv3.OpPut(s.memberKey(m.ID), mustJSON(m))).Commit()
	if err != nil {
		return "", fmt.Errorf("refresh the credential of %s: %w", m.Name, err)
	}
	if !resp.Succeeded {
		return "", fmt.Errorf("%w: member %s changed meanwhile: try again", ErrConflict, m.Name)
	}
	return cred, nil
}

// Report records a member central's site (its poll) and answers with the
// fleet view: the owner's own site and every member's last report.
func (s *Service) Report(ctx context.Context, memberID string, site sdk.FleetSite) ([]sdk.FleetSite, error) {
	if len(site.Nodes) > MaxSiteNodes {
		return nil, fmt.Errorf("%w: %d nodes in one report: at most %d", ErrInvalid, len(site.Nodes), MaxSiteNodes)
	}
	for _, n := range site.Nodes {
		if !store.ValidName(n.Name) || len(n.State) > 32 || n.VMs < 0 {
			return nil, fmt.Errorf("%w: a reported node needs a valid name, a short state and a VM count of 0 or more", ErrInvalid)
		}
	}
	if site.VMs < 0 {
		return nil, fmt.Errorf("%w: vms must be 0 or more", ErrInvalid)
	}
	var m Member
	rev, err := s.get(ctx, s.memberKey(memberID), &m)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	site.Member, site.CheckedAt = m.Name, now
	m.Site, m.LastSeen = &site, now
	if _, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.memberKey(m.ID)), "=", rev)).
		Then(clientv3.OpPut(s.memberKey(m.ID), mustJSON(m))).Commit(); err != nil {
		return nil, fmt.Errorf("record the report of %s: %w", m.Name, err)
	}
	return s.ownerSites(ctx)
}

// ownerSites is the owner's view: its own site first, then each member
// central that has reported, by name.
func (s *Service) ownerSites(ctx context.Context) ([]sdk.FleetSite, error) {
	own, err := s.local(ctx)
	if err != nil {
		return nil, fmt.Errorf("read this central's nodes: %w", err)
	}
	own.Member, own.CheckedAt = "owner", s.now().UTC()
	sites := []sdk.FleetSite{own}
	ms, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Kind == sdk.PairCentral && m.Site != nil {
			sites = append(sites, *m.Site)
		}
	}
	return sites, nil
}
