package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

// Whole documents (the policy, the price list) are read with an ETag, their
// store version, and written back with If-Match: a write for a version that
// has changed since is 412, so two operators cannot undo each other's edits
// unawares. A write without If-Match replaces whatever is there.

// setETag answers a document's version.
func setETag(w http.ResponseWriter, version int64) {
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(version, 10)))
}

// ifMatch reads If-Match: the version a write is for (given false without
// the header, or with "*"). A malformed one is answered 400 and ok is false.
func ifMatch(w http.ResponseWriter, r *http.Request) (version []int64, ok bool) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return nil, true
	}
	v, err := strconv.Unquote(h)
	n, perr := strconv.ParseInt(v, 10, 64)
	if err != nil || perr != nil || n < 0 || len(h) > 24 {
		jsonapi.WriteError(w, http.StatusBadRequest, "If-Match must be one ETag as a GET of this document answered it (a quoted number)",
			`for example If-Match: "42"; leave it out to replace the document whatever its version`)
		return nil, false
	}
	return []int64{n}, true
}

// stale answers a write refused for a changed version (true), or says the
// error is another (false).
func stale(w http.ResponseWriter, err error, what string) bool {
	if !errors.Is(err, store.ErrStale) {
		return false
	}
	jsonapi.WriteError(w, http.StatusPreconditionFailed, fmt.Sprintf("the %s changed since you read it", what),
		fmt.Sprintf("GET the %s again, apply your change to it and send it with the new ETag in If-Match", what))
	return true
}
