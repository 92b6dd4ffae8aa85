package central

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/signup"
)

func TestCentralRefusesASignupThatCouldNotMailItsLinks(t *testing.T) {
	good := Options{FleetToken: "t", PublicURL: "https://cloud.example.com",
		Signup: api.SignupOptions{Enabled: true, SMTP: signup.SMTP{Host: "smtp.example.com", Port: 587, From: "signup@example.com"}}}
	if err := checkSignup(good); err != nil {
		t.Fatalf("a complete set-up: %v", err)
	}
	if err := checkSignup(Options{}); err != nil {
		t.Fatalf("sign-up off: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"lab mode", func(o *Options) { o.FleetToken = "" }, "-token"},
		{"no public URL", func(o *Options) { o.PublicURL = "" }, "-public-url"},
		{"a public URL without a scheme", func(o *Options) { o.PublicURL = "cloud.example.com" }, "-public-url"},
		{"no SMTP host", func(o *Options) { o.Signup.SMTP.Host = "" }, "-smtp-host"},
		{"no sender", func(o *Options) { o.Signup.SMTP.From = "" }, "-smtp-from"},
	} {
		o := good
		c.edit(&o)
		if err := checkSignup(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
}
