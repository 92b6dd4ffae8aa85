package sdk

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Fleets (docs/fleets.md): a central pairs with another central, or a node
// enrolls into a central, with a single-use invite and a six-digit code both
// sides show. These are the wire types of the pairing and of the fleet view.

// Credential prefixes minted at pairing; central routes a bearer token by them.
const (
	// FleetTokenPrefix starts a member central's fleet-scoped token.
	FleetTokenPrefix = "fvf_"
	// NodeCredentialPrefix starts an enrolled node's credential.
	NodeCredentialPrefix = "fvn_"
	// OwnerPollPrefix starts the token a member central gives its owner to
	// read the member's site (GET /fleet/federation/site) at its URL.
	OwnerPollPrefix = "fvp_"
)

// The two kinds of pairing.
const (
	// PairCentral is a central joining an owner central as a member.
	PairCentral = "central"
	// PairNode is a node enrolling into a central.
	PairNode = "node"
)

// States of a pairing request as the owner lists it.
const (
	RequestPending  = "pending"  // redeemed; waiting for the owner's approval
	RequestApproved = "approved" // approved; waiting for the joiner to confirm
)

// States of a pairing as the joiner sees it (PairingResult.State,
// FleetMembership.State).
const (
	PairingPending  = "pending"  // the owner has not approved yet: ask again
	PairingAdmitted = "admitted" // both sides agreed: the credential is in the reply, once
	PairingJoined   = "member"   // this central is a member of a fleet
)

// Member health badges (MemberHealth.Badge).
const (
	HealthOK         = "ok"
	HealthNotChecked = "not_checked"
	HealthDegraded   = "degraded"
	HealthStopped    = "stopped"
)

// FleetCreateInviteRequest is POST /fleet/federation/invites.
type FleetCreateInviteRequest struct {
	// Kind is PairCentral (a central joins as a member) or PairNode (a node
	// enrolls).
	Kind string `json:"kind"`
}

// FleetInvite is a new invite: shown once; central keeps only its SHA-256.
type FleetInvite struct {
	Invite    string    `json:"invite"`
	Kind      string    `json:"kind"`
	ExpiresAt time.Time `json:"expires_at"`
	Note      string    `json:"note"`
}

// FleetRedeemRequest is POST /fleet/pairing/redeem: the joiner's first
// call, with the invite and a nonce of its own (the only credentials).
type FleetRedeemRequest struct {
	Invite string `json:"invite"`
	// Nonce is 64 hex digits the joiner made for this pairing.
	Nonce string `json:"nonce"`
	Kind  string `json:"kind"`
	// Name is the joiner's name: a node's name, or how the member central
	// wants to be listed.
	Name string `json:"name"`
	// URL is where the owner reaches a member central (optional).
	URL string `json:"url,omitempty"`
}

// FleetRedeemReply answers a redeem: the request the owner now lists.
type FleetRedeemReply struct {
	RequestID string    `json:"request_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// FleetPairingRequest is a redeemed invite waiting on the owner, with the
// code the owner computed from the invite and the joiner's nonce.
type FleetPairingRequest struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	URL       string    `json:"url,omitempty"`
	Code      string    `json:"code"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// FleetRequestList is GET /fleet/federation/requests.
type FleetRequestList struct {
	Requests []FleetPairingRequest `json:"requests"`
}

// FleetApproveRequest is POST /fleet/federation/requests/{id}/approve: the
// code the joiner's screen shows, as read out to the owner.
type FleetApproveRequest struct {
	Code string `json:"code"`
}

// FleetPairingConfirm is POST /fleet/pairing/confirm: the joiner vouches
// that the codes match, with its nonce as the credential.
type FleetPairingConfirm struct {
	Nonce string `json:"nonce"`
	// PollToken (fvp_), from a member central that gave a URL, is what the
	// owner presents to read the member's site there; the member keeps its
	// hash.
	PollToken string `json:"poll_token,omitempty"`
}

// FleetPairingResult answers the joiner's confirm: pending until the owner
// approved, then admitted with the credential, handed over this once.
type FleetPairingResult struct {
	State      string `json:"state"`
	MemberID   string `json:"member_id,omitempty"`
	Credential string `json:"credential,omitempty"`
	Note       string `json:"note,omitempty"`
}

// MemberHealth is a member's badge: what is wrong and the one thing to do.
type MemberHealth struct {
	Badge  string `json:"badge"`
	Reason string `json:"reason,omitempty"`
	Action string `json:"action,omitempty"`
}

// FleetSiteNode is one node of a site in the fleet view.
type FleetSiteNode struct {
	Name  string `json:"name"`
	State string `json:"state"`
	VMs   int64  `json:"vms"`
}

// FleetSite is one central's nodes and VM counts in the fleet view.
type FleetSite struct {
	// Member is the site's name: "owner" for the owner's central, else the
	// member's name.
	Member    string          `json:"member"`
	Nodes     []FleetSiteNode `json:"nodes"`
	VMs       int64           `json:"vms"`
	CheckedAt time.Time       `json:"checked_at"`
}

// FleetMember is a member central or an enrolled node, as the owner lists it.
type FleetMember struct {
	ID       string       `json:"id"`
	Kind     string       `json:"kind"`
	Name     string       `json:"name"`
	URL      string       `json:"url,omitempty"`
	JoinedAt time.Time    `json:"joined_at"`
	LastSeen *time.Time   `json:"last_seen,omitempty"`
	Health   MemberHealth `json:"health"`
}

// FleetMembership is this central's place in another central's fleet.
type FleetMembership struct {
	State    string       `json:"state"`
	OwnerURL string       `json:"owner_url"`
	Name     string       `json:"name"`
	MemberID string       `json:"member_id,omitempty"`
	Code     string       `json:"code,omitempty"`
	JoinedAt *time.Time   `json:"joined_at,omitempty"`
	Health   MemberHealth `json:"health"`
}

// Roles of a central in a fleet (Federation.Role).
const (
	FedAlone   = "alone"
	FedOwner   = "owner"
	FedMember  = "member"
	FedJoining = "joining"
)

// Federation is GET /fleet/federation: this central's role, its members
// (an owner), its membership (a member), and the fleet view: every site's
// nodes and VM counts.
type Federation struct {
	Role       string           `json:"role"`
	Membership *FleetMembership `json:"membership,omitempty"`
	Members    []FleetMember    `json:"members"`
	Sites      []FleetSite      `json:"sites"`
}

// FleetJoinRequest is POST /fleet/federation/join on the joining central.
type FleetJoinRequest struct {
	OwnerURL string `json:"owner_url"`
	Invite   string `json:"invite"`
	// Name is how the owner lists this central (fluxctl defaults it to the
	// host name).
	Name string `json:"name,omitempty"`
	// URL is where the owner reaches this central (optional).
	URL string `json:"url,omitempty"`
}

// FleetConfirmJoinRequest is POST /fleet/federation/confirm on the joining
// central: the code the owner's screen shows, as read out to the joiner.
type FleetConfirmJoinRequest struct {
	Code string `json:"code"`
}

// FleetReport is POST /fleet/federation/report, a member's poll of its
// owner: its own site, answered with the fleet view.
type FleetReport struct {
	Site FleetSite `json:"site"`
}

// FleetView is the owner's answer to a member's report.
type FleetView struct {
	Sites []FleetSite `json:"sites"`
}

// FleetRefreshReply is POST /fleet/federation/refresh: a member's new
// fleet token, its old one revoked.
type FleetRefreshReply struct {
	Credential string `json:"credential"`
}

// FleetFloor is GET /fleet/federation/policy, the owner's answer to a
// member central (its fleet token): the owner's effective egress floor,
// which every member's tenant networks are held to. Mode "open" with no
// blocks when the owner has none.
type FleetFloor struct {
	Egress EgressPolicy `json:"egress"`
}

// FleetEgress is, in a member central's GET /fleet/policy, its owner's
// egress floor as last fetched, and what tenant networks on this member
// get: the fleet floor tightened by this central's own policy egress.
type FleetEgress struct {
	OwnerURL string `json:"owner_url"`
	// Floor is the owner's floor as last fetched (nil: none fetched yet).
	Floor *EgressPolicy `json:"floor,omitempty"`
	// FetchedAt is when the owner last answered; AgeSeconds how long ago.
	FetchedAt  *time.Time `json:"fetched_at,omitempty"`
	AgeSeconds int64      `json:"age_seconds"`
	// LastError is why the last fetch failed (since FetchedAt); the floor
	// last fetched stays in force meanwhile.
	LastError string     `json:"last_error,omitempty"`
	LastTry   *time.Time `json:"last_try,omitempty"`
	// Effective is what this member's tenant networks get: Floor
	// tightened by this central's own egress (Policy.Egress).
	Effective EgressPolicy `json:"effective"`
	// Overridden says what of this central's own egress the floor
	// overrides because it would loosen it.
	Overridden []string `json:"overridden,omitempty"`
}

// OwnerFloor reads the owner's egress floor (a member's fleet token).
func (f *FleetClient) OwnerFloor(ctx context.Context) (*FleetFloor, error) {
	var out FleetFloor
	if err := f.c.call(ctx, http.MethodGet, "/fleet/federation/policy", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateFleetInvite mints a single-use invite (the owner's operator).
func (f *FleetClient) CreateFleetInvite(ctx context.Context, kind string) (*FleetInvite, error) {
	var out FleetInvite
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/invites", nil, FleetCreateInviteRequest{Kind: kind}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RedeemInvite is the joiner's first call to the owner (no token needed).
func (f *FleetClient) RedeemInvite(ctx context.Context, req FleetRedeemRequest) (*FleetRedeemReply, error) {
	var out FleetRedeemReply
	if err := f.c.call(ctx, http.MethodPost, "/fleet/pairing/redeem", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConfirmPairing is the joiner's confirm to the owner (no token needed):
// pending until the owner approved, then the credential, once.
func (f *FleetClient) ConfirmPairing(ctx context.Context, nonce string) (*FleetPairingResult, error) {
	return f.ConfirmPairingWith(ctx, FleetPairingConfirm{Nonce: nonce})
}

// ConfirmPairingWith is ConfirmPairing with the whole request (a member
// central's poll token).
func (f *FleetClient) ConfirmPairingWith(ctx context.Context, req FleetPairingConfirm) (*FleetPairingResult, error) {
	var out FleetPairingResult
	if err := f.c.call(ctx, http.MethodPost, "/fleet/pairing/confirm", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FleetSiteOf reads a member central's site at its URL (the owner, with the
// member's poll token).
func (f *FleetClient) FleetSiteOf(ctx context.Context) (*FleetSite, error) {
	var out FleetSite
	if err := f.c.call(ctx, http.MethodGet, "/fleet/federation/site", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPairingRequests lists the requests waiting on the owner.
func (f *FleetClient) ListPairingRequests(ctx context.Context) (*FleetRequestList, error) {
	var out FleetRequestList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/federation/requests", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ApprovePairing approves request id when code is the one the joiner shows.
func (f *FleetClient) ApprovePairing(ctx context.Context, id, code string) (*FleetPairingRequest, error) {
	var out FleetPairingRequest
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/requests/"+url.PathEscape(id)+"/approve", nil, FleetApproveRequest{Code: code}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RejectPairing rejects request id.
func (f *FleetClient) RejectPairing(ctx context.Context, id string) error {
	return f.c.call(ctx, http.MethodPost, "/fleet/federation/requests/"+url.PathEscape(id)+"/reject", nil, nil, nil)
}

// Federation reads this central's role, members, membership and fleet view.
func (f *FleetClient) Federation(ctx context.Context) (*Federation, error) {
	var out Federation
	if err := f.c.call(ctx, http.MethodGet, "/fleet/federation", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveFleetMember removes a member central or an enrolled node (the owner).
func (f *FleetClient) RemoveFleetMember(ctx context.Context, id string) error {
	return f.c.call(ctx, http.MethodDelete, "/fleet/federation/members/"+url.PathEscape(id), nil, nil, nil)
}

// JoinFleet has this central redeem an owner's invite; the reply carries
// the code to compare.
func (f *FleetClient) JoinFleet(ctx context.Context, req FleetJoinRequest) (*FleetMembership, error) {
	var out FleetMembership
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/join", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConfirmJoin confirms, with the code the owner shows, that the codes match.
func (f *FleetClient) ConfirmJoin(ctx context.Context, code string) (*FleetMembership, error) {
	var out FleetMembership
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/confirm", nil, FleetConfirmJoinRequest{Code: code}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LeaveFleet has this central leave its fleet (or abandon a join).
func (f *FleetClient) LeaveFleet(ctx context.Context) error {
	return f.c.call(ctx, http.MethodDelete, "/fleet/federation/membership", nil, nil, nil)
}

// ReportToOwner is a member central's poll of its owner (fleet token).
func (f *FleetClient) ReportToOwner(ctx context.Context, site FleetSite) (*FleetView, error) {
	var out FleetView
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/report", nil, FleetReport{Site: site}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LeaveOwner tells the owner this member leaves (fleet token).
func (f *FleetClient) LeaveOwner(ctx context.Context) error {
	return f.c.call(ctx, http.MethodPost, "/fleet/federation/leave", nil, nil, nil)
}

// RefreshFleetToken swaps the member's fleet token for a new one (fleet token).
func (f *FleetClient) RefreshFleetToken(ctx context.Context) (*FleetRefreshReply, error) {
	var out FleetRefreshReply
	if err := f.c.call(ctx, http.MethodPost, "/fleet/federation/refresh", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// pairDomain separates the confirmation code's hash from every other use
// of SHA-256 over an invite.
const pairDomain = "fluxvm-fleet-pair\x00"

var normalInviteRE = regexp.MustCompile(`^[A-Z2-7]{16}$`)

// NormalizeInvite is an invite as both sides hash it: upper case, without
// the dashes and spaces a person may type or drop. ok is false for anything
// that cannot be an invite (16 base32 characters).
func NormalizeInvite(s string) (norm string, ok bool) {
	if len(s) > 64 {
		return "", false
	}
	norm = strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(s))
	return norm, normalInviteRE.MatchString(norm)
}

// NewPairingNonce returns a joiner's nonce: 32 random bytes in hex.
func NewPairingNonce() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// PairingCode is the six-digit confirmation code of a pairing: the first
// four bytes of SHA-256 over a domain string, the normalised invite, a NUL
// and the joiner's nonce, as a big-endian u32, mod 1,000,000. The owner
// computes it when the joiner redeems (it learns the nonce then), the
// joiner from what it made; neither sends it to the other.
func PairingCode(normalInvite, nonce string) string {
	sum := sha256.Sum256([]byte(pairDomain + normalInvite + "\x00" + nonce))
	return fmt.Sprintf("%06d", binary.BigEndian.Uint32(sum[:4])%1_000_000)
}

// ShowPairingCode groups a code as people read it: "123 456".
func ShowPairingCode(code string) string {
	if len(code) != 6 {
		return code
	}
	return code[:3] + " " + code[3:]
}
