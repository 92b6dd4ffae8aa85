//go:build linux

package qemu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

func TestParseConfigFillsDefaultsAndKeepsValues(t *testing.T) {
	cfg, err := parseConfig(nil)
	if err != nil {
		t.Fatalf("empty config: %v", err)
	}
	if cfg.QEMUBinary != "qemu-system-x86_64" || cfg.QEMUImg != "qemu-img" || cfg.Accel != "auto" || cfg.Machine != "microvm" || cfg.ImageDirs != nil {
		t.Errorf("defaults = %+v", cfg)
	}
	cfg, err = parseConfig([]byte(`{"qemu_binary": "/opt/qemu/bin/qemu-system-x86_64", "accel": "tcg", "machine": "pc", "image_dirs": ["/srv/images/", "/var/cache/fluxvm"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QEMUBinary != "/opt/qemu/bin/qemu-system-x86_64" || cfg.QEMUImg != "qemu-img" || cfg.Accel != "tcg" || cfg.Machine != "pc" {
		t.Errorf("config = %+v", cfg)
	}
	if !slices.Equal(cfg.ImageDirs, []string{"/srv/images", "/var/cache/fluxvm"}) {
		t.Errorf("image_dirs = %q, want them cleaned", cfg.ImageDirs)
	}
}

func TestParseConfigRefusesBadConfigNamingTheField(t *testing.T) {
	cases := []struct {
		name, json, mention string
	}{
		{"unknown field", `{"qemu_bianry": "x"}`, "qemu_bianry"},
		{"not json", `qemu_binary = "x"`, "invalid character"},
		{"trailing data", `{} {}`, "trailing"},
		{"accel value", `{"accel": "hvf"}`, "accel"},
		{"machine value", `{"machine": "q35"}`, "machine"},
		{"empty binary", `{"qemu_binary": ""}`, "qemu_binary"},
		{"empty qemu-img", `{"qemu_img": " "}`, "qemu_img"},
		{"relative image dir", `{"image_dirs": ["images"]}`, "image_dirs[0]"},
		{"wrong type", `{"image_dirs": "/srv/images"}`, "image_dirs"},
		{"number for string", `{"accel": 1}`, "accel"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			_, err := parseConfig([]byte(c.json))
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("parseConfig(%s) = %v, want ErrInvalid", c.json, err)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
}

func TestConfigSchemaListsEveryConfigField(t *testing.T) {
	var names []string
	for _, a := range ConfigSchema().Attributes {
		names = append(names, a.Name)
	}
	want := []string{"qemu_binary", "qemu_img", "accel", "machine", "image_dirs", "vcpus"}
	if !slices.Equal(names, want) {
		t.Errorf("schema attributes %v, want %v", names, want)
	}
	// Every attribute must be accepted by the parser (a schema/parser drift check).
	for _, n := range want {
		val := `"x"`
		switch n {
		case "image_dirs":
			val = `["/x"]`
		case "accel":
			val = `"tcg"`
		case "machine":
			val = `"pc"`
		case "vcpus":
			val = `8`
		}
		if _, err := parseConfig([]byte(`{"` + n + `": ` + val + `}`)); err != nil {
			t.Errorf("schema attribute %s is refused by the parser: %v", n, err)
		}
	}
}
