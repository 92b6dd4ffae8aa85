// Package images brings VM image bundles onto a node from OCI registries and
// publishes them there (go-containerregistry). A pull resumes where an
// interrupted one stopped and installs nothing whose digest does not match;
// the artifact layout is in docs/images.md.
package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ManifestFile is the bundle's metadata file, the artifact's config blob.
const ManifestFile = "fluxvm-image.json"

// originFile records where a pulled bundle came from.
const originFile = ".fluxvm-origin.json"

// pullDir holds interrupted pulls' partial blobs, per image name.
const pullDir = ".pull"

// Bounds of what a pull accepts from a registry.
const (
	maxManifestBytes = 1 << 20
	maxConfigBytes   = 64 << 10
	maxLayers        = 16
	maxBlobBytes     = 64 << 30
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func fail(status int, hint, format string, args ...any) *jsonapi.Error {
	if hint == "" {
		hint = "docs/images.md says what a FluxVM image in a registry looks like"
	}
	return &jsonapi.Error{Status: status, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

// Options configure a Store.
type Options struct {
	// Dir is the node's image directory: pulls land in Dir/<name>.
	Dir string
	// AllowedDirs are where a push may read a bundle given by path.
	AllowedDirs []string
	// Transport is the base HTTP transport to registries (http.DefaultTransport when nil).
	Transport http.RoundTripper
	// Attempts is how often one pull fetches a blob before giving up,
	// resuming each time where the last stopped (3 when 0).
	Attempts int
	// Now is the clock of progress rates and pull times (time.Now when nil).
	Now func() time.Time
}

// Store is a node's image directory.
type Store struct {
	opts Options

	mu   sync.Mutex
	busy map[string]bool // image names being pulled
}

// New returns a Store over opts.Dir.
func New(opts Options) *Store {
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 3
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{opts: opts, busy: map[string]bool{}}
}

// Dir is the image directory.
func (s *Store) Dir() string { return s.opts.Dir }

// List returns the bundles in the image directory (directories holding a
// fluxvm-image.json).
func (s *Store) List() ([]sdk.NodeImage, error) {
	entries, err := os.ReadDir(s.opts.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return []sdk.NodeImage{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list images in %s: %w", s.opts.Dir, err)
	}
	out := []sdk.NodeImage{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		img, err := s.describe(filepath.Join(s.opts.Dir, e.Name()))
		if err != nil {
			continue // not a bundle
		}
		out = append(out, *img)
	}
	return out, nil
}

// bundle is the part of fluxvm-image.json a pull and a push read.
type bundle struct {
	Name          string `json:"name"`
	GuestOS       string `json:"guest_os"`
	Kernel        string `json:"kernel"`
	Initrd        string `json:"initrd"`
	DisplayInitrd string `json:"display_initrd"`
	Disk          string `json:"disk"`
}

// files lists the bundle's files with their media types.
func (b bundle) files() []bundleFile {
	var out []bundleFile
	for _, f := range []bundleFile{
		{b.Kernel, sdk.ImageKernelMediaType},
		{b.Initrd, sdk.ImageInitrdMediaType},
		{b.DisplayInitrd, sdk.ImageInitrdMediaType},
		{b.Disk, sdk.ImageDiskMediaType},
	} {
		if f.name != "" {
			out = append(out, f)
		}
	}
	return out
}

type bundleFile struct {
	name      string
	mediaType string
}

// checkFileName refuses a bundle file name that is not a plain name in the
// bundle's directory (the metadata comes from a registry).
func checkFileName(n string) error {
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, `/\`) || strings.HasPrefix(n, ".") || len(n) > 128 || n == ManifestFile {
		return fmt.Errorf("file name %q is not a plain file name", n)
	}
	return nil
}

type origin struct {
	Ref      string    `json:"ref"`
	Digest   string    `json:"digest"`
	PulledAt time.Time `json:"pulled_at"`
}

func (s *Store) describe(dir string) (*sdk.NodeImage, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var b bundle
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	img := &sdk.NodeImage{Name: filepath.Base(dir), Path: dir, GuestOS: b.GuestOS}
	for _, f := range b.files() {
		if st, err := os.Stat(filepath.Join(dir, f.name)); err == nil {
			img.SizeBytes += st.Size()
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, originFile)); err == nil {
		var o origin
		if json.Unmarshal(raw, &o) == nil {
			img.Ref, img.Digest = o.Ref, o.Digest
			t := o.PulledAt
			img.PulledAt = &t
		}
	}
	return img, nil
}

// checkAuth bounds the credentials and turns them into an authenticator.
func checkAuth(a sdk.RegistryAuth) (authn.Authenticator, *jsonapi.Error) {
	if len(a.Username) > sdk.MaxRegistryUserLen || len(a.Password) > sdk.MaxRegistrySecretLen || len(a.Token) > sdk.MaxRegistrySecretLen {
		return nil, fail(http.StatusBadRequest, fmt.Sprintf("username up to %d bytes, password and token up to %d", sdk.MaxRegistryUserLen, sdk.MaxRegistrySecretLen),
			"registry credentials are too long")
	}
	switch {
	case a.Token != "" && (a.Username != "" || a.Password != ""):
		return nil, fail(http.StatusBadRequest, "give a username and password, or a token", "registry credentials: both a token and a username or password")
	case a.Token != "":
		return &authn.Bearer{Token: a.Token}, nil
	case a.Username != "" || a.Password != "":
		if a.Username == "" {
			return nil, fail(http.StatusBadRequest, "give a username with the password", "registry credentials: a password without a username")
		}
		return &authn.Basic{Username: a.Username, Password: a.Password}, nil
	}
	return authn.Anonymous, nil
}

func parseRef(ref string, insecure bool) (name.Reference, *jsonapi.Error) {
	if ref == "" || len(ref) > sdk.MaxImageRefLen {
		return nil, fail(http.StatusBadRequest, "give registry/repository:tag or registry/repository@sha256:…",
			"ref must be 1-%d characters", sdk.MaxImageRefLen)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fail(http.StatusBadRequest, "give registry/repository:tag or registry/repository@sha256:…",
			"ref %q is not an OCI reference: %v", clip(ref), err)
	}
	return r, nil
}

// registryErr turns a registry's refusal into an Error for people.
func registryErr(ref name.Reference, what string, err error) *jsonapi.Error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fail(http.StatusForbidden, "give the registry's credentials (fluxctl vm-image --username, with the password on stdin or in FLUXVM_REGISTRY_PASSWORD)",
				"%s: the registry %s refused access to %s", what, ref.Context().RegistryStr(), ref.Context().RepositoryStr())
		case http.StatusNotFound:
			return fail(http.StatusNotFound, "check the repository and tag", "%s: the registry has no %s", what, clip(ref.String()))
		}
	}
	return fail(http.StatusBadGateway, "check that the registry is reachable from the node and answers the OCI distribution API",
		"%s %s: %v", what, clip(ref.String()), scrub(err))
}

// scrub keeps an error's text bounded. go-containerregistry's errors carry
// URLs and statuses, never the credentials.
func scrub(err error) string { return clip(err.Error()) }

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func remoteOpts(ctx context.Context, s *Store, auth authn.Authenticator) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(s.opts.Transport)}
}

// lock marks an image name busy; false when another pull holds it.
func (s *Store) lock(n string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[n] {
		return false
	}
	s.busy[n] = true
	return true
}

func (s *Store) unlock(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, n)
}

// meter turns byte counts into progress lines with a rate and an ETA.
type meter struct {
	now      func() time.Time
	emit     func(sdk.ImageProgress)
	start    time.Time
	total    int64
	done     int64
	resumed  int64
	lastEmit time.Time
}

func (m *meter) line(phase, file, digest string) sdk.ImageProgress {
	p := sdk.ImageProgress{Phase: phase, File: file, Digest: digest, BytesDone: m.done, BytesTotal: m.total,
		ResumedBytes: m.resumed, ETASeconds: -1}
	if el := m.now().Sub(m.start).Seconds(); el > 0 {
		p.BytesPerSecond = int64(float64(m.done-m.resumed) / el)
	}
	if p.BytesPerSecond > 0 {
		p.ETASeconds = (m.total - m.done + p.BytesPerSecond - 1) / p.BytesPerSecond
	} else if m.done >= m.total {
		p.ETASeconds = 0
	}
	return p
}

// add counts n more bytes of file and emits a line at most every 200 ms.
func (m *meter) add(n int64, file, digest string) {
	m.done += n
	if t := m.now(); t.Sub(m.lastEmit) >= 200*time.Millisecond {
		m.lastEmit = t
		m.emit(m.line("blob", file, digest))
	}
}
