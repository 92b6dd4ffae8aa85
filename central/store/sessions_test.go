package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAPersonKeepsAtMostTwentySessionsAcrossTwoCentrals: 30 sign-ins of one
// person, ten of them at once through two centrals, leave exactly 20
// sessions, the newest; another person's are untouched, and an ended
// session is not found.
func TestAPersonKeepsAtMostTwentySessionsAcrossTwoCentrals(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	peer := openPeer(t, s, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	start := time.Now().UTC()
	session := func(email string, i int) *Session {
		created := start.Add(time.Duration(i) * time.Second)
		return &Session{Email: email, Tenant: acme.ID, CreatedAt: created, ExpiresAt: created.Add(12 * time.Hour),
			TokenSHA256: HashToken(fmt.Sprintf("%s-%d", NormalEmail(email), i))}
	}
	if _, err := s.CreateSession(ctx, session("bo@example.com", 0)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.CreateSession(ctx, session("Alex@example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	atOnce(10, s, peer, func(i int, st *Store) {
		if _, err := st.CreateSession(ctx, session("alex@example.com", 20+i)); err != nil {
			t.Errorf("session %d: %v", 20+i, err)
		}
	})
	found := 0
	for i := range 30 {
		x, err := s.SessionByToken(ctx, HashToken(fmt.Sprintf("alex@example.com-%d", i)))
		switch {
		case err == nil && x.Email == "alex@example.com":
			found++
		case errors.Is(err, ErrNotFound):
		default:
			t.Fatalf("session %d: %+v, %v", i, x, err)
		}
	}
	if r, err := s.client.Get(ctx, s.sessionPersonPrefix("alex@example.com"), clientv3.WithPrefix()); err != nil || len(r.Kvs) != MaxSessionsPerPerson || found != MaxSessionsPerPerson {
		t.Fatalf("%d sessions found, %d indexed (%v), want %d", found, len(r.Kvs), err, MaxSessionsPerPerson)
	}
	// The first ten went (they were the oldest when the limit was reached).
	if _, err := s.SessionByToken(ctx, HashToken("alex@example.com-0")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the oldest session: %v, want it gone", err)
	}
	if _, err := s.SessionByToken(ctx, HashToken("bo@example.com-0")); err != nil {
		t.Fatalf("another person's session: %v", err)
	}
	if err := s.DeleteSession(ctx, HashToken("bo@example.com-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionByToken(ctx, HashToken("bo@example.com-0")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an ended session: %v", err)
	}
	for _, bad := range []*Session{
		{Email: "x", Tenant: acme.ID, CreatedAt: start, ExpiresAt: start.Add(time.Hour), TokenSHA256: HashToken("x")},
		{Email: "x@example.com", Operator: true, Tenant: acme.ID, CreatedAt: start, ExpiresAt: start.Add(time.Hour), TokenSHA256: HashToken("x")},
		{Email: "x@example.com", Tenant: acme.ID, CreatedAt: start, ExpiresAt: start, TokenSHA256: HashToken("x")},
		{Email: "x@example.com", Tenant: acme.ID, CreatedAt: start, ExpiresAt: start.Add(time.Hour), TokenSHA256: "plain-token"},
	} {
		if _, err := s.CreateSession(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("session %+v: %v, want ErrInvalid", bad, err)
		}
	}
}
