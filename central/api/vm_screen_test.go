package api_test

import (
	"bytes"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestVMScreenThroughCentral: a tenant's VM with a display gives its screen
// as a PNG through central, scaled down on request; a VM without one is the
// node's 409, and a bad max_width a 400.
func TestVMScreenThroughCentral(t *testing.T) {
	c := newFxCentral(t, fxStore(t, nil))
	images, img := fxImages(t)
	startFxNode(t, "sim-1", c.url, images, 8, 8192)
	fxWaitUp(t, c.url, "sim-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, tok := fxTenant(t, c.url, "acme", nil)
	var shown, headless sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "desk", "image": "tiny", "display": true}, http.StatusCreated, &shown)
	fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "svc", "image": "tiny"}, http.StatusCreated, &headless)

	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", c.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data
	}
	for _, tc := range []struct {
		query    string
		maxWidth int
	}{{"", 0}, {"?max_width=64", 64}} {
		resp, data := get("/fleet/vms/sim-1/" + shown.VM.ID + "/screen" + tc.query)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("screen%s: %s %s %.200s", tc.query, resp.Status, resp.Header.Get("Content-Type"), data)
		}
		im, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("screen%s is not a PNG: %v", tc.query, err)
		}
		if w := im.Bounds().Dx(); w < 1 || (tc.maxWidth > 0 && w > tc.maxWidth) {
			t.Fatalf("screen%s is %d pixels wide", tc.query, w)
		}
	}
	// By name too, as every VM route.
	if resp, _ := get("/fleet/vms/sim-1/desk/screen"); resp.StatusCode != http.StatusOK {
		t.Fatalf("screen by name: %s", resp.Status)
	}
	if code, body := fxCall(t, "GET", c.url+"/fleet/vms/sim-1/"+headless.VM.ID+"/screen", tok, nil); code != http.StatusConflict || !strings.Contains(string(body), "display") {
		t.Fatalf("screen of a VM without a display: %d %s", code, body)
	}
	if code, body := fxCall(t, "GET", c.url+"/fleet/vms/sim-1/"+shown.VM.ID+"/screen?max_width=0", tok, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "max_width") {
		t.Fatalf("max_width=0: %d %s", code, body)
	}
}
