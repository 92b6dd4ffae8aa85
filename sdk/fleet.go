package sdk

import (
	"context"
	"net/http"
	"net/url"
)

// DefaultCentralURL is where central listens unless told otherwise.
const DefaultCentralURL = "http://127.0.0.1:7799"

// FleetClient calls central's fleet API (/fleet/...). It is safe for
// concurrent use. The token is the operator's fleet token, a tenant's
// fvt_ token, or, for heartbeats, the fleet token a node was given.
type FleetClient struct {
	c *client
}

// NewFleetClient returns a client for central at baseURL (for example
// "http://127.0.0.1:7799"). It does not connect; the first call does.
func NewFleetClient(baseURL string, opts ...Option) (*FleetClient, error) {
	c, err := newClient("central", baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &FleetClient{c: c}, nil
}

// URL is central's base URL as the client uses it.
func (f *FleetClient) URL() string { return f.c.base }

func fleetVMPath(node, id string, action ...string) string {
	p := "/fleet/vms/" + url.PathEscape(node) + "/" + url.PathEscape(id)
	for _, a := range action {
		p += "/" + a
	}
	return p
}

// Heartbeat reports a node to central.
func (f *FleetClient) Heartbeat(ctx context.Context, node string, hb Heartbeat) (*HeartbeatReply, error) {
	var out HeartbeatReply
	if err := f.c.call(ctx, http.MethodPost, "/fleet/nodes/"+url.PathEscape(node)+"/heartbeat", nil, hb, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVM places a VM on a node chosen by central's scheduler, within the
// caller's quota. A quota refusal is IsQuota; no fitting node IsConflict.
func (f *FleetClient) CreateVM(ctx context.Context, req FleetCreateVMRequest) (*FleetCreateVMResponse, error) {
	var out FleetCreateVMResponse
	if err := f.c.call(ctx, http.MethodPost, "/fleet/vms", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVMs lists the caller's VMs on every node (the operator's: all), and
// the nodes that did not answer.
func (f *FleetClient) ListVMs(ctx context.Context) (*FleetVMList, error) {
	var out FleetVMList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/vms", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVM deletes a VM on a node and ends its ledger entry.
func (f *FleetClient) DeleteVM(ctx context.Context, node, id string) error {
	return f.c.call(ctx, http.MethodDelete, fleetVMPath(node, id), nil, nil, nil)
}

// Exec runs a command in a VM through its node; see NodeClient.Exec.
func (f *FleetClient) Exec(ctx context.Context, node, id string, req ExecRequest) (*ExecResult, error) {
	var res ExecResult
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
