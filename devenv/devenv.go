// Package devenv runs a whole FluxVM on one machine for a newcomer
// (`fluxvm-agent dev`): central on an embedded etcd, a node agent reporting
// to it, a launchable image in the catalog and a demo tenant. Everything
// lives in one state directory, so a restart brings back the same tokens,
// tenant and VMs.
package devenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/agent"
	"github.com/fluxvm/fluxvm/agent/config"
	"github.com/fluxvm/fluxvm/agent/link"
	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Defaults of Options.
const (
	DefaultListen     = central.DefaultListen
	DefaultNodeListen = config.DefaultListen
)

// Names of what dev sets up.
const (
	// NodeName is the local node's name in the fleet.
	NodeName = "dev"
	// TenantName is the demo tenant.
	TenantName = "demo"
	// QEMUImage is the catalog name of the guest image when QEMU works.
	QEMUImage = "debian-minimal"
	// SimImage is the catalog name of the placeholder image the sim driver
	// "boots" when QEMU does not work here.
	SimImage = "sim-linux"
	// StateFile holds the tokens, mode 0600, in the state directory.
	StateFile = "dev.json"
	// LogFile receives central's and the node's logs.
	LogFile = "dev.log"
)

// demoQuota is the most the demo tenant may use; fitQuota lowers it to what
// the dev node holds, so each refusal the demo meets is the quota's, with a
// hint that fits.
var demoQuota = sdk.Quotas{MaxVMs: 5, MaxVCPUs: 8, MaxMemoryMiB: 8192}

// heartbeatInterval is short so that the node is up a moment after start
// and the first heartbeat that carries its drivers comes soon.
const heartbeatInterval = 2 * time.Second

// Options configure Run.
type Options struct {
	// StateDir holds everything: tokens, central's etcd, the node's state,
	// the logs (DefaultStateDir when empty).
	StateDir string
	// Reset wipes StateDir first.
	Reset bool
	// Listen is central's host:port (DefaultListen when empty).
	Listen string
	// NodeListen is the node API's host:port (DefaultNodeListen when empty).
	NodeListen string
	// Executable is the fluxvm-agent binary, which runs the built-in
	// plugins; BuiltinPlugins are their names.
	Executable     string
	BuiltinPlugins []string
	Version        string
	// LogLevel of the log file (trace, debug, info, warn, error).
	LogLevel string
	// Out receives what a person reads: where things are, the tokens and
	// the commands to try.
	Out io.Writer
}

// DefaultStateDir is /var/lib/fluxvm-dev for root and ~/.fluxvm-dev for
// anyone else.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/fluxvm-dev"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".fluxvm-dev")
	}
	return filepath.Join(os.TempDir(), "fluxvm-dev")
}

// devState is StateFile: what must stay the same across restarts.
type devState struct {
	// FleetToken is the operator's token.
	FleetToken string `json:"fleet_token"`
	// NodeToken is the node API's own admin token; the node reaches
	// central with the credential it got by enrolling. Empty in a state
	// dir from before dev enrolled its node: that node keeps the
	// operator's token for both, as it was set up.
	NodeToken string `json:"node_token,omitempty"`
	// TenantID and TenantToken are the demo tenant's.
	TenantID    string `json:"tenant_id,omitempty"`
	TenantToken string `json:"tenant_token,omitempty"`
}

// Run sets up and runs the dev FluxVM until ctx ends. VMs keep running
// after it returns; the next Run picks them up.
func Run(ctx context.Context, opts Options) error {
	if opts.StateDir == "" {
		opts.StateDir = DefaultStateDir()
	}
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.NodeListen == "" {
		opts.NodeListen = DefaultNodeListen
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	out := opts.Out
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", opts.StateDir, err)
	}
	// The node's config refuses relative paths, and VM sockets live under
	// the directory: resolve it once.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir %s is not writable (%v); pick another with -state-dir", dir, err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if opts.Reset {
		stopped, err := reset(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "reset: wiped %s", dir)
		if stopped > 0 {
			fmt.Fprintf(out, " and stopped %d VM(s) the last run left running", stopped)
		}
		fmt.Fprintln(out)
	}
	// Say which port is taken before etcd and the plugins start.
	if err := checkFree(opts.Listen, "-listen"); err != nil {
		return err
	}
	if err := checkFree(opts.NodeListen, "-node-listen"); err != nil {
		return err
	}

	st, err := loadState(dir)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("state dir %s is not writable (%v); pick another with -state-dir", dir, err)
	}
	defer logf.Close()
	level := hclog.LevelFromString(opts.LogLevel)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	logger := func(name string) hclog.Logger {
		return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: logf})
	}
	plugin, why := chooseDriver()

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logs := filepath.Join(dir, LogFile)
	started := time.Now()
	centralUp := make(chan string, 1)
	centralRun := goRun(func() error {
		return central.Run(ctx, central.Options{
			Listen: opts.Listen, StateDir: filepath.Join(dir, "central"), FleetToken: st.FleetToken,
			HeartbeatInterval: heartbeatInterval, Version: opts.Version, Logger: logger("central"),
			Listening: func(addr string) { centralUp <- addr },
		})
	})
	var centralAddr string
	select {
	case centralAddr = <-centralUp:
	case <-centralRun.done:
		return inUse(centralRun.err, opts.Listen, "-listen")
	}
	centralURL := "http://" + loopback(centralAddr)
	nodeRun := &running{done: make(chan struct{})} // until the node starts
	close(nodeRun.done)
	// stop ends central and the node (through ctx) and waits for both.
	stop := func() {
		cancel()
		<-nodeRun.done
		<-centralRun.done
	}
	defer stop()

	if st.NodeToken != "" {
		cred, err := link.LoadCredential(filepath.Join(dir, "node"))
		if err == nil && cred == nil {
			err = enrollNode(ctx, centralURL, st.FleetToken, filepath.Join(dir, "node"), opts.Version)
		}
		if err != nil {
			if parent.Err() != nil {
				return nil
			}
			return fmt.Errorf("enroll the node into central: %w (logs: %s; -reset starts afresh)", err, logs)
		}
	}
	cfgPath, err := writeNodeConfig(dir, opts.NodeListen, centralURL, st, plugin)
	if err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	nodeUp := make(chan string, 1)
	nodeRun = goRun(func() error {
		return agent.Run(ctx, cfg, agent.Options{
			Executable: opts.Executable, BuiltinPlugins: opts.BuiltinPlugins, Version: opts.Version,
			Logger: logger("agent"), Listening: func(addr string) { nodeUp <- addr },
		})
	})
	var nodeAddr string
	select {
	case nodeAddr = <-nodeUp:
	case <-nodeRun.done:
		return inUse(nodeRun.err, opts.NodeListen, "-node-listen")
	case <-centralRun.done:
		stop()
		return early(parent, centralRun, nodeRun, logs)
	}
	nodeURL := "http://" + loopback(nodeAddr)

	op := &caller{base: centralURL, token: st.FleetToken}
	catalogImage, err := setUp(ctx, op, dir, plugin, st)
	if err == nil {
		err = waitNode(ctx, op, started, centralRun, nodeRun)
	}
	if parent.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		return fmt.Errorf("%w (logs: %s)", err, logs)
	}
	driverLine := describeDriver(ctx, nodeURL, st.nodeAdmin(), plugin, why)
	if parent.Err() != nil {
		return nil
	}

	quota, err := fitQuota(ctx, op, st.TenantID)
	var prices string
	if err == nil {
		prices, err = samplePrices(ctx, op)
	}
	var name string
	if err == nil {
		name, err = freeName(ctx, op, st.TenantToken)
	}
	if parent.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w (logs: %s)", err, logs)
	}
	fmt.Fprint(out, banner{dir: dir, logs: logs, driver: driverLine, central: centralURL, node: nodeURL,
		operator: st.FleetToken, nodeToken: st.nodeAdmin(), tenant: st.TenantToken, quota: quota, image: catalogImage, prices: prices, vm: name,
		sim: plugin == "sim", fluxctlDir: fluxctlDir(opts.Executable)}.String())

	select {
	case <-parent.Done():
	case <-nodeRun.done:
	case <-centralRun.done:
	}
	stop()
	if err := early(parent, centralRun, nodeRun, logs); err != nil {
		return err
	}
	fmt.Fprintln(out, "FluxVM dev stopped. VMs keep running; rerun fluxvm-agent dev to pick them up.")
	return nil
}

// early is the error of central or the node agent having stopped by
// itself (nil when parent ended: a normal stop). Call it once both are done.
func early(parent context.Context, central, node *running, logs string) error {
	if parent.Err() != nil {
		return nil
	}
	var why []string
	if central.err != nil {
		why = append(why, "central: "+central.err.Error())
	}
	if node.err != nil {
		why = append(why, "node agent: "+node.err.Error())
	}
	if len(why) == 0 {
		why = append(why, "central or the node agent stopped by itself")
	}
	return fmt.Errorf("%s (logs: %s)", strings.Join(why, "; "), logs)
}

// chooseDriver picks the node's plugin: qemu when QEMU and the guest image
// are here, else sim, with the reason.
func chooseDriver() (plugin, why string) {
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			return "sim", bin + " not found: apt-get install qemu-system-x86 qemu-utils (or make deps)"
		}
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		return "sim", err.Error()
	}
	return "qemu", ""
}

// fluxctlDir is the directory to put on PATH for fluxctl: the one beside
// this binary when make dev built both into bin/ ("" when there is none, and
// fluxctl must already be on PATH).
func fluxctlDir(executable string) string {
	if executable == "" {
		return ""
	}
	dir := filepath.Dir(executable)
	if fi, err := os.Stat(filepath.Join(dir, "fluxctl")); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return dir
	}
	return ""
}

// describeDriver is the line that says which driver the node runs and why:
// for QEMU the accelerator verdict from the node's health (waiting a little
// for the KVM probe), for sim why QEMU cannot be used.
func describeDriver(ctx context.Context, nodeURL, token, plugin, why string) string {
	if plugin == "sim" {
		return "node: sim driver, simulated VMs (" + why + ")"
	}
	nc, err := sdk.NewNodeClient(nodeURL, sdk.WithToken(token))
	if err != nil {
		return "node: qemu driver"
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, err := nc.Health(ctx)
		if err == nil {
			for _, d := range h.Drivers {
				if d.Name != "qemu" {
					continue
				}
				accel := d.Attributes["qemu.accel"]
				switch {
				case d.Health != "healthy":
					return fmt.Sprintf("node: qemu driver, %s (%s)", d.Health, d.Description)
				case accel == "kvm":
					return "node: qemu driver (KVM)"
				case accel == "tcg":
					return "node: qemu driver (TCG, slower than KVM: " + strings.TrimSuffix(d.Attributes["qemu.accel_reason"], "; using TCG") + ")"
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "node: qemu driver (still probing KVM)"
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeAdmin is the node API's admin token.
func (st *devState) nodeAdmin() string {
	if st.NodeToken != "" {
		return st.NodeToken
	}
	return st.FleetToken
}

// enrollNode pairs dev's node with central as fluxvm-agent node enroll
// does, dev playing both people: it mints a node invite with the operator's
// token, redeems it as the node, approves the request central shows with its
// code, and the node checks that code against its own before it takes the
// credential into its state dir.
func enrollNode(ctx context.Context, centralURL, operatorToken, stateDir, version string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	op, err := sdk.NewFleetClient(centralURL, sdk.WithToken(operatorToken))
	if err != nil {
		return err
	}
	inv, err := op.CreateFleetInvite(ctx, sdk.PairNode)
	if err != nil {
		return fmt.Errorf("mint a node invite: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	// The node prints its code first; of the requests central lists for
	// this node (an enrollment cut short may have left one), dev approves
	// the one showing that code.
	var shown bytes.Buffer
	_, err = link.Enroll(ctx, link.EnrollOptions{
		CentralURL: centralURL, Node: NodeName, Invite: inv.Invite, StateDir: stateDir,
		Out: &shown, Poll: 100 * time.Millisecond, Version: version,
		OwnerCode: func() (string, error) {
			list, err := op.ListPairingRequests(ctx)
			if err != nil {
				return "", fmt.Errorf("list pairing requests: %w", err)
			}
			for _, r := range list.Requests {
				if r.Name == NodeName && r.Kind == sdk.PairNode && strings.Contains(shown.String(), "Confirmation code: "+sdk.ShowPairingCode(r.Code)+"\n") {
					if _, err := op.ApprovePairing(ctx, r.ID, r.Code); err != nil {
						return "", fmt.Errorf("approve the enrollment: %w", err)
					}
					return r.Code, nil
				}
			}
			return "", fmt.Errorf("central lists no enrollment request of %s", NodeName)
		},
	})
	return err
}

// writeNodeConfig writes the node's HCL file into the state dir, so a
// person can read what dev runs; it is rewritten on every start.
func writeNodeConfig(dir, listen, centralURL string, st *devState, plugin string) (string, error) {
	imageDirs := []string{agent.DefaultImageDir, filepath.Join(dir, "images")}
	if d := filepath.Dir(image.DefaultDir()); plugin == "qemu" && d != agent.DefaultImageDir {
		imageDirs = append(imageDirs, d)
	}
	// An enrolled node reaches central with the credential in its state
	// dir (central-credential.json), and central reaches it only through
	// the channel the node opens.
	adminNote := "The node API's own admin token (fluxctl vm ... --node URL --token it)."
	centralToken := ""
	if st.NodeToken == "" {
		adminNote = "Central's fleet token: central calls this node with it (a state dir from before dev enrolled its node)."
		centralToken = fmt.Sprintf("\n  token = %q", st.FleetToken)
	}
	quoted := make([]string, len(imageDirs))
	for i, d := range imageDirs {
		quoted[i] = strconv.Quote(d)
	}
	hcl := fmt.Sprintf(`# Written by fluxvm-agent dev on every start: edits here are overwritten.
name      = %q
state_dir = %q
listen    = %q

tokens {
  # %s
  admin = [%q]
}

policy {
  allowed_image_dirs = [%s]
}

plugin %q {}

central {
  url   = %q%s
}
`, NodeName, filepath.Join(dir, "node"), listen, adminNote, st.nodeAdmin(), strings.Join(quoted, ", "), plugin, centralURL, centralToken)
	path := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o600); err != nil {
		return "", fmt.Errorf("write node config: %w", err)
	}
	return path, nil
}

// setUp puts the image into the catalog (and takes the other driver's out,
// so the catalog lists only what launches here) and makes sure the demo
// tenant exists with a token that works. It returns the image's name.
func setUp(ctx context.Context, op *caller, dir, plugin string, st *devState) (string, error) {
	im := sdk.Image{Name: QEMUImage, DisplayName: "Debian minimal (FluxVM guest image)", GuestOS: store.GuestLinux,
		Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 512}
	other := SimImage
	if plugin == "sim" {
		placeholder := filepath.Join(dir, "images", SimImage+".img")
		if err := os.MkdirAll(filepath.Dir(placeholder), 0o700); err != nil {
			return "", fmt.Errorf("sim image: %w", err)
		}
		if err := os.WriteFile(placeholder, []byte("a placeholder disk: the sim driver only checks that it exists\n"), 0o600); err != nil {
			return "", fmt.Errorf("sim image: %w", err)
		}
		im = sdk.Image{Name: SimImage, DisplayName: "Simulated Linux (sim driver)", GuestOS: store.GuestLinux,
			Image: placeholder, VCPUs: 1, MemoryMiB: 512}
		other = QEMUImage
	}
	if _, err := op.do(ctx, "PUT", "/fleet/images/"+im.Name, op.token, im, nil, 200, 201); err != nil {
		return "", fmt.Errorf("put image %s into the catalog: %w", im.Name, err)
	}
	if _, err := op.do(ctx, "DELETE", "/fleet/images/"+other, op.token, nil, nil, 204, 404); err != nil {
		return "", fmt.Errorf("remove image %s from the catalog: %w", other, err)
	}
	return im.Name, ensureTenant(ctx, op, dir, st)
}

// ensureTenant makes the demo tenant once and keeps its token in dev.json.
// A tenant deleted by hand is made again; one whose token no longer works
// (rotated by hand, or dev.json lost) gets a new token.
func ensureTenant(ctx context.Context, op *caller, dir string, st *devState) error {
	var withToken struct {
		Tenant struct {
			ID string `json:"id"`
		} `json:"tenant"`
		Token string `json:"token"`
	}
	save := func() error {
		st.TenantID, st.TenantToken = withToken.Tenant.ID, withToken.Token
		return saveState(dir, st)
	}
	rotate := func(ref string) error {
		if _, err := op.do(ctx, "POST", "/fleet/tenants/"+ref+"/rotate-token", op.token, nil, &withToken, 200); err != nil {
			return fmt.Errorf("new token for tenant %s: %w", TenantName, err)
		}
		return save()
	}
	if st.TenantID != "" {
		code, err := op.do(ctx, "GET", "/fleet/tenants/"+st.TenantID, op.token, nil, nil, 200, 404)
		if err != nil {
			return fmt.Errorf("read tenant %s: %w", TenantName, err)
		}
		if code == 200 {
			code, err := op.do(ctx, "GET", "/fleet/tenants/me", st.TenantToken, nil, nil, 200, 401)
			if err != nil {
				return fmt.Errorf("check the token of tenant %s: %w", TenantName, err)
			}
			if code == 200 {
				return nil
			}
			return rotate(st.TenantID)
		}
	}
	code, err := op.do(ctx, "POST", "/fleet/tenants", op.token, map[string]any{"name": TenantName, "quota": demoQuota}, &withToken, 201, 409)
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", TenantName, err)
	}
	if code == 409 { // made by an earlier run whose dev.json is gone
		return rotate(TenantName)
	}
	return save()
}

// waitNode waits until the node has heartbeated since started and reported
// a driver, so a VM can be placed on it.
func waitNode(ctx context.Context, op *caller, started time.Time, central, node *running) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n store.Node
		code, err := op.do(ctx, "GET", "/fleet/nodes/"+NodeName, op.token, nil, &n, 200, 404)
		if err == nil && code == 200 && n.State == store.NodeUp && n.LastHeartbeat.After(started) && len(n.GuestOS) > 0 {
			return nil
		}
		select {
		case <-node.done:
			return fmt.Errorf("node agent stopped: %v", node.err)
		case <-central.done:
			return fmt.Errorf("central stopped: %v", central.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not report to central within 90s", NodeName)
		}
	}
}

// caller makes the few fleet API calls dev needs.
type caller struct {
	base, token string
}

// do calls the API with token and decodes a 2xx answer into out. A status
// not in want is an error carrying central's message and hint.
func (c *caller) do(ctx context.Context, method, path, token string, in, out any, want ...int) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	for _, w := range want {
		if resp.StatusCode != w {
			continue
		}
		if out != nil && w/100 == 2 && len(data) > 0 {
			if err := json.Unmarshal(data, out); err != nil {
				return w, fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
		return w, nil
	}
	var e struct{ Error, Hint string }
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, &sdk.APIError{Status: resp.StatusCode, Message: e.Error, Hint: e.Hint}
}

// loadState reads dev.json, or makes a new fleet token and writes it.
func loadState(dir string) (*devState, error) {
	path := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		n := make([]byte, 32)
		if _, err := rand.Read(n); err != nil {
			return nil, err
		}
		st := &devState{FleetToken: hex.EncodeToString(b), NodeToken: hex.EncodeToString(n)}
		return st, saveState(dir, st)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var st devState
	if err := json.Unmarshal(data, &st); err != nil || len(st.FleetToken) < config.MinTokenLength {
		return nil, fmt.Errorf("%s is damaged (%v); start afresh with -reset", path, err)
	}
	return &st, nil
}

// saveState writes dev.json atomically, mode 0600: it holds tokens.
func saveState(dir string, st *devState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, StateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("state dir %s is not writable (%v); pick another with -state-dir", dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}

// lockDir keeps a second dev off the same state directory.
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "dev.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir %s is not writable (%v); pick another with -state-dir", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another fluxvm-agent dev (pid %s) uses %s; stop it, or pick another -state-dir",
			strings.TrimSpace(string(pid)), dir)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// reset empties the state directory but for its lock. QEMU processes of
// VMs the last run left running are killed first: their disks are about to
// go, and nothing would know them any more.
func reset(dir string) (stopped int, err error) {
	stopped = KillVMsUnder(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return stopped, fmt.Errorf("reset %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Name() == "dev.lock" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return stopped, fmt.Errorf("reset %s: %w", dir, err)
		}
	}
	return stopped, nil
}

// KillVMsUnder SIGKILLs the QEMU processes whose command line names a path
// under dir, and returns how many. Where /proc is missing it finds none.
func KillVMsUnder(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "qemu-system") || !strings.Contains(string(data), dir+string(filepath.Separator)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// checkFree says which flag to change when addr cannot be listened on.
func checkFree(addr, flag string) error {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return inUse(err, addr, flag)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return ln.Close()
}

// inUse rewords "address already in use" into what to do about it; other
// errors pass unchanged.
func inUse(err error, addr, flag string) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s is in use (another fluxvm-agent dev, central or node?); stop that, or pick another port with %s", addr, flag)
	}
	return err
}

// running is central or the node agent, run in a goroutine.
type running struct {
	done chan struct{} // closed when it returned
	err  error         // what it returned; read after done
}

func goRun(f func() error) *running {
	r := &running{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = f()
	}()
	return r
}

// loopback turns a listen address into one this machine can call: an
// unspecified host becomes 127.0.0.1.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
