//go:build !(darwin && arm64 && cgo)

package vz

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// hostPlatform: this build has no Virtualization framework, so the driver
// is unusable here and says why.
func hostPlatform() Platform {
	why := fmt.Sprintf("the vz driver needs macOS on Apple silicon (darwin/arm64) and a build with cgo; this fluxvm-agent was built for %s/%s", runtime.GOOS, runtime.GOARCH)
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		why = "this fluxvm-agent for darwin/arm64 was built without cgo (CGO_ENABLED=0), which the vz driver needs: build it on the Mac with CGO_ENABLED=1 (docs/mac.md)"
	}
	return Platform{Usable: false, Why: why}
}

// newMachine cannot make a VM in this build.
func newMachine(*HostConfig) (Machine, error) {
	return nil, errors.New(hostPlatform().Why)
}

// installMacOS cannot install macOS in this build.
func installMacOS(context.Context, string, string, int64, func(string, ...any)) error {
	return errors.New(hostPlatform().Why)
}
