// Package nodecall is how central reaches node agents: node API clients that
// carry central's fleet token and go through the node's channel (see
// package channel) or, for a node that holds none to this central but
// advertises a URL, straight to that URL; and the timeouts every mechanism
// that calls a node (launches, drains, pools, leases, the reconciler) uses.
package nodecall

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/channel"
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

// ChannelHost is the domain of the placeholder base URLs of clients that
// reach a node through its channel: http://NODE.node.fluxvm. The node API
// does not look at the Host header; the name only shows in errors.
const ChannelHost = "node.fluxvm"

// Caller makes node API clients. It is safe for concurrent use.
type Caller struct {
	token    string
	direct   *http.Client
	channels *channel.Registry

	mu sync.Mutex
	// viaChannel holds one client per node whose transport dials through
	// the node's channel, so each node keeps its own pool of streams.
	viaChannel map[string]*http.Client
}

// New makes a Caller that sends token (the fleet token, which nodes list
// among their admin tokens; empty: none), with an empty channel registry
// that the fleet API's channel route fills.
func New(token string) *Caller {
	return NewWithChannels(token, channel.New(channel.Options{}))
}

// NewWithChannels is New with the given registry of node channels.
func NewWithChannels(token string, channels *channel.Registry) *Caller {
	tr := newTransport()
	tr.DialContext = (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &Caller{token: token, direct: &http.Client{Transport: tr}, channels: channels, viaChannel: map[string]*http.Client{}}
}

func newTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Bursts of creates go to a handful of nodes; keep their connections.
	tr.MaxIdleConnsPerHost = 64
	tr.Proxy = nil // a node's channel or its advertised address, never a proxy
	return tr
}

// Channels is the registry of the node channels this central holds.
func (c *Caller) Channels() *channel.Registry { return c.channels }

// Client is a client for node n's API: through n's channel when this
// central holds it, else at the URL n's heartbeat carries, else through
// the channel n is expected to open (its dials wait for it a few seconds,
// then fail with channel.ErrNoChannel inside an *sdk.ConnectError).
// WebSockets of the client (sdk's DialWebSocket, Stream) take the same way,
// since they dial with the client's transport.
func (c *Caller) Client(n *store.Node) (*sdk.NodeClient, error) {
	opts := []sdk.Option{sdk.WithUserAgent("fluxvm-central")}
	// An enrolled node holds its own credential, not the operator's token:
	// it is reached only through the channel it opened, which it trusts as
	// central, and is never sent the token.
	if c.token != "" && !n.Enrolled {
		opts = append(opts, sdk.WithToken(c.token))
	}
	if n.URL != "" && !n.Enrolled && !c.channels.Has(n.Name) {
		nc, err := sdk.NewNodeClient(n.URL, append(opts, sdk.WithHTTPClient(c.direct))...)
		if err != nil {
			return nil, fmt.Errorf("node %s reports a bad url: %w", n.Name, err)
		}
		return nc, nil
	}
	nc, err := sdk.NewNodeClient("http://"+n.Name+"."+ChannelHost, append(opts, sdk.WithHTTPClient(c.channelClient(n.Name)))...)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nc, nil
}

// channelClient is the *http.Client whose connections are streams on
// node's channel.
func (c *Caller) channelClient(node string) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc := c.viaChannel[node]; hc != nil {
		return hc
	}
	tr := newTransport()
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return c.channels.DialContext(ctx, node)
	}
	// Streams are cheap and die with their channel; do not hoard them.
	tr.IdleConnTimeout = 30 * time.Second
	hc := &http.Client{Transport: tr}
	c.viaChannel[node] = hc
	return hc
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

// NodeError is a node that refused or failed a call central made while doing
// What ("create the vm"); Err is the node's answer. What is empty when the
// node could not be called at all (its reported address is unusable), and
// Err then says why.
type NodeError struct {
	Node *store.Node
	What string
	Err  error
}

func (e *NodeError) Error() string {
	if e.What == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("node %s: %s: %v", e.Node.Name, e.What, e.Err)
}
func (e *NodeError) Unwrap() error { return e.Err }
