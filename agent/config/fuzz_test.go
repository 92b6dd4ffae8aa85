package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluxvm/fluxvm/drivers/qemu"
)

// FuzzParse feeds arbitrary bytes to Parse and to DecodePluginConfig: neither
// may panic, and Parse returns a Config exactly when it reports no error.
// Run it with a bounded minimisation, or the seed files (a few KB each) stall
// the workers while new inputs are minimised:
//
//	go test ./agent/config -run '^$' -fuzz FuzzParse -fuzztime 60s -fuzzminimizetime 200x
func FuzzParse(f *testing.F) {
	for _, name := range []string{"agent-linux.hcl"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "plugin \"p\" {\n  config {\n    vcpus = \"x\"\n    dirs = [1, 2]\n    env = { a = true }\n  }\n}\n"))
	f.Add([]byte("state_dir = \"/x\"\ntokens {\n  admin = [\n"))
	f.Add([]byte("listen = \"[::1]:99999\"\ncentral { url = \"http://[::1\" }\n"))
	f.Add([]byte("plugin \"a\" {}\nplugin \"a\" {}\nreserved { vcpus = -1e400 }\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, diags := Parse("fuzz.hcl", src)
		if diags.HasErrors() != (cfg == nil) {
			t.Fatalf("HasErrors=%v but cfg=%v", diags.HasErrors(), cfg)
		}
		_ = DiagnosticsError(diags)
		if cfg == nil {
			return
		}
		_ = cfg.String()
		_ = cfg.Redacted()
		for _, p := range cfg.Plugins {
			_, _ = cfg.DecodePluginConfig(p.Name, fullSchema)
			_, _ = cfg.DecodePluginConfig(p.Name, qemu.ConfigSchema())
		}
	})
}
