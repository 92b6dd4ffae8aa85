package driver

import "github.com/fluxvm/fluxvm/plugins/base"

// The error kinds of the plugin contract (package base), under the names a
// driver uses, so that a driver needs only this package to fail with one.
// They are the same values: errors.Is(err, ErrNotFound) and
// errors.Is(err, base.ErrNotFound) agree.
var (
	ErrInvalid     = base.ErrInvalid     // INVALID_ARGUMENT
	ErrNotFound    = base.ErrNotFound    // NOT_FOUND
	ErrExists      = base.ErrExists      // ALREADY_EXISTS
	ErrState       = base.ErrState       // FAILED_PRECONDITION
	ErrNoCapacity  = base.ErrNoCapacity  // RESOURCE_EXHAUSTED
	ErrUnsupported = base.ErrUnsupported // UNIMPLEMENTED
	ErrUnavailable = base.ErrUnavailable // UNAVAILABLE
	ErrTimeout     = base.ErrTimeout     // DEADLINE_EXCEEDED
)

// Error is an error of a known kind with a message for people.
type Error = base.Error

// Errorf makes an error of the given kind (one of the sentinels above).
func Errorf(kind error, format string, args ...any) error {
	return base.Errorf(kind, format, args...)
}
