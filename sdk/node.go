package sdk

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// DefaultNodeURL is where a node agent listens unless its config says
// otherwise.
const DefaultNodeURL = "http://127.0.0.1:7777"

// NodeClient calls the node API of one fluxvm-agent node (/v1/...). It is
// safe for concurrent use. VMs are named by id or by name wherever a call
// takes idOrName.
type NodeClient struct {
	c *client
}

// NewNodeClient returns a client for the node API at baseURL (for example
// "http://127.0.0.1:7777", or "unix:///run/fluxvm/api.sock" for a node
// whose `listen` is a unix socket). It does not connect; the first call does.
func NewNodeClient(baseURL string, opts ...Option) (*NodeClient, error) {
	c, err := newClient("node", baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &NodeClient{c: c}, nil
}

// URL is the node's base URL as the client was made with it.
func (n *NodeClient) URL() string { return n.c.shown }

func vmPath(idOrName string, action ...string) string {
	p := "/v1/vms/" + url.PathEscape(idOrName)
	for _, a := range action {
		p += "/" + a
	}
	return p
}

// Health returns the node's name, drivers, capacity and VM count.
func (n *NodeClient) Health(ctx context.Context) (*NodeHealth, error) {
	var h NodeHealth
	if err := n.c.call(ctx, http.MethodGet, "/v1/health", nil, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// ListVMs returns every VM on the node, oldest first.
func (n *NodeClient) ListVMs(ctx context.Context) ([]VM, error) {
	var out VMList
	if err := n.c.call(ctx, http.MethodGet, "/v1/vms", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.VMs == nil {
		out.VMs = []VM{}
	}
	return out.VMs, nil
}

// CreateVM creates a VM and starts it. It returns once the hypervisor has
// started it, usually before the guest agent answers: see WaitReady.
func (n *NodeClient) CreateVM(ctx context.Context, req CreateVMRequest) (*VM, error) {
	var vm VM
	if err := n.c.call(ctx, http.MethodPost, "/v1/vms", nil, req, &vm); err != nil {
		return nil, err
	}
	return &vm, nil
}

// GetVM returns a VM with its live state.
func (n *NodeClient) GetVM(ctx context.Context, idOrName string) (*VM, error) {
	var vm VM
	if err := n.c.call(ctx, http.MethodGet, vmPath(idOrName), nil, nil, &vm); err != nil {
		return nil, err
	}
	return &vm, nil
}

// DeleteVM stops a VM if needed and deletes it with its workspace.
func (n *NodeClient) DeleteVM(ctx context.Context, idOrName string) error {
	return n.c.call(ctx, http.MethodDelete, vmPath(idOrName), nil, nil, nil)
}

func (n *NodeClient) power(ctx context.Context, idOrName, action string, body any) (*VM, error) {
	var vm VM
	if err := n.c.call(ctx, http.MethodPost, vmPath(idOrName, action), nil, body, &vm); err != nil {
		return nil, err
	}
	return &vm, nil
}

// StartVM boots a stopped VM.
func (n *NodeClient) StartVM(ctx context.Context, idOrName string) (*VM, error) {
	return n.power(ctx, idOrName, "start", nil)
}

// StopVM asks the guest to shut down and waits up to timeout before the node
// stops the VM hard. A zero timeout leaves the choice to the node.
func (n *NodeClient) StopVM(ctx context.Context, idOrName string, timeout time.Duration) (*VM, error) {
	var body any
	if timeout > 0 {
		secs := int64((timeout + time.Second - 1) / time.Second)
		body = StopRequest{TimeoutSeconds: secs}
	}
	return n.power(ctx, idOrName, "stop", body)
}

// RestartVM stops a VM and starts it again.
func (n *NodeClient) RestartVM(ctx context.Context, idOrName string) (*VM, error) {
	return n.power(ctx, idOrName, "restart", nil)
}

// PauseVM freezes a running VM's vCPUs; its memory stays in place.
func (n *NodeClient) PauseVM(ctx context.Context, idOrName string) (*VM, error) {
	return n.power(ctx, idOrName, "pause", nil)
}

// ResumeVM continues a paused VM.
func (n *NodeClient) ResumeVM(ctx context.Context, idOrName string) (*VM, error) {
	return n.power(ctx, idOrName, "resume", nil)
}

// Exec runs a command in a VM through its guest agent and returns what it
// printed and its exit code. A command that ran and failed is a result with
// a non-zero ExitCode, not an error.
func (n *NodeClient) Exec(ctx context.Context, idOrName string, req ExecRequest) (*ExecResult, error) {
	var res ExecResult
	if err := n.c.call(ctx, http.MethodPost, vmPath(idOrName, "exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Logs returns the end of a VM's console log: its last lines lines, or the
// node's default when lines is 0.
func (n *NodeClient) Logs(ctx context.Context, idOrName string, lines int) ([]byte, error) {
	var q url.Values
	if lines > 0 {
		q = url.Values{"lines": {strconv.Itoa(lines)}}
	}
	return n.c.blob(ctx, http.MethodGet, vmPath(idOrName, "logs"), q)
}

// Screenshot returns a PNG of a VM's display, scaled down to maxWidth
// pixels when it is wider (0 keeps its size). A VM without a display is a
// conflict (IsConflict).
func (n *NodeClient) Screenshot(ctx context.Context, idOrName string, maxWidth int) ([]byte, error) {
	var q url.Values
	if maxWidth > 0 {
		q = url.Values{"max_width": {strconv.Itoa(maxWidth)}}
	}
	return n.c.blob(ctx, http.MethodGet, vmPath(idOrName, "screenshot"), q)
}

// Input sends keyboard and pointer actions to a VM's display, in order.
func (n *NodeClient) Input(ctx context.Context, idOrName string, actions []InputAction) error {
	if actions == nil {
		actions = []InputAction{}
	}
	return n.c.call(ctx, http.MethodPost, vmPath(idOrName, "input"), nil, InputRequest{Actions: actions}, nil)
}

// MaxWaitReadySeconds is the most GET /v1/vms/{id}?wait_ready=N holds its
// answer for (N from 0, the default: answer at once, to this).
const MaxWaitReadySeconds = 60

// WaitReady waits until a VM's guest agent is ready and returns it then.
// Each request asks the node to hold its answer until the agent is ready
// (wait_ready), so a VM that comes up is seen at once, without polling; poll
// (500ms when 0) is the pause before asking again when the node answers
// not ready (a node that does not hold answers, or a guest still coming up
// when the node's hold ended). It fails with ErrVMDown (wrapped) when the
// VM stops or is lost first, with the API's error when the VM goes away,
// and with the context's error when ctx ends: give ctx a deadline. With
// ErrVMDown and a context error it also returns the VM as last seen.
func (n *NodeClient) WaitReady(ctx context.Context, idOrName string, poll time.Duration) (*VM, error) {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var last *VM
	for {
		wait := MaxWaitReadySeconds
		if dl, ok := ctx.Deadline(); ok {
			// Whole seconds, rounded down: the node answers before ctx ends.
			wait = max(0, min(wait, int(time.Until(dl)/time.Second)-1))
		}
		vm := &VM{}
		err := n.c.call(ctx, http.MethodGet, vmPath(idOrName), url.Values{"wait_ready": {strconv.Itoa(wait)}}, nil, vm)
		switch {
		case err != nil && ctx.Err() != nil && last != nil:
			return last, fmt.Errorf("wait for vm %s: guest agent not ready (state %s): %w", last.Name, last.State, ctx.Err())
		case err != nil:
			return nil, err
		}
		last = vm
		switch {
		case vm.AgentReady:
			return vm, nil
		case vm.State == StateStopped || vm.State == StateLost:
			why := ""
			if vm.LastError != "" {
				why = " (" + vm.LastError + ")"
			}
			return vm, fmt.Errorf("wait for vm %s: it is %s before its guest agent answered%s: %w", vm.Name, vm.State, why, ErrVMDown)
		}
		select {
		case <-ctx.Done():
			return vm, fmt.Errorf("wait for vm %s: guest agent not ready (state %s): %w", vm.Name, vm.State, ctx.Err())
		case <-t.C:
		}
	}
}

// Workspaces lists the VM folders in the node's driver state directories,
// each marked owned when a VM record of the node owns it. A node that runs no
// VM and lists no workspace has nothing of any VM left.
func (n *NodeClient) Workspaces(ctx context.Context) ([]Workspace, error) {
	var out WorkspaceList
	if err := n.c.call(ctx, http.MethodGet, "/v1/workspaces", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Workspaces, nil
}

// CleanWorkspaces destroys the workspaces no VM record owns (admin token) and
// returns them; workspaces of existing VMs are kept.
func (n *NodeClient) CleanWorkspaces(ctx context.Context) ([]Workspace, error) {
	var out WorkspaceList
	if err := n.c.call(ctx, http.MethodPost, "/v1/workspaces/clean", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Workspaces, nil
}

// SnapshotVM takes a disk snapshot of a VM, or a memory snapshot with
// req.Memory.
func (n *NodeClient) SnapshotVM(ctx context.Context, idOrName string, req SnapshotRequest) (*Snapshot, error) {
	var s Snapshot
	if err := n.c.call(ctx, http.MethodPost, vmPath(idOrName, "snapshot"), nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Snapshots lists a VM's snapshots, oldest first.
func (n *NodeClient) Snapshots(ctx context.Context, idOrName string) ([]Snapshot, error) {
	var out []Snapshot
	if err := n.c.call(ctx, http.MethodGet, vmPath(idOrName, "snapshots"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteSnapshot removes one of a VM's snapshots.
func (n *NodeClient) DeleteSnapshot(ctx context.Context, idOrName, tag string) error {
	return n.c.call(ctx, http.MethodDelete, vmPath(idOrName, "snapshots", url.PathEscape(tag)), nil, nil, nil)
}

// RestoreVM puts a VM back to one of its snapshots.
func (n *NodeClient) RestoreVM(ctx context.Context, idOrName, tag string) (*VM, error) {
	return n.power(ctx, idOrName, "restore", RestoreRequest{Tag: tag})
}

// CloneVM creates and starts a new VM from a VM's snapshot or stopped disk.
func (n *NodeClient) CloneVM(ctx context.Context, idOrName string, req CloneRequest) (*VM, error) {
	return n.power(ctx, idOrName, "clone", req)
}
