// Package nodecall is how central reaches node agents: node API clients that
// carry central's fleet token and share one connection pool, and the
// timeouts every mechanism that calls a node (launches, drains, pools,
// leases, the reconciler) uses.
package nodecall

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Timeouts of central's calls to nodes. A create waits for the hypervisor to
// start the VM; a list must not let one slow node hold up the fleet's answer.
const (
	CreateTimeout = 2 * time.Minute
	CallTimeout   = 30 * time.Second
	ListTimeout   = 5 * time.Second
)

// Caller makes node API clients. It is safe for concurrent use.
type Caller struct {
	token string
	hc    *http.Client
}

// New makes a Caller that sends token (the fleet token, which nodes list
// among their admin tokens; empty: none).
func New(token string) *Caller {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Bursts of creates go to a handful of nodes; keep their connections.
	tr.MaxIdleConnsPerHost = 64
	tr.DialContext = (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &Caller{token: token, hc: &http.Client{Transport: tr}}
}

// Client is a client for node n's API, at the address its heartbeat carries.
func (c *Caller) Client(n *store.Node) (*sdk.NodeClient, error) {
	opts := []sdk.Option{sdk.WithHTTPClient(c.hc), sdk.WithUserAgent("fluxvm-central")}
	if c.token != "" {
		opts = append(opts, sdk.WithToken(c.token))
	}
	nc, err := sdk.NewNodeClient(n.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("node %s reports a bad url: %w", n.Name, err)
	}
	return nc, nil
}

// Create creates a VM on node n (within CreateTimeout).
func (c *Caller) Create(ctx context.Context, n *store.Node, spec sdk.CreateVMRequest) (*sdk.VM, error) {
	nc, err := c.Client(n)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CreateTimeout)
	defer cancel()
	return nc.CreateVM(ctx, spec)
}

// Delete deletes VM vmID on node n (within CallTimeout). A VM the node does
// not know is gone already: gone is true and err nil.
func (c *Caller) Delete(ctx context.Context, n *store.Node, vmID string) (gone bool, err error) {
	nc, err := c.Client(n)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	err = nc.DeleteVM(ctx, vmID)
	if sdk.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// TenantVMNamed finds the tenant's VM with the name on a node (the node's
// own lookup by name is ambiguous when two tenants use one name).
func TenantVMNamed(ctx context.Context, nc *sdk.NodeClient, tenant, name string) (*sdk.VM, error) {
	vms, err := nc.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	for i := range vms {
		if vms[i].Name == name && vms[i].Tenant == tenant {
			return &vms[i], nil
		}
	}
	return nil, &sdk.APIError{Status: http.StatusNotFound, Message: "no vm named " + name}
}
