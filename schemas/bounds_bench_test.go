package schemas

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// BenchmarkBounds measures the range check central runs before every write
// against the decode the handler runs anyway (encoding/json into the
// request's type), interleaved in the same loop, on a typical create body
// and on a refused one carrying a 1 MiB name. bounds/decode is the ratio.
func BenchmarkBounds(b *testing.B) {
	spec, err := FleetSpec()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, body string }{
		{"typical-create", `{"name": "web-1", "image": "debian-minimal", "vcpus": 2, "memory_mib": 1024, "ttl_seconds": 3600,
			"labels": {"team": "ci", "fluxvm.dev/ephemeral": "true"}, "node_selector": {"rack": "a"}}`},
		{"1MiB-name", `{"name": "` + strings.Repeat("x", 1<<20-32) + `", "image": "debian-minimal"}`},
	} {
		body := []byte(tc.body)
		b.Run(tc.name, func(b *testing.B) {
			var bounds, decode time.Duration
			for range b.N {
				t0 := time.Now()
				spec.Bounds("POST", "/fleet/vms", url.Values{}, body)
				t1 := time.Now()
				var req sdk.FleetCreateVMRequest
				_ = json.Unmarshal(body, &req)
				t2 := time.Now()
				bounds, decode = bounds+t1.Sub(t0), decode+t2.Sub(t1)
			}
			b.ReportMetric(float64(bounds.Nanoseconds())/float64(b.N), "bounds-ns/op")
			b.ReportMetric(float64(decode.Nanoseconds())/float64(b.N), "decode-ns/op")
			b.ReportMetric(float64(bounds)/float64(decode), "bounds/decode")
		})
	}
}
