package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/google/go-containerregistry/pkg/registry"
)

// flakyLink sits in front of an in-process registry (go-containerregistry's
// registry code): the first blob download longer than cutAt is cut off
// after cutAt bytes, as a dropped connection would; with tamper set every
// blob arrives with its first byte changed. It notes the Range headers.
type flakyLink struct {
	next   http.Handler
	cutAt  int64
	cuts   atomic.Int32
	tamper atomic.Bool
	mu     sync.Mutex
	ranges []string
}

func (l *flakyLink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
		l.mu.Lock()
		l.ranges = append(l.ranges, r.Header.Get("Range"))
		l.mu.Unlock()
		w = &linkWriter{ResponseWriter: w, l: l, left: l.cutAt}
	}
	l.next.ServeHTTP(w, r)
}

type linkWriter struct {
	http.ResponseWriter
	l       *flakyLink
	left    int64
	flipped bool
}

func (w *linkWriter) Write(b []byte) (int, error) {
	if w.l.tamper.Load() && !w.flipped && len(b) > 0 {
		w.flipped = true
		c := append([]byte(nil), b...)
		c[0] ^= 0xff
		b = c
	}
	if int64(len(b)) > w.left && w.l.cuts.Add(-1) >= 0 {
		_, _ = w.ResponseWriter.Write(b[:w.left])
		w.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	w.left -= int64(len(b))
	return w.ResponseWriter.Write(b)
}

// TestVMImagePushPullResumedAfterACutThenAQEMUGuestBootsFromIt: the guest
// image is pushed through a node to a registry served in this process,
// pulled back through the node API over a link cut half way through the
// kernel (the pull resumes from there: a Range request), a tampered copy is
// refused, and a real QEMU VM boots from the pulled image and runs a
// command.
func TestVMImagePushPullResumedAfterACutThenAQEMUGuestBootsFromIt(t *testing.T) {
	src := guestImage(t)
	node := nodetest.Start(t, nodetest.WithQEMU(src))
	c := nodeCLI(node)
	link := &flakyLink{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	reg := httptest.NewServer(link)
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	ref := host + "/fluxvm/debian-minimal:test"

	r := c.run(t, "vm-image", "push", src, ref, "-o", "json").ok(t, "vm-image push")
	pushed := decode[map[string]string](t, "push -o json", r.stdout)
	if !strings.HasPrefix(pushed["digest"], "sha256:") {
		t.Fatalf("push printed %s", r.stdout)
	}

	kernel, err := os.Stat(filepath.Join(src, "vmlinux"))
	if err != nil {
		t.Fatal(err)
	}
	link.cutAt = kernel.Size() / 2
	link.cuts.Store(1)
	term := c
	term.stdoutTTY, term.stderrTTY = true, true
	r = term.run(t, "vm-image", "pull", ref, "--name", "pulled").ok(t, "vm-image pull over a cut link")
	if !strings.Contains(r.stdout, "Pulled "+ref+" as image pulled ("+pushed["digest"]) || !strings.Contains(r.stderr, "/s") || !strings.Contains(r.stderr, "ETA") {
		t.Fatalf("pull output:\nstdout %s\nstderr %q\nwant the digest, and progress with a rate and an ETA", r.stdout, r.stderr)
	}
	resumed := false
	for _, rg := range link.ranges {
		if strings.HasPrefix(rg, "bytes=") && !strings.HasPrefix(rg, "bytes=0-") {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("the pull never resumed with a Range request; ranges: %q", link.ranges)
	}
	pulled := filepath.Join(node.ImageDir, "pulled")
	for _, f := range []string{"vmlinux", "initrd.cpio", "disk.qcow2", "fluxvm-image.json"} {
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(pulled, f))
		if err != nil || string(a) != string(b) {
			t.Fatalf("pulled %s differs from the pushed one (%v)", f, err)
		}
	}

	link.tamper.Store(true)
	c.run(t, "vm-image", "pull", ref, "--name", "tampered").refused(t, "pull of a tampered blob", "digest", "nothing was installed")
	if _, err := os.Stat(filepath.Join(node.ImageDir, "tampered")); err == nil {
		t.Fatal("the tampered image was installed")
	}
	link.tamper.Store(false)

	r = c.run(t, "vm-image", "list", "-o", "json").ok(t, "vm-image list")
	imgs := decode[[]sdk.NodeImage](t, "list", r.stdout)
	if len(imgs) != 1 || imgs[0].Name != "pulled" || imgs[0].Digest != pushed["digest"] || imgs[0].Ref != ref {
		t.Fatalf("vm-image list: %s", r.stdout)
	}

	c.run(t, "vm", "create", "from-oci", "--image", pulled, "--memory-mib", "256", "--network", "none", "--wait", "--wait-timeout", "3m").ok(t, "create a VM from the pulled image")
	r = c.run(t, "vm", "exec", "from-oci", "--", "cat", "/proc/version").ok(t, "exec in the VM from the pulled image")
	if !strings.Contains(r.stdout, "Linux version") {
		t.Fatalf("exec printed %q", r.stdout)
	}
	c.run(t, "vm", "rm", "from-oci", "-y").ok(t, "rm")
}
