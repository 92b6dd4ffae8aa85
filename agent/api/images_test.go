package api

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/go-containerregistry/pkg/registry"
)

// bundleIn writes a small image bundle named n into dir.
func bundleIn(t *testing.T, dir, n string) {
	t.Helper()
	b := filepath.Join(dir, n)
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	kernel := make([]byte, 600<<10)
	_, _ = rand.Read(kernel)
	_ = os.WriteFile(filepath.Join(b, "vmlinux"), kernel, 0o644)
	_ = os.WriteFile(filepath.Join(b, "initrd.cpio"), []byte("initrd"), 0o644)
	meta, _ := json.Marshal(map[string]any{"name": n, "guest_os": "linux", "kernel": "vmlinux", "initrd": "initrd.cpio"})
	if err := os.WriteFile(filepath.Join(b, "fluxvm-image.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
}

// progress splits an NDJSON answer into its lines.
func progress(t *testing.T, body []byte) []sdk.ImageProgress {
	t.Helper()
	var out []sdk.ImageProgress
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var p sdk.ImageProgress
		if err := dec.Decode(&p); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("progress stream: %v\n%s", err, body)
		}
		out = append(out, p)
	}
}

func TestImagePushThenPullThroughTheNodeAPIStreamsProgressTheSpecDescribes(t *testing.T) {
	e := newEnv(t, nil)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	bundleIn(t, e.imageDir, "mini")

	body, _ := json.Marshal(sdk.ImagePushRequest{Image: "mini", Ref: host + "/fluxvm/mini:1", RegistryAuth: sdk.RegistryAuth{Username: "u", Password: "hunter2-secret"}})
	out := e.must(req{method: "POST", path: "/v1/images/push", token: adminToken, body: body}, http.StatusOK)
	if ct := out.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("push answered %s, want application/x-ndjson", ct)
	}
	lines := progress(t, out.body)
	last := lines[len(lines)-1]
	if lines[0].Phase != "manifest" || last.Phase != "done" || !strings.HasPrefix(last.Digest, "sha256:") {
		t.Fatalf("push stream %+v: want manifest first and done with a digest last", lines)
	}

	body, _ = json.Marshal(sdk.ImagePullRequest{Ref: host + "/fluxvm/mini:1", Name: "mini-pulled", RegistryAuth: sdk.RegistryAuth{Username: "u", Password: "hunter2-secret"}})
	out = e.must(req{method: "POST", path: "/v1/images/pull", token: adminToken, body: body}, http.StatusOK)
	lines = progress(t, out.body)
	last = lines[len(lines)-1]
	if last.Phase != "done" || last.Image == nil || last.Image.Name != "mini-pulled" || last.Image.Digest == "" ||
		last.BytesDone != last.BytesTotal || last.BytesTotal != (600<<10)+6 {
		t.Fatalf("pull stream ends with %+v, want done with the image and every byte", last)
	}
	kernel, _ := os.ReadFile(filepath.Join(e.imageDir, "mini", "vmlinux"))
	pulled, _ := os.ReadFile(filepath.Join(e.imageDir, "mini-pulled", "vmlinux"))
	if !bytes.Equal(kernel, pulled) {
		t.Fatal("the pulled kernel differs from the pushed one")
	}
	if strings.Contains(e.logs.String(), "hunter2") {
		t.Fatalf("the node's log holds the registry password:\n%s", e.logs.String())
	}

	out = e.must(req{method: "GET", path: "/v1/images", token: readOnlyToken}, http.StatusOK)
	var list []sdk.NodeImage
	_ = json.Unmarshal(out.body, &list)
	if len(list) != 2 || list[1].Name != "mini-pulled" || list[1].Ref != host+"/fluxvm/mini:1" {
		t.Fatalf("GET /v1/images: %s", out.body)
	}
	// The same name with another artifact is refused before any stream.
	bundleIn(t, e.imageDir, "other")
	body, _ = json.Marshal(sdk.ImagePushRequest{Image: "other", Ref: host + "/fluxvm/mini:2"})
	e.must(req{method: "POST", path: "/v1/images/push", token: adminToken, body: body}, http.StatusOK)
	body, _ = json.Marshal(sdk.ImagePullRequest{Ref: host + "/fluxvm/mini:2", Name: "mini-pulled"})
	out = e.must(req{method: "POST", path: "/v1/images/pull", token: adminToken, body: body}, http.StatusConflict)
	if eb := out.errorBody(t); !strings.Contains(eb.Error, "already exists") || eb.Hint == "" {
		t.Fatalf("409 body %+v", eb)
	}
}

func TestImageRoutesRefuseBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	for _, tc := range []struct {
		what   string
		r      req
		status int
	}{
		{"pull without a token", req{method: "POST", path: "/v1/images/pull", body: []byte(`{"ref":"` + host + `/a:b"}`)}, 401},
		{"pull with a read-only token", req{method: "POST", path: "/v1/images/pull", token: readOnlyToken, body: []byte(`{"ref":"` + host + `/a:b"}`)}, 403},
		{"pull without a body", req{method: "POST", path: "/v1/images/pull", token: adminToken}, 400},
		{"pull with an unknown field", req{method: "POST", path: "/v1/images/pull", token: adminToken, body: []byte(`{"ref":"` + host + `/a:b","nope":1}`)}, 400},
		{"pull of a bad reference", req{method: "POST", path: "/v1/images/pull", token: adminToken, body: []byte(`{"ref":"Not A Ref"}`)}, 400},
		{"pull under a bad name", req{method: "POST", path: "/v1/images/pull", token: adminToken, body: []byte(`{"ref":"` + host + `/a:b","name":"../x"}`)}, 400},
		{"pull of a missing tag", req{method: "POST", path: "/v1/images/pull", token: adminToken, body: []byte(`{"ref":"` + host + `/a:b"}`)}, 404},
		{"pull with a too long password", req{method: "POST", path: "/v1/images/pull", token: adminToken, body: []byte(`{"ref":"` + host + `/a:b","username":"u","password":"` + strings.Repeat("p", 8193) + `"}`)}, 400},
		{"push of nothing", req{method: "POST", path: "/v1/images/push", token: adminToken, body: []byte(`{"image":"none","ref":"` + host + `/a:b"}`)}, 404},
		{"push from outside the image dirs", req{method: "POST", path: "/v1/images/push", token: adminToken, body: []byte(`{"image":"/etc","ref":"` + host + `/a:b"}`)}, 403},
		{"push with a read-only token", req{method: "POST", path: "/v1/images/push", token: readOnlyToken, body: []byte(`{"image":"none","ref":"` + host + `/a:b"}`)}, 403},
	} {
		out := e.call(tc.r)
		if out.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.what, out.status, out.body, tc.status)
			continue
		}
		if eb := out.errorBody(t); eb.Error == "" || eb.Hint == "" {
			t.Errorf("%s: error body %s lacks an error or a hint", tc.what, out.body)
		}
	}
}
