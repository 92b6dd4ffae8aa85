package vms

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestResolveSendsSSHKeysForTheImagesLoginAndRefusesBadOnes: the keys of a
// create go to the node with the catalog image's ssh_user, and keys beyond
// the limits are a 400-kind refusal with a hint, before anything is reserved.
func TestResolveSendsSSHKeysForTheImagesLoginAndRefusesBadOnes(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	for _, im := range []*sdk.Image{
		{Name: "deb", GuestOS: store.GuestLinux, Image: "/img/deb", SSHUser: "debian"},
		{Name: "mac", GuestOS: store.GuestMacOS, Image: "/img/mac"},
	} {
		if err := st.PutImage(ctx, im); err != nil {
			t.Fatal(err)
		}
	}
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0b3Bz me@laptop"
	spec, _, err := Resolve(ctx, st, "t-acme", &sdk.FleetCreateVMRequest{Name: "web", Image: "deb", SSHAuthorizedKeys: []string{key}})
	if err != nil || len(spec.SSHAuthorizedKeys) != 1 || spec.SSHAuthorizedKeys[0] != key || spec.SSHUser != "debian" {
		t.Fatalf("Resolve = %+v, %v; want the key for debian", spec, err)
	}
	// An image stored without ssh_user gets central's default, admin.
	if err := st.PutImage(ctx, &sdk.Image{Name: "plain", GuestOS: store.GuestLinux, Image: "/img/plain"}); err != nil {
		t.Fatal(err)
	}
	if spec, _, err := Resolve(ctx, st, "t-acme", &sdk.FleetCreateVMRequest{Name: "web", Image: "plain", SSHAuthorizedKeys: []string{key}}); err != nil || spec.SSHUser != sdk.DefaultSSHUser {
		t.Errorf("Resolve of an image without ssh_user = %+v, %v; want ssh_user %s", spec, err, sdk.DefaultSSHUser)
	}
	many := make([]string, sdk.MaxSSHAuthorizedKeys+1)
	for i := range many {
		many[i] = key
	}
	for _, tc := range []struct {
		what string
		req  sdk.FleetCreateVMRequest
		says string
	}{
		{"too many keys", sdk.FleetCreateVMRequest{Name: "a", Image: "deb", SSHAuthorizedKeys: many}, "at most 16"},
		{"a huge key", sdk.FleetCreateVMRequest{Name: "a", Image: "deb", SSHAuthorizedKeys: []string{"ssh-rsa " + strings.Repeat("A", 1<<20)}}, "at most 8192"},
		{"not a key", sdk.FleetCreateVMRequest{Name: "a", Image: "deb", SSHAuthorizedKeys: []string{"password123"}}, "not an OpenSSH public key"},
		{"a macOS guest", sdk.FleetCreateVMRequest{Name: "a", Image: "mac", SSHAuthorizedKeys: []string{key}}, "Linux guest agent"},
	} {
		_, _, err := Resolve(ctx, st, "t-acme", &tc.req)
		var rf *jsonapi.Error
		if !errors.As(err, &rf) || rf.Status != http.StatusBadRequest || !strings.Contains(rf.Msg, tc.says) || rf.Hint == "" || len(rf.Msg) > 300 {
			t.Errorf("%s: %v; want an http.StatusBadRequest refusal saying %q, with a hint, short", tc.what, err, tc.says)
		}
	}
}
