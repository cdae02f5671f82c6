package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

// Every answer carries the security headers; the page and its modules
// are served with their types; nothing else is.
func TestHandler(t *testing.T) {
	h := Handler()
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/lib.js": "text/javascript",
		"/ui/form.js": "text/javascript", "/ui/style.css": "text/css"} {
		resp := get(t, h, http.MethodGet, path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q allows unsafe-*", path, csp)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "same-origin" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
	if resp := get(t, h, http.MethodGet, "/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "ui/" {
		t.Errorf("/ui: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, p := range []string{"/ui/nope.js", "/ui/../console.go", "/ui/assets/app.js"} {
		if resp := get(t, h, http.MethodGet, p); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp := get(t, h, http.MethodPost, "/ui/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// The page loads only embedded files, holds no inline script, style or
// event handler (the CSP would refuse them), and no script writes HTML.
func TestAssets(t *testing.T) {
	index, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#:]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %v", refs)
	}
	for _, m := range refs {
		if _, err := assets.ReadFile("assets/" + m[1]); err != nil {
			t.Errorf("index.html loads %q, which is not embedded", m[1])
		}
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).Match(index) || regexp.MustCompile(`<style|\son[a-z]+=|style="`).Match(index) {
		t.Errorf("index.html has inline script, style or handlers")
	}
	importRE := regexp.MustCompile(`from "\./([^"]+)"`)
	err = fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		f, _ := assets.Open(p)
		b, _ := io.ReadAll(f)
		f.Close()
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s", p, bad)
			}
		}
		for _, m := range importRE.FindAllStringSubmatch(string(b), -1) {
			if _, err := assets.ReadFile("assets/" + m[1]); err != nil {
				t.Errorf("%s imports %q, which is not embedded", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
