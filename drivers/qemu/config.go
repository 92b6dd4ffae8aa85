//go:build linux

package qemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
)

// Config is the driver's configuration block (`plugin "qemu" { config { ... } }`).
type Config struct {
	// QEMUBinary is the system emulator, a path or a name looked up in PATH.
	QEMUBinary string `json:"qemu_binary"`
	// QEMUImg is the qemu-img tool that makes overlay disks.
	QEMUImg string `json:"qemu_img"`
	// Accel is "auto" (probe KVM with a real guest, fall back to TCG), "kvm" or "tcg".
	Accel string `json:"accel"`
	// Machine is the default machine type for image bundles: "microvm" or "pc".
	// Plain disk images always boot on "pc".
	Machine string `json:"machine"`
	// ImageDirs, when set, are the only directories images may come from.
	ImageDirs []string `json:"image_dirs"`
	// VCPUs is how many vCPUs the driver offers VMs in all (its
	// fingerprint's resources); 0 for the host's CPU count. More than the
	// host has overcommits its CPUs; one VM still gets at most the host's.
	VCPUs int64 `json:"vcpus"`
}

// defaultConfig is the configuration of a driver whose config block is empty.
func defaultConfig() Config {
	return Config{
		QEMUBinary: "qemu-system-x86_64",
		QEMUImg:    "qemu-img",
		Accel:      "auto",
		Machine:    "microvm",
	}
}

// ConfigSchema describes Config for the agent's HCL decoder (what the
// driver answers to ConfigSchema).
func ConfigSchema() *basepb.ConfigSchemaResponse {
	const str, list = basepb.AttributeType_ATTRIBUTE_TYPE_STRING, basepb.AttributeType_ATTRIBUTE_TYPE_LIST_STRING
	return &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{
		{Name: "qemu_binary", Type: str, DefaultJson: `"qemu-system-x86_64"`,
			Description: "QEMU system emulator: a path, or a name looked up in PATH"},
		{Name: "qemu_img", Type: str, DefaultJson: `"qemu-img"`,
			Description: "qemu-img, used to make each VM's copy-on-write overlay disk"},
		{Name: "accel", Type: str, DefaultJson: `"auto"`,
			Description: `"auto" probes KVM with a real guest and falls back to TCG; "kvm" or "tcg" force one`},
		{Name: "machine", Type: str, DefaultJson: `"microvm"`,
			Description: `machine type for image bundles: "microvm" (fastest boot) or "pc"; plain disk images always use "pc"`},
		{Name: "image_dirs", Type: list,
			Description: "absolute directories VM images must live in; any absolute path when empty"},
		{Name: "vcpus", Type: basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER,
			Description: "vCPUs offered to VMs in all, 1 to 4096; absent or 0 for the host's CPU count (more overcommits the host's CPUs)"},
	}}
}

// parseConfig decodes and validates a config JSON object. Absent fields keep
// their defaults; unknown fields and bad values are ErrInvalid naming the field.
func parseConfig(data []byte) (Config, error) {
	cfg := defaultConfig()
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: %s", jsonProblem(err))
		}
		if dec.More() {
			return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: trailing data after the JSON object")
		}
	}
	if strings.TrimSpace(cfg.QEMUBinary) == "" {
		return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: qemu_binary must not be empty")
	}
	if strings.TrimSpace(cfg.QEMUImg) == "" {
		return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: qemu_img must not be empty")
	}
	switch cfg.Accel {
	case "auto", "kvm", "tcg":
	default:
		return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: accel %q is not one of auto, kvm, tcg", cfg.Accel)
	}
	switch cfg.Machine {
	case machineMicrovm, machinePC:
	default:
		return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: machine %q is not one of microvm, pc", cfg.Machine)
	}
	if cfg.VCPUs < 0 || cfg.VCPUs > 4096 {
		return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: vcpus %d is not between 0 (the host's CPU count) and 4096", cfg.VCPUs)
	}
	for i, d := range cfg.ImageDirs {
		if !filepath.IsAbs(d) {
			return Config{}, driver.Errorf(driver.ErrInvalid, "qemu driver config: image_dirs[%d] %q is not an absolute path", i, d)
		}
		cfg.ImageDirs[i] = filepath.Clean(d)
	}
	return cfg, nil
}

// jsonProblem turns an encoding/json error into a sentence that names the field.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q must be a %s, not a JSON %s", te.Field, te.Type, te.Value)
	}
	msg := err.Error()
	// encoding/json says `json: unknown field "x"`.
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f
	}
	return strings.TrimPrefix(msg, "json: ")
}
