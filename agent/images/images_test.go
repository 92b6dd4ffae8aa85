package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
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

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// wire sits in front of the in-process registry (go-containerregistry's
// registry code) and misbehaves on blob downloads as a test asks: it cuts
// the connection after cut bytes of the next cuts responses, or flips a
// byte in every blob it serves. It records the Range headers it saw.
type wire struct {
	next     http.Handler
	cut      int64
	cuts     atomic.Int32
	tamper   atomic.Bool
	user     string
	password string

	mu     sync.Mutex
	ranges []string
}

func (w *wire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if w.user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != w.user || p != w.password {
			rw.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(rw, `{"errors":[{"code":"UNAUTHORIZED","message":"sign in"}]}`, http.StatusUnauthorized)
			return
		}
	}
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
		w.next.ServeHTTP(rw, r)
		return
	}
	w.mu.Lock()
	w.ranges = append(w.ranges, r.Header.Get("Range"))
	w.mu.Unlock()
	out := http.ResponseWriter(rw)
	if w.cuts.Load() > 0 {
		out = &cutWriter{ResponseWriter: rw, left: w.cut, cuts: &w.cuts}
	} else if w.tamper.Load() {
		out = &flipWriter{ResponseWriter: rw}
	}
	w.next.ServeHTTP(out, r)
}

func (w *wire) sawRanges() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ranges...)
}

// cutWriter passes left bytes, then (while cuts are left) aborts the
// handler: net/http closes the connection mid-body, as a dropped link would.
type cutWriter struct {
	http.ResponseWriter
	left int64
	cuts *atomic.Int32
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > c.left && c.cuts.Add(-1) >= 0 {
		n, _ := c.ResponseWriter.Write(b[:c.left])
		c.left = 0
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		_ = n
		panic(http.ErrAbortHandler)
	}
	c.left -= int64(len(b))
	return c.ResponseWriter.Write(b)
}

// flipWriter changes the first byte of the body.
type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Write(b []byte) (int, error) {
	if !f.done && len(b) > 0 {
		f.done = true
		c := append([]byte(nil), b...)
		c[0] ^= 0xff
		return f.ResponseWriter.Write(c)
	}
	return f.ResponseWriter.Write(b)
}

// testBundle writes a small bundle: a 3 MiB kernel of random bytes, an
// initramfs and a disk.
func testBundle(t *testing.T, dir, imgName string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]int{"vmlinux": 3 << 20, "initrd.cpio": 512 << 10, "disk.qcow2": 64 << 10}
	for f, n := range files {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta, _ := json.Marshal(map[string]any{"format_version": 1, "name": imgName, "guest_os": "linux",
		"kernel": "vmlinux", "initrd": "initrd.cpio", "disk": "disk.qcow2", "cmdline": "console=ttyS0"})
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	wire  *wire
	host  string // registry host:port
	src   string // the pushed bundle
	store *Store // the pulling node's
	dir   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	w := &wire{next: registry.New(registry.Logger(log.New(io.Discard, "", 0))), cut: 1 << 20}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	src := filepath.Join(t.TempDir(), "tiny")
	testBundle(t, src, "tiny")
	dir := t.TempDir()
	return &fixture{wire: w, host: strings.TrimPrefix(srv.URL, "http://"), src: src, dir: dir,
		store: New(Options{Dir: dir, Attempts: 1})}
}

func (f *fixture) push(t *testing.T, ref string, auth sdk.RegistryAuth) string {
	t.Helper()
	pub := New(Options{Dir: filepath.Dir(f.src)})
	p, err := pub.PreparePush(context.Background(), sdk.ImagePushRequest{Image: f.src, Ref: ref, RegistryAuth: auth})
	if err != nil {
		t.Fatalf("prepare push: %v", err)
	}
	digest, err := p.Run(context.Background(), func(sdk.ImageProgress) {})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return digest
}

func (f *fixture) pull(t *testing.T, req sdk.ImagePullRequest) (*sdk.NodeImage, []sdk.ImageProgress, error) {
	t.Helper()
	p, err := f.store.PreparePull(context.Background(), req)
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	var lines []sdk.ImageProgress
	img, err := p.Run(context.Background(), func(l sdk.ImageProgress) { lines = append(lines, l) })
	return img, lines, err
}

func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	for _, f := range []string{"vmlinux", "initrd.cpio", "disk.qcow2", ManifestFile} {
		x, err1 := os.ReadFile(filepath.Join(a, f))
		y, err2 := os.ReadFile(filepath.Join(b, f))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs between %s and %s (%v, %v)", f, a, b, err1, err2)
		}
	}
}

func statusOf(err error) int {
	var e *jsonapi.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func TestPullCutHalfWayResumesFromWhereItStoppedAndInstallsTheSameFiles(t *testing.T) {
	f := newFixture(t)
	ref := f.host + "/fluxvm/tiny:v1"
	digest := f.push(t, ref, sdk.RegistryAuth{})

	f.wire.cuts.Store(1) // the next blob download dies after 1 MiB
	_, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref})
	if err == nil || statusOf(err) != http.StatusBadGateway || !strings.Contains(err.Error(), "connection ended") {
		t.Fatalf("pull over a connection cut at 1 MiB: %v (status %d), want a 502 saying the connection ended", err, statusOf(err))
	}
	if _, err := os.Stat(filepath.Join(f.dir, "tiny")); err == nil {
		t.Fatal("a pull that failed half way installed the image")
	}
	parts, _ := filepath.Glob(filepath.Join(f.dir, pullDir, "tiny", "*.part"))
	if len(parts) != 1 {
		t.Fatalf("partial files after the cut: %v, want one", parts)
	}
	if st, _ := os.Stat(parts[0]); st == nil || st.Size() != 1<<20 {
		t.Fatalf("the partial file holds %v bytes, want the 1 MiB that arrived", st)
	}

	img, lines, err := f.pull(t, sdk.ImagePullRequest{Ref: ref})
	if err != nil {
		t.Fatalf("second pull: %v", err)
	}
	if img.Digest != digest || img.Ref != ref || img.Path != filepath.Join(f.dir, "tiny") || img.GuestOS != "linux" {
		t.Fatalf("pulled image %+v, want digest %s from %s", img, digest, ref)
	}
	sameFiles(t, f.src, img.Path)
	resumedRange := false
	for _, r := range f.wire.sawRanges() {
		if strings.HasPrefix(r, "bytes=1048576-") {
			resumedRange = true
		}
	}
	if !resumedRange {
		t.Fatalf("the second pull never asked for the blob from byte 1048576 on; ranges seen: %q", f.wire.sawRanges())
	}
	last := lines[len(lines)-1]
	if last.ResumedBytes < 1<<20 || last.BytesDone != last.BytesTotal || last.BytesTotal != (3<<20)+(512<<10)+(64<<10) {
		t.Fatalf("last progress line %+v: want all bytes done and at least 1 MiB resumed", last)
	}
	if left, _ := os.ReadDir(filepath.Join(f.dir, pullDir)); len(left) != 0 {
		t.Fatalf("the pull left partial state behind: %v", left)
	}
	list, err := f.store.List()
	if err != nil || len(list) != 1 || list[0].Digest != digest {
		t.Fatalf("List after the pull: %+v, %v", list, err)
	}

	// The same artifact again is already there; another under the name is a conflict.
	if img2, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref}); err != nil || img2.Digest != digest {
		t.Fatalf("pulling what is installed: %+v, %v; want the installed image", img2, err)
	}
	testBundle(t, f.src, "tiny") // new random bytes: another artifact
	f.push(t, f.host+"/fluxvm/tiny:v2", sdk.RegistryAuth{})
	if _, _, err := f.pull(t, sdk.ImagePullRequest{Ref: f.host + "/fluxvm/tiny:v2"}); statusOf(err) != http.StatusConflict {
		t.Fatalf("pulling another artifact over tiny: %v, want 409", err)
	}
	if img3, _, err := f.pull(t, sdk.ImagePullRequest{Ref: f.host + "/fluxvm/tiny:v2", Name: "tiny-2"}); err != nil || img3.Name != "tiny-2" {
		t.Fatalf("pull --name tiny-2: %+v, %v", img3, err)
	}
}

func TestPullRetriesACutConnectionWithinOneCall(t *testing.T) {
	f := newFixture(t)
	ref := f.host + "/fluxvm/tiny:v1"
	f.push(t, ref, sdk.RegistryAuth{})
	f.store = New(Options{Dir: f.dir}) // 3 attempts
	f.wire.cuts.Store(2)
	img, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref})
	if err != nil {
		t.Fatalf("pull with two cuts and three attempts: %v", err)
	}
	sameFiles(t, f.src, img.Path)
}

func TestPullRefusesATamperedBlobAndKeepsNothingOfIt(t *testing.T) {
	f := newFixture(t)
	ref := f.host + "/fluxvm/tiny:v1"
	f.push(t, ref, sdk.RegistryAuth{})
	f.wire.tamper.Store(true)
	_, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref})
	if err == nil || statusOf(err) != http.StatusBadGateway || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("pull of a tampered blob: %v, want a 502 about the digest", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "tiny")); err == nil {
		t.Fatal("a tampered image was installed")
	}
	if parts, _ := filepath.Glob(filepath.Join(f.dir, pullDir, "*", "*")); len(parts) != 0 {
		t.Fatalf("the tampered bytes were kept: %v", parts)
	}
}

func TestPullAndPushUseCredentialsTheRegistryAsksFor(t *testing.T) {
	f := newFixture(t)
	f.wire.user, f.wire.password = "ci", "s3cret-pass"
	ref := f.host + "/private/tiny:v1"
	pub := New(Options{Dir: filepath.Dir(f.src)})
	if _, err := pub.PreparePush(context.Background(), sdk.ImagePushRequest{Image: f.src, Ref: ref}); err != nil {
		t.Fatal(err)
	}
	p, _ := pub.PreparePush(context.Background(), sdk.ImagePushRequest{Image: f.src, Ref: ref})
	if _, err := p.Run(context.Background(), func(sdk.ImageProgress) {}); statusOf(err) != http.StatusForbidden {
		t.Fatalf("push without credentials: %v, want 403", err)
	}
	f.push(t, ref, sdk.RegistryAuth{Username: "ci", Password: "s3cret-pass"})
	_, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref})
	if statusOf(err) != http.StatusForbidden || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("pull without credentials: %v, want 403", err)
	}
	_, _, err = f.pull(t, sdk.ImagePullRequest{Ref: ref, RegistryAuth: sdk.RegistryAuth{Username: "ci", Password: "wrong"}})
	if statusOf(err) != http.StatusForbidden || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("pull with a wrong password: %v, want 403 without the password", err)
	}
	img, _, err := f.pull(t, sdk.ImagePullRequest{Ref: ref, RegistryAuth: sdk.RegistryAuth{Username: "ci", Password: "s3cret-pass"}})
	if err != nil {
		t.Fatalf("pull with credentials: %v", err)
	}
	sameFiles(t, f.src, img.Path)
	raw, _ := os.ReadFile(filepath.Join(img.Path, originFile))
	if bytes.Contains(raw, []byte("s3cret")) {
		t.Fatalf("the origin record holds the password: %s", raw)
	}
}

func TestPullRefusesWhatIsNotAFluxVMImage(t *testing.T) {
	f := newFixture(t)
	ctrImg, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(f.host + "/library/app:latest")
	if err := remote.Write(ref, ctrImg); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.pull(t, sdk.ImagePullRequest{Ref: ref.String()})
	if statusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "not a FluxVM image") {
		t.Fatalf("pull of a container image: %v, want 400 not a FluxVM image", err)
	}
	_, _, err = f.pull(t, sdk.ImagePullRequest{Ref: f.host + "/library/none:latest"})
	if statusOf(err) != http.StatusNotFound {
		t.Fatalf("pull of a missing tag: %v, want 404", err)
	}
}

func TestPullAndPushRefuseBadInput(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("x", sdk.MaxRegistrySecretLen+1)
	for _, tc := range []struct {
		what string
		req  sdk.ImagePullRequest
	}{
		{"empty ref", sdk.ImagePullRequest{}},
		{"ref too long", sdk.ImagePullRequest{Ref: f.host + "/a:" + strings.Repeat("b", sdk.MaxImageRefLen)}},
		{"ref not a reference", sdk.ImagePullRequest{Ref: "UPPER CASE/ref"}},
		{"name with a slash", sdk.ImagePullRequest{Ref: f.host + "/a:b", Name: "../etc"}},
		{"name starting with a dot", sdk.ImagePullRequest{Ref: f.host + "/a:b", Name: ".pull"}},
		{"password without user", sdk.ImagePullRequest{Ref: f.host + "/a:b", RegistryAuth: sdk.RegistryAuth{Password: "p"}}},
		{"token and user", sdk.ImagePullRequest{Ref: f.host + "/a:b", RegistryAuth: sdk.RegistryAuth{Username: "u", Token: "t"}}},
		{"password too long", sdk.ImagePullRequest{Ref: f.host + "/a:b", RegistryAuth: sdk.RegistryAuth{Username: "u", Password: long}}},
	} {
		if _, err := f.store.PreparePull(context.Background(), tc.req); statusOf(err) != http.StatusBadRequest {
			t.Errorf("%s: %v, want 400", tc.what, err)
		}
	}
	for _, tc := range []struct {
		what   string
		req    sdk.ImagePushRequest
		status int
	}{
		{"no image", sdk.ImagePushRequest{Ref: f.host + "/a:b"}, 400},
		{"relative path", sdk.ImagePushRequest{Image: "a/b", Ref: f.host + "/a:b"}, 400},
		{"outside the image dirs", sdk.ImagePushRequest{Image: "/etc", Ref: f.host + "/a:b"}, 403},
		{"no such image", sdk.ImagePushRequest{Image: "nothing", Ref: f.host + "/a:b"}, 404},
	} {
		if _, err := f.store.PreparePush(context.Background(), tc.req); statusOf(err) != tc.status {
			t.Errorf("push %s: %v, want %d", tc.what, err, tc.status)
		}
	}
}

// FuzzCheckFileName: whatever title a registry sends, the check either
// refuses it or passes names that stay inside the bundle directory.
func FuzzCheckFileName(f *testing.F) {
	for _, s := range []string{"vmlinux", "../x", "a/b", ".hidden", "", ManifestFile, "ok.qcow2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if checkFileName(s) != nil {
			return
		}
		if filepath.Join("/bundle", s) != "/bundle/"+s || filepath.Dir(filepath.Join("/bundle", s)) != "/bundle" {
			t.Fatalf("checkFileName passed %q, which leaves the bundle directory", s)
		}
	})
}

// FuzzCheckLayers: whatever manifest a registry sends, parsing and checking
// it does not panic, and every layer it lets through has a plain file name,
// a sha256 digest and a size in range.
func FuzzCheckLayers(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"layers":[{"mediaType":"` + sdk.ImageKernelMediaType + `","size":3,"digest":"sha256:` + strings.Repeat("a", 64) + `","annotations":{"org.opencontainers.image.title":"vmlinux"}}]}`))
	f.Add([]byte(`{"schemaVersion":2,"layers":[{"mediaType":"x","size":-1,"digest":"md5:00","annotations":{"org.opencontainers.image.title":"../x"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := v1.ParseManifest(bytes.NewReader(data))
		if err != nil || checkLayers(m.Layers) != nil {
			return
		}
		for _, l := range m.Layers {
			title := l.Annotations[sdk.ImageTitleAnnotation]
			if checkFileName(title) != nil || l.Digest.Algorithm != "sha256" || l.Size < 0 || l.Size > maxBlobBytes {
				t.Fatalf("checkLayers passed layer %+v", l)
			}
		}
	})
}
