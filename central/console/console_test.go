package console

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCommittedBundleIsBuiltFromTheCommittedSources fails when someone
// changed web/ (or its lockfile) and did not run make console: the hash
// build.mjs recorded must be the sources' hash now.
func TestCommittedBundleIsBuiltFromTheCommittedSources(t *testing.T) {
	built, err := BuiltFrom()
	if err != nil {
		t.Fatal(err)
	}
	now, err := SourcesHash("web")
	if err != nil {
		t.Fatal(err)
	}
	if built != now {
		t.Fatalf("the committed console (dist/) was built from other sources (%s) than web/ holds now (%s): run make console and commit dist/", built, now)
	}
}

func serve(t *testing.T, method, path string, header map[string]string) *http.Response {
	t.Helper()
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	r := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.Mount(api).ServeHTTP(w, r)
	return w.Result()
}

func TestMountServesTheConsoleAndLeavesTheAPIAlone(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
		location, body     string
	}{
		{"index", "GET", "/console/", 200, "", "<div id=\"app\">"},
		{"a deep path is the index", "GET", "/console/vms/node-1/abc", 200, "", "<div id=\"app\">"},
		{"the script", "GET", "/console/assets/main.js", 200, "", ""},
		{"dot-dot stays inside", "GET", "/console/../../etc/passwd", 200, "", "<div id=\"app\">"},
		{"a missing asset is 404", "GET", "/console/assets/nope.js", 404, "", "\"hint\""},
		{"a change is 405", "POST", "/console/", 405, "", "\"error\""},
		{"root goes to the console", "GET", "/", 302, "/console/", ""},
		{"no slash goes to the console", "GET", "/console", 302, "/console/", ""},
		{"the API is the API", "GET", "/fleet/vms", 418, "", ""},
		{"a POST to / is the API's", "POST", "/", 418, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := serve(t, tc.method, tc.path, nil)
			body, _ := io.ReadAll(r.Body)
			if r.StatusCode != tc.status || r.Header.Get("Location") != tc.location || !strings.Contains(string(body), tc.body) {
				t.Fatalf("%s %s: %d to %q, %q", tc.method, tc.path, r.StatusCode, r.Header.Get("Location"), body)
			}
		})
	}
}

func TestIndexCarriesAContentSecurityPolicyAndGzip(t *testing.T) {
	r := serve(t, "GET", "/console/", map[string]string{"Accept-Encoding": "gzip, br"})
	if r.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
		r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("headers %v", r.Header)
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(zr)
	if !bytes.Contains(body, []byte("assets/main.js")) {
		t.Fatalf("gunzipped index: %s", body)
	}
	etag := r.Header.Get("ETag")
	if again := serve(t, "GET", "/console/", map[string]string{"If-None-Match": etag}); again.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match with the ETag: %d, want 304", again.StatusCode)
	}
	if plain := serve(t, "GET", "/console/", map[string]string{"Accept-Encoding": "gzip;q=0"}); plain.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip;q=0 still got %q", plain.Header.Get("Content-Encoding"))
	}
}

// FuzzConsolePath: whatever path a browser asks for under /console/, the
// console answers with one of its own files (or a JSON 404 for a missing
// asset) and never anything else.
func FuzzConsolePath(f *testing.F) {
	h, err := New()
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{"/console/", "/console/assets/main.js", "/console/../../etc/passwd", "/console/%2e%2e/", "/console/assets/../index.html", "/console//x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r := httptest.NewRequest("GET", "/console/", nil)
		r.URL.Path = Prefix + p
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			if w.Header().Get("ETag") == "" {
				t.Fatalf("%q: 200 without one of the console's files", p)
			}
		case http.StatusNotFound:
			if !strings.Contains(w.Body.String(), `"hint"`) {
				t.Fatalf("%q: a 404 without the JSON error: %q", p, w.Body.String())
			}
		default:
			t.Fatalf("%q: %d", p, w.Code)
		}
	})
}
