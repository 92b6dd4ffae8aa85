package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestARevokedKeyIs401AtOnceOnEveryCentral: two centrals on one etcd; a key
// used through one is revoked through the other, and the very next request
// through either is 401, as a key never made is. Then the other way round.
func TestARevokedKeyIs401AtOnceOnEveryCentral(t *testing.T) {
	st := fxStore(t, nil)
	clock := newLxClock(time.Now().UTC())
	c1 := newLxCentral(t, st, clock)
	c2 := newLxCentral(t, fxStore(t, st.Endpoints()), clock)
	_, token := fxTenant(t, c1.url, "acme", nil)
	for _, c := range []struct{ use, revoke *fxCentral }{{c2, c1}, {c1, c2}} {
		var k sdk.APIKeyWithToken
		fxMust(t, "POST", c.revoke.url+"/fleet/tenants/me/keys", token, map[string]any{"name": "ci"}, http.StatusCreated, &k)
		for range 3 { // the key is known on both, and used (a cache would now hold it)
			fxMust(t, "GET", c.use.url+"/fleet/tenants/me/keys", k.Token, nil, http.StatusOK, nil)
			fxMust(t, "GET", c.revoke.url+"/fleet/tenants/me", k.Token, nil, http.StatusOK, nil)
		}
		fxMust(t, "DELETE", c.revoke.url+"/fleet/tenants/me/keys/"+k.Key.ID, token, nil, http.StatusNoContent, nil)
		fxMust(t, "GET", c.use.url+"/fleet/tenants/me/keys", k.Token, nil, http.StatusUnauthorized, nil)
		fxMust(t, "GET", c.revoke.url+"/fleet/tenants/me/keys", k.Token, nil, http.StatusUnauthorized, nil)
	}
}

// TestAnExpiredKeyIs401LikeAnUnknownOne: with central's clock moved, a key
// of one day works until its last second and is then refused exactly as a
// key never made (same status, same answer), on both centrals; a key that
// never expires still works years on.
func TestAnExpiredKeyIs401LikeAnUnknownOne(t *testing.T) {
	st := fxStore(t, nil)
	clock := newLxClock(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC))
	c1 := newLxCentral(t, st, clock)
	c2 := newLxCentral(t, fxStore(t, st.Endpoints()), clock)
	_, token := fxTenant(t, c1.url, "acme", nil)
	var day, never sdk.APIKeyWithToken
	fxMust(t, "POST", c1.url+"/fleet/tenants/me/keys", token, map[string]any{"name": "day", "expires_days": 1}, http.StatusCreated, &day)
	fxMust(t, "POST", c1.url+"/fleet/tenants/me/keys", token, map[string]any{"name": "never", "expires_days": 0}, http.StatusCreated, &never)
	if !day.Key.ExpiresAt.Equal(clock.now().Add(24 * time.Hour)) {
		t.Fatalf("a key of one day expires at %v", day.Key.ExpiresAt)
	}
	clock.advance(24*time.Hour - time.Second)
	fxMust(t, "GET", c2.url+"/fleet/tenants/me", day.Token, nil, http.StatusOK, nil)
	clock.advance(time.Second)
	_, unknown := fxCall(t, "GET", c1.url+"/fleet/tenants/me", "fvk_"+"0123456789012345678901234567890123456789abc", nil)
	for _, c := range []*fxCentral{c1, c2} {
		code, body := fxCall(t, "GET", c.url+"/fleet/tenants/me", day.Token, nil)
		if code != http.StatusUnauthorized || string(body) != string(unknown) {
			t.Fatalf("an expired key: %d %s, want 401 %s (as a key never made)", code, body, unknown)
		}
	}
	clock.advance(10 * 365 * 24 * time.Hour)
	fxMust(t, "GET", c2.url+"/fleet/tenants/me", never.Token, nil, http.StatusOK, nil)
}
