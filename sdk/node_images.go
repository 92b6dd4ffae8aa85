package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The artifact layout of a FluxVM image in an OCI registry (docs/images.md):
// an OCI image manifest whose artifactType and config say "FluxVM image",
// whose config blob is the bundle's fluxvm-image.json, and whose layers are
// the bundle's files, uncompressed, each named by its
// org.opencontainers.image.title annotation.
const (
	ImageArtifactType    = "application/vnd.fluxvm.image.v1"
	ImageConfigMediaType = "application/vnd.fluxvm.image.config.v1+json"
	ImageKernelMediaType = "application/vnd.fluxvm.image.kernel.v1"
	ImageInitrdMediaType = "application/vnd.fluxvm.image.initrd.v1"
	ImageDiskMediaType   = "application/vnd.fluxvm.image.disk.qcow2.v1"
	ImageTitleAnnotation = "org.opencontainers.image.title"
)

// Bounds of the image routes' fields, enforced by the node (agent/images)
// and stated in schemas/node-openapi.yaml.
const (
	MaxImageRefLen       = 512
	MaxImageNameLen      = 63
	MaxRegistryUserLen   = 256
	MaxRegistrySecretLen = 8192
)

// RegistryAuth is how the node signs in to a registry. Neither field is
// logged or kept: the node uses them for the one pull or push.
type RegistryAuth struct {
	// Username and Password for a registry's basic or token sign-in.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// Token is a bearer token given as is (instead of a username).
	Token string `json:"token,omitempty"`
}

// ImagePullRequest is POST /v1/images/pull.
type ImagePullRequest struct {
	// Ref is the artifact: registry/repository:tag or @sha256:digest.
	Ref string `json:"ref"`
	// Name is the image's directory under the node's image directory; empty:
	// the name in the image's metadata.
	Name string `json:"name,omitempty"`
	// Insecure allows plain HTTP to a registry that is not on loopback.
	Insecure bool `json:"insecure,omitempty"`
	RegistryAuth
}

// ImagePushRequest is POST /v1/images/push.
type ImagePushRequest struct {
	// Image is a bundle's name under the node's image directory, or an
	// absolute path of a bundle directory under the node's allowed image
	// directories.
	Image string `json:"image"`
	// Ref is where to publish it: registry/repository:tag.
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
	RegistryAuth
}

// NodeImage is a VM image bundle on a node.
type NodeImage struct {
	Name string `json:"name"`
	// Path is the bundle directory: what a VM spec's image names.
	Path    string `json:"path"`
	GuestOS string `json:"guest_os,omitempty"`
	// SizeBytes is the sum of the bundle's files.
	SizeBytes int64 `json:"size_bytes"`
	// Ref and Digest say where a pulled image came from (the manifest's
	// digest); empty for an image built on the node.
	Ref      string     `json:"ref,omitempty"`
	Digest   string     `json:"digest,omitempty"`
	PulledAt *time.Time `json:"pulled_at,omitempty"`
}

// ImageProgress is one line of a pull's or push's stream
// (application/x-ndjson). Phase "manifest" comes first, "blob" lines while
// files move, then exactly one "done" (with Image or Digest) or "error".
type ImageProgress struct {
	Phase string `json:"phase"`
	// File is the bundle file a "blob" line is about, Digest its blob digest
	// (or, on "done" of a push, the manifest's).
	File   string `json:"file,omitempty"`
	Digest string `json:"digest,omitempty"`
	// BytesDone and BytesTotal count the whole transfer (every file).
	BytesDone  int64 `json:"bytes_done"`
	BytesTotal int64 `json:"bytes_total"`
	// ResumedBytes were already on the node from an interrupted pull and
	// were not fetched again.
	ResumedBytes int64 `json:"resumed_bytes,omitempty"`
	// BytesPerSecond is the rate since the transfer began (resumed bytes not
	// counted); ETASeconds the time left at that rate (-1: unknown).
	BytesPerSecond int64 `json:"bytes_per_second"`
	ETASeconds     int64 `json:"eta_seconds"`
	// Image is the pulled image, on "done" of a pull.
	Image *NodeImage `json:"image,omitempty"`
	// Status, Error and Hint say why on "error": Status is what the node
	// would have answered had the failure come before the stream began.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	Hint   string `json:"hint,omitempty"`
}

// maxProgressLine bounds one line of a progress stream.
const maxProgressLine = 64 << 10

// Images lists the image bundles in the node's image directory.
func (n *NodeClient) Images(ctx context.Context) ([]NodeImage, error) {
	var out []NodeImage
	return out, n.c.call(ctx, http.MethodGet, "/v1/images", nil, nil, &out)
}

// PullImage asks the node to pull an image; progress (may be nil) gets every
// line of the stream. It returns the image, or the stream's error as an
// *APIError.
func (n *NodeClient) PullImage(ctx context.Context, req ImagePullRequest, progress func(ImageProgress)) (*NodeImage, error) {
	last, err := n.imageStream(ctx, "/v1/images/pull", req, progress)
	if err != nil {
		return nil, err
	}
	return last.Image, nil
}

// PushImage asks the node to publish one of its images; it returns the
// manifest's digest.
func (n *NodeClient) PushImage(ctx context.Context, req ImagePushRequest, progress func(ImageProgress)) (string, error) {
	last, err := n.imageStream(ctx, "/v1/images/push", req, progress)
	if err != nil {
		return "", err
	}
	return last.Digest, nil
}

func (n *NodeClient) imageStream(ctx context.Context, path string, in any, progress func(ImageProgress)) (*ImageProgress, error) {
	resp, err := n.c.do(ctx, http.MethodPost, path, nil, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), maxProgressLine)
	for sc.Scan() {
		var p ImageProgress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("POST %s: decode progress line: %w", path, err)
		}
		if progress != nil {
			progress(p)
		}
		switch p.Phase {
		case "done":
			return &p, nil
		case "error":
			return nil, &APIError{Status: p.Status, Message: p.Error, Hint: p.Hint}
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("POST %s: %w", path, ctx.Err())
		}
		return nil, &ConnectError{Service: n.c.service, URL: n.c.shown, Err: err}
	}
	return nil, &ConnectError{Service: n.c.service, URL: n.c.shown,
		Err: fmt.Errorf("the progress stream of %s ended before it said done or error", path)}
}
