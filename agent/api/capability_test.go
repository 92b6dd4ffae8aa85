package api

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/agent/pluginhost"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestOptionalCallsWithoutTheCapabilityNeverReachThePlugin runs two real
// plugin processes of testdata/recorder (the sim driver, writing down every
// optional RPC it receives): "bare" claims no capability, "full" claims all.
// Every optional call on a VM of "bare" is refused by the agent with 501 and
// the capability hint, and the plugin's record stays empty; the same calls
// on a VM of "full" do reach its plugin, so the record is no blind spot.
func TestOptionalCallsWithoutTheCapabilityNeverReachThePlugin(t *testing.T) {
	bin := drivertest.Build(t, ".", "./testdata/recorder")
	dir := t.TempDir()
	recorder := func(name, caps string) pluginhost.Plugin {
		return pluginhost.Plugin{
			Name: name,
			Command: func() *exec.Cmd {
				cmd := exec.Command(bin)
				cmd.Env = append(os.Environ(), "FLUXVM_TEST_CAPS="+caps, "FLUXVM_TEST_RPC_LOG="+filepath.Join(dir, name+".rpcs"))
				return cmd
			},
			Config: func(*basepb.ConfigSchemaResponse) ([]byte, error) { return []byte(`{}`), nil },
		}
	}
	e := newEnvWith(t, nil, []pluginhost.Plugin{recorder("bare", ""), recorder("full", "pause,screenshot,input,exec,disk_snapshots,memory_snapshots,clones,port_forward,volumes")})
	received := func(name string) []string {
		data, err := os.ReadFile(filepath.Join(dir, name+".rpcs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(data))
	}

	var h sdk.NodeHealth
	_ = json.Unmarshal(e.must(req{method: "GET", path: "/v1/health", token: readOnlyToken}, 200).body, &h)
	caps := map[string][]string{}
	for _, d := range h.Drivers {
		caps[d.Name] = d.Capabilities
	}
	if len(caps["bare"]) != 0 || !slices.Equal(caps["full"], []string{"clones", "disk_snapshots", "exec", "input", "memory_snapshots", "pause", "port_forward", "screenshot", "volumes"}) {
		t.Fatalf("health lists capabilities %v", caps)
	}

	calls := []struct {
		capability string
		r          func(vm string) req
	}{
		{"pause", func(vm string) req { return req{method: "POST", path: "/v1/vms/" + vm + "/pause", token: adminToken} }},
		{"pause", func(vm string) req { return req{method: "POST", path: "/v1/vms/" + vm + "/resume", token: adminToken} }},
		{"screenshot", func(vm string) req {
			return req{method: "GET", path: "/v1/vms/" + vm + "/screenshot", token: adminToken}
		}},
		{"input", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/input", token: adminToken, body: []byte(`{"actions": [{"kind": "text", "text": "hi"}]}`)}
		}},
		{"exec", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/exec", token: adminToken, body: []byte(`{"command": ["uname", "-a"]}`)}
		}},
		{"disk_snapshots", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/snapshot", token: adminToken, body: []byte(`{"tag": "d1"}`)}
		}},
		{"memory_snapshots", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/snapshot", token: adminToken, body: []byte(`{"tag": "m1", "memory": true}`)}
		}},
		{"disk_snapshots", func(vm string) req {
			return req{method: "GET", path: "/v1/vms/" + vm + "/snapshots", token: adminToken}
		}},
		{"disk_snapshots", func(vm string) req {
			return req{method: "DELETE", path: "/v1/vms/" + vm + "/snapshots/d1", token: adminToken}
		}},
		{"disk_snapshots", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/restore", token: adminToken, body: []byte(`{"tag": "m1"}`)}
		}},
		{"clones", func(vm string) req {
			return req{method: "POST", path: "/v1/vms/" + vm + "/clone", token: adminToken, body: []byte(`{"name": "` + vm + `-clone", "snapshot": "m1"}`)}
		}},
	}

	bare := e.create("on-bare", `, "driver": "bare", "display": true`)
	for _, c := range calls {
		r := c.r(bare.ID)
		out := e.must(r, 501)
		eb := out.errorBody(t)
		if !strings.Contains(eb.Error, `driver bare lacks capability "`+c.capability+`"`) || !strings.Contains(eb.Hint, "capabilities") {
			t.Errorf("%s %s: error body %+v, want the driver named as lacking %q and the capability hint", r.method, r.path, eb, c.capability)
		}
	}
	if got := received("bare"); len(got) != 0 {
		t.Fatalf("the plugin without capabilities received optional RPCs %v", got)
	}
	if vm := e.vm(req{method: "GET", path: "/v1/vms/" + bare.ID, token: readOnlyToken}, 200); vm.State != sdk.StateRunning {
		t.Fatalf("after the refused calls the VM is %s, want running", vm.State)
	}
	e.must(req{method: "GET", path: "/v1/vms/" + bare.ID + "-clone", token: readOnlyToken}, 404) // the refused clone left no VM
	// Volumes: a create that attaches one to a driver without the capability is refused before the plugin is asked.
	e.must(req{method: "POST", path: "/v1/volumes", token: adminToken, body: []byte(`{"name": "data", "size_gib": 1}`)}, 201)
	refused := e.must(req{method: "POST", path: "/v1/vms", token: adminToken,
		body: []byte(`{"name": "vol-on-bare", "image": "` + e.image + `", "vcpus": 1, "memory_mib": 256, "driver": "bare", "volumes": ["data"]}`)}, 400)
	if eb := refused.errorBody(t); !strings.Contains(eb.Error, "driver bare cannot attach volumes") || !strings.Contains(eb.Hint, "volumes capability") {
		t.Errorf("a create with volumes on bare: %+v", eb)
	}
	e.must(req{method: "GET", path: "/v1/vms/vol-on-bare", token: readOnlyToken}, 404)

	full := e.create("on-full", `, "driver": "full", "display": true`)
	for _, c := range calls {
		e.call(c.r(full.ID)) // the sim refuses exec itself; what counts is that it was asked
	}
	if got, want := received("full"), []string{"PauseVM", "ResumeVM", "Screenshot", "SendInput", "Exec",
		"SnapshotVM", "SnapshotVM", "ListSnapshots", "DeleteSnapshot", "RestoreVM", "CloneVM"}; !slices.Equal(got, want) {
		t.Fatalf("the plugin with every capability received %v, want %v", got, want)
	}
	if got := received("bare"); len(got) != 0 {
		t.Fatalf("the plugin without capabilities received optional RPCs %v", got)
	}

	// A tunnel needs port_forward: without it the node answers 409 (the
	// VM runs, its driver just cannot reach guest ports), as it would for
	// a plugin older than the RPC.
	node, err := sdk.NewNodeClient(e.srv.URL, sdk.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	_, err = node.DialTunnel(t.Context(), bare.ID, 22)
	var ae *sdk.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || !strings.Contains(ae.Message, "this driver cannot forward guest ports") {
		t.Errorf("tunnel to a VM of bare = %v, want 409 this driver cannot forward guest ports", err)
	}
	if got := received("bare"); len(got) != 0 {
		t.Fatalf("the plugin without port_forward received %v", got)
	}
	_, _ = node.DialTunnel(t.Context(), full.ID, 22) // the sim's config forwards no port: 409, but asked
	if got := received("full"); !slices.Contains(got, "ForwardPort") {
		t.Fatalf("the plugin with port_forward was not asked: %v", got)
	}
}
