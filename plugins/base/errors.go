package base

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors that cross the plugin boundary as gRPC codes. Plugins wrap
// them (Errorf does); callers test them with errors.Is. The driver package
// offers the same values under the same names.
var (
	ErrInvalid     = errors.New("invalid argument")    // codes.InvalidArgument
	ErrNotFound    = errors.New("not found")           // codes.NotFound
	ErrExists      = errors.New("already exists")      // codes.AlreadyExists
	ErrState       = errors.New("wrong state")         // codes.FailedPrecondition
	ErrNoCapacity  = errors.New("not enough capacity") // codes.ResourceExhausted
	ErrUnsupported = errors.New("not supported")       // codes.Unimplemented
	ErrUnavailable = errors.New("unavailable")         // codes.Unavailable
	ErrTimeout     = errors.New("timed out")           // codes.DeadlineExceeded
)

var kindCodes = []struct {
	kind error
	code codes.Code
}{
	{ErrInvalid, codes.InvalidArgument},
	{ErrNotFound, codes.NotFound},
	{ErrExists, codes.AlreadyExists},
	{ErrState, codes.FailedPrecondition},
	{ErrNoCapacity, codes.ResourceExhausted},
	{ErrUnsupported, codes.Unimplemented},
	{ErrUnavailable, codes.Unavailable},
	{ErrTimeout, codes.DeadlineExceeded},
}

// Error is an error of a known kind with a message for people. Its Error is
// the message alone; errors.Is(err, kind) holds.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

// Errorf makes an error of the given kind (one of the sentinels above).
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// ToStatus turns a plugin's error into a gRPC status error. Plugin glue calls
// it on the plugin's side of every RPC.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	default:
		for _, kc := range kindCodes {
			if errors.Is(err, kc.kind) {
				code = kc.code
				break
			}
		}
	}
	return status.Error(code, err.Error())
}

// FromStatus turns a gRPC error from the plugin back into an error of the
// matching kind, keeping the plugin's message. Plugin glue calls it on the
// agent's side of every RPC.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.Unavailable:
		return &Error{Kind: ErrUnavailable, Msg: st.Message()}
	}
	for _, kc := range kindCodes {
		if kc.code == st.Code() {
			return &Error{Kind: kc.kind, Msg: st.Message()}
		}
	}
	return errors.New(st.Message())
}
