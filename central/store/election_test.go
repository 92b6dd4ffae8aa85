package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestElectionHasOneLeaderAndHandsOverOnResignAndDeath(t *testing.T) {
	ctx := testCtx(t)
	host := openEmbedded(t, Options{ID: "host"})
	a := openPeer(t, host, Options{ID: "central-a", SessionTTL: 2})
	b := openPeer(t, host, Options{ID: "central-b", SessionTTL: 2})
	c := openPeer(t, host, Options{ID: "central-c", SessionTTL: 2})

	if _, err := host.Leader(ctx, "loops"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("leader before any campaign: %v, want ErrNotFound", err)
	}
	leaderA, err := a.Campaign(ctx, "loops")
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		l   *Leader
		err error
	}
	bWon := make(chan won, 1)
	go func() { l, err := b.Campaign(ctx, "loops"); bWon <- won{l, err} }()

	select {
	case w := <-bWon:
		t.Fatalf("second campaigner won while the first leads: %+v", w)
	case <-time.After(500 * time.Millisecond):
	}
	if id, err := host.Leader(ctx, "loops"); err != nil || id != "central-a" {
		t.Errorf("leader = %q, %v; want central-a", id, err)
	}

	resigned := time.Now()
	if err := leaderA.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leaderA.Done():
	case <-time.After(time.Second):
		t.Error("Done not closed after Resign")
	}
	var leaderB *Leader
	select {
	case w := <-bWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		leaderB = w.l
		t.Logf("central-b took over %v after central-a resigned", time.Since(resigned))
	case <-time.After(3 * time.Second):
		t.Fatal("central-b did not take over within 3 s of a resign")
	}
	if id, _ := host.Leader(ctx, "loops"); id != "central-b" {
		t.Errorf("leader after resign = %q, want central-b", id)
	}

	// central-b dies without resigning: central-c takes over when b's lease expires.
	cWon := make(chan won, 1)
	go func() { l, err := c.Campaign(ctx, "loops"); cWon <- won{l, err} }()
	time.Sleep(200 * time.Millisecond) // c is queued behind b
	killAbruptly(b)
	died := time.Now()
	select {
	case w := <-cWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		t.Logf("central-c took over %v after central-b died (TTL 2 s)", time.Since(died))
	case <-time.After(10 * time.Second):
		t.Fatal("central-c did not take over within 10 s of central-b's death")
	}
	if id, _ := host.Leader(ctx, "loops"); id != "central-c" {
		t.Errorf("leader after death = %q, want central-c", id)
	}
	select {
	case <-leaderB.Done():
	case <-time.After(5 * time.Second):
		t.Error("the dead leader's Done was never closed")
	}

	// Closing a store hands its leadership over at once.
	aWon := make(chan won, 1)
	go func() { l, err := a.Campaign(ctx, "loops"); aWon <- won{l, err} }()
	time.Sleep(200 * time.Millisecond)
	closed := time.Now()
	c.Close()
	select {
	case w := <-aWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		if d := time.Since(closed); d > time.Second {
			t.Errorf("central-a took over %v after central-c closed; want at once", d)
		}
		defer w.l.Resign(context.Background())
	case <-time.After(5 * time.Second):
		t.Fatal("central-a did not take over after central-c closed")
	}

	// A campaign gives up with its context.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	d := openPeer(t, host, Options{ID: "central-d"})
	if _, err := d.Campaign(short, "loops"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("campaign with a short context: %v, want DeadlineExceeded", err)
	}
}
