package previews

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Serve answers one request to preview id: rest is the escaped path below
// the preview ("/" at least). It checks the caller may use the preview and
// that its VM still runs in the same boot, then passes the request, less
// every credential the caller presented, to the guest port through the
// node, and the guest's answer back, less any cookie it sets. A WebSocket
// upgrade is carried both ways until either side closes it, the preview is
// closed on this central, or the VM's connection ends.
func (s *Service) Serve(w http.ResponseWriter, r *http.Request, c Caller, id, rest string) {
	rec, err := s.find(r.Context(), c, id)
	if err != nil {
		s.fail(w, err, "no open preview "+jsonapi.Echo(id))
		return
	}
	if c.ReadOnly {
		jsonapi.WriteError(w, http.StatusForbidden, "a read-only API key cannot use a preview: it reaches into a vm",
			"use a full key or the tenant's primary token")
		return
	}
	reason, paused, err := s.gone(r.Context(), rec)
	switch {
	case err != nil:
		s.log.Warn("preview: cannot ask the vm's node", "id", rec.ID, "vm", rec.VMName, "node", rec.Node, "error", err)
		jsonapi.WriteError(w, http.StatusBadGateway, "the node of vm "+rec.VMName+" does not answer", "try again in a moment; GET /fleet/nodes/{name} shows the node")
		return
	case reason != "":
		s.drop(r.Context(), rec, reason)
		jsonapi.WriteError(w, http.StatusNotFound, "no open preview "+rec.ID+": "+reason, "open a new one once the vm runs (POST /fleet/vms/{node}/{id}/preview)")
		return
	case paused:
		jsonapi.WriteError(w, http.StatusNotFound, "preview "+rec.ID+" serves nothing while vm "+rec.VMName+" is paused", "resume the vm (POST /fleet/vms/{node}/{id}/resume)")
		return
	}
	if r.ContentLength > MaxRequestBody {
		jsonapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is %d bytes; a preview passes on at most %d", r.ContentLength, MaxRequestBody), "send less")
		return
	}
	ctx, leave, ok := s.enter(r.Context(), rec.ID)
	if !ok {
		jsonapi.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("preview %s carries %d requests already", rec.ID, MaxInFlight), "wait for some to finish")
		return
	}
	defer leave()
	n, err := s.opts.Store.GetNode(ctx, rec.Node)
	if err != nil {
		s.fail(w, err, "read the node")
		return
	}
	nc, err := s.opts.Client(n)
	if err != nil {
		s.fail(w, err, "reach the node")
		return
	}
	r = r.WithContext(ctx)
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBody)
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return nc.DialTunnel(ctx, rec.VM, rec.Port)
		},
		// One tunnel per request: nothing is pooled that a stopped VM or a
		// closed preview would have to find and end.
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: MaxResponseHeader,
		ResponseHeaderTimeout:  HeaderTimeout,
	}
	prefix := sdk.PreviewPathPrefix + rec.ID
	host := "localhost:" + strconv.Itoa(rec.Port)
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host, out.Host = "http", host, host
			out.URL.RawPath = rest
			if p, err := url.PathUnescape(rest); err == nil {
				out.URL.Path = p
			} else {
				out.URL.Path, out.URL.RawPath = rest, ""
			}
			out.URL.RawQuery = StripQuery(pr.In.URL.RawQuery, c.Credential)
			StripHeaders(out.Header, c.Credential)
			pr.SetXForwarded()
			out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Set-Cookie")
			if loc := resp.Header.Get("Location"); loc != "" {
				resp.Header.Set("Location", rebase(loc, prefix, host))
			}
			if resp.StatusCode != http.StatusSwitchingProtocols {
				resp.Body = &cappedBody{ReadCloser: resp.Body, left: MaxResponseBody}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.proxyError(r.Context(), w, rec, err)
		},
		ErrorLog: nil,
	}
	rp.ServeHTTP(w, r)
}

// fail answers an error of the service, or a store's or node's.
func (s *Service) fail(w http.ResponseWriter, err error, what string) {
	if status, hint := Status(err); status != 0 {
		jsonapi.WriteError(w, status, what, hint)
		return
	}
	s.log.Error("preview: "+what, "error", err)
	jsonapi.WriteError(w, http.StatusServiceUnavailable, "cannot "+what+" now", "central's store or the vm's node does not answer; retry")
}

// proxyError answers a request the guest did not answer.
func (s *Service) proxyError(ctx context.Context, w http.ResponseWriter, rec *store.Preview, err error) {
	var ae *sdk.APIError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		jsonapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes, the most a preview passes on", MaxRequestBody), "send less")
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		// The VM was deleted between the check and the dial.
		s.drop(context.WithoutCancel(ctx), rec, "the vm was deleted")
		jsonapi.WriteError(w, http.StatusNotFound, "no open preview "+rec.ID+": the vm was deleted", "GET /fleet/vms lists your VMs")
	case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		// The VM stopped since the check, or its driver cannot forward the port.
		if reason, _, gerr := s.gone(context.WithoutCancel(ctx), rec); gerr == nil && reason != "" {
			s.drop(context.WithoutCancel(ctx), rec, reason)
			jsonapi.WriteError(w, http.StatusNotFound, "no open preview "+rec.ID+": "+reason, "open a new one once the vm runs (POST /fleet/vms/{node}/{id}/preview)")
			return
		}
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("port %d of vm %s cannot be reached: %s", rec.Port, rec.VMName, ae.Message), ae.Hint)
	case errors.As(err, &ae) && ae.Status == http.StatusBadGateway:
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("nothing answers on port %d of vm %s", rec.Port, rec.VMName),
			"is a server listening on that port in the guest, on all addresses (0.0.0.0), not only 127.0.0.1?")
	case errors.Is(err, context.Canceled):
		// The caller went away, or the preview was closed: nobody reads an answer.
		w.WriteHeader(http.StatusNotFound)
	default:
		s.log.Info("preview: the guest did not answer", "id", rec.ID, "vm", rec.VMName, "port", rec.Port, "error", err)
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("port %d of vm %s did not answer the request", rec.Port, rec.VMName),
			"the guest's server closed the connection or answered something that is not HTTP/1.1")
	}
}

// StripHeaders removes every credential of the caller from h: the
// Authorization and Proxy-Authorization headers, cookies, any X-FluxVM-*
// header, and any other header whose value carries the caller's token.
func StripHeaders(h http.Header, credential string) {
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		drop := ck == "Authorization" || ck == "Proxy-Authorization" || ck == "Cookie" || strings.HasPrefix(ck, "X-Fluxvm-")
		for _, v := range vs {
			if credential != "" && strings.Contains(v, credential) {
				drop = true
			}
		}
		if drop {
			delete(h, k)
		}
	}
}

// StripQuery removes from a raw query every parameter whose name or value
// carries the caller's token, keeping the others as they came.
func StripQuery(raw, credential string) string {
	if raw == "" || credential == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		plain, err := url.QueryUnescape(p)
		if err != nil {
			plain = p
		}
		if strings.Contains(plain, credential) || strings.Contains(p, credential) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// rebase points a guest's redirect at the preview: a path of the guest
// ("/login") or an address naming the guest itself (http://localhost:PORT/x)
// goes below the preview's prefix; anything else is left alone.
func rebase(loc, prefix, host string) string {
	switch {
	case strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//"):
		return prefix + loc
	case strings.HasPrefix(loc, "http://"+host+"/"):
		return prefix + strings.TrimPrefix(loc, "http://"+host)
	}
	return loc
}

// errTooLong ends a guest's answer that passed MaxResponseBody.
var errTooLong = fmt.Errorf("the guest's answer is over %d bytes, the most a preview passes back", MaxResponseBody)

// cappedBody ends a response body with errTooLong once it passed left
// bytes: what came before is passed on, the rest never is.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), errTooLong
	}
	return n, err
}
