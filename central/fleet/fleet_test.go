package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newService(t *testing.T) (*Service, *clock) {
	c := &clock{t: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)}
	return New(Options{Store: storetest.Open(t), Now: c.now}), c
}

// TestCodeIsTheFirstFourBytesOfTheDomainSeparatedHashModAMillion holds the
// code to the formula both sides implement, written out here on its own.
func TestCodeIsTheFirstFourBytesOfTheDomainSeparatedHashModAMillion(t *testing.T) {
	for i := 0; i < 50; i++ {
		inv, nonce := NewInvite(), NewNonce()
		norm, ok := NormalizeInvite(inv)
		if !ok {
			t.Fatalf("a fresh invite %q does not normalise", inv)
		}
		sum := sha256.Sum256([]byte("fluxvm-fleet-pair\x00" + norm + "\x00" + nonce))
		want := fmt.Sprintf("%06d", binary.BigEndian.Uint32(sum[:4])%1000000)
		if got := Code(norm, nonce); got != want {
			t.Fatalf("Code(%s, %s) = %s, want %s", norm, nonce, got, want)
		}
		// However a person types the invite, it is the same code.
		typed, _ := NormalizeInvite(strings.ToLower(strings.ReplaceAll(inv, "-", " ")))
		if Code(typed, nonce) != want {
			t.Fatalf("the invite typed in lower case with spaces gives another code")
		}
	}
	for _, bad := range []string{"", "ABCD-EFGH", "ABCD-EFGH-IJKL-MNO1", strings.Repeat("A", 65), "ABCD-EFGH-IJKL-MNOPQ"} {
		if _, ok := NormalizeInvite(bad); ok {
			t.Errorf("%q normalised as an invite", bad)
		}
	}
}

// redeem redeems a fresh invite of kind as name and returns the nonce.
func redeem(t *testing.T, s *Service, kind, name string) (reqID, nonce, code string) {
	t.Helper()
	inv, err := s.CreateInvite(context.Background(), kind)
	if err != nil {
		t.Fatal(err)
	}
	nonce = NewNonce()
	r, err := s.Redeem(context.Background(), sdk.FleetRedeemRequest{Invite: inv.Invite, Nonce: nonce, Kind: kind, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := NormalizeInvite(inv.Invite)
	return r.RequestID, nonce, Code(norm, nonce)
}

// TestNothingIsAdmittedBeforeTheOwnerApprovedAndTheJoinerConfirmed: the
// joiner's confirm is pending until approval; an approval with another
// code is refused; the credential comes once, after both.
func TestNothingIsAdmittedBeforeTheOwnerApprovedAndTheJoinerConfirmed(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	id, nonce, code := redeem(t, s, sdk.PairNode, "mac-1")
	if r, err := s.Confirm(ctx, nonce); err != nil || r.State != sdk.PairingPending || r.Credential != "" {
		t.Fatalf("confirm before approval: %+v %v", r, err)
	}
	wrong := fmt.Sprintf("%06d", (atoi(code)+1)%1000000)
	if _, err := s.Approve(ctx, id, wrong); !errors.Is(err, ErrConflict) {
		t.Fatalf("approve with another code: %v", err)
	}
	if ms, _ := s.Members(ctx); len(ms) != 0 {
		t.Fatalf("members before approval: %+v", ms)
	}
	if _, err := s.Approve(ctx, id, code[:3]+" "+code[3:]); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Members(ctx); len(ms) != 0 {
		t.Fatalf("members before the joiner confirmed: %+v", ms)
	}
	r, err := s.Confirm(ctx, nonce)
	if err != nil || r.State != sdk.PairingAdmitted || !strings.HasPrefix(r.Credential, sdk.NodeCredentialPrefix) {
		t.Fatalf("confirm after approval: %+v %v", r, err)
	}
	if _, err := s.Confirm(ctx, nonce); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second confirm handed over the credential again: %v", err)
	}
	m, err := s.Authenticate(ctx, r.Credential)
	if err != nil || m.Name != "mac-1" || m.Kind != sdk.PairNode || m.CredentialSHA256 == r.Credential {
		t.Fatalf("authenticate: %+v %v", m, err)
	}
	// A second node of the same name cannot enroll while this one is.
	id2, _, code2 := redeem(t, s, sdk.PairNode, "mac-1")
	if _, err := s.Approve(ctx, id2, code2); !errors.Is(err, ErrConflict) {
		t.Fatalf("approve a second mac-1: %v", err)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestRequestsExpireWithTheirInviteWindow: a redeemed request waits 15
// minutes for both sides, then confirming it finds nothing.
func TestRequestsExpireWithTheirInviteWindow(t *testing.T) {
	s, c := newService(t)
	ctx := context.Background()
	id, nonce, code := redeem(t, s, sdk.PairCentral, "site-b")
	c.add(InviteTTL)
	if _, err := s.Approve(ctx, id, code); !errors.Is(err, ErrNotFound) {
		t.Fatalf("approve an expired request: %v", err)
	}
	if _, err := s.Confirm(ctx, nonce); !errors.Is(err, ErrNotFound) {
		t.Fatalf("confirm an expired request: %v", err)
	}
	if rs, _ := s.Requests(ctx); len(rs) != 0 {
		t.Fatalf("expired requests listed: %+v", rs)
	}
}

// TestTombstonesKeepTheNewest256Removals: the oldest removal's credential
// falls back to unknown (401) once 256 newer ones exist; the newest is
// still "removed"; a member that left leaves none.
func TestTombstonesKeepTheNewest256Removals(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	var creds []string
	for i := 0; i <= MaxTombstones; i++ {
		cred := admit(t, s, fmt.Sprintf("n-%03d", i))
		if _, err := s.Remove(ctx, fmt.Sprintf("n-%03d", i)); err != nil {
			t.Fatal(err)
		}
		creds = append(creds, cred)
	}
	if _, err := s.Authenticate(ctx, creds[0]); !errors.Is(err, ErrUnknown) {
		t.Errorf("the 257th-newest removal: %v, want unknown", err)
	}
	for _, c := range []string{creds[1], creds[MaxTombstones]} {
		if _, err := s.Authenticate(ctx, c); !errors.Is(err, ErrRemoved) {
			t.Errorf("a recent removal: %v, want removed", err)
		}
	}
	cred := admit(t, s, "leaver")
	m, _ := s.Authenticate(ctx, cred)
	if _, err := s.Leave(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, cred); !errors.Is(err, ErrUnknown) {
		t.Errorf("a member that left: %v, want unknown", err)
	}
	if _, err := s.Refresh(ctx, m.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("refresh after leaving: %v", err)
	}
}

func admit(t *testing.T, s *Service, name string) string {
	t.Helper()
	id, nonce, code := redeem(t, s, sdk.PairNode, name)
	if _, err := s.Approve(context.Background(), id, code); err != nil {
		t.Fatal(err)
	}
	r, err := s.Confirm(context.Background(), nonce)
	if err != nil {
		t.Fatal(err)
	}
	return r.Credential
}

// TestHealthBadgeWorstProblemWins: not checked until the first call, OK
// while calls come, degraded then stopped as the silence grows.
func TestHealthBadgeWorstProblemWins(t *testing.T) {
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	m := Member{Kind: sdk.PairCentral}
	if h := Health(m, now, ""); h.Badge != sdk.HealthNotChecked || h.Action == "" {
		t.Errorf("never seen: %+v", h)
	}
	for _, c := range []struct {
		ago   time.Duration
		badge string
	}{{time.Second, sdk.HealthOK}, {DegradedAfter, sdk.HealthDegraded}, {12 * time.Minute, sdk.HealthDegraded}, {StoppedAfter, sdk.HealthStopped}} {
		m.LastSeen = now.Add(-c.ago)
		h := Health(m, now, "")
		if h.Badge != c.badge || (c.badge != sdk.HealthOK && (h.Reason == "" || h.Action == "")) {
			t.Errorf("silent %v: %+v, want %s with a reason and an action", c.ago, h, c.badge)
		}
	}
	m = Member{Kind: sdk.PairNode, LastSeen: now}
	if h := Health(m, now, "down"); h.Badge != sdk.HealthDegraded {
		t.Errorf("a node marked down: %+v", h)
	}
}

// FuzzNormalizeInvite: whatever comes in, a normalised invite is 16 base32
// characters, and normalising it again changes nothing.
func FuzzNormalizeInvite(f *testing.F) {
	f.Add("ABCD-EFGH-IJKL-MNOP")
	f.Add("abcd efgh ijkl mnop")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		norm, ok := NormalizeInvite(s)
		if !ok {
			return
		}
		if len(norm) != 16 {
			t.Fatalf("%q -> %q", s, norm)
		}
		if again, ok := NormalizeInvite(norm); !ok || again != norm {
			t.Fatalf("%q normalises to %q, then to %q", s, norm, again)
		}
	})
}

// FuzzNormalizeCode: a code taken as typed is six digits or refused.
func FuzzNormalizeCode(f *testing.F) {
	f.Add("123 456")
	f.Add("12-34-56")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := NormalizeCode(s)
		if ok && !ValidCode(c) {
			t.Fatalf("%q accepted as %q", s, c)
		}
	})
}
