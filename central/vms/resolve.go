package vms

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Catalog is what resolving a create needs of central's store.
type Catalog interface {
	// GetImage reads one catalog image.
	GetImage(ctx context.Context, name string) (*sdk.Image, error)
	// ListImages reads the whole catalog.
	ListImages(ctx context.Context) ([]sdk.Image, error)
}

// MaxLabels bounds a VM's labels and a request's node_selector entries.
const MaxLabels = 64

// ReservedLabelPrefix starts the labels FluxVM sets itself (a warm pool's
// mark): tenants may not set them, but for EphemeralLabel.
const ReservedLabelPrefix = "fluxvm.dev/"

// EphemeralLabel marks a VM that a drain may delete, like one with a TTL.
const EphemeralLabel = "fluxvm.dev/ephemeral"

// The node agent's rules for names and labels, checked here too so that a
// bad request is refused before anything is reserved.
var (
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)
)

// Resolve checks a create request of tenant ("" is the operator) and turns
// it into the node's request (image path, guest OS and size filled from the
// catalog, the tenant stamped). It returns the image's name for the ledger,
// or a *jsonapi.Error.
func Resolve(ctx context.Context, cat Catalog, tenant string, req *sdk.FleetCreateVMRequest) (spec sdk.CreateVMRequest, image string, err error) {
	bad := func(m, h string) (sdk.CreateVMRequest, string, error) {
		return sdk.CreateVMRequest{}, "", &jsonapi.Error{Status: http.StatusBadRequest, Msg: m, Hint: h}
	}
	refuse := func(k int, m, h string) (sdk.CreateVMRequest, string, error) {
		return sdk.CreateVMRequest{}, "", &jsonapi.Error{Status: k, Msg: m, Hint: h}
	}
	if !nameRE.MatchString(req.Name) {
		return bad(fmt.Sprintf("name %q is not a valid vm name", jsonapi.Echo(req.Name)), "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	spec = sdk.CreateVMRequest{Name: req.Name, GuestOS: req.GuestOS, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB,
		Display: req.Display, Network: req.Network, TTLSeconds: req.TTLSeconds, Labels: req.Labels, Tenant: tenant}
	switch {
	case req.Image != "" && req.ImagePath != "":
		return bad("give image or image_path, not both", "image names a catalog image; image_path a disk on the nodes")
	case req.ImagePath != "":
		if tenant != "" {
			names, _ := CatalogNames(ctx, cat)
			return refuse(http.StatusForbidden, "image_path is for the operator", "launch a catalog image by name instead (\"image\"): "+names)
		}
		if !filepath.IsAbs(req.ImagePath) {
			return bad("image_path must be an absolute path on the nodes", "or launch a catalog image by name (\"image\")")
		}
		spec.Image, image = req.ImagePath, req.ImagePath
	default:
		// The catalog's names are read only for a refusal's hint: a create that
		// names an image reads that one image.
		badImage := func(msg string) (sdk.CreateVMRequest, string, error) {
			names, err := CatalogNames(ctx, cat)
			if err != nil {
				return refuse(http.StatusServiceUnavailable, "cannot read the image catalog", "retry in a moment")
			}
			return bad(msg, "catalog images: "+names)
		}
		if req.Image == "" {
			return badImage("image is required: a catalog image's name")
		}
		if !store.ValidName(req.Image) {
			return badImage(fmt.Sprintf("no image %q in the catalog", jsonapi.Echo(req.Image)))
		}
		im, err := cat.GetImage(ctx, req.Image)
		if errors.Is(err, store.ErrNotFound) {
			return badImage(fmt.Sprintf("no image %q in the catalog", jsonapi.Echo(req.Image)))
		}
		if err != nil {
			return refuse(http.StatusServiceUnavailable, "cannot read the image catalog", "retry in a moment")
		}
		if spec.GuestOS != "" && spec.GuestOS != im.GuestOS {
			return bad(fmt.Sprintf("guest_os %q does not match image %s, a %s image", jsonapi.Echo(spec.GuestOS), im.Name, im.GuestOS),
				"leave guest_os out: the catalog image sets it")
		}
		spec.GuestOS, spec.Image, image = im.GuestOS, im.Image, im.Name
		spec.SSHUser = im.SSHUser
		if spec.VCPUs == 0 {
			spec.VCPUs = im.VCPUs
		}
		if spec.MemoryMiB == 0 {
			spec.MemoryMiB = im.MemoryMiB
		}
	}
	if spec.GuestOS == "" {
		spec.GuestOS = store.GuestLinux
	}
	switch {
	case spec.GuestOS != store.GuestLinux && spec.GuestOS != store.GuestMacOS:
		return bad(fmt.Sprintf("guest_os %q is not known", jsonapi.Echo(spec.GuestOS)), `use "linux" or "macos"`)
	case spec.VCPUs < 1 || spec.VCPUs > 1024:
		return bad(fmt.Sprintf("vcpus must be between 1 and 1024, not %d", spec.VCPUs), "ask for 1 or more vCPUs")
	case spec.MemoryMiB < 64 || spec.MemoryMiB > 16<<20:
		return bad(fmt.Sprintf("memory_mib must be between 64 and 16777216, not %d", spec.MemoryMiB), "ask for at least 64 MiB")
	case spec.TTLSeconds < 0:
		return bad("ttl_seconds must not be negative", "leave it out for a VM that lives until deleted")
	case spec.Network != "" && spec.Network != NetworkUser && spec.Network != NetworkNone && spec.Network != NetworkTenant:
		return bad(fmt.Sprintf("network %q is not known", jsonapi.Echo(spec.Network)), `use "tenant" (your tenant's own network), "user" (NAT) or "none"`)
	case req.Node != "" && !store.ValidName(req.Node):
		return bad(fmt.Sprintf("node %q is not a valid node name", jsonapi.Echo(req.Node)), "GET /fleet/capacity lists the nodes you may use")
	case len(req.Labels) > MaxLabels || len(req.NodeSelector) > MaxLabels:
		return bad(fmt.Sprintf("at most %d labels and %d node_selector entries", MaxLabels, MaxLabels), "trim them")
	}
	for _, m := range []map[string]string{req.Labels, req.NodeSelector} {
		for k, v := range m {
			if !labelKeyRE.MatchString(k) || len(v) > 256 {
				return bad(fmt.Sprintf("label %q is not valid", jsonapi.Echo(k)),
					"label keys are 1-63 letters, digits, '.', '_', '/' or '-'; values at most 256 characters")
			}
		}
	}
	// The keys go to the node as they came; the node checks them too (same rule).
	if err := sdk.CheckSSHAuthorizedKeys(req.SSHAuthorizedKeys, spec.SSHUser); err != nil {
		var ae *sdk.APIError
		if errors.As(err, &ae) {
			return bad(ae.Message, ae.Hint)
		}
		return bad(err.Error(), "")
	}
	if len(req.SSHAuthorizedKeys) > 0 && spec.GuestOS != store.GuestLinux {
		return bad("ssh_authorized_keys are installed by the Linux guest agent; a macOS guest has none",
			"leave ssh_authorized_keys out, or launch a Linux image")
	}
	spec.SSHAuthorizedKeys = req.SSHAuthorizedKeys
	if tenant != "" {
		for k := range req.Labels {
			if strings.HasPrefix(k, ReservedLabelPrefix) && k != EphemeralLabel {
				return bad(fmt.Sprintf("label %q uses the reserved prefix %s", k, ReservedLabelPrefix),
					"FluxVM sets those labels itself; of them a tenant may set only "+EphemeralLabel+"=true")
			}
		}
	}
	return spec, image, nil
}

// CatalogNames lists the catalog's image names, for hints.
func CatalogNames(ctx context.Context, cat Catalog) (string, error) {
	ims, err := cat.ListImages(ctx)
	if err != nil {
		return "", err
	}
	if len(ims) == 0 {
		return "(none yet: the operator adds them with PUT /fleet/images/{name})", nil
	}
	names := make([]string, len(ims))
	for i, im := range ims {
		names[i] = im.Name
	}
	return strings.Join(names, ", "), nil
}
