package link

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a log sink safe for the link's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHeartbeatsAtCentralsIntervalAndLogsAnOutageOnce runs the link against
// an HTTP server speaking central's heartbeat route: the first heartbeat
// goes at once with the fleet token, later ones follow the interval central
// returns, and an outage of many heartbeats is logged once when it starts
// and once when it ends.
func TestHeartbeatsAtCentralsIntervalAndLogsAnOutageOnce(t *testing.T) {
	var beats, failing atomic.Int32
	got := make(chan sdk.Heartbeat, 100)
	central := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fleet/nodes/n1/heartbeat" || r.Header.Get("Authorization") != "Bearer fleet-token" {
			http.Error(w, `{"error":"wrong route or token"}`, http.StatusUnauthorized)
			return
		}
		beats.Add(1)
		if failing.Load() == 1 {
			http.Error(w, `{"error":"central is restarting"}`, http.StatusServiceUnavailable)
			return
		}
		var hb sdk.Heartbeat
		_ = json.NewDecoder(r.Body).Decode(&hb)
		got <- hb
		_ = json.NewEncoder(w).Encode(sdk.HeartbeatReply{State: "up", IntervalSeconds: 1})
	}))
	defer central.Close()

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		done <- Run(ctx, Options{CentralURL: central.URL, Token: "fleet-token", Node: "n1", Interval: time.Hour,
			Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
			Report: func(context.Context) (sdk.Heartbeat, error) {
				return sdk.Heartbeat{URL: "http://127.0.0.1:7777", VMs: []sdk.HeartbeatVM{{ID: "vm-1", Tenant: "t-1"}}}, nil
			}})
	}()
	first := <-got
	if time.Since(began) > 2*time.Second || first.URL != "http://127.0.0.1:7777" || len(first.VMs) != 1 {
		t.Fatalf("first heartbeat %+v after %v: want it at once with the report", first, time.Since(began))
	}
	// The next follows central's 1 s, not the configured hour.
	select {
	case <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("no second heartbeat within 3s: the link ignored central's interval")
	}
	failing.Store(1)
	for n := beats.Load(); beats.Load() < n+3; {
		time.Sleep(50 * time.Millisecond)
	}
	failing.Store(0)
	<-got
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(logs.String(), "again") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if c := strings.Count(out, "cannot heartbeat to central"); c != 1 {
		t.Errorf("an outage of 3 heartbeats logged %d warnings, want 1:\n%s", c, out)
	}
	if !strings.Contains(out, "heartbeating to central again") {
		t.Errorf("recovery not logged:\n%s", out)
	}
	if strings.Contains(out, "fleet-token") {
		t.Errorf("the token reached the log:\n%s", out)
	}
}
