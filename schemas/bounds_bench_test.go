package schemas

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
)

// BenchmarkBounds measures the range check central runs before every write
// against the decode the handler runs anyway (encoding/json into the
// request's type), on a typical create body and on a refused one carrying a
// 1 MiB name. One op is one round: reps range checks in a row and reps
// decodes in a row, alternating which goes first. It reports both times per
// call and bounds/decode round by round, each as a median with its p10–p90.
// Run it with -benchtime Nx (N rounds).
func BenchmarkBounds(b *testing.B) {
	spec, err := FleetSpec()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, body string
		reps       int // calls of each in a round: enough that a round is far above the clock's grain
	}{
		{"typical-create", `{"name": "web-1", "image": "debian-minimal", "vcpus": 2, "memory_mib": 1024, "ttl_seconds": 3600,
			"labels": {"team": "ci", "fluxvm.dev/ephemeral": "true"}, "node_selector": {"rack": "a"}}`, 1000},
		{"1MiB-name", `{"name": "` + strings.Repeat("x", 1<<20-32) + `", "image": "debian-minimal"}`, 10},
	} {
		body := []byte(tc.body)
		b.Run(tc.name, func(b *testing.B) {
			var bounds, decode []time.Duration // per call, each round's mean
			for round := range b.N {
				benchstat.Interleave(round,
					func() {
						t0 := time.Now()
						for range tc.reps {
							spec.Bounds("POST", "/fleet/vms", url.Values{}, body)
						}
						bounds = append(bounds, time.Since(t0)/time.Duration(tc.reps))
					},
					func() {
						t0 := time.Now()
						for range tc.reps {
							var req sdk.FleetCreateVMRequest
							_ = json.Unmarshal(body, &req)
						}
						decode = append(decode, time.Since(t0)/time.Duration(tc.reps))
					})
			}
			bs, ds, ratio := benchstat.Seconds(bounds).Scaled(1e6), benchstat.Seconds(decode).Scaled(1e6), benchstat.RatiosOfSeconds(bounds, decode)
			benchstat.Report(b, bs, "bounds-µs/call")
			benchstat.Report(b, ds, "decode-µs/call")
			benchstat.Report(b, ratio, "bounds/decode")
			b.Logf("%s, %d calls of each a round: range check, µs: %v; JSON decode, µs: %v; bounds/decode round by round %v",
				tc.name, tc.reps, bs, ds, ratio)
		})
	}
}
