// Package console serves FluxVM Studio, the web console, from files built
// into the binary: every central serves it at /console/ beside its API.
// The app itself is TypeScript in web/, bundled by `make console` into
// dist/, which is committed so that building central needs no Node.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/fluxvm/fluxvm/jsonapi"
)

//go:embed dist
var dist embed.FS

// Prefix is where central serves the console.
const Prefix = "/console/"

// file is one built file, kept as it is and gzipped, with its ETag.
type file struct {
	body, gz    []byte
	contentType string
	etag        string
}

// Handler serves the built console. Made with New, it holds every file in
// memory, compressed once, so a page load costs no compression.
type Handler struct {
	files map[string]*file
}

// New reads the embedded build.
func New() (*Handler, error) {
	h := &Handler{files: map[string]*file{}}
	err := fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := dist.ReadFile(p)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		if err := zw.Close(); err != nil {
			return fmt.Errorf("gzip %s: %w", p, err)
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.files[strings.TrimPrefix(p, "dist/")] = &file{body: body, gz: buf.Bytes(), contentType: ct,
			etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: read the embedded build: %w", err)
	}
	if h.files["index.html"] == nil {
		return nil, fmt.Errorf("console: the embedded build has no index.html (run make console)")
	}
	return h, nil
}

// Mount serves the console at /console/ and the API (next) at every other
// path. GET / goes to the console too: a browser that signs in with SSO
// lands there, and central's API has nothing at /.
func (h *Handler) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/" || r.URL.Path == "/console":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				next.ServeHTTP(w, r)
				return
			}
			http.Redirect(w, r, Prefix, http.StatusFound)
		case strings.HasPrefix(r.URL.Path, Prefix):
			h.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP answers GET and HEAD under Prefix with a built file; any other
// path under it is the app's index (its routes live after the #).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		jsonapi.WriteError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on the console's files", "the console only reads: GET "+Prefix)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, Prefix)), "/")
	f := h.files[name]
	if name == "" || name == "." {
		f, name = h.files["index.html"], "index.html"
	}
	if f == nil {
		if strings.HasPrefix(name, "assets/") {
			jsonapi.WriteError(w, http.StatusNotFound, "no such console file: "+name, "reload "+Prefix+": the console was updated")
			return
		}
		f, name = h.files["index.html"], "index.html"
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("ETag", f.etag)
	hd.Set("Vary", "Accept-Encoding")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	if name == "index.html" {
		// The page may only load its own files and talk to its own central;
		// nothing of another site runs in it, and no site frames it.
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Frame-Options", "DENY")
	}
	// Revalidated on each load (the ETag makes that a 304): a new central
	// serves its own console at once.
	hd.Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := f.body
	if acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		body = f.gz
	}
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
