package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/fluxvm/fluxvm/drivers/qemu"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
)

const (
	adminTok = "admin-token-0123456789abcdef"
	readTok  = "read-token-0123456789abcdef"
)

// minimal is the smallest valid file; negative cases edit one thing in it.
const minimal = `state_dir = "/var/lib/fluxvm"
tokens {
  admin = ["` + adminTok + `"]
}
`

func TestParseFullFile(t *testing.T) {
	src := `name      = "mac-mini-01"
state_dir = "/var/lib/fluxvm/"
listen    = "0.0.0.0:7777"
labels    = { rack = "a1", zone = "eu" }
plugin_dir = "/usr/lib/fluxvm/plugins"
tokens {
  admin     = ["` + adminTok + `"]
  read_only = ["` + readTok + `"]
}
reserved {
  vcpus      = 1
  memory_mib = 1024
}
policy { allowed_image_dirs = ["/var/cache/fluxvm/images/", "/srv/images"] }
plugin "qemu" {
  config { accel = "auto" }
}
plugin "sim" {}
central {
  url       = "https://central:7799"
  token     = "central-token-0123456789"
  advertise = "http://10.0.0.5:7777"
}
`
	cfg, diags := Parse("agent.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", DiagnosticsError(diags))
	}
	if cfg.Name != "mac-mini-01" || cfg.StateDir != "/var/lib/fluxvm" || cfg.Listen != "0.0.0.0:7777" {
		t.Errorf("name/state_dir/listen = %q %q %q", cfg.Name, cfg.StateDir, cfg.Listen)
	}
	if cfg.Labels["rack"] != "a1" || cfg.Labels["zone"] != "eu" || len(cfg.Labels) != 2 {
		t.Errorf("labels = %v", cfg.Labels)
	}
	if cfg.PluginDir != "/usr/lib/fluxvm/plugins" {
		t.Errorf("plugin_dir = %q", cfg.PluginDir)
	}
	if len(cfg.Tokens.Admin) != 1 || cfg.Tokens.Admin[0].Reveal() != adminTok ||
		len(cfg.Tokens.ReadOnly) != 1 || cfg.Tokens.ReadOnly[0].Reveal() != readTok {
		t.Errorf("tokens not decoded: %d admin, %d read-only", len(cfg.Tokens.Admin), len(cfg.Tokens.ReadOnly))
	}
	if cfg.Reserved != (Reserved{VCPUs: 1, MemoryMiB: 1024}) {
		t.Errorf("reserved = %+v", cfg.Reserved)
	}
	if got := strings.Join(cfg.Policy.AllowedImageDirs, ","); got != "/var/cache/fluxvm/images,/srv/images" {
		t.Errorf("allowed_image_dirs = %q", got)
	}
	if len(cfg.Plugins) != 2 || cfg.Plugins[0].Name != "qemu" || !cfg.Plugins[0].HasConfig() ||
		cfg.Plugins[1].Name != "sim" || cfg.Plugins[1].HasConfig() {
		t.Errorf("plugins = %+v", cfg.Plugins)
	}
	if cfg.Plugins[0].DeclRange.Start.Line != 15 {
		t.Errorf("qemu plugin declared at line %d, want 15", cfg.Plugins[0].DeclRange.Start.Line)
	}
	if cfg.Central == nil || cfg.Central.URL != "https://central:7799" || cfg.Central.Token.Reveal() != "central-token-0123456789" || cfg.Central.Advertise != "http://10.0.0.5:7777" {
		t.Errorf("central = %+v", cfg.Central)
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, diags := Parse("agent.hcl", []byte(minimal))
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", DiagnosticsError(diags))
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != host {
		t.Errorf("name = %q, want the host name %q", cfg.Name, host)
	}
	if cfg.Listen != DefaultListen {
		t.Errorf("listen = %q, want %q", cfg.Listen, DefaultListen)
	}
	if cfg.Central != nil || cfg.Plugins != nil || cfg.Reserved != (Reserved{}) || cfg.PluginDir != "" {
		t.Errorf("unexpected non-defaults: %+v", cfg)
	}
}

// TestParseRejects checks that each mistake is reported, with the file and
// line it sits on, and that no Config comes back.
func TestParseRejects(t *testing.T) {
	tokens := "tokens {\n  admin = [\"" + adminTok + "\"]\n}\n"
	cases := []struct {
		name string
		src  string
		want []string // substrings of the error, the first one with file:line
	}{
		{"bad syntax", "state_dir = \"/x\"\ntokens {\n  admin = [\n", []string{"agent.hcl:4,1-1: Missing expression"}},
		{"unclosed string", "state_dir = \"/x\n", []string{"agent.hcl:1,"}},
		{"unknown top-level attribute", minimal + "bogus = 1\n", []string{`agent.hcl:5,1-6: Unsupported argument; An argument named "bogus" is not expected here.`}},
		{"unknown block", minimal + "network {}\n", []string{"agent.hcl:5,", `Unsupported block type`}},
		{"unknown attribute in tokens", "state_dir = \"/x\"\ntokens {\n  admin = [\"" + adminTok + "\"]\n  root = []\n}\n", []string{"agent.hcl:4,", `"root" is not expected`}},
		{"missing state_dir", tokens, []string{"agent.hcl:1,1-1: Missing required argument", "state_dir"}},
		{"relative state_dir", "state_dir = \"var/lib/fluxvm\"\n" + tokens, []string{"agent.hcl:1,13-29: Invalid state_dir", "absolute"}},
		{"state_dir not a string", "state_dir = [\"/x\"]\n" + tokens, []string{"agent.hcl:1,", "string required"}},
		{"listen without port", minimal + "listen = \"127.0.0.1\"\n", []string{"agent.hcl:5,10-21: Invalid listen address", "missing port"}},
		{"listen port out of range", minimal + "listen = \"127.0.0.1:70000\"\n", []string{"agent.hcl:5,", "1 to 65535"}},
		{"listen port not numeric", minimal + "listen = \"localhost:http\"\n", []string{"agent.hcl:5,", "port"}},
		{"listen number", minimal + "listen = 7777\n", []string{"agent.hcl:5,", "Invalid listen address"}},
		{"listen socket relative", minimal + "listen = \"unix:run/api.sock\"\n", []string{"agent.hcl:5,10-29: Invalid listen socket", "not absolute"}},
		{"listen socket empty", minimal + "listen = \"unix:\"\n", []string{"agent.hcl:5,", "Invalid listen socket", "no socket path"}},
		{"listen socket as url", minimal + "listen = \"unix:///run/api.sock\"\n", []string{"agent.hcl:5,", "Invalid listen socket", "one slash"}},
		{"listen socket too long", minimal + "listen = \"unix:/" + strings.Repeat("s", 120) + "\"\n", []string{"agent.hcl:5,", "Invalid listen socket", "at most 107"}},
		{"bad node name", minimal + "name = \"-node\"\n", []string{"agent.hcl:5,", "Invalid node name"}},
		{"no tokens block", "state_dir = \"/x\"\n", []string{"agent.hcl:1,1-1: Missing tokens block"}},
		{"no admin token", "state_dir = \"/x\"\ntokens {\n  read_only = [\"" + readTok + "\"]\n}\n", []string{"agent.hcl:2,", "No admin token"}},
		{"short token", "state_dir = \"/x\"\ntokens {\n  admin = [\"" + adminTok + "\", \"short\"]\n}\n", []string{"agent.hcl:3,44-51: Token too short", "tokens.admin[1] has 5 characters"}},
		{"empty token", "state_dir = \"/x\"\ntokens {\n  admin = [\"\"]\n}\n", []string{"agent.hcl:3,", "Token too short"}},
		{"token with a space", "state_dir = \"/x\"\ntokens {\n  admin = [\"admin token 0123456789\"]\n}\n", []string{"agent.hcl:3,", "whitespace"}},
		{"token in admin and read_only", "state_dir = \"/x\"\ntokens {\n  admin = [\"" + adminTok + "\"]\n  read_only = [\"" + adminTok + "\"]\n}\n", []string{"agent.hcl:4,", "Duplicate token", "tokens.read_only[0] repeats tokens.admin[0]"}},
		{"tokens not a list", "state_dir = \"/x\"\ntokens {\n  admin = \"" + adminTok + "\"\n}\n", []string{"agent.hcl:3,", "list of string required"}},
		{"negative vcpus", minimal + "reserved {\n  vcpus = -1\n}\n", []string{"agent.hcl:6,11-13: Invalid reserved.vcpus", "negative"}},
		{"negative memory", minimal + "reserved {\n  memory_mib = -5\n}\n", []string{"agent.hcl:6,", "Invalid reserved.memory_mib"}},
		{"fractional vcpus", minimal + "reserved {\n  vcpus = 1.5\n}\n", []string{"agent.hcl:6,", "whole number"}},
		{"vcpus as word", minimal + "reserved {\n  vcpus = \"one\"\n}\n", []string{"agent.hcl:6,", "number"}},
		{"relative image dir", minimal + "policy {\n  allowed_image_dirs = [\"/ok\", \"images\"]\n}\n", []string{"agent.hcl:6,32-40: Invalid allowed_image_dirs", "[1]"}},
		{"relative plugin_dir", minimal + "plugin_dir = \"plugins\"\n", []string{"agent.hcl:5,", "Invalid plugin_dir"}},
		{"duplicate plugin", minimal + "plugin \"qemu\" {}\nplugin \"qemu\" {}\n", []string{"agent.hcl:6,1-14: Duplicate plugin block", "agent.hcl:5,1-14"}},
		{"plugin name with capitals", minimal + "plugin \"QEMU\" {}\n", []string{"agent.hcl:5,8-14: Invalid plugin name"}},
		{"plugin without name", minimal + "plugin {}\n", []string{"agent.hcl:5,", "label"}},
		{"unknown plugin type", minimal + "plugin \"netns\" {\n  type = \"bridge\"\n}\n", []string{"agent.hcl:6,10-18: Invalid plugin type", `"network"`}},
		{"two config blocks", minimal + "plugin \"qemu\" {\n  config {}\n  config {}\n}\n", []string{"agent.hcl:7,", "Duplicate config block"}},
		{"unknown attribute in plugin block", minimal + "plugin \"qemu\" {\n  accel = \"kvm\"\n}\n", []string{"agent.hcl:6,", `"accel" is not expected`}},
		{"central url not http", minimal + "central {\n  url = \"ftp://central\"\n}\n", []string{"agent.hcl:6,9-24: Invalid central.url", "http"}},
		{"central url without host", minimal + "central {\n  url = \"https://\"\n}\n", []string{"agent.hcl:6,", "no host"}},
		{"central url garbage", minimal + "central {\n  url = \"http://[::1\"\n}\n", []string{"agent.hcl:6,", "Invalid central.url"}},
		{"central without url", minimal + "central {\n}\n", []string{"agent.hcl:5,", `"url" is required`}},
		{"central advertise not http", minimal + "central {\n  url = \"https://c:7799\"\n  advertise = \"10.0.0.5:7777\"\n}\n", []string{"agent.hcl:7,", "Invalid central.advertise"}},
		{"central short token", minimal + "central {\n  url = \"https://c:7799\"\n  token = \"x\"\n}\n", []string{"agent.hcl:7,", "central.token has 1 characters"}},
		{"variable reference", minimal + "listen = var.listen\n", []string{"agent.hcl:5,", "Variables not allowed"}},
		{"function call", minimal + "listen = upper(\"x\")\n", []string{"agent.hcl:5,", "Function calls not allowed"}},
		{"labels not a map", minimal + "labels = [\"a\"]\n", []string{"agent.hcl:5,", "map of string required"}},
		{"several problems all reported", "state_dir = \"rel\"\nlisten = \"nope\"\n" + tokens, []string{"agent.hcl:1,", "Invalid state_dir", "\nagent.hcl:2,", "Invalid listen"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse("agent.hcl", []byte(tc.src))
			if !diags.HasErrors() {
				t.Fatalf("Parse accepted:\n%s", tc.src)
			}
			if cfg != nil {
				t.Errorf("Parse returned a Config along with errors")
			}
			msg := DiagnosticsError(diags).Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
			for _, tok := range []string{adminTok, readTok} {
				if strings.Contains(msg, tok) {
					t.Errorf("error leaks a token:\n%s", msg)
				}
			}
		})
	}
}

func TestLoadErrorNamesFileLineAndColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte("state_dir = \"/x\"\nlisten = \"127.0.0.1:7777\"\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + `:3,1-6: Unsupported argument; An argument named "bogus" is not expected here.`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load error = %v\nwant it to contain %q", err, want)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.hcl")); err == nil || !strings.Contains(err.Error(), "read agent config") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestExamplesLoad(t *testing.T) {
	for _, name := range []string{"agent-linux.hcl"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(filepath.Join("..", "..", "examples", name))
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Plugins) != 1 || !cfg.Plugins[0].HasConfig() {
				t.Fatalf("plugins = %+v, want one plugin with a config block", cfg.Plugins)
			}
		})
	}
}

func TestExamplePluginBlocksDecode(t *testing.T) {
	cases := []struct {
		file, plugin string
		schema       *basepb.ConfigSchemaResponse
		want         string
	}{
		{"agent-linux.hcl", "qemu", qemu.ConfigSchema(),
			`{"accel":"auto","image_dirs":["/var/cache/fluxvm/images"],"machine":"microvm","qemu_binary":"qemu-system-x86_64","qemu_img":"qemu-img"}`},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			cfg, err := Load(filepath.Join("..", "..", "examples", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			js, diags := cfg.DecodePluginConfig(tc.plugin, tc.schema)
			if diags.HasErrors() {
				t.Fatal(DiagnosticsError(diags))
			}
			if string(js) != tc.want {
				t.Errorf("config JSON = %s\nwant          %s", js, tc.want)
			}
		})
	}
}

var fullSchema = &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{
	{Name: "accel", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING, DefaultJson: `"auto"`},
	{Name: "vcpus", Type: basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER, DefaultJson: `4`},
	{Name: "debug", Type: basepb.AttributeType_ATTRIBUTE_TYPE_BOOL, DefaultJson: `false`},
	{Name: "dirs", Type: basepb.AttributeType_ATTRIBUTE_TYPE_LIST_STRING, DefaultJson: `["/a"]`},
	{Name: "env", Type: basepb.AttributeType_ATTRIBUTE_TYPE_MAP_STRING},
	{Name: "socket", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING},
}}

func TestDecodePluginConfig(t *testing.T) {
	cases := []struct {
		name   string
		block  string // the plugin "p" block, starting on line 5
		schema *basepb.ConfigSchemaResponse
		want   string // JSON, or "error:" + substrings separated by "|"
	}{
		{"all set", `plugin "p" {
  config {
    accel  = "kvm"
    vcpus  = 8
    debug  = true
    dirs   = ["/x", "/y"]
    env    = { A = "1" }
    socket = "/run/s"
  }
}`, fullSchema, `{"accel":"kvm","debug":true,"dirs":["/x","/y"],"env":{"A":"1"},"socket":"/run/s","vcpus":8}`},
		{"defaults fill absent attributes", `plugin "p" {
  config {
    vcpus = 2
  }
}`, fullSchema, `{"accel":"auto","debug":false,"dirs":["/a"],"vcpus":2}`},
		{"null means default", `plugin "p" {
  config {
    accel = null
  }
}`, fullSchema, `{"accel":"auto","debug":false,"dirs":["/a"],"vcpus":4}`},
		{"no config block gives defaults", `plugin "p" {}`, fullSchema, `{"accel":"auto","debug":false,"dirs":["/a"],"vcpus":4}`},
		{"plugin not in file gives defaults", ``, fullSchema, `{"accel":"auto","debug":false,"dirs":["/a"],"vcpus":4}`},
		{"empty schema, empty block", `plugin "p" {
  config {}
}`, &basepb.ConfigSchemaResponse{}, `{}`},
		{"unknown attribute", `plugin "p" {
  config {
    acel = "kvm"
  }
}`, fullSchema, `error:agent.hcl:7,5-9: Unsupported argument|"acel" is not expected|Did you mean "accel"?`},
		{"number for a string is a type mismatch", `plugin "p" {
  config {
    vcpus = "many"
  }
}`, fullSchema, `error:agent.hcl:7,13-19: Incorrect attribute value type|a number is required`},
		{"string for a list", `plugin "p" {
  config {
    dirs = "/x"
  }
}`, fullSchema, `error:agent.hcl:7,12-16: Incorrect attribute value type|list of string required`},
		{"list for a bool", `plugin "p" {
  config {
    debug = [true]
  }
}`, fullSchema, `error:agent.hcl:7,13-19: Incorrect attribute value type|bool required`},
		{"nested block", `plugin "p" {
  config {
    inner {}
  }
}`, fullSchema, `error:agent.hcl:7,5-10: Unsupported block type`},
		{"required attribute missing in block", `plugin "p" {
  config {
  }
}`, &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "socket", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING, Required: true}}},
			`error:agent.hcl:6,10-10: Missing required argument|"socket"`},
		{"required attribute, no config block", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "socket", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING, Required: true}}},
			`error:agent.hcl:5,1-11: Missing required argument`},
		{"schema with an unknown type", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "x", Type: 99}}},
			`error:Invalid plugin config schema|type 99|bug in the plugin`},
		{"schema without a type", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "x"}}},
			`error:Invalid plugin config schema|ATTRIBUTE_TYPE_UNSPECIFIED|bug in the plugin`},
		{"schema default of the wrong type", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "x", Type: basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER, DefaultJson: `"four"`}}},
			`error:Invalid plugin config schema|default_json of "x"`},
		{"schema with a bad attribute name", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "a b", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING}}},
			`error:Invalid plugin config schema|not a valid HCL identifier`},
		{"schema with a repeated attribute", `plugin "p" {}`,
			&basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{Name: "a", Type: basepb.AttributeType_ATTRIBUTE_TYPE_STRING}, {Name: "a", Type: basepb.AttributeType_ATTRIBUTE_TYPE_BOOL}}},
			`error:Invalid plugin config schema|listed twice`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse("agent.hcl", []byte(minimal+tc.block+"\n"))
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", DiagnosticsError(diags))
			}
			js, diags := cfg.DecodePluginConfig("p", tc.schema)
			if want, ok := strings.CutPrefix(tc.want, "error:"); ok {
				if !diags.HasErrors() {
					t.Fatalf("decoded to %s, want an error", js)
				}
				msg := DiagnosticsError(diags).Error()
				for _, w := range strings.Split(want, "|") {
					if !strings.Contains(msg, w) {
						t.Errorf("error does not contain %q:\n%s", w, msg)
					}
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(DiagnosticsError(diags))
			}
			if string(js) != tc.want {
				t.Errorf("config JSON = %s\nwant          %s", js, tc.want)
			}
			var obj map[string]any
			if err := json.Unmarshal(js, &obj); err != nil {
				t.Errorf("result is not a JSON object: %v", err)
			}
		})
	}
}

// TestTokensNeverPrinted formats the configuration every way a log line
// might and checks that no token appears.
func TestTokensNeverPrinted(t *testing.T) {
	src := minimal + "tokens_dummy = 1\n"
	src = strings.Replace(src, "tokens_dummy = 1\n", "central {\n  url = \"https://c:7799\"\n  token = \"central-secret-0123456789\"\n}\n", 1)
	src = strings.Replace(src, `admin = [`, `read_only = ["`+readTok+`"]`+"\n  admin = [", 1)
	cfg, diags := Parse("agent.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(DiagnosticsError(diags))
	}
	secrets := []string{adminTok, readTok, "central-secret-0123456789"}

	var logged strings.Builder
	logger := slog.New(slog.NewJSONHandler(&logged, nil))
	logger.Info("config", "cfg", cfg, "tokens", cfg.Tokens, "central", cfg.Central)
	redactedJSON, err := json.Marshal(cfg.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	plainJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"String":           cfg.String(),
		"%v":               fmt.Sprintf("%v", *cfg),
		"%+v":              fmt.Sprintf("%+v", *cfg),
		"%#v":              fmt.Sprintf("%#v", *cfg),
		"%s tokens":        fmt.Sprintf("%s", cfg.Tokens.Admin),
		"%q token":         fmt.Sprintf("%q", cfg.Tokens.Admin[0]),
		"%v central":       fmt.Sprintf("%v", *cfg.Central),
		"slog":             logged.String(),
		"json Redacted()":  string(redactedJSON),
		"json plain":       string(plainJSON),
		"%+v Redacted()":   fmt.Sprintf("%+v", *cfg.Redacted()),
		"Redacted().Value": string(cfg.Redacted().Tokens.Admin[0]),
	}
	for how, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s prints a token: %s", how, out)
			}
		}
	}
	if !strings.Contains(cfg.String(), "admin_tokens=1") || !strings.Contains(cfg.String(), "read_only_tokens=1") {
		t.Errorf("String() = %q, want the token counts", cfg.String())
	}
	// Redacted is a copy: the original keeps its tokens.
	if cfg.Tokens.Admin[0].Reveal() != adminTok || cfg.Central.Token.Reveal() != "central-secret-0123456789" {
		t.Error("Redacted() changed the original Config")
	}
}

func TestDiagnosticsErrorWithoutSubject(t *testing.T) {
	err := DiagnosticsError(hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "S", Detail: "D."}})
	if err == nil || err.Error() != "S; D." {
		t.Errorf("got %v", err)
	}
	if DiagnosticsError(hcl.Diagnostics{{Severity: hcl.DiagWarning, Summary: "w"}}) != nil {
		t.Error("warnings alone must not make an error")
	}
}

// TestParseListenSocket takes a unix socket for the node API, cleaned, and
// tells it apart from a TCP address.
func TestParseListenSocket(t *testing.T) {
	cfg, diags := Parse("agent.hcl", []byte(minimal+"listen = \"unix:/run/fluxvm//api.sock\"\n"))
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", DiagnosticsError(diags))
	}
	if cfg.Listen != "unix:/run/fluxvm/api.sock" || cfg.ListenSocket() != "/run/fluxvm/api.sock" {
		t.Errorf("listen = %q, socket %q; want unix:/run/fluxvm/api.sock", cfg.Listen, cfg.ListenSocket())
	}
	cfg, diags = Parse("agent.hcl", []byte(minimal))
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", DiagnosticsError(diags))
	}
	if cfg.ListenSocket() != "" {
		t.Errorf("a TCP listen has socket %q, want none", cfg.ListenSocket())
	}
}
