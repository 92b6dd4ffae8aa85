package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Push is a push whose bundle has been found and checked; Run publishes it.
type Push struct {
	s      *Store
	ref    name.Reference
	auth   authn.Authenticator
	dir    string
	config []byte
	files  []bundleFile
}

// PreparePush finds the bundle (a name in the image directory, or an
// absolute path under the allowed directories) and checks its files.
func (s *Store) PreparePush(ctx context.Context, req sdk.ImagePushRequest) (*Push, error) {
	ref, ferr := parseRef(req.Ref, req.Insecure)
	if ferr != nil {
		return nil, ferr
	}
	auth, ferr := checkAuth(req.RegistryAuth)
	if ferr != nil {
		return nil, ferr
	}
	dir, ferr := s.resolve(req.Image)
	if ferr != nil {
		return nil, ferr
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fail(http.StatusNotFound, "GET /v1/images lists the node's images", "%s is not an image bundle: no %s", clip(req.Image), ManifestFile)
	}
	if len(cfg) > maxConfigBytes {
		return nil, fail(http.StatusBadRequest, "", "%s is larger than %d bytes", ManifestFile, maxConfigBytes)
	}
	var b bundle
	if err := json.Unmarshal(cfg, &b); err != nil {
		return nil, fail(http.StatusBadRequest, "", "%s of %s is not JSON: %v", ManifestFile, clip(req.Image), err)
	}
	if b.Kernel == "" {
		return nil, fail(http.StatusBadRequest, "", "%s of %s names no kernel", ManifestFile, clip(req.Image))
	}
	for _, f := range b.files() {
		if err := checkFileName(f.name); err != nil {
			return nil, fail(http.StatusBadRequest, "", "%s of %s: %v", ManifestFile, clip(req.Image), err)
		}
		if st, err := os.Stat(filepath.Join(dir, f.name)); err != nil || !st.Mode().IsRegular() {
			return nil, fail(http.StatusBadRequest, "rebuild the bundle (make guest-image)", "%s names %s, which is not a file in %s", ManifestFile, f.name, dir)
		}
	}
	return &Push{s: s, ref: ref, auth: auth, dir: dir, config: cfg, files: b.files()}, nil
}

// resolve turns a push's image into a bundle directory the node may read.
func (s *Store) resolve(image string) (string, *jsonapi.Error) {
	if image == "" || len(image) > 4096 {
		return "", fail(http.StatusBadRequest, "give an image's name (GET /v1/images) or its bundle directory", "image is required (up to 4096 bytes)")
	}
	if !filepath.IsAbs(image) {
		if !nameRE.MatchString(image) {
			return "", fail(http.StatusBadRequest, "give an image's name (GET /v1/images) or an absolute path", "image name %q is not valid", clip(image))
		}
		return filepath.Join(s.opts.Dir, image), nil
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(image))
	if err != nil {
		return "", fail(http.StatusNotFound, "", "%s does not exist", clip(image))
	}
	for _, d := range append([]string{s.opts.Dir}, s.opts.AllowedDirs...) {
		if rd, err := filepath.EvalSymlinks(d); err == nil && (real == rd || strings.HasPrefix(real, rd+string(filepath.Separator))) {
			return real, nil
		}
	}
	return "", fail(http.StatusForbidden, "images live under "+strings.Join(append([]string{s.opts.Dir}, s.opts.AllowedDirs...), ", "),
		"%s is outside the node's image directories", clip(image))
}

// Run uploads the files (those the registry has already are skipped), the
// metadata, then the manifest; it returns the manifest's digest.
func (p *Push) Run(ctx context.Context, emit func(sdk.ImageProgress)) (string, error) {
	m := &meter{now: p.s.opts.Now, emit: emit, start: p.s.opts.Now()}
	layers := make([]*fileLayer, 0, len(p.files))
	for _, f := range p.files {
		l, err := newFileLayer(filepath.Join(p.dir, f.name), types.MediaType(f.mediaType))
		if err != nil {
			return "", fmt.Errorf("push %s: %w", f.name, err)
		}
		m.total += l.size
		layers = append(layers, l)
	}
	emit(m.line("manifest", "", ""))
	opts := remoteOpts(ctx, p.s, p.auth)
	repo := p.ref.Context()
	man := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: sdk.ImageArtifactType}
	for i, l := range layers {
		title := p.files[i].name
		before := m.done
		l.count = func(n int64) { m.add(n, title, l.digest.String()) }
		if err := remote.WriteLayer(repo, l, opts...); err != nil {
			return "", registryErr(p.ref, "upload "+title, err)
		}
		m.done = before + l.size // a blob the registry had is not read at all
		emit(m.line("blob", title, l.digest.String()))
		man.Layers = append(man.Layers, v1.Descriptor{MediaType: l.mediaType, Size: l.size, Digest: l.digest,
			Annotations: map[string]string{sdk.ImageTitleAnnotation: title}})
	}
	cfg := &memLayer{data: p.config, mediaType: sdk.ImageConfigMediaType}
	if err := remote.WriteLayer(repo, cfg, opts...); err != nil {
		return "", registryErr(p.ref, "upload "+ManifestFile, err)
	}
	cd, _ := cfg.Digest()
	man.Config = v1.Descriptor{MediaType: sdk.ImageConfigMediaType, Size: int64(len(p.config)), Digest: cd}
	raw, err := json.Marshal(man)
	if err != nil {
		return "", err
	}
	if err := remote.Put(p.ref, rawManifest(raw), opts...); err != nil {
		return "", registryErr(p.ref, "write the manifest", err)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// fileLayer is one bundle file as an uncompressed blob.
type fileLayer struct {
	path      string
	mediaType types.MediaType
	size      int64
	digest    v1.Hash
	count     func(int64)
}

func newFileLayer(path string, mt types.MediaType) (*fileLayer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, err
	}
	return &fileLayer{path: path, mediaType: mt, size: n,
		digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	return &countReader{f, l.count}, nil
}

type countReader struct {
	*os.File
	count func(int64)
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.File.Read(b)
	if c.count != nil && n > 0 {
		c.count(int64(n))
	}
	return n, err
}

// memLayer is the config blob.
type memLayer struct {
	data      []byte
	mediaType types.MediaType
}

func (l *memLayer) Digest() (v1.Hash, error) {
	s := sha256.Sum256(l.data)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}, nil
}
func (l *memLayer) DiffID() (v1.Hash, error)             { return l.Digest() }
func (l *memLayer) Size() (int64, error)                 { return int64(len(l.data)), nil }
func (l *memLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }
func (l *memLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l *memLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(l.data))), nil
}
