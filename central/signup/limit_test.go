package signup

import (
	"strconv"
	"testing"
	"time"
)

func TestTheLimiterForgetsTheLongestIdleAddressesPastItsBound(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }})
	for i := range MaxAddresses + 500 {
		now = now.Add(time.Millisecond)
		s.allow("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	if n := len(s.buckets); n > MaxAddresses {
		t.Fatalf("%d addresses kept, at most %d", n, MaxAddresses)
	}
	if _, ok := s.buckets["10.0.0.0"]; ok {
		t.Error("the address idle longest is still kept")
	}
	last := MaxAddresses + 499
	if _, ok := s.buckets["10.0."+strconv.Itoa(last/256)+"."+strconv.Itoa(last%256)]; !ok {
		t.Error("the newest address was forgotten")
	}
}
