package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetPreviewCommandLineMistakesSayWhatToDo: arguments fleet preview
// and preview-rm cannot use are refused with the usage before anything is
// sent (central's address here answers nothing).
func TestFleetPreviewCommandLineMistakesSayWhatToDo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := cli{env: map[string]string{envCentral: "http://" + addr, envFleetToken: "fvt_x"}}
	for _, tc := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"fleet", "preview"}, "takes a VM and a PORT, got 0", "usage: fluxctl fleet preview VM PORT"},
		{[]string{"fleet", "preview", "web-1"}, "takes a VM and a PORT, got 1", "usage: fluxctl fleet preview VM PORT"},
		{[]string{"fleet", "preview", "web-1", "80", "81"}, "got 3", "usage: fluxctl fleet preview"},
		{[]string{"fleet", "preview", "web-1", "0"}, `port "0" is not a TCP port (1-65535)`, "usage: fluxctl fleet preview"},
		{[]string{"fleet", "preview", "web-1", "65536"}, `port "65536" is not a TCP port`, "usage: fluxctl fleet preview"},
		{[]string{"fleet", "preview", "web-1", "http"}, `port "http" is not a TCP port`, "usage: fluxctl fleet preview"},
		{[]string{"fleet", "preview-rm"}, "takes a VM and optionally a PORT, got 0", "usage: fluxctl fleet preview-rm VM [PORT]"},
		{[]string{"fleet", "preview-rm", "web-1", "-1"}, "unknown shorthand flag", "usage: fluxctl fleet preview-rm"},
		{[]string{"fleet", "preview-rm", "web-1", "99999"}, `port "99999" is not a TCP port`, "usage: fluxctl fleet preview-rm"},
		{[]string{"fleet", "previews", "extra"}, `unknown command "extra"`, "fluxctl --help"},
		{[]string{"fleet", "previews"}, "is unreachable", "is central running"},
	} {
		c.run(t, tc.args...).refused(t, strings.Join(tc.args[1:], " "), tc.msg, tc.hint)
	}
}

// TestFleetPreviewOpensListsServesAndCloses: against a real central and a
// sim node (reached through its channel) whose guest port 8080 is a host
// web server, fleet preview prints the preview's URL, a request there with
// the token reaches the server without it, fleet previews lists it, a port
// outside the policy and another tenant's VM are refused with hints, and
// fleet preview-rm closes it (then 404 with a hint).
func TestFleetPreviewOpensListsServesAndCloses(t *testing.T) {
	seen := make(chan http.Header, 16)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprint(w, "dev page")
	}))
	t.Cleanup(web.Close)
	f := fleettest.Start(t, fleettest.WithSimPortForwards(map[string]string{"8080": strings.TrimPrefix(web.URL, "http://")}))
	f.CatalogImage(t, "tiny")
	_, token := f.Tenant(t, "acme", nil)
	_, other := f.Tenant(t, "bravo", nil)
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.CreateVM(t.Context(), sdk.FleetCreateVMRequest{Name: "web-1", Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	c := cli{env: map[string]string{envCentral: f.URL, envFleetToken: token}, stdoutTTY: true}

	out := c.run(t, "fleet", "preview", "web-1", "8080").ok(t, "fleet preview").stdout
	if !strings.Contains(out, "Preview of web-1 port 8080: "+f.URL+"/fleet/previews/prv_") || !strings.Contains(out, "next: curl -H") {
		t.Fatalf("fleet preview printed:\n%s", out)
	}
	p := decode[sdk.Preview](t, "fleet preview -o json", c.run(t, "fleet", "preview", "web-1", "8080", "-o", "json").ok(t, "again").stdout)
	if !strings.Contains(out, p.Path) {
		t.Fatalf("opening again gave %s, not the preview printed first:\n%s", p.ID, out)
	}
	req, _ := http.NewRequest("GET", f.URL+p.Path+"index.html", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "dev page" {
		t.Fatalf("the preview's URL: %d %q", resp.StatusCode, b)
	}
	if h := <-seen; h.Get("Authorization") != "" {
		t.Fatal("the guest saw the token")
	}

	list := c.run(t, "fleet", "previews").ok(t, "fleet previews").stdout
	if !strings.Contains(list, p.ID) || !strings.Contains(list, "web-1") || !strings.Contains(list, "8080") || !strings.Contains(list, f.URL+p.Path) {
		t.Fatalf("fleet previews:\n%s", list)
	}
	c.run(t, "fleet", "preview", "web-1", "80").refused(t, "port 80", "not among the policy's tunnel ports", "tunnels.ports")
	cb := cli{env: map[string]string{envCentral: f.URL, envFleetToken: other}, stdoutTTY: true}
	cb.run(t, "fleet", "preview", "web-1", "8080").refused(t, "bravo on acme's vm", "web-1", "fluxctl fleet vms")
	if empty := cb.run(t, "fleet", "previews").ok(t, "bravo's previews").stdout; !strings.Contains(empty, "no open previews") {
		t.Fatalf("bravo's fleet previews:\n%s", empty)
	}

	done := c.run(t, "fleet", "preview-rm", "web-1", "8080").ok(t, "fleet preview-rm").stdout
	if !strings.Contains(done, "Closed the preview of web-1 port 8080") {
		t.Fatalf("fleet preview-rm printed:\n%s", done)
	}
	c.run(t, "fleet", "preview-rm", "web-1").refused(t, "nothing left", "no open previews", "fluxctl fleet previews")
}
