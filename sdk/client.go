package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "fluxvm-go-sdk"

// Size caps for what the client reads, so a misbehaving server cannot make
// it allocate without bound.
const (
	maxJSONReply  = 32 << 20
	maxBlobReply  = 256 << 20
	maxErrorReply = 64 << 10
)

// Option configures a client.
type Option func(*options)

type options struct {
	token     string
	hc        *http.Client
	userAgent string
}

// WithToken sends token as "Authorization: Bearer TOKEN" on every request.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithHTTPClient uses hc instead of http.DefaultClient, for timeouts,
// proxies or TLS settings. Per-call deadlines come from the context.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// WithUserAgent sets the User-Agent header, so a server's logs can tell
// programs apart.
func WithUserAgent(ua string) Option { return func(o *options) { o.userAgent = ua } }

// client is the HTTP plumbing the API clients share: one base URL, one
// credential, JSON in and out, errors turned into *APIError or
// *ConnectError.
type client struct {
	service string // "node" or "central", for messages
	base    string // scheme://host[:port][/prefix], no trailing slash
	// shown is the base URL as the caller gave it, for messages: base, or
	// unix:///PATH for a node API on a unix socket.
	shown string
	opts  options
}

// unixBase is the base URL of requests to a node API on a unix socket; the
// client's transport dials the socket whatever the host.
const unixBase = "http://localhost"

func newClient(service, baseURL string, opts []Option) (*client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	socket := ""
	if err == nil && u.Scheme == "unix" && service == "node" {
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("node URL %q: want unix:///ABSOLUTE/PATH/api.sock (three slashes)", baseURL)
		}
		socket = u.Path
	} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		want := "http://HOST:PORT or https://HOST:PORT"
		if service == "node" {
			want += " or unix:///PATH/api.sock"
		}
		return nil, fmt.Errorf("%s URL %q: want %s", service, baseURL, want)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%s URL %q: must not carry a query or fragment", service, baseURL)
	}
	c := &client{service: service, base: strings.TrimRight(u.String(), "/"),
		opts: options{hc: http.DefaultClient, userAgent: DefaultUserAgent}}
	for _, o := range opts {
		o(&c.opts)
	}
	if c.opts.hc == nil {
		c.opts.hc = http.DefaultClient
	}
	c.shown = c.base
	if socket != "" {
		c.base, c.shown = unixBase, "unix://"+socket
		c.opts.hc = unixClient(c.opts.hc, socket)
	}
	return c, nil
}

// unixClient is hc with a transport that dials the unix socket at path for
// every request (and WebSocket): hc's own *http.Transport cloned, or the
// default one.
func unixClient(hc *http.Client, path string) *http.Client {
	tr, ok := hc.Transport.(*http.Transport)
	if !ok || tr == nil {
		tr = http.DefaultTransport.(*http.Transport)
	}
	tr = tr.Clone()
	tr.Proxy = nil
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}
	out := *hc
	out.Transport = tr
	return &out
}

// do sends a request and returns the response of a 2xx answer; any other
// status becomes an *APIError and a failed round trip a *ConnectError.
// path must already be escaped. in, when not nil, is sent as JSON.
func (c *client) do(ctx context.Context, method, path string, query url.Values, in any) (*http.Response, error) {
	return c.doWith(ctx, method, path, query, in, nil)
}

// doWith is do with extra request headers (If-Match).
func (c *client) doWith(ctx context.Context, method, path string, query url.Values, in any, header http.Header) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.token)
	}
	if c.opts.userAgent != "" {
		req.Header.Set("User-Agent", c.opts.userAgent)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.opts.hc.Do(req)
	if err != nil {
		// A caller's cancel or deadline is theirs, not the server's fault.
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctxErr)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &ConnectError{Service: c.service, URL: c.shown, Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, c.decodeError(resp)
}

// decodeError turns a non-2xx reply into an *APIError. FluxVM servers send
// {"error", "hint"}; anything else (a proxy's HTML page, a bare text line)
// still gets a message that says what came back.
func (c *client) decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorReply))
	e := &APIError{Status: resp.StatusCode}
	var eb ErrorBody
	if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
		e.Message, e.Hint = eb.Error, eb.Hint
		return e
	}
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	text := strings.TrimSpace(string(raw))
	if line, _, _ := strings.Cut(text, "\n"); mt != "text/html" && line != "" && utf8.ValidString(line) && !strings.HasPrefix(line, "<") {
		if len(line) > 200 {
			line = line[:200] + "…"
		}
		e.Message = fmt.Sprintf("%s answered %s: %s", c.service, status, line)
	} else {
		e.Message = fmt.Sprintf("%s answered %s", c.service, status)
	}
	e.Hint = fmt.Sprintf("the reply was not FluxVM's JSON error; check that %s is a FluxVM %s API and not a proxy or another service", c.shown, c.service)
	return e
}

// call sends a request and decodes a JSON reply into out (when not nil).
func (c *client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	_, err := c.callWith(ctx, method, path, query, in, out, nil)
	return err
}

// callWith is call with extra request headers; it returns the reply's headers.
func (c *client) callWith(ctx context.Context, method, path string, query url.Values, in, out any, header http.Header) (http.Header, error) {
	resp, err := c.doWith(ctx, method, path, query, in, header)
	if err != nil {
		return nil, err
	}
	return resp.Header, c.decodeReply(resp, method, path, out)
}

// decodeReply decodes a 2xx reply's JSON into out (when not nil) and closes it.
func (c *client) decodeReply(resp *http.Response, method, path string, out any) error {
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorReply))
		return nil
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxJSONReply))
	if err := dec.Decode(out); err != nil {
		ct := resp.Header.Get("Content-Type")
		return fmt.Errorf("%s %s: decode %s reply (%s): %w", method, path, c.service, ct, err)
	}
	return nil
}

// blob sends a request and returns the reply's body as is (logs, PNGs).
func (c *client) blob(ctx context.Context, method, path string, query url.Values) ([]byte, error) {
	resp, err := c.do(ctx, method, path, query, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBlobReply+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read reply: %w", method, path, err)
	}
	if len(b) > maxBlobReply {
		return nil, fmt.Errorf("%s %s: reply larger than %d bytes", method, path, maxBlobReply)
	}
	return b, nil
}
