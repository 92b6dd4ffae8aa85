package vmm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// guestSSHKeysCommand is how the node has the FluxVM guest agent install
// authorized SSH keys: the agent is the initramfs's /init, and with
// "ssh-keys USER" it takes the keys on stdin (guest/agent.InstallAuthorizedKeys).
// It goes through the driver's ordinary Exec, so no driver needs to know.
var guestSSHKeysCommand = []string{"/init", "ssh-keys"}

// sshKeysTimeout bounds the install: a small file write in the guest, then
// waiting (the guest gives up after a minute) for its SSH server to listen.
const sshKeysTimeout = 90 * time.Second

// checkSSHKeys is the create request's ssh_authorized_keys rule (the same
// one central applies), as the node's refusal.
func checkSSHKeys(req *sdk.CreateVMRequest) error {
	if err := sdk.CheckSSHAuthorizedKeys(req.SSHAuthorizedKeys, req.SSHUser); err != nil {
		ae, _ := err.(*sdk.APIError)
		if ae == nil {
			return fail(driver.ErrInvalid, "see the node API reference (docs/node.md)", "%v", err)
		}
		return fail(driver.ErrInvalid, ae.Hint, "%s", ae.Message)
	}
	if len(req.SSHAuthorizedKeys) > 0 && req.GuestOS == "macos" {
		return fail(driver.ErrInvalid, "leave ssh_authorized_keys out, or launch a Linux image",
			"ssh_authorized_keys are installed by the Linux guest agent; a macOS guest has none")
	}
	return nil
}

// hasSSHKeys reports whether VM id was created with SSH keys to install.
func (m *Manager) hasSSHKeys(id string) bool {
	rec, err := m.opts.Store.GetVM(id)
	if err != nil {
		return false
	}
	var req sdk.CreateVMRequest
	return json.Unmarshal(rec.Spec, &req) == nil && len(req.SSHAuthorizedKeys) > 0
}

// installSSHKeys installs the keys of VM id's create request for its login
// in the guest, which forgets them when it restarts (its root is an
// initramfs): it runs at every readiness. No keys, nothing to do.
func (m *Manager) installSSHKeys(ctx context.Context, id string, d driver.Driver) error {
	rec, err := m.opts.Store.GetVM(id)
	if err != nil {
		return err
	}
	var req sdk.CreateVMRequest
	if err := json.Unmarshal(rec.Spec, &req); err != nil || len(req.SSHAuthorizedKeys) == 0 {
		return nil
	}
	user := req.SSHUser
	if user == "" {
		user = sdk.DefaultSSHUser
	}
	ctx, cancel := context.WithTimeout(ctx, sshKeysTimeout)
	defer cancel()
	out := &capped{max: 4 << 10}
	preq := &pb.ExecRequest{Id: id, Stdin: []byte(strings.Join(req.SSHAuthorizedKeys, "\n") + "\n"),
		TimeoutMs: sshKeysTimeout.Milliseconds(),
		Command:   &pb.ExecRequest_Argv{Argv: &pb.Argv{Args: append(append([]string(nil), guestSSHKeysCommand...), user)}}}
	code, err := d.Exec(ctx, preq, out, out)
	if err != nil {
		return fmt.Errorf("install ssh keys for %s: %w", user, err)
	}
	if code != 0 {
		return fmt.Errorf("install ssh keys for %s: the guest agent answered %d: %s (is the image built by scripts/guest-image.sh, with an SSH server?)",
			user, code, strings.TrimSpace(out.String()))
	}
	return nil
}
