package vmm

import (
	"errors"
	"fmt"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

// ErrForbidden is a request the node's policy refuses (an image outside the
// allowed directories). The other kinds are the driver contract's:
// driver.ErrInvalid, ErrNotFound, ErrExists, ErrState, ErrNoCapacity,
// ErrUnsupported, ErrUnavailable, ErrTimeout.
var ErrForbidden = errors.New("forbidden")

// Error is what the manager returns for a request it refuses: a kind to
// branch on (errors.Is), a message for people and a hint saying what to do.
type Error struct {
	Kind error
	Msg  string
	Hint string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

func fail(kind error, hint, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

// HintOf returns the hint of an Error in err's chain, if any.
func HintOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

// driverErr wraps an error from a driver with what the manager was doing,
// keeping its kind.
func driverErr(err error, format string, args ...any) error {
	var own *Error
	if err == nil || errors.As(err, &own) {
		return err // nil, or already said for people
	}
	hint := ""
	switch {
	case errors.Is(err, driver.ErrUnavailable):
		hint = "the driver plugin or the guest agent does not answer; see GET /v1/health and the plugin log"
	case errors.Is(err, driver.ErrUnsupported):
		hint = "this VM's driver does not have that capability; GET /v1/health lists each driver's capabilities"
	}
	msg := fmt.Sprintf(format, args...) + ": " + err.Error()
	for _, kind := range []error{driver.ErrInvalid, driver.ErrNotFound, driver.ErrExists, driver.ErrState,
		driver.ErrNoCapacity, driver.ErrUnsupported, driver.ErrUnavailable, driver.ErrTimeout} {
		if errors.Is(err, kind) {
			return &Error{Kind: kind, Msg: msg, Hint: hint}
		}
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
