package sdk_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestFleetClientManagesAPIKeysOnARealCentral: a tenant makes keys with its
// primary token and lists them; a key acts as the tenant and lists them
// too, but cannot make one, and a read-only key cannot change anything; the
// operator makes and revokes a tenant's keys by the tenant's name; a
// revoked key is refused; each refusal is the Is* it says it is.
func TestFleetClientManagesAPIKeysOnARealCentral(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)
	name := unique("keys")
	_, token := liveFleet.Tenant(t, name, nil)
	tenant := fleetClient(t, token)

	full, err := tenant.CreateKey(ctx, "", sdk.CreateKeyRequest{Name: "ci-github"})
	if err != nil || !strings.HasPrefix(full.Token, sdk.APIKeyPrefix) || full.Key.Name != "ci-github" || full.Key.ExpiresAt.IsZero() {
		t.Fatalf("create a key: %+v, %v", full, err)
	}
	never := 0
	ro, err := tenant.CreateKey(ctx, "", sdk.CreateKeyRequest{Name: "grafana", ReadOnly: true, ExpiresDays: &never})
	if err != nil || !ro.Key.ReadOnly || !ro.Key.ExpiresAt.IsZero() {
		t.Fatalf("create a read-only key that never expires: %+v, %v", ro, err)
	}
	byKey := fleetClient(t, full.Token)
	if me, err := byKey.TenantMe(ctx); err != nil || me.Tenant.Name != name {
		t.Fatalf("the key's tenant: %+v, %v", me, err)
	}
	ks, err := byKey.ListKeys(ctx, "")
	if err != nil || len(ks) != 2 || ks[0].Name != "ci-github" || ks[0].LastUsedAt.IsZero() || ks[1].Name != "grafana" {
		t.Fatalf("keys listed with a key: %+v, %v", ks, err)
	}
	readOnly := fleetClient(t, ro.Token)
	for _, c := range []struct {
		what   string
		err    error
		status int
		is     func(error) bool
	}{
		{"a key making a key", func() error { _, err := byKey.CreateKey(ctx, "", sdk.CreateKeyRequest{Name: "x"}); return err }(), http.StatusForbidden, sdk.IsForbidden},
		{"a read-only key revoking", readOnly.RevokeKey(ctx, "", "ci-github"), http.StatusForbidden, sdk.IsForbidden},
		{"a name taken", func() error { _, err := tenant.CreateKey(ctx, "", sdk.CreateKeyRequest{Name: "grafana"}); return err }(), http.StatusConflict, sdk.IsConflict},
		{"an unknown key", tenant.RevokeKey(ctx, "", "nope"), http.StatusNotFound, sdk.IsNotFound},
		{"a tenant naming a tenant", func() error { _, err := tenant.ListKeys(ctx, name); return err }(), http.StatusForbidden, sdk.IsForbidden},
		{"the operator without a tenant", func() error { _, err := op.ListKeys(ctx, ""); return err }(), http.StatusBadRequest, func(error) bool { return true }},
	} {
		if wantStatus(t, c.what, c.err, c.status); !c.is(c.err) {
			t.Fatalf("%s: %v is not what its Is* says", c.what, c.err)
		}
	}

	opKey, err := op.CreateKey(ctx, name, sdk.CreateKeyRequest{Name: "from-ops"})
	if err != nil {
		t.Fatal(err)
	}
	if ks, err := op.ListKeys(ctx, name); err != nil || len(ks) != 3 {
		t.Fatalf("the operator's list of %s's keys: %+v, %v", name, ks, err)
	}
	if err := op.RevokeKey(ctx, name, opKey.Key.ID); err != nil {
		t.Fatal(err)
	}
	if err := tenant.RevokeKey(ctx, "", "ci-github"); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{opKey.Token, full.Token} {
		if _, err := fleetClient(t, gone).TenantMe(ctx); !sdk.IsUnauthorized(err) {
			t.Fatalf("a revoked key: %v, want IsUnauthorized", err)
		}
	}
	if ks, err := readOnly.ListKeys(ctx, ""); err != nil || len(ks) != 1 || ks[0].Name != "grafana" {
		t.Fatalf("keys left: %+v, %v", ks, err)
	}
}
