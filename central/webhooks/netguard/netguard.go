// Package netguard keeps tenants' webhooks from being turned against the
// network central runs in. It refuses a URL that is not https or names an
// address that is not public, resolves the host again at every delivery,
// refuses the delivery if any address it resolves to is not public, and
// pins the connection to the address it checked (TLS still verifies the
// host name); redirects are never followed.
package netguard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// MaxURLLen is the longest webhook URL accepted (docs/notifications.md).
const MaxURLLen = 2048

// DefaultTimeout bounds one delivery: resolving, connecting, TLS, sending
// and reading the answer's status.
const DefaultTimeout = 10 * time.Second

// ErrRefused is wrapped by every refusal of this package, so callers can
// tell a refused address from a receiver that did not answer.
var ErrRefused = errors.New("refused")

// RefusedError says why a URL or an address is refused.
type RefusedError struct {
	// Host is the URL's host as given ("" when the URL itself is wrong).
	Host string
	// Addr is the refused address (invalid when the URL is refused).
	Addr netip.Addr
	// Reason is what is wrong, in words: "loopback", "private (10.0.0.0/8)".
	Reason string
}

func (e *RefusedError) Error() string {
	switch {
	case e.Addr.IsValid() && e.Host != "" && e.Host != e.Addr.String():
		return fmt.Sprintf("%s resolves to %s, which is not a public address: %s", e.Host, e.Addr, e.Reason)
	case e.Addr.IsValid():
		return fmt.Sprintf("%s is not a public address: %s", e.Addr, e.Reason)
	}
	return e.Reason
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// class is a range of addresses that is not public, with its name.
type class struct {
	prefix netip.Prefix
	reason string
}

func mustClasses(pairs ...string) []class {
	out := make([]class, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, class{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// v4Refused is every IPv4 range that is not public (IANA's special-purpose
// registry, the ranges not globally reachable).
var v4Refused = mustClasses(
	"0.0.0.0/8", "this network (0.0.0.0/8)",
	"10.0.0.0/8", "private (10.0.0.0/8)",
	"100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)",
	"127.0.0.0/8", "loopback (127.0.0.0/8)",
	"169.254.0.0/16", "link-local (169.254.0.0/16)",
	"172.16.0.0/12", "private (172.16.0.0/12)",
	"192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)",
	"192.0.2.0/24", "documentation (192.0.2.0/24)",
	"192.88.99.0/24", "6to4 relay anycast (192.88.99.0/24)",
	"192.168.0.0/16", "private (192.168.0.0/16)",
	"198.18.0.0/15", "benchmarking (198.18.0.0/15)",
	"198.51.100.0/24", "documentation (198.51.100.0/24)",
	"203.0.113.0/24", "documentation (203.0.113.0/24)",
	"224.0.0.0/4", "multicast (224.0.0.0/4)",
	"255.255.255.255/32", "broadcast (255.255.255.255)",
	"240.0.0.0/4", "reserved (240.0.0.0/4)",
)

// v6Refused is every IPv6 range that is not public and does not embed an
// IPv4 address that decides (those are handled in Check).
var v6Refused = mustClasses(
	"::/128", "unspecified (::)",
	"::1/128", "loopback (::1)",
	"::/96", "IPv4-compatible IPv6 (::/96, deprecated)",
	"64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)",
	"100::/64", "discard-only (100::/64)",
	"2001::/32", "Teredo (2001::/32)",
	"2001:2::/48", "benchmarking (2001:2::/48)",
	"2001:10::/28", "ORCHID (2001:10::/28)",
	"2001:20::/28", "ORCHIDv2 (2001:20::/28)",
	"2001:db8::/32", "documentation (2001:db8::/32)",
	"3fff::/20", "documentation (3fff::/20)",
	"5f00::/16", "segment routing (5f00::/16)",
	"fc00::/7", "unique-local (fc00::/7)",
	"fe80::/10", "link-local (fe80::/10)",
	"fec0::/10", "site-local (fec0::/10)",
	"ff00::/8", "multicast (ff00::/8)",
)

var (
	mapped = netip.MustParsePrefix("::ffff:0:0/96")
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
	global = netip.MustParsePrefix("2000::/3")
)

// Check returns nil for a public address and a *RefusedError saying which
// class it falls in otherwise. IPv6 forms that carry an IPv4 address
// (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by that
// address; any other IPv6 address must be global unicast (2000::/3) outside
// the special ranges.
func Check(a netip.Addr) error {
	reason := classify(a)
	if reason == "" {
		return nil
	}
	return &RefusedError{Addr: a, Reason: reason}
}

func classify(a netip.Addr) string {
	if !a.IsValid() {
		return "not an address"
	}
	if a.Zone() != "" {
		return "scoped address (zone " + a.Zone() + ")"
	}
	if a.Is4() {
		for _, c := range v4Refused {
			if c.prefix.Contains(a) {
				return c.reason
			}
		}
		return ""
	}
	embedded := func(form string, v4 netip.Addr) string {
		if r := classify(v4); r != "" {
			return form + " of " + v4.String() + ": " + r
		}
		return ""
	}
	b := a.As16()
	switch {
	case mapped.Contains(a):
		return embedded("IPv4-mapped IPv6", a.Unmap())
	case nat64.Contains(a):
		return embedded("NAT64 (64:ff9b::/96)", netip.AddrFrom4([4]byte(b[12:16])))
	case sixTo4.Contains(a):
		return embedded("6to4 (2002::/16)", netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, c := range v6Refused {
		if c.prefix.Contains(a) {
			return c.reason
		}
	}
	if !global.Contains(a) {
		return "not global unicast (outside 2000::/3)"
	}
	return ""
}

// CheckURL judges a tenant's webhook URL when it is created: at most
// MaxURLLen bytes, https, a host, no user name or password, and, when the
// host is an IP literal, a public one. A host name is judged at every
// delivery (Guard.Do), since what it resolves to may change.
func CheckURL(raw string) (*url.URL, error) {
	refuse := func(reason string) (*url.URL, error) { return nil, &RefusedError{Reason: reason} }
	if len(raw) > MaxURLLen {
		return refuse(fmt.Sprintf("the URL is longer than %d bytes", MaxURLLen))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return refuse("the URL does not parse")
	case u.Scheme != "https":
		return refuse("a tenant's webhook must use https")
	case u.Hostname() == "":
		return refuse("the URL has no host")
	case u.User != nil:
		return refuse("the URL may not carry a user name or password")
	case u.Fragment != "" || u.Opaque != "":
		return refuse("the URL may not have a fragment or an opaque part")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return nil, &RefusedError{Host: u.Hostname(), Reason: "localhost is loopback"}
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if err := Check(a); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Resolver looks a host name up (*net.Resolver does).
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Guard sends requests to tenants' webhooks.
type Guard struct {
	// Resolver looks the host up at every delivery (nil: net.DefaultResolver).
	Resolver Resolver
	// Timeout bounds one request (DefaultTimeout when 0).
	Timeout time.Duration
	// TLSConfig, when set, is cloned for each connection (ServerName is
	// always set to the URL's host). Tests give it their own CA.
	TLSConfig *tls.Config
	// RewriteForTests is for tests only and central never sets it: it
	// turns the checked, pinned address into the one actually dialed, so a
	// test's server on loopback can stand in for a public address and no
	// test traffic leaves the machine. The address is checked before the
	// rewrite, as in production.
	RewriteForTests func(netip.AddrPort) netip.AddrPort
}

// Do sends req (its URL must pass CheckURL) to the address its host
// resolves to now: every address the resolver returns must be public, or
// the request is refused with a *RefusedError before anything is sent. The
// connection goes to the checked address only, TLS verifies the URL's host
// name, no proxy is used and a redirect is returned as it is, not followed.
func (g *Guard) Do(req *http.Request) (*http.Response, error) {
	if _, err := CheckURL(req.URL.String()); err != nil {
		return nil, err
	}
	ctx := req.Context()
	host := req.URL.Hostname()
	port := req.URL.Port()
	if port == "" {
		port = "443"
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		var r Resolver = net.DefaultResolver
		if g.Resolver != nil {
			r = g.Resolver
		}
		ips, err := r.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ip := range ips {
			a, ok := netip.AddrFromSlice(ip.IP)
			if !ok {
				return nil, &RefusedError{Host: host, Reason: "the resolver returned a malformed address"}
			}
			addrs = append(addrs, a.WithZone(ip.Zone))
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	for _, a := range addrs {
		if r := classify(a); r != "" {
			return nil, &RefusedError{Host: host, Addr: a, Reason: r}
		}
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", port, err)
	}
	// Every address was checked; they are tried in the resolver's order
	// (an IPv6 one first may not be reachable from here), and no other.
	pinned := make([]netip.AddrPort, len(addrs))
	for i, a := range addrs {
		pinned[i] = netip.AddrPortFrom(a.Unmap(), uint16(p))
		if g.RewriteForTests != nil {
			pinned[i] = g.RewriteForTests(pinned[i])
		}
	}
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.TLSConfig != nil {
		tlsConf = g.TLSConfig.Clone()
	}
	tlsConf.ServerName = host
	dialer := &net.Dialer{Timeout: timeout}
	tr := &http.Transport{
		Proxy: nil, // never through a proxy: the pinned address is where it goes
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var errs []error
			for _, ap := range pinned {
				c, err := dialer.DialContext(ctx, "tcp", ap.String())
				if err == nil {
					return c, nil
				}
				errs = append(errs, err)
				if ctx.Err() != nil {
					break
				}
			}
			return nil, errors.Join(errs...)
		},
		TLSClientConfig:        tlsConf,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Drain reads and closes at most 64 KiB of an answer's body, so a receiver
// cannot make central read forever.
func Drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
