package sdk

import (
	"errors"
	"fmt"
	"net/http"
)

// APIError is a request the server answered with an error status. Message
// and Hint are the server's own words ({"error", "hint"}); Status is the
// HTTP status, which the Is* helpers branch on.
type APIError struct {
	Status  int
	Message string
	Hint    string
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// ConnectError is a request that never got an answer: the server is down,
// the address is wrong, or something in between dropped the connection.
type ConnectError struct {
	// Service is what was called: "node" or "central".
	Service string
	// URL is the base URL the client was made with.
	URL string
	Err error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("%s at %s is unreachable: %v", e.Service, e.URL, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// ErrVMDown is what WaitReady returns (wrapped) when the VM stopped or was
// lost before its guest agent answered, so waiting longer cannot help.
var ErrVMDown = errors.New("vm is down")

func hasStatus(err error, status ...int) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range status {
		if e.Status == s {
			return true
		}
	}
	return false
}

// IsNotFound reports a 404: no such VM (or one that is not yours).
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsStale reports a 412: a write for a version of a document (If-Match)
// that has changed since it was read. Read it again and redo the change.
func IsStale(err error) bool { return hasStatus(err, http.StatusPreconditionFailed) }

// IsConflict reports a 409: the object is in the wrong state for the call
// (a name already taken, pausing a stopped VM, a screenshot without display).
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsUnauthorized reports a 401: no token, or one the server does not know.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports a 403: the token or the server's policy does not allow
// the call (a read-only token, an image outside the allowed directories).
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsQuota reports a 429: a quota or limit was reached.
func IsQuota(err error) bool { return hasStatus(err, http.StatusTooManyRequests) }

// IsUnavailable reports that the server could not be reached, or answered
// that it (or a driver behind it) is not available right now (502, 503,
// 504). Calls that failed this way may work when retried.
func IsUnavailable(err error) bool {
	var ce *ConnectError
	if errors.As(err, &ce) {
		return true
	}
	return hasStatus(err, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)
}
