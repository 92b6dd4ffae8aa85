package network

import (
	"errors"
	"testing"
)

func TestTenantSubnetIsTheTenantsSlash24(t *testing.T) {
	cases := []struct {
		prefix string
		n      int
		want   string // "" for ErrInvalid
	}{
		{"10.230", 7, "10.230.7.0/24"},
		{"10.230", 0, "10.230.0.0/24"},
		{"172.16", 255, "172.16.255.0/24"},
		{"10.230", 256, ""},
		{"10.230", -1, ""},
		{"10", 1, ""},
		{"10.230.1", 1, ""},
		{"10.300", 1, ""},
		{"", 1, ""},
		{"fd00::", 1, ""},
	}
	for _, c := range cases {
		got, err := TenantSubnet(c.prefix, c.n)
		if c.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("TenantSubnet(%q, %d) = %q, %v; want ErrInvalid", c.prefix, c.n, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("TenantSubnet(%q, %d) = %q, %v; want %q", c.prefix, c.n, got, err, c.want)
		}
	}
}
