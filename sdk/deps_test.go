package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSDKImportsNoServer keeps the SDK embeddable: nothing it imports,
// its tests' imports included, is an etcd or gRPC server, a driver, the
// node agent or central.
func TestSDKImportsNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "github.com/fluxvm/fluxvm/sdk/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"go.etcd.io/etcd/server", "go.etcd.io/etcd/client", "google.golang.org/grpc",
			"github.com/fluxvm/fluxvm/agent", "github.com/fluxvm/fluxvm/central", "github.com/fluxvm/fluxvm/drivers",
			"github.com/fluxvm/fluxvm/plugins",
		} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the SDK's import graph holds %s (a %s package)", pkg, banned)
			}
		}
	}
}
