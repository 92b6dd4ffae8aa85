// Package config reads the node agent's HCL configuration file
// (`fluxvm-agent node -config agent.hcl`) into a validated Config.
// Plugin `config {}` blocks stay undecoded until the plugin reports its schema;
// DecodePluginConfig then turns one into the JSON that SetConfig expects.
package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// DefaultListen is the node API address used when the file sets no `listen`.
const DefaultListen = "127.0.0.1:7777"

// MinTokenLength is the shortest bearer token accepted. Sixteen characters
// keep an operator from pasting a placeholder like "changeme" into production.
const MinTokenLength = 16

// Config is the node agent's configuration, validated.
type Config struct {
	// Name identifies the node to central and in logs; the hostname by default.
	Name string
	// StateDir holds the agent's store and the VM workspaces; absolute.
	StateDir string
	// Listen is the node API's host:port, or "unix:" and the absolute path
	// of a unix socket (mode 0600), which only this machine reaches: then
	// central reaches the node only through its channel (see ListenSocket).
	Listen string
	// Labels are free-form node labels the scheduler can match on.
	Labels map[string]string
	// PluginDir holds third-party plugin binaries; empty for none.
	PluginDir string
	// Tokens authorise callers of the node API.
	Tokens Tokens
	// Reserved is what the scheduler must leave to the host itself.
	Reserved Reserved
	// Policy limits what tenants' VM specs may point at on this host.
	Policy Policy
	// Plugins are the `plugin "<name>"` blocks, in file order.
	Plugins []Plugin
	// Central is the control plane this node reports to; nil when absent.
	Central *Central
}

// Tokens are the bearer tokens of the node API.
type Tokens struct {
	// Admin tokens may call every endpoint.
	Admin []Secret
	// ReadOnly tokens may only make GET requests.
	ReadOnly []Secret
}

// Reserved is capacity kept back for the host.
type Reserved struct {
	// VCPUs kept for the host.
	VCPUs int64
	// MemoryMiB kept for the host.
	MemoryMiB int64
}

// Policy restricts the host resources VM specs may reference.
type Policy struct {
	// AllowedImageDirs are the absolute, cleaned directories images may come
	// from; empty allows none to be enforced here (the driver may still restrict).
	AllowedImageDirs []string
}

// Central locates the control plane.
type Central struct {
	// URL is central's base URL (http or https).
	URL string
	// Token is the operator's fleet token, the older way to authenticate
	// this node to central; empty: the node uses the credential enrollment
	// wrote to its state dir (link.LoadCredential).
	Token Secret
	// Advertise is the URL central calls this node's API at; empty: derived
	// from Listen (its host, or this machine's host name when Listen binds
	// every address).
	Advertise string
}

// Plugin is one `plugin "<name>" { config { ... } }` block. Its config body is
// kept undecoded until DecodePluginConfig gets the plugin's schema.
type Plugin struct {
	// Name is the block label: a built-in plugin's name or a binary in PluginDir.
	Name string
	// Type is the block's `type` attribute: "driver", "network", or empty
	// when the block does not say (a built-in plugin's name says it; a
	// binary in PluginDir is then a driver).
	Type string
	// TypeRange is where `type` is set, for messages about it.
	TypeRange hcl.Range
	// DeclRange is where the block is declared, for messages about it.
	DeclRange hcl.Range

	config hcl.Body // nil when the block has no config {}
}

// HasConfig reports whether the plugin block has a `config {}` block.
func (p Plugin) HasConfig() bool { return p.config != nil }

// Secret is a credential read from the file. It prints, logs and marshals as
// "[redacted]" so that a token cannot reach a log by accident; Reveal is the
// one way to get the value, for the code that compares credentials.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// SHA256 is the digest the API layer compares and stores instead of the token.
func (s Secret) SHA256() [32]byte { return sha256.Sum256([]byte(s)) }

// String redacts the secret (fmt's %v and %s, hclog).
func (s Secret) String() string { return redacted }

// GoString redacts the secret (fmt's %#v).
func (s Secret) GoString() string { return strconv.Quote(redacted) }

// LogValue redacts the secret (log/slog).
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText redacts the secret (encoding/json and friends).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// String summarises the configuration without any secret: token counts only.
func (c *Config) String() string {
	names := make([]string, len(c.Plugins))
	for i, p := range c.Plugins {
		names[i] = p.Name
	}
	central := "none"
	if c.Central != nil {
		central = c.Central.URL
	}
	return fmt.Sprintf("node %q state_dir=%s listen=%s plugins=[%s] admin_tokens=%d read_only_tokens=%d central=%s",
		c.Name, c.StateDir, c.Listen, strings.Join(names, ","), len(c.Tokens.Admin), len(c.Tokens.ReadOnly), central)
}

// Redacted returns a deep copy whose secrets are replaced by "[redacted]",
// for printing or dumping the effective configuration.
func (c *Config) Redacted() *Config {
	r := *c
	r.Labels = cloneMap(c.Labels)
	r.Tokens = Tokens{Admin: redactAll(c.Tokens.Admin), ReadOnly: redactAll(c.Tokens.ReadOnly)}
	r.Policy.AllowedImageDirs = slices.Clone(c.Policy.AllowedImageDirs)
	r.Plugins = slices.Clone(c.Plugins)
	if c.Central != nil {
		cc := *c.Central
		if cc.Token != "" {
			cc.Token = redacted
		}
		r.Central = &cc
	}
	return &r
}

func redactAll(s []Secret) []Secret {
	if s == nil {
		return nil
	}
	out := make([]Secret, len(s))
	for i := range out {
		out[i] = redacted
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// fileSchema is the file as gohcl decodes it; Parse validates it into Config.
type fileSchema struct {
	Name      *hcl.Attribute    `hcl:"name,optional"`
	StateDir  *hcl.Attribute    `hcl:"state_dir,optional"` // required, checked by hand for a better message
	Listen    *hcl.Attribute    `hcl:"listen,optional"`
	Labels    map[string]string `hcl:"labels,optional"`
	LabelsAt  hcl.Range         `hcl:"labels,attr_value_range"`
	PluginDir *hcl.Attribute    `hcl:"plugin_dir,optional"`
	Tokens    *tokensBlock      `hcl:"tokens,block"`
	Reserved  *reservedBlock    `hcl:"reserved,block"`
	Policy    *policyBlock      `hcl:"policy,block"`
	Plugins   []pluginBlock     `hcl:"plugin,block"`
	Central   *centralBlock     `hcl:"central,block"`
}

type tokensBlock struct {
	Admin    *hcl.Attribute `hcl:"admin,optional"`
	ReadOnly *hcl.Attribute `hcl:"read_only,optional"`
	DefRange hcl.Range      `hcl:",def_range"`
}

type reservedBlock struct {
	VCPUs       *int64    `hcl:"vcpus,optional"`
	VCPUsAt     hcl.Range `hcl:"vcpus,attr_value_range"`
	MemoryMiB   *int64    `hcl:"memory_mib,optional"`
	MemoryMiBAt hcl.Range `hcl:"memory_mib,attr_value_range"`
}

type policyBlock struct {
	AllowedImageDirs *hcl.Attribute `hcl:"allowed_image_dirs,optional"`
}

type pluginBlock struct {
	Name     string             `hcl:"name,label"`
	NameAt   hcl.Range          `hcl:"name,label_range"`
	DefRange hcl.Range          `hcl:",def_range"`
	Type     *string            `hcl:"type,optional"`
	TypeAt   hcl.Range          `hcl:"type,attr_value_range"`
	Config   *pluginConfigBlock `hcl:"config,block"`
}

type pluginConfigBlock struct {
	Body hcl.Body `hcl:",remain"`
}

type centralBlock struct {
	URL     string    `hcl:"url"`
	URLAt   hcl.Range `hcl:"url,attr_value_range"`
	Token   *string   `hcl:"token,optional"`
	TokenAt hcl.Range `hcl:"token,attr_value_range"`

	Advertise   *string   `hcl:"advertise,optional"`
	AdvertiseAt hcl.Range `hcl:"advertise,attr_value_range"`
}

var pluginNameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

// The values of a plugin block's `type`.
const (
	PluginTypeDriver  = "driver"
	PluginTypeNetwork = "network"
)

// nodeNameRE admits host names, including fully qualified ones.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Load reads and parses the file at path. The error lists every problem, one
// per line, as "file:line,col-col: summary; detail".
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read agent config: %w", err)
	}
	cfg, diags := Parse(path, src)
	if diags.HasErrors() {
		return nil, DiagnosticsError(diags)
	}
	return cfg, nil
}

// Parse parses and validates src, naming it filename in diagnostics. The
// Config is nil when the diagnostics hold an error.
func Parse(filename string, src []byte) (*Config, hcl.Diagnostics) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, sortDiags(diags)
	}
	var raw fileSchema
	diags = append(diags, gohcl.DecodeBody(file.Body, nil, &raw)...)
	if diags.HasErrors() {
		return nil, sortDiags(diags)
	}
	missing := file.Body.MissingItemRange()
	cfg, vdiags := validate(&raw, missing)
	diags = append(diags, vdiags...)
	if diags.HasErrors() {
		return nil, sortDiags(diags)
	}
	return cfg, diags
}

// validate turns the decoded file into a Config, reporting every problem
// against the source range it comes from.
func validate(raw *fileSchema, missing hcl.Range) (*Config, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	bad := func(at hcl.Range, summary, detail string, args ...any) {
		at2 := at
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  summary,
			Detail:   fmt.Sprintf(detail, args...),
			Subject:  &at2,
		})
	}
	cfg := &Config{Listen: DefaultListen, Labels: raw.Labels}

	if raw.Name != nil {
		name, d := decodeString(raw.Name)
		diags = append(diags, d...)
		cfg.Name = name
		if !d.HasErrors() && (!nodeNameRE.MatchString(name) || len(name) > 253) {
			bad(raw.Name.Expr.Range(), "Invalid node name",
				"name %q must start with a letter or digit and contain only letters, digits, '.', '_' and '-' (at most 253 characters).", name)
		}
	} else {
		host, err := os.Hostname()
		if err != nil || host == "" {
			bad(missing, "Missing node name", "The host name cannot be read (%v); set name = \"...\".", err)
		}
		cfg.Name = host
	}

	if raw.StateDir == nil {
		bad(missing, "Missing required argument",
			`The argument "state_dir" is required: the absolute directory for the agent's store and VM workspaces, e.g. state_dir = "/var/lib/fluxvm".`)
	} else {
		dir, d := decodeString(raw.StateDir)
		diags = append(diags, d...)
		if !d.HasErrors() {
			if !filepath.IsAbs(dir) {
				bad(raw.StateDir.Expr.Range(), "Invalid state_dir", "state_dir must be an absolute path, got %q.", dir)
			}
			cfg.StateDir = filepath.Clean(dir)
		}
	}

	if raw.Listen != nil {
		listen, d := decodeString(raw.Listen)
		diags = append(diags, d...)
		if !d.HasErrors() {
			if path, ok := strings.CutPrefix(listen, "unix:"); ok {
				if err := checkSocketPath(path); err != nil {
					bad(raw.Listen.Expr.Range(), "Invalid listen socket", "listen %q: %v; use unix: and an absolute path, e.g. %q.", listen, err, "unix:/run/fluxvm/api.sock")
				}
				listen = "unix:" + filepath.Clean(path)
			} else if err := checkHostPort(listen); err != nil {
				bad(raw.Listen.Expr.Range(), "Invalid listen address", "listen %q: %v; use host:port, e.g. %q, or unix:/path/to/api.sock.", listen, err, DefaultListen)
			}
			cfg.Listen = listen
		}
	}

	for k := range raw.Labels {
		if strings.TrimSpace(k) == "" {
			bad(raw.LabelsAt, "Invalid label", "Label names must not be empty.")
		}
	}

	if raw.PluginDir != nil {
		dir, d := decodeString(raw.PluginDir)
		diags = append(diags, d...)
		if !d.HasErrors() {
			if !filepath.IsAbs(dir) {
				bad(raw.PluginDir.Expr.Range(), "Invalid plugin_dir", "plugin_dir must be an absolute path, got %q.", dir)
			}
			cfg.PluginDir = filepath.Clean(dir)
		}
	}

	// Tokens. Messages name a token by its position, never by its value.
	if raw.Tokens == nil {
		bad(missing, "Missing tokens block",
			"The node API needs at least one admin bearer token: tokens { admin = [\"<%d+ random characters>\"] }.", MinTokenLength)
	} else {
		seen := map[string]string{} // token -> where it was first seen
		collect := func(attr *hcl.Attribute, list string) []Secret {
			if attr == nil {
				return nil
			}
			vals, ranges, d := decodeStrings(attr)
			diags = append(diags, d...)
			out := make([]Secret, 0, len(vals))
			for i, v := range vals {
				where := fmt.Sprintf("tokens.%s[%d]", list, i)
				switch {
				case len(v) < MinTokenLength:
					bad(ranges[i], "Token too short", "%s has %d characters; bearer tokens need at least %d.", where, len(v), MinTokenLength)
				case strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
					bad(ranges[i], "Invalid token", "%s contains whitespace or control characters, which an Authorization header cannot carry.", where)
				}
				if first, dup := seen[v]; dup {
					bad(ranges[i], "Duplicate token", "%s repeats %s; a token must appear once, in admin or in read_only.", where, first)
				} else {
					seen[v] = where
				}
				out = append(out, Secret(v))
			}
			return out
		}
		cfg.Tokens.Admin = collect(raw.Tokens.Admin, "admin")
		cfg.Tokens.ReadOnly = collect(raw.Tokens.ReadOnly, "read_only")
		if len(cfg.Tokens.Admin) == 0 && !diags.HasErrors() {
			bad(raw.Tokens.DefRange, "No admin token",
				"tokens.admin must list at least one bearer token, or nobody can manage this node.")
		}
	}

	if r := raw.Reserved; r != nil {
		if r.VCPUs != nil {
			if *r.VCPUs < 0 {
				bad(r.VCPUsAt, "Invalid reserved.vcpus", "reserved.vcpus must not be negative, got %d.", *r.VCPUs)
			}
			cfg.Reserved.VCPUs = *r.VCPUs
		}
		if r.MemoryMiB != nil {
			if *r.MemoryMiB < 0 {
				bad(r.MemoryMiBAt, "Invalid reserved.memory_mib", "reserved.memory_mib must not be negative, got %d.", *r.MemoryMiB)
			}
			cfg.Reserved.MemoryMiB = *r.MemoryMiB
		}
	}

	if raw.Policy != nil && raw.Policy.AllowedImageDirs != nil {
		dirs, ranges, d := decodeStrings(raw.Policy.AllowedImageDirs)
		diags = append(diags, d...)
		for i, dir := range dirs {
			if !filepath.IsAbs(dir) {
				bad(ranges[i], "Invalid allowed_image_dirs", "policy.allowed_image_dirs[%d] must be an absolute path, got %q.", i, dir)
				continue
			}
			cfg.Policy.AllowedImageDirs = append(cfg.Policy.AllowedImageDirs, filepath.Clean(dir))
		}
	}

	declared := map[string]hcl.Range{}
	for _, p := range raw.Plugins {
		if !pluginNameRE.MatchString(p.Name) {
			bad(p.NameAt, "Invalid plugin name", "Plugin name %q must match [a-z0-9_-]+.", p.Name)
		}
		if first, dup := declared[p.Name]; dup {
			bad(p.DefRange, "Duplicate plugin block", "Plugin %q was already configured at %s.", p.Name, first)
			continue
		}
		declared[p.Name] = p.DefRange
		pl := Plugin{Name: p.Name, DeclRange: p.DefRange}
		if p.Type != nil {
			switch *p.Type {
			case PluginTypeDriver, PluginTypeNetwork:
				pl.Type, pl.TypeRange = *p.Type, p.TypeAt
			default:
				bad(p.TypeAt, "Invalid plugin type", "Plugin %q has type %q; use \"driver\" (a hypervisor) or \"network\" (a network plugin such as netns).", p.Name, *p.Type)
			}
		}
		if p.Config != nil {
			pl.config = p.Config.Body
		}
		cfg.Plugins = append(cfg.Plugins, pl)
	}

	if c := raw.Central; c != nil {
		u, err := url.Parse(c.URL)
		switch {
		case err != nil:
			bad(c.URLAt, "Invalid central.url", "central.url %q does not parse: %v.", c.URL, errors.Unwrap(err))
		case u.Scheme != "http" && u.Scheme != "https":
			bad(c.URLAt, "Invalid central.url", "central.url %q must start with http:// or https://.", c.URL)
		case u.Host == "":
			bad(c.URLAt, "Invalid central.url", "central.url %q has no host.", c.URL)
		}
		cfg.Central = &Central{URL: c.URL}
		if c.Token != nil {
			if len(*c.Token) < MinTokenLength {
				bad(c.TokenAt, "Token too short", "central.token has %d characters; tokens need at least %d.", len(*c.Token), MinTokenLength)
			}
			cfg.Central.Token = Secret(*c.Token)
		}
		if c.Advertise != nil {
			u, err := url.Parse(*c.Advertise)
			switch {
			case err != nil:
				bad(c.AdvertiseAt, "Invalid central.advertise", "central.advertise %q does not parse: %v.", *c.Advertise, errors.Unwrap(err))
			case u.Scheme != "http" && u.Scheme != "https":
				bad(c.AdvertiseAt, "Invalid central.advertise", "central.advertise %q must start with http:// or https://.", *c.Advertise)
			case u.Host == "":
				bad(c.AdvertiseAt, "Invalid central.advertise", "central.advertise %q has no host.", *c.Advertise)
			}
			cfg.Central.Advertise = *c.Advertise
		}
	}

	if diags.HasErrors() {
		return nil, diags
	}
	return cfg, diags
}

// MaxSocketPath is the longest unix socket path Linux takes (sun_path is
// 108 bytes with the terminating NUL).
const MaxSocketPath = 107

// checkSocketPath accepts an absolute path short enough for a unix socket.
func checkSocketPath(p string) error {
	switch {
	case p == "":
		return errors.New("no socket path follows unix")
	case strings.HasPrefix(p, "//"):
		return errors.New("write unix:/path (one slash), not a URL")
	case !filepath.IsAbs(p):
		return fmt.Errorf("socket path %q is not absolute", p)
	case len(filepath.Clean(p)) > MaxSocketPath:
		return fmt.Errorf("socket path has %d bytes; unix sockets take at most %d", len(filepath.Clean(p)), MaxSocketPath)
	}
	return nil
}

// ListenSocket is the unix socket path the node API listens on, or "" when
// it listens on TCP.
func (c *Config) ListenSocket() string {
	p, _ := strings.CutPrefix(c.Listen, "unix:")
	if p == c.Listen {
		return ""
	}
	return p
}

// checkHostPort accepts "host:port" and ":port" with a numeric port 1-65535.
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

func decodeString(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	var s string
	diags := gohcl.DecodeExpression(attr.Expr, nil, &s)
	return s, diags
}

// decodeStrings decodes a list of strings and returns, for each element, the
// range of its own expression when the source is a literal list, so messages
// point at the offending element.
func decodeStrings(attr *hcl.Attribute) ([]string, []hcl.Range, hcl.Diagnostics) {
	var vals []string
	diags := gohcl.DecodeExpression(attr.Expr, nil, &vals)
	if diags.HasErrors() {
		return nil, nil, diags
	}
	ranges := make([]hcl.Range, len(vals))
	elems, d := hcl.ExprList(attr.Expr)
	for i := range ranges {
		if !d.HasErrors() && len(elems) == len(vals) {
			ranges[i] = elems[i].Range()
		} else {
			ranges[i] = attr.Expr.Range()
		}
	}
	return vals, ranges, diags
}

// DiagnosticsError turns diagnostics into an error listing each one on its own
// line as "file:line,col-col: summary; detail", or nil if none is an error.
// Source snippets are left out on purpose: the line may hold a token.
func DiagnosticsError(diags hcl.Diagnostics) error {
	if !diags.HasErrors() {
		return nil
	}
	lines := make([]string, 0, len(diags))
	for _, d := range sortDiags(diags) {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		if d.Subject != nil {
			msg = d.Subject.String() + ": " + msg
		}
		lines = append(lines, msg)
	}
	return errors.New(strings.Join(lines, "\n"))
}

// sortDiags orders diagnostics by position so messages read top to bottom
// (gohcl reports attributes in map order).
func sortDiags(diags hcl.Diagnostics) hcl.Diagnostics {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil && b.Subject == nil:
			return 0
		case a.Subject == nil:
			return 1
		case b.Subject == nil:
			return -1
		}
		if c := strings.Compare(a.Subject.Filename, b.Subject.Filename); c != 0 {
			return c
		}
		return a.Subject.Start.Byte - b.Subject.Start.Byte
	})
	return diags
}
