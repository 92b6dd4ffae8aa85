package api_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
)

// recorderScript writes /tmp/rec.sh, which answers one HTTP request on
// stdin/stdout (busybox nc -e runs it per connection) after writing the
// request's head, line by line as it arrived, to /tmp/req.txt.
const recorderScript = `cat > /tmp/rec.sh <<'REC'
#!/bin/sh
: > /tmp/req.part
while IFS= read -r line; do
  printf '%s\n' "$line" >> /tmp/req.part
  [ "${#line}" -le 1 ] && break
done
mv /tmp/req.part /tmp/req.txt
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9\r\nConnection: close\r\n\r\nrecorded\n'
REC
chmod +x /tmp/rec.sh`

// TestPreviewServesARealQEMUGuestAndTheGuestSeesNoCredential: a preview of
// port 8080 of a real QEMU guest serves its busybox httpd through central
// (node channel, the QEMU driver's port forward); a request through a
// preview of port 8081, where a busybox nc loop records each request's
// head, carries the token in Authorization, a cookie, X-FluxVM-* headers
// and a query parameter, and the head the guest recorded (read back with
// exec) has none of them; once the VM stops, the preview is 404.
func TestPreviewServesARealQEMUGuestAndTheGuestSeesNoCredential(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	img := image.DefaultDir()
	if _, err := image.Load(img); err != nil {
		t.Fatalf("guest image in %s: %v (run make guest-image)", img, err)
	}
	url, _ := tnCentral(t)
	node := startQemuFxNode(t, "qemu-1", url, img)
	t.Cleanup(func() {
		var list sdk.VMList
		if code, body := fxCall(t, "GET", node.url+"/v1/vms", node.admin, nil); code == http.StatusOK && json.Unmarshal(body, &list) == nil {
			for _, vm := range list.VMs {
				fxCall(t, "DELETE", node.url+"/v1/vms/"+vm.ID, node.admin, nil)
			}
		}
	})
	fxWaitUp(t, url, "qemu-1")
	fxMust(t, "PUT", url+"/fleet/images/debian-minimal", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, tok := fxTenant(t, url, "acme", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tok, map[string]any{"name": "dev", "image": "debian-minimal"}, http.StatusCreated, &vm)
	fxWait(t, "the guest agent of dev", 3*time.Minute, func() bool {
		var list sdk.FleetVMList
		fxMust(t, "GET", url+"/fleet/vms", tok, nil, http.StatusOK, &list)
		return len(list.VMs) == 1 && list.VMs[0].AgentReady
	})
	vmURL := url + "/fleet/vms/qemu-1/" + vm.VM.ID
	var res sdk.ExecResult
	fxMust(t, "POST", vmURL+"/exec", tok, map[string]any{"timeout_seconds": 30,
		"command": "mkdir -p /tmp/www && echo hello-from-the-guest > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && " +
			recorderScript + " && (setsid nc -ll -p 8081 -e /tmp/rec.sh </dev/null >/dev/null 2>&1 &) && sleep 1 && echo started"}, http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("start the servers in the guest: %+v", res)
	}

	var web, rec sdk.Preview
	fxMust(t, "POST", vmURL+"/preview", tok, map[string]any{"port": 8080}, http.StatusCreated, &web)
	fxMust(t, "POST", vmURL+"/preview", tok, map[string]any{"port": 8081}, http.StatusCreated, &rec)
	code, body := pvDo(t, "GET", url+web.Path+"index.html", nil, http.Header{"Authorization": {"Bearer " + tok}})
	if code != http.StatusOK || !strings.Contains(body, "hello-from-the-guest") {
		t.Fatalf("the guest's httpd through the preview: %d %q", code, body)
	}

	code, body = pvDo(t, "GET", url+rec.Path+"rec?x=1&token="+tok, nil, http.Header{
		"Authorization":    {"Bearer " + tok},
		"Cookie":           {"fluxvm_session=console-secret; theme=dark"},
		"X-Fluxvm-Console": {"1"},
		"X-Fluxvm-Tenant":  {"acme"},
		"X-Visible":        {"yes"},
	})
	if code != http.StatusOK || body != "recorded\n" {
		t.Fatalf("the recorder through the preview: %d %q", code, body)
	}
	fxMust(t, "POST", vmURL+"/exec", tok, map[string]any{"timeout_seconds": 30, "command": "cat /tmp/req.txt"}, http.StatusOK, &res)
	head := res.Stdout
	t.Logf("the request as the guest recorded it:\n%s", head)
	if !strings.HasPrefix(head, "GET /rec?x=1 HTTP/1.1") || !strings.Contains(head, "X-Visible: yes") {
		t.Fatalf("the guest recorded %q", head)
	}
	lower := strings.ToLower(head)
	for _, bad := range []string{strings.ToLower(tok), "authorization:", "cookie:", "console-secret", "x-fluxvm", "token="} {
		if strings.Contains(lower, bad) {
			t.Errorf("the guest's recorded request carries %q", bad)
		}
	}

	fxMust(t, "POST", vmURL+"/stop", tok, nil, http.StatusOK, nil)
	code, body = pvDo(t, "GET", url+web.Path+"index.html", nil, http.Header{"Authorization": {"Bearer " + tok}})
	if code != http.StatusNotFound {
		t.Fatalf("the preview of a stopped VM: %d %s, want 404", code, body)
	}
}
