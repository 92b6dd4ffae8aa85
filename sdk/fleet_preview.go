package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// PreviewPathPrefix is where central serves previews: PreviewPathPrefix +
// id + "/" and whatever path the guest's server knows.
const PreviewPathPrefix = "/fleet/previews/"

// PreviewRequest opens a preview of a guest port
// (POST /fleet/vms/{node}/{id}/preview).
type PreviewRequest struct {
	Port int `json:"port"`
}

// Preview is one open preview: central reverse-proxies HTTP (and WebSocket
// upgrades) at Path to Port of the VM, while the VM keeps running in the
// boot the preview was opened in.
type Preview struct {
	ID         string `json:"id"`
	Tenant     string `json:"tenant,omitempty"`
	TenantName string `json:"tenant_name,omitempty"`
	Node       string `json:"node"`
	VM         string `json:"vm"`
	VMName     string `json:"vm_name"`
	Port       int    `json:"port"`
	// Path is where the preview is served: /fleet/previews/<id>/.
	Path string `json:"path"`
	// OpenedBy names who opened it: "primary token", "key <name>", a
	// member's email or "operator".
	OpenedBy string    `json:"opened_by"`
	OpenedAt time.Time `json:"opened_at"`
}

// PreviewList is GET /fleet/previews: the caller's open previews (all of
// them for the operator).
type PreviewList struct {
	Previews []Preview `json:"previews"`
}

// OpenPreview opens a preview of a running VM's guest port. Opening the
// same port again returns the preview already open. Refusals are
// *APIError: 404 no such VM, 409 the VM does not run, 403 tunnels are off
// or the port is outside the policy's, 429 too many previews.
func (f *FleetClient) OpenPreview(ctx context.Context, node, id string, port int) (*Preview, error) {
	var out Preview
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "preview"), nil, PreviewRequest{Port: port}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClosePreview closes a VM's preview of port, or all of its previews when
// port is 0. A VM without one is a 404 *APIError.
func (f *FleetClient) ClosePreview(ctx context.Context, node, id string, port int) error {
	var q url.Values
	if port != 0 {
		q = url.Values{"port": {strconv.Itoa(port)}}
	}
	return f.c.call(ctx, http.MethodDelete, fleetVMPath(node, id, "preview"), q, nil, nil)
}

// ListPreviews lists the caller's open previews (the operator's: all).
func (f *FleetClient) ListPreviews(ctx context.Context) (*PreviewList, error) {
	var out PreviewList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/previews", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DoPreview sends one HTTP request through preview id to its guest port:
// method, a path below the preview ("/", "/api/x?y=1") and a body (nil for
// none), with the client's token, which central strips before the request
// goes on. It returns the guest's answer whatever its status; the caller
// closes its body. Central's own refusals (no such preview, 404 once the
// VM stopped; 502 nothing listens) come back the same way, as JSON
// {"error","hint"}.
func (f *FleetClient) DoPreview(ctx context.Context, id, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, method, f.c.base+PreviewPathPrefix+url.PathEscape(id)+path, body)
	if err != nil {
		return nil, fmt.Errorf("%s preview %s%s: %w", method, id, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if f.c.opts.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.c.opts.token)
	}
	if f.c.opts.userAgent != "" && req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", f.c.opts.userAgent)
	}
	resp, err := f.c.opts.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%s preview %s%s: %w", method, id, path, ctxErr)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &ConnectError{Service: f.c.service, URL: f.c.shown, Err: err}
	}
	return resp, nil
}
