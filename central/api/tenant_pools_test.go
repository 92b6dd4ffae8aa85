package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestTenantWithPoolsIsNotDeleted: a tenant's warm pools keep it from being
// deleted (the pool loop would boot their VMs again for a tenant that is
// gone); the refusal names the pools and how to delete them, and once they
// are gone the tenant goes.
func TestTenantWithPoolsIsNotDeleted(t *testing.T) {
	c := newFxCentral(t, fxStore(t, nil))
	_, img := fxImages(t)
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	id, tok := fxTenant(t, c.url, "acme", nil)
	// No pool loop runs here: the pools stay empty records.
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "ci", "image": "tiny", "size": 2}, http.StatusCreated, nil)
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "web", "image": "tiny", "size": 1}, http.StatusCreated, nil)

	code, body := fxCall(t, "DELETE", c.url+"/fleet/tenants/acme", fxToken, nil)
	if code != http.StatusConflict || !strings.Contains(string(body), "warm pools: ci, web") ||
		!strings.Contains(string(body), "DELETE /fleet/pools/{name}?tenant="+id) {
		t.Fatalf("delete a tenant with pools: %d %s", code, body)
	}
	fxMust(t, "GET", c.url+"/fleet/tenants/acme", fxToken, nil, http.StatusOK, nil)
	for _, p := range []string{"ci", "web"} {
		fxMust(t, "DELETE", c.url+"/fleet/pools/"+p+"?tenant="+id, fxToken, nil, http.StatusNoContent, nil)
	}
	fxMust(t, "DELETE", c.url+"/fleet/tenants/acme", fxToken, nil, http.StatusNoContent, nil)
}
