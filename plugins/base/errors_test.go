package base

import (
	"context"
	"errors"
	"testing"
)

// TestErrorKindsCrossTheWire checks that every sentinel survives the trip
// through a gRPC status and back, message intact.
func TestErrorKindsCrossTheWire(t *testing.T) {
	for _, kc := range kindCodes {
		sent := Errorf(kc.kind, "vm x: something about %s", kc.kind)
		got := FromStatus(ToStatus(sent))
		if !errors.Is(got, kc.kind) {
			t.Errorf("%v came back as %v", kc.kind, got)
		}
		if got.Error() != sent.Error() {
			t.Errorf("message %q came back as %q", sent, got)
		}
	}
	wrapped := errors.Join(errors.New("context"), Errorf(ErrNotFound, "no vm"))
	if got := FromStatus(ToStatus(wrapped)); !errors.Is(got, ErrNotFound) {
		t.Errorf("a wrapped ErrNotFound came back as %v", got)
	}
	if got := FromStatus(ToStatus(context.DeadlineExceeded)); !errors.Is(got, ErrTimeout) {
		t.Errorf("a deadline came back as %v, want ErrTimeout", got)
	}
	if got := FromStatus(ToStatus(errors.New("plain"))); got.Error() != "plain" {
		t.Errorf("a plain error came back as %q", got)
	}
}
