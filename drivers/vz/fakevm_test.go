package vz

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/guest/agent"
)

// FakeVM stands in for a Virtualization framework VM on Linux, where the
// framework cannot run: it is the only fake in this package's tests. It keeps
// the framework's states and its rules (pause only a running VM, save only a
// paused one, restore a saved state at start), writes the files a real VM
// would (EFI variable store, machine identifier, console), and answers on
// its "vsock" agent port with the real FluxVM guest agent, which runs
// commands on this host: the fake's "guest" is the test machine itself.
type FakeVM struct {
	cfg *HostConfig

	mu      sync.Mutex
	state   MachineState
	changes chan MachineState
	boots   int // from the saved state when restored
}

// fakeSavedState is what the fake writes for SaveState.
type fakeSavedState struct {
	Fake  string `json:"fake"`
	VMID  string `json:"vm_id"`
	Boots int    `json:"boots"`
}

func newFakeVM(cfg *HostConfig) (Machine, error) {
	if _, err := os.Stat(cfg.Disk); err != nil {
		return nil, fmt.Errorf("fake vm: boot disk: %w", err)
	}
	return &FakeVM{cfg: cfg, state: MachineStopped, changes: make(chan MachineState, 16)}, nil
}

func (f *FakeVM) set(st MachineState) {
	f.state = st
	select {
	case f.changes <- st:
	default:
	}
}

func (f *FakeVM) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MachineStopped {
		return fmt.Errorf("fake vm: start: vm is %s", f.state)
	}
	// What the real machine makes on first boot.
	for _, p := range []string{f.cfg.EFIVars, f.cfg.MachineID} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			b := make([]byte, 32)
			_, _ = rand.Read(b)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				return err
			}
		}
	}
	how := "booted"
	if f.cfg.RestoreFrom != "" {
		data, err := os.ReadFile(f.cfg.RestoreFrom)
		if err != nil {
			return fmt.Errorf("fake vm: restore: %w", err)
		}
		var saved fakeSavedState
		if err := json.Unmarshal(data, &saved); err != nil || saved.VMID != f.cfg.VMID {
			return fmt.Errorf("fake vm: restore: %s is not a saved state of vm %s", f.cfg.RestoreFrom, f.cfg.VMID)
		}
		f.boots, how = saved.Boots, "restored"
	} else {
		f.boots++
	}
	con, err := os.OpenFile(f.cfg.Console, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		fmt.Fprintf(con, "fake vm %s: %s (%d cpus, %d MiB)\n", f.cfg.VMID, how, f.cfg.CPUs, f.cfg.MemoryMiB)
		con.Close()
	}
	f.set(MachineRunning)
	return nil
}

func (f *FakeVM) Pause(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MachineRunning {
		return fmt.Errorf("fake vm: pause: vm is %s", f.state)
	}
	f.set(MachinePaused)
	return nil
}

func (f *FakeVM) Resume(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MachinePaused {
		return fmt.Errorf("fake vm: resume: vm is %s", f.state)
	}
	f.set(MachineRunning)
	return nil
}

// RequestStop: the fake guest powers off shortly after the button.
func (f *FakeVM) RequestStop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MachineRunning {
		return fmt.Errorf("fake vm: request stop: vm is %s", f.state)
	}
	f.set(MachineStopping)
	time.AfterFunc(50*time.Millisecond, func() { f.mu.Lock(); f.set(MachineStopped); f.mu.Unlock() })
	return nil
}

func (f *FakeVM) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set(MachineStopped)
	return nil
}

func (f *FakeVM) State() MachineState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *FakeVM) StateChanged() <-chan MachineState { return f.changes }

func (f *FakeVM) SaveState(_ context.Context, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MachinePaused {
		return fmt.Errorf("fake vm: save: vm is %s", f.state)
	}
	data, _ := json.Marshal(fakeSavedState{Fake: "fake vm saved state", VMID: f.cfg.VMID, Boots: f.boots})
	return os.WriteFile(path, data, 0o600)
}

// DialVsock serves the real guest agent on the agent port of a running VM.
func (f *FakeVM) DialVsock(ctx context.Context, port uint32) (net.Conn, error) {
	if port != f.cfg.AgentPort {
		return nil, fmt.Errorf("fake vm: vsock port %d: connection refused", port)
	}
	if st := f.State(); st != MachineRunning {
		return nil, fmt.Errorf("fake vm: vsock port %d: vm is %s", port, st)
	}
	host, guest := net.Pipe()
	srv := agent.NewServer(agent.Options{PowerOff: func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.set(MachineStopped)
		return nil
	}})
	go func() { _ = srv.Serve(context.Background(), guest); guest.Close() }()
	return host, nil
}
