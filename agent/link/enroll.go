package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// CredentialFile is where an enrolled node keeps its credential, in its
// state dir, mode 0600.
const CredentialFile = "central-credential.json"

// Credential is what enrollment leaves in the node's state dir: the central
// it enrolled into and the node credential central handed over once.
type Credential struct {
	CentralURL string    `json:"central_url"`
	Node       string    `json:"node"`
	MemberID   string    `json:"member_id"`
	Credential string    `json:"credential"`
	EnrolledAt time.Time `json:"enrolled_at"`
}

// LoadCredential reads the state dir's credential; (nil, nil) when the node
// has not enrolled.
func LoadCredential(stateDir string) (*Credential, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, CredentialFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the node's credential: %w", err)
	}
	var c Credential
	if err := json.Unmarshal(data, &c); err != nil || c.Credential == "" {
		return nil, fmt.Errorf("the node's credential file %s is damaged: enroll again (fluxvm-agent node enroll)", filepath.Join(stateDir, CredentialFile))
	}
	return &c, nil
}

// SaveCredential writes c into the state dir, mode 0600 from the start,
// replacing any older one whole.
func SaveCredential(stateDir string, c *Credential) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(stateDir, ".credential-*")
	if err != nil {
		return fmt.Errorf("write the node's credential: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(stateDir, CredentialFile))
}

// EnrollOptions configure Enroll.
type EnrollOptions struct {
	CentralURL, Node, Invite string
	// StateDir receives the credential.
	StateDir string
	// Out gets what the person at the node reads: the code, then progress.
	Out io.Writer
	// OwnerCode asks the person for the code central's operator reads out
	// from the request they see; Enroll confirms only when it is this
	// node's code.
	OwnerCode func() (string, error)
	// Poll is how often to ask whether the operator approved (2 s by default).
	Poll    time.Duration
	Version string
}

// Enroll pairs this node with central: it redeems the invite with a nonce
// of its own, shows the six-digit code, asks for the code central's
// operator sees, and when both match waits for the operator's approval;
// then it writes the credential central hands over into the state dir.
func Enroll(ctx context.Context, o EnrollOptions) (*Credential, error) {
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	norm, ok := sdk.NormalizeInvite(o.Invite)
	if !ok {
		return nil, errors.New("the invite is 16 letters and digits in four groups (ABCD-EFGH-IJKL-MNOP), as central's operator got it from fluxctl fleet invite --node")
	}
	c, err := sdk.NewFleetClient(o.CentralURL, sdk.WithUserAgent("fluxvm-agent/"+o.Version))
	if err != nil {
		return nil, fmt.Errorf("central url: %w", err)
	}
	nonce := sdk.NewPairingNonce()
	if _, err := c.RedeemInvite(ctx, sdk.FleetRedeemRequest{Invite: o.Invite, Nonce: nonce, Kind: sdk.PairNode, Name: o.Node}); err != nil {
		if sdk.IsNotFound(err) {
			return nil, errors.New("central knows no such invite: it is wrong, expired (15 minutes) or used already; if this node did not use it, someone else did: tell central's operator to reject the request they see and mint a new invite")
		}
		return nil, fmt.Errorf("redeem the invite: %w", err)
	}
	code := sdk.PairingCode(norm, nonce)
	fmt.Fprintf(o.Out, "Confirmation code: %s\nCentral's operator sees a request for node %s with a code (fluxctl fleet requests).\n", sdk.ShowPairingCode(code), o.Node)
	typed, err := o.OwnerCode()
	if err != nil {
		return nil, fmt.Errorf("read the operator's code: %w", err)
	}
	if stripSpaces(typed) != code {
		fmt.Fprintf(o.Out, "The codes differ (this node's is %s): do not enroll; tell the operator to reject the request.\n", sdk.ShowPairingCode(code))
		return nil, errors.New("the codes differ: someone else's machine redeemed the invite")
	}
	fmt.Fprintln(o.Out, "Codes match. Waiting for central's operator to approve (fluxctl fleet approve REQUEST --code CODE)...")
	for {
		res, err := c.ConfirmPairing(ctx, nonce)
		switch {
		case sdk.IsNotFound(err):
			return nil, errors.New("central's operator rejected this node, or the request expired (15 minutes): ask for a new invite")
		case err != nil:
			var ce *sdk.ConnectError
			if !errors.As(err, &ce) {
				return nil, fmt.Errorf("confirm the enrollment: %w", err)
			}
		case res.State == sdk.PairingAdmitted:
			cred := &Credential{CentralURL: o.CentralURL, Node: o.Node, MemberID: res.MemberID, Credential: res.Credential, EnrolledAt: time.Now().UTC()}
			if err := SaveCredential(o.StateDir, cred); err != nil {
				return nil, fmt.Errorf("central admitted this node, but its credential could not be saved (remove the node in central and enroll again): %w", err)
			}
			fmt.Fprintf(o.Out, "Enrolled: node %s's credential is in %s (mode 0600).\n", o.Node, filepath.Join(o.StateDir, CredentialFile))
			return cred, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

func stripSpaces(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
			out = append(out, s[i])
		}
	}
	return string(out)
}
