package netguard

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// refusedCases is every class of address a tenant's webhook may not reach,
// in IPv4 and IPv6 forms, with a word its reason must contain.
var refusedCases = []struct{ addr, says string }{
	{"0.0.0.0", "this network"},
	{"0.1.2.3", "this network"},
	{"10.1.2.3", "private"},
	{"100.64.0.1", "carrier-grade NAT"},
	{"100.127.255.254", "carrier-grade NAT"},
	{"127.0.0.1", "loopback"},
	{"127.255.0.9", "loopback"},
	{"169.254.169.254", "link-local"},
	{"172.16.0.1", "private"},
	{"172.31.255.255", "private"},
	{"192.0.0.8", "IETF protocol"},
	{"192.0.2.10", "documentation"},
	{"192.88.99.1", "6to4 relay"},
	{"192.168.1.1", "private"},
	{"198.18.0.1", "benchmarking"},
	{"198.19.255.1", "benchmarking"},
	{"198.51.100.7", "documentation"},
	{"203.0.113.9", "documentation"},
	{"224.0.0.1", "multicast"},
	{"239.255.255.250", "multicast"},
	{"240.0.0.1", "reserved"},
	{"255.255.255.255", "broadcast"},
	{"::", "unspecified"},
	{"::1", "loopback"},
	{"::ffff:127.0.0.1", "IPv4-mapped IPv6 of 127.0.0.1: loopback"},
	{"::ffff:10.0.0.1", "IPv4-mapped IPv6 of 10.0.0.1: private"},
	{"::ffff:169.254.169.254", "link-local"},
	{"::127.0.0.1", "IPv4-compatible"},
	{"::10.0.0.1", "IPv4-compatible"},
	{"64:ff9b::7f00:1", "NAT64 (64:ff9b::/96) of 127.0.0.1: loopback"},
	{"64:ff9b::a9fe:a9fe", "NAT64 (64:ff9b::/96) of 169.254.169.254: link-local"},
	{"64:ff9b::c0a8:101", "NAT64 (64:ff9b::/96) of 192.168.1.1: private"},
	{"64:ff9b:1::a00:1", "local-use NAT64"},
	{"2002:7f00:1::1", "6to4 (2002::/16) of 127.0.0.1: loopback"},
	{"2002:a00:1::1", "6to4 (2002::/16) of 10.0.0.1: private"},
	{"2002:a9fe:a9fe::", "6to4 (2002::/16) of 169.254.169.254"},
	{"2001::1", "Teredo"},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
	{"2001:2::1", "benchmarking"},
	{"2001:db8::1", "documentation"},
	{"2001:10::1", "ORCHID"},
	{"3fff::1", "documentation"},
	{"100::1", "discard-only"},
	{"fc00::1", "unique-local"},
	{"fd12:3456::1", "unique-local"},
	{"fe80::1", "link-local"},
	{"febf::1", "link-local"},
	{"fec0::1", "site-local"},
	{"ff02::1", "multicast"},
	{"ff05::1:3", "multicast"},
	{"4000::1", "not global unicast"},
}

// publicCases are addresses that pass, including the IPv6 forms that embed
// a public IPv4 address.
var publicCases = []string{"1.1.1.1", "8.8.8.8", "93.184.215.14", "100.63.255.255", "100.128.0.0", "172.15.255.255",
	"172.32.0.0", "192.169.0.1", "198.17.255.255", "198.20.0.0", "223.255.255.255",
	"2606:4700:4700::1111", "2a00:1450:4001:81b::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"}

// TestCheckRefusesEveryClassAndPassesPublicAddresses is the table of every
// refused class, IPv4 and IPv6 forms, and of public addresses next to them.
func TestCheckRefusesEveryClassAndPassesPublicAddresses(t *testing.T) {
	for _, c := range refusedCases {
		err := Check(netip.MustParseAddr(c.addr))
		var re *RefusedError
		if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || !strings.Contains(re.Reason, c.says) {
			t.Errorf("Check(%s) = %v, want refused for %q", c.addr, err, c.says)
		}
	}
	for _, a := range publicCases {
		if err := Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("Check(%s) = %v, want public", a, err)
		}
	}
	if err := Check(netip.MustParseAddr("fe80::1%eth0")); err == nil {
		t.Error("a scoped address passed")
	}
}

// TestCheckURLRefusesLiteralsOfEveryClassAtCreation: what a tenant gives
// when creating a webhook.
func TestCheckURLRefusesLiteralsOfEveryClassAtCreation(t *testing.T) {
	for _, c := range refusedCases {
		host := c.addr
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if _, err := CheckURL("https://" + host + "/hook"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckURL(%s) = %v, want refused for %q", host, err, c.says)
		}
	}
	for _, bad := range []string{"http://hooks.example.com/x", "ftp://hooks.example.com/", "https:///nohost", "https://user:pw@hooks.example.com/",
		"https://localhost/x", "https://a.localhost./x", "hooks.example.com/x", "https://hooks.example.com/" + strings.Repeat("a", MaxURLLen), "://"} {
		if _, err := CheckURL(bad); !errors.Is(err, ErrRefused) {
			t.Errorf("CheckURL(%.60q) = %v, want refused", bad, err)
		}
	}
	for _, good := range []string{"https://hooks.example.com/fluxvm", "https://8.8.8.8:8443/x", "https://[2606:4700:4700::1111]/x"} {
		if _, err := CheckURL(good); err != nil {
			t.Errorf("CheckURL(%s) = %v", good, err)
		}
	}
}

// dnsServer is a DNS server on loopback that the test controls: each name
// answers the next of its address lists on each A or AAAA query (the last
// one again when the list is spent).
type dnsServer struct {
	mu      sync.Mutex
	answers map[string][][]string // name (with trailing dot) -> answers in turn
	asked   map[string]int
	addr    string
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{answers: map[string][][]string{}, asked: map[string]int{}, addr: pc.LocalAddr().String()}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := d.answer(buf[:n]); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return d
}

// set makes name answer each of turns in turn (one turn per lookup).
func (d *dnsServer) set(name string, turns ...[]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[name+"."] = turns
	d.asked[name+"."] = 0
}

func (d *dnsServer) answer(req []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(q.Name.String())
	d.mu.Lock()
	turns, ok := d.answers[name]
	var addrs []string
	if ok && len(turns) > 0 {
		// A and AAAA of one lookup come together: a turn moves on with each A query.
		i := d.asked[name]
		if q.Type == dnsmessage.TypeA {
			d.asked[name]++
		} else if i > 0 {
			i--
		}
		addrs = turns[min(i, len(turns)-1)]
	}
	d.mu.Unlock()
	rcode := dnsmessage.RCodeSuccess
	if !ok {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		switch {
		case a.Is4() && q.Type == dnsmessage.TypeA:
			_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case !a.Is4() && q.Type == dnsmessage.TypeAAAA:
			_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// resolver asks only d.
func (d *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
}

// standIn is a TLS receiver on loopback with a certificate for example.com
// that plays a public address: the guard checks the public address the name
// resolves to, and only then the test's rewrite dials the receiver instead.
type standIn struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []string
}

func startStandIn(t *testing.T, h http.HandlerFunc) *standIn {
	s := &standIn{}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls = append(s.calls, r.Host+r.URL.Path)
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) guard(d *dnsServer) *Guard {
	pool := s.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	loop := netip.MustParseAddrPort(s.srv.Listener.Addr().String())
	return &Guard{Resolver: d.resolver(), Timeout: 5 * time.Second, TLSConfig: &tls.Config{RootCAs: pool},
		RewriteForTests: func(netip.AddrPort) netip.AddrPort { return loop }}
}

func (s *standIn) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func post(t *testing.T, g *Guard, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.Do(req)
	if err == nil {
		Drain(resp)
	}
	return resp, err
}

// TestDeliveryRefusesANameResolvingToEveryClass: a name that resolves, through
// the test's DNS server, to an address of each refused class is refused at
// delivery with the reason, and nothing is sent; so is a name with one bad
// address among good ones. A public answer goes through, pinned, with TLS
// verifying the name.
func TestDeliveryRefusesANameResolvingToEveryClass(t *testing.T) {
	d := startDNS(t)
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	g := recv.guard(d)

	d.set("example.com", []string{"93.184.215.14"})
	resp, err := post(t, g, "https://example.com/hook")
	if err != nil || resp.StatusCode != 204 || recv.count() != 1 {
		t.Fatalf("public address: %v %v, %d calls", resp, err, recv.count())
	}
	d.set("example.com", []string{"2606:4700:4700::1111"})
	if resp, err := post(t, g, "https://example.com/hook"); err != nil || resp.StatusCode != 204 {
		t.Fatalf("public IPv6 address: %v %v", resp, err)
	}

	for _, c := range refusedCases {
		d.set("example.com", []string{c.addr})
		_, err := post(t, g, "https://example.com/hook")
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), c.says) || re.Host != "example.com" {
			t.Errorf("example.com -> %s: %v, want refused for %q", c.addr, err, c.says)
		}
	}
	d.set("example.com", []string{"93.184.215.14", "10.0.0.7"})
	if _, err := post(t, g, "https://example.com/hook"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "10.0.0.7") {
		t.Errorf("one private address among public ones: %v", err)
	}
	d.set("example.com", []string{"93.184.215.14", "fd00::1"})
	if _, err := post(t, g, "https://example.com/hook"); !errors.Is(err, ErrRefused) {
		t.Errorf("one unique-local AAAA next to a public A: %v", err)
	}
	if n := recv.count(); n != 2 {
		t.Fatalf("the receiver got %d calls, want only the 2 public ones", n)
	}
}

// TestRebindingIsRefusedOnTheSecondDelivery: a name answering a public
// address first and a private one next is resolved again at the second
// delivery and refused there.
func TestRebindingIsRefusedOnTheSecondDelivery(t *testing.T) {
	d := startDNS(t)
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	g := recv.guard(d)
	d.set("example.com", []string{"93.184.215.14"}, []string{"127.0.0.1"})
	if resp, err := post(t, g, "https://example.com/hook"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first delivery: %v %v", resp, err)
	}
	_, err := post(t, g, "https://example.com/hook")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("second delivery after rebinding to loopback: %v", err)
	}
	if recv.count() != 1 {
		t.Fatalf("%d calls reached the receiver, want 1", recv.count())
	}
}

// TestRedirectIsNotFollowed: a 307 to a loopback address comes back as the
// answer; nothing goes to the redirect's target.
func TestRedirectIsNotFollowed(t *testing.T) {
	d := startDNS(t)
	target := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+"/stolen", http.StatusTemporaryRedirect)
	})
	d.set("example.com", []string{"93.184.215.14"})
	resp, err := post(t, recv.guard(d), "https://example.com/hook")
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("redirect: %v %v", resp, err)
	}
	if target.count() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// TestTLSVerifiesTheHostName: the pinned connection still checks the
// certificate against the URL's name (the stand-in's is for example.com).
func TestTLSVerifiesTheHostName(t *testing.T) {
	d := startDNS(t)
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	d.set("other.example.net", []string{"93.184.215.14"})
	_, err := post(t, recv.guard(d), "https://other.example.net/hook")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate for another name was accepted: %v", err)
	}
	if recv.count() != 0 {
		t.Fatal("the request was sent")
	}
}

// TestDoRefusesPlainHTTPAndUnknownNames: https only, and a name that does
// not resolve is an error, not a fallback.
func TestDoRefusesPlainHTTPAndUnknownNames(t *testing.T) {
	d := startDNS(t)
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	g := recv.guard(d)
	if _, err := post(t, g, "http://example.com/hook"); !errors.Is(err, ErrRefused) {
		t.Fatalf("http: %v", err)
	}
	if _, err := post(t, g, "https://nowhere.example.org/hook"); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("an unknown name: %v", err)
	}
	if recv.count() != 0 {
		t.Fatal("something reached the receiver")
	}
}

// FuzzCheckURL: whatever a tenant sends as a URL, CheckURL answers without
// panicking, and what it accepts is https with a host and no literal of a
// refused class.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://hooks.example.com/x", "https://[::ffff:127.0.0.1]/", "https://10.0.0.1:443/", "http://x", "https://[fe80::1%25eth0]/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := CheckURL(s)
		if err != nil {
			return
		}
		if u.Scheme != "https" || u.Hostname() == "" {
			t.Fatalf("accepted %q", s)
		}
		if a, err := netip.ParseAddr(u.Hostname()); err == nil && Check(a) != nil {
			t.Fatalf("accepted a refused literal %q", s)
		}
	})
}

// TestEveryCheckedAddressIsTriedAndNoOther: a name with two public
// addresses, the first not answering, is delivered through the second; the
// dialer never goes anywhere the check did not pass.
func TestEveryCheckedAddressIsTriedAndNoOther(t *testing.T) {
	recv := startStandIn(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	g := recv.guard(startDNS(t))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	live := netip.MustParseAddrPort(recv.srv.Listener.Addr().String())
	var mu sync.Mutex
	var dialed []string
	g.RewriteForTests = func(ap netip.AddrPort) netip.AddrPort {
		mu.Lock()
		defer mu.Unlock()
		dialed = append(dialed, ap.Addr().String())
		if ap.Addr() == netip.MustParseAddr("2606:4700:4700::1111") {
			return dead
		}
		return live
	}
	// The unreachable address first, in this order.
	g.Resolver = fixedResolver{"2606:4700:4700::1111", "93.184.215.14"}
	resp, err := post(t, g, "https://example.com/hook")
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("%v %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(dialed, " ") != "2606:4700:4700::1111 93.184.215.14" {
		t.Fatalf("pinned %v, want the two checked addresses in order", dialed)
	}
}

// fixedResolver answers every name with its addresses, in order.
type fixedResolver []string

func (r fixedResolver) LookupIPAddr(context.Context, string) ([]net.IPAddr, error) {
	var out []net.IPAddr
	for _, a := range r {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}
