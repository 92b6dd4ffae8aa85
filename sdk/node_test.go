package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

func TestNodeClientDrivesAVMThroughItsLifeOnARealNode(t *testing.T) {
	node := nodetest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken), sdk.WithUserAgent("sdk-test"))
	if err != nil {
		t.Fatal(err)
	}

	h, err := nc.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Node != "test-node" || len(h.Drivers) == 0 || h.Drivers[0].Name != "sim" {
		t.Fatalf("health = %+v, want node test-node with the sim driver", h)
	}
	vms, err := nc.ListVMs(ctx)
	if err != nil || vms == nil || len(vms) != 0 {
		t.Fatalf("ListVMs on an empty node = %v, %v; want an empty, non-nil list", vms, err)
	}

	vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{
		Name: "web-1", Image: node.Image, VCPUs: 1, MemoryMiB: 256, Display: true,
		Labels: map[string]string{"team": "sdk"}, TTLSeconds: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID == "" || vm.Name != "web-1" || vm.Driver != "sim" || vm.Labels["team"] != "sdk" || vm.ExpiresAt == nil {
		t.Fatalf("created %+v", vm)
	}
	ready, err := nc.WaitReady(ctx, "web-1", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !ready.AgentReady || ready.State != sdk.StateRunning {
		t.Fatalf("WaitReady returned %+v", ready)
	}

	_, err = nc.CreateVM(ctx, sdk.CreateVMRequest{Name: "web-1", Image: node.Image, VCPUs: 1, MemoryMiB: 256})
	if !sdk.IsConflict(err) {
		t.Fatalf("second create of web-1: %v, want a conflict", err)
	}
	var apiErr *sdk.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Hint == "" {
		t.Fatalf("conflict error = %#v, want an *APIError with status 409 and a hint", err)
	}

	byID, err := nc.GetVM(ctx, vm.ID)
	if err != nil || byID.Name != "web-1" {
		t.Fatalf("GetVM by id = %+v, %v", byID, err)
	}

	steps := []struct {
		name string
		call func() (*sdk.VM, error)
		want string
	}{
		{"pause", func() (*sdk.VM, error) { return nc.PauseVM(ctx, "web-1") }, sdk.StatePaused},
		{"resume", func() (*sdk.VM, error) { return nc.ResumeVM(ctx, "web-1") }, sdk.StateRunning},
		{"stop", func() (*sdk.VM, error) { return nc.StopVM(ctx, "web-1", 5*time.Second) }, sdk.StateStopped},
		{"start", func() (*sdk.VM, error) { return nc.StartVM(ctx, "web-1") }, sdk.StateRunning},
		{"restart", func() (*sdk.VM, error) { return nc.RestartVM(ctx, "web-1") }, sdk.StateRunning},
	}
	for _, s := range steps {
		got, err := s.call()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got.State != s.want {
			t.Fatalf("%s: state %s, want %s", s.name, got.State, s.want)
		}
	}
	if _, err := nc.ResumeVM(ctx, "web-1"); !sdk.IsConflict(err) {
		t.Fatalf("resume of a running VM: %v, want a conflict", err)
	}

	logs, err := nc.Logs(ctx, "web-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(string(logs)), "\n") + 1; n != 3 {
		t.Fatalf("Logs(3) returned %d lines:\n%s", n, logs)
	}

	if err := nc.Input(ctx, "web-1", []sdk.InputAction{{Kind: "text", Text: "hello"}, {Kind: "key", Keys: []string{"enter"}}}); err != nil {
		t.Fatalf("input: %v", err)
	}
	shot, err := nc.Screenshot(ctx, "web-1", 320)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if cfg.Width > 320 {
		t.Fatalf("screenshot is %d pixels wide, asked for at most 320", cfg.Width)
	}

	// The simulator runs no guest: exec is a capability it lacks, which the
	// node answers 501 with a hint.
	_, err = nc.Exec(ctx, "web-1", sdk.ExecRequest{Command: sdk.Command{Argv: []string{"uname", "-a"}}})
	if !errors.As(err, &apiErr) || apiErr.Status != 501 || !strings.Contains(apiErr.Message, "cannot run commands") || apiErr.Hint == "" {
		t.Fatalf("exec on sim: %#v", err)
	}

	// A stopped VM never becomes ready: WaitReady says so at once.
	if _, err := nc.StopVM(ctx, "web-1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.WaitReady(ctx, "web-1", 10*time.Millisecond); !errors.Is(err, sdk.ErrVMDown) {
		t.Fatalf("WaitReady on a stopped VM: %v, want ErrVMDown", err)
	}

	list, err := nc.ListVMs(ctx)
	if err != nil || len(list) != 1 || list[0].ID != vm.ID {
		t.Fatalf("ListVMs = %+v, %v", list, err)
	}
	if err := nc.DeleteVM(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.GetVM(ctx, "web-1"); !sdk.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want not found", err)
	}
	if err := nc.DeleteVM(ctx, vm.ID); !sdk.IsNotFound(err) {
		t.Fatalf("second delete: %v, want not found", err)
	}
}

func TestNodeClientErrorsFromARealNode(t *testing.T) {
	node := nodetest.Start(t)
	ctx := t.Context()
	client := func(token string) *sdk.NodeClient {
		nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	admin := client(node.AdminToken)

	cases := []struct {
		name   string
		call   func() error
		is     func(error) bool
		status int
		msg    string
	}{
		{"no token", func() error { _, err := client("").ListVMs(ctx); return err }, sdk.IsUnauthorized, 401, "token"},
		{"wrong token", func() error { _, err := client("nope").Health(ctx); return err }, sdk.IsUnauthorized, 401, "token"},
		{"read-only token creates", func() error {
			_, err := client(node.ReadOnlyToken).CreateVM(ctx, sdk.CreateVMRequest{Name: "x", Image: node.Image, VCPUs: 1, MemoryMiB: 128})
			return err
		}, sdk.IsForbidden, 403, "read-only"},
		{"image outside the allowed dirs", func() error {
			_, err := admin.CreateVM(ctx, sdk.CreateVMRequest{Name: "x", Image: "/etc/passwd", VCPUs: 1, MemoryMiB: 128})
			return err
		}, sdk.IsForbidden, 403, ""},
		// Names with characters that mean something in a URL must travel
		// escaped and come back in the node's message as they were.
		{"name with ? and space", func() error { _, err := admin.GetVM(ctx, "a b?c=d"); return err }, sdk.IsNotFound, 404, `"a b?c=d"`},
		{"name with #", func() error { return admin.DeleteVM(ctx, "x#y") }, sdk.IsNotFound, 404, `"x#y"`},
		{"unknown vm exec", func() error {
			_, err := admin.Exec(ctx, "ghost", sdk.ExecRequest{Command: sdk.Command{Shell: "true"}})
			return err
		}, sdk.IsNotFound, 404, "ghost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var apiErr *sdk.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v (%T), want an *APIError", err, err)
			}
			if !c.is(err) || apiErr.Status != c.status || !strings.Contains(apiErr.Message, c.msg) {
				t.Fatalf("error = %+v, want status %d with %q in its message", apiErr, c.status, c.msg)
			}
			if apiErr.Hint == "" {
				t.Errorf("no hint in %+v", apiErr)
			}
		})
	}
}
