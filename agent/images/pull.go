package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Pull is a pull whose manifest has been read and checked; Run fetches it.
type Pull struct {
	s        *Store
	ref      name.Reference
	auth     authn.Authenticator
	name     string
	digest   string // the manifest's
	layers   []v1.Descriptor
	config   []byte
	present  bool // the same artifact is already installed under name
	released bool
}

// PreparePull reads and checks the artifact's manifest and config, picks the
// image's name and holds it until Close. Every refusal it can know before
// moving the files (a bad reference, no access, not a FluxVM image, a name
// taken by another image) comes from here, as a *jsonapi.Error.
func (s *Store) PreparePull(ctx context.Context, req sdk.ImagePullRequest) (*Pull, error) {
	ref, ferr := parseRef(req.Ref, req.Insecure)
	if ferr != nil {
		return nil, ferr
	}
	auth, ferr := checkAuth(req.RegistryAuth)
	if ferr != nil {
		return nil, ferr
	}
	if req.Name != "" && !nameRE.MatchString(req.Name) {
		return nil, fail(http.StatusBadRequest, "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", "image name %q is not valid", clip(req.Name))
	}
	desc, err := remote.Get(ref, remoteOpts(ctx, s, auth)...)
	if err != nil {
		return nil, registryErr(ref, "read the manifest", err)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		return nil, fail(http.StatusBadRequest, "push the image with fluxctl vm-image push, which writes an OCI image manifest",
			"%s is a %s, not a FluxVM image (an OCI image manifest)", clip(ref.String()), clip(string(desc.MediaType)))
	}
	if len(desc.Manifest) > maxManifestBytes {
		return nil, fail(http.StatusBadRequest, "", "the manifest of %s is larger than %d bytes", clip(ref.String()), maxManifestBytes)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, fail(http.StatusBadGateway, "", "the manifest of %s does not parse: %v", clip(ref.String()), err)
	}
	if m.Config.MediaType != sdk.ImageConfigMediaType {
		return nil, fail(http.StatusBadRequest, "a FluxVM image's config is "+sdk.ImageConfigMediaType+" (docs/images.md)",
			"%s is not a FluxVM image: its config is %s", clip(ref.String()), clip(string(m.Config.MediaType)))
	}
	if err := checkLayers(m.Layers); err != nil {
		return nil, fail(http.StatusBadRequest, "see docs/images.md for the layout", "%s: %v", clip(ref.String()), err)
	}
	p := &Pull{s: s, ref: ref, auth: auth, digest: desc.Digest.String(), layers: m.Layers}

	client, err := p.client(ctx)
	if err != nil {
		return nil, registryErr(ref, "sign in to the registry", err)
	}
	if m.Config.Size > maxConfigBytes {
		return nil, fail(http.StatusBadRequest, "", "the image's metadata is %d bytes, more than %d", m.Config.Size, maxConfigBytes)
	}
	var buf bytes.Buffer
	if err := p.fetch(ctx, client, m.Config, &memPart{&buf}, nil); err != nil {
		return nil, asError(ref, "fetch the image's metadata", err)
	}
	p.config = buf.Bytes()
	var b bundle
	if err := json.Unmarshal(p.config, &b); err != nil {
		return nil, fail(http.StatusBadRequest, "", "the image's metadata (%s) is not JSON: %v", ManifestFile, err)
	}
	titles := map[string]bool{}
	for _, l := range m.Layers {
		titles[l.Annotations[sdk.ImageTitleAnnotation]] = true
	}
	if b.Kernel == "" {
		return nil, fail(http.StatusBadRequest, "", "the image's metadata names no kernel")
	}
	for _, f := range b.files() {
		if !titles[f.name] {
			return nil, fail(http.StatusBadRequest, "", "the image's metadata names %q, which is not one of its layers", clip(f.name))
		}
	}
	p.name = req.Name
	if p.name == "" {
		p.name = b.Name
	}
	if !nameRE.MatchString(p.name) {
		return nil, fail(http.StatusBadRequest, "give the image a name with --name", "the image's own name %q cannot name a directory", clip(p.name))
	}
	if !s.lock(p.name) {
		return nil, fail(http.StatusConflict, "wait for it to finish, or pull under another --name", "image %s is being pulled already", p.name)
	}
	if img, err := s.describe(filepath.Join(s.opts.Dir, p.name)); err == nil {
		if img.Digest != p.digest {
			s.unlock(p.name)
			return nil, fail(http.StatusConflict, "pull it under another --name",
				"image %s already exists on this node (from %s)", p.name, orBuilt(img.Ref))
		}
		p.present = true
	} else if _, err := os.Stat(filepath.Join(s.opts.Dir, p.name)); err == nil {
		s.unlock(p.name)
		return nil, fail(http.StatusConflict, "pull it under another --name", "%s already exists in the image directory", p.name)
	}
	return p, nil
}

func orBuilt(ref string) string {
	if ref == "" {
		return "built on the node"
	}
	return clip(ref)
}

func checkLayers(layers []v1.Descriptor) error {
	if len(layers) == 0 || len(layers) > maxLayers {
		return fmt.Errorf("an image has 1-%d layers, this one %d", maxLayers, len(layers))
	}
	seen := map[string]bool{}
	for _, l := range layers {
		switch string(l.MediaType) {
		case sdk.ImageKernelMediaType, sdk.ImageInitrdMediaType, sdk.ImageDiskMediaType:
		default:
			return fmt.Errorf("layer %s has media type %s, which is not a FluxVM image file", l.Digest, clip(string(l.MediaType)))
		}
		title := l.Annotations[sdk.ImageTitleAnnotation]
		if err := checkFileName(title); err != nil {
			return fmt.Errorf("layer %s: %v", l.Digest, err)
		}
		if seen[title] {
			return fmt.Errorf("two layers are named %q", title)
		}
		seen[title] = true
		if l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64 {
			return fmt.Errorf("layer %q: digest %s is not sha256", title, l.Digest)
		}
		if l.Size < 0 || l.Size > maxBlobBytes {
			return fmt.Errorf("layer %q: size %d is out of range (0-%d)", title, l.Size, int64(maxBlobBytes))
		}
	}
	return nil
}

// Name is the image's name on the node.
func (p *Pull) Name() string { return p.name }

// Close releases the image's name.
func (p *Pull) Close() {
	if !p.released {
		p.released = true
		p.s.unlock(p.name)
	}
}

func (p *Pull) client(ctx context.Context) (*http.Client, error) {
	repo := p.ref.Context()
	rt, err := transport.NewWithContext(ctx, repo.Registry, p.auth, p.s.opts.Transport, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt}, nil
}

// Run fetches the layers into the pull's partial directory, each verified
// against its digest, then installs the bundle at once (a rename). emit gets
// the progress lines; Run itself emits neither "done" nor "error".
func (p *Pull) Run(ctx context.Context, emit func(sdk.ImageProgress)) (*sdk.NodeImage, error) {
	dir := filepath.Join(p.s.opts.Dir, p.name)
	m := &meter{now: p.s.opts.Now, emit: emit, start: p.s.opts.Now()}
	for _, l := range p.layers {
		m.total += l.Size
	}
	emit(m.line("manifest", "", p.digest))
	if p.present {
		m.done = m.total
		return p.s.describe(dir)
	}
	client, err := p.client(ctx)
	if err != nil {
		return nil, registryErr(p.ref, "sign in to the registry", err)
	}
	work := filepath.Join(p.s.opts.Dir, pullDir, p.name)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("pull %s: %w", p.name, err)
	}
	for _, l := range p.layers {
		title := l.Annotations[sdk.ImageTitleAnnotation]
		blob := filepath.Join(work, "sha256-"+l.Digest.Hex)
		if _, err := os.Stat(blob); err == nil { // fetched and verified by an earlier attempt
			m.done += l.Size
			m.resumed += l.Size
			continue
		}
		part, err := openPart(blob + ".part")
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", p.name, err)
		}
		err = p.fetch(ctx, client, l, part, func(n int64, resumed bool) {
			if resumed {
				m.resumed += n
				m.done += n
				return
			}
			m.add(n, title, l.Digest.String())
		})
		_ = part.f.Close()
		if err != nil {
			var bad *digestError
			if errors.As(err, &bad) {
				_ = os.Remove(blob + ".part")
			}
			return nil, asError(p.ref, "fetch "+title, err)
		}
		if err := os.Rename(blob+".part", blob); err != nil {
			return nil, fmt.Errorf("pull %s: %w", p.name, err)
		}
		emit(m.line("blob", title, l.Digest.String()))
	}

	tree := filepath.Join(work, "tree")
	_ = os.RemoveAll(tree)
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, fmt.Errorf("pull %s: %w", p.name, err)
	}
	for _, l := range p.layers {
		if err := os.Rename(filepath.Join(work, "sha256-"+l.Digest.Hex), filepath.Join(tree, l.Annotations[sdk.ImageTitleAnnotation])); err != nil {
			return nil, fmt.Errorf("pull %s: %w", p.name, err)
		}
		_ = os.Chmod(filepath.Join(tree, l.Annotations[sdk.ImageTitleAnnotation]), 0o644)
	}
	org, _ := json.Marshal(origin{Ref: p.ref.String(), Digest: p.digest, PulledAt: p.s.opts.Now().UTC()})
	if err := os.WriteFile(filepath.Join(tree, ManifestFile), p.config, 0o644); err != nil {
		return nil, fmt.Errorf("pull %s: %w", p.name, err)
	}
	if err := os.WriteFile(filepath.Join(tree, originFile), org, 0o644); err != nil {
		return nil, fmt.Errorf("pull %s: %w", p.name, err)
	}
	if err := os.Rename(tree, dir); err != nil {
		return nil, fmt.Errorf("install %s: %w", p.name, err)
	}
	_ = os.RemoveAll(work)
	return p.s.describe(dir)
}

// digestError is a blob that does not match its descriptor: never retried,
// never kept.
type digestError struct{ msg string }

func (e *digestError) Error() string { return e.msg }

// asError says a failed fetch for people.
func asError(ref name.Reference, what string, err error) error {
	var bad *digestError
	if errors.As(err, &bad) {
		return fail(http.StatusBadGateway, "the registry or something between it and the node changed the blob; nothing was installed, and the bad bytes were dropped",
			"%s: %s", what, bad.msg)
	}
	var fe *jsonapi.Error
	if errors.As(err, &fe) {
		return fe
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fail(http.StatusBadGateway, "pull again: it resumes where this one stopped", "%s: %v", what, err)
	}
	e := registryErr(ref, what, err)
	if e.Status == http.StatusBadGateway {
		e.Hint = "pull again: it resumes where this one stopped"
	}
	return e
}

// part is where a blob's bytes go: a file that survives an interrupted
// pull, or memory for the small config blob.
type part interface {
	io.Writer
	// have is how many bytes are already there; reset drops them.
	have() (int64, error)
	reset() error
	// sum hashes what is there.
	sum() ([]byte, error)
}

type filePart struct{ f *os.File }

func openPart(path string) (*filePart, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return &filePart{f}, nil
}

func (p *filePart) Write(b []byte) (int, error) { return p.f.Write(b) }
func (p *filePart) have() (int64, error) {
	st, err := p.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
func (p *filePart) reset() error {
	if err := p.f.Truncate(0); err != nil {
		return err
	}
	_, err := p.f.Seek(0, io.SeekStart)
	return err
}
func (p *filePart) sum() ([]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(p.f, 0, 1<<62)); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

type memPart struct{ b *bytes.Buffer }

func (p *memPart) Write(b []byte) (int, error) { return p.b.Write(b) }
func (p *memPart) have() (int64, error)        { return int64(p.b.Len()), nil }
func (p *memPart) reset() error                { p.b.Reset(); return nil }
func (p *memPart) sum() ([]byte, error) {
	s := sha256.Sum256(p.b.Bytes())
	return s[:], nil
}

// fetch brings blob d into dst, asking only for the bytes dst lacks, up to
// Attempts times, then checks the size and the digest. count gets the bytes
// found already there (resumed) and those written.
func (p *Pull) fetch(ctx context.Context, client *http.Client, d v1.Descriptor, dst part, count func(n int64, resumed bool)) error {
	if count == nil {
		count = func(int64, bool) {}
	}
	have, err := dst.have()
	if err != nil {
		return err
	}
	if have > d.Size {
		if err := dst.reset(); err != nil {
			return err
		}
		have = 0
	}
	count(have, true)
	for attempt := 1; have < d.Size; attempt++ {
		n, err := p.fetchFrom(ctx, client, d, dst, have, count)
		have += n
		if err == nil {
			break
		}
		var bad *digestError
		if errors.As(err, &bad) || ctx.Err() != nil || attempt >= p.s.opts.Attempts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
		if h, herr := dst.have(); herr == nil {
			have = h
		}
	}
	sum, err := dst.sum()
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(sum); got != d.Digest.Hex {
		return &digestError{fmt.Sprintf("the registry sent %d bytes whose digest is sha256:%s, but the manifest says %s", d.Size, got, d.Digest)}
	}
	return nil
}

// fetchFrom asks for the blob from byte `from` on and appends what comes. It
// returns how many bytes it appended; a connection that ends early is an
// error the caller may retry from there.
func (p *Pull) fetchFrom(ctx context.Context, client *http.Client, d v1.Descriptor, dst part, from int64, count func(int64, bool)) (int64, error) {
	repo := p.ref.Context()
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", repo.Registry.Scheme(), repo.RegistryStr(), repo.RepositoryStr(), d.Digest)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if from > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, d.Size-1))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && from > 0:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(from, 10)+"-") {
			return 0, fmt.Errorf("the registry answered the range from %d with %q", from, clip(resp.Header.Get("Content-Range")))
		}
	case resp.StatusCode == http.StatusOK:
		if from > 0 { // no ranges: start over
			if err := dst.reset(); err != nil {
				return 0, err
			}
			count(-from, true)
			from = 0
		}
	default:
		return 0, transport.CheckError(resp, http.StatusOK, http.StatusPartialContent)
	}
	want := d.Size - from
	n, err := io.Copy(&countWriter{dst, count}, io.LimitReader(resp.Body, want+1))
	if n > want {
		return n, &digestError{fmt.Sprintf("the registry sent more than the %d bytes the manifest says blob %s has", d.Size, d.Digest)}
	}
	if err == nil && n < want {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, fmt.Errorf("the connection ended after %d of %d bytes: %w", from+n, d.Size, err)
	}
	return n, nil
}

type countWriter struct {
	w     io.Writer
	count func(int64, bool)
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.count(int64(n), false)
	return n, err
}
