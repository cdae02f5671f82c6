// Package console is mcpgate's web console, served at /ui: static files
// embedded in the binary (no Node at run time, nothing fetched from
// elsewhere), which run in the operator's browser and call /admin/v1
// with the operator's own key.
//
// It owns the files and the headers that keep them safe: a strict
// Content-Security-Policy (scripts and styles from the gateway only, no
// inline script, no framing, connections to the gateway only),
// X-Frame-Options DENY, nosniff, no referrer to other origins. It must not hold state,
// read the store or reach the gateway's internals: everything the
// console shows comes through the admin API, so the console can do
// exactly what the key it signed in with may do, and no more.
//
// The key is kept in the tab's sessionStorage and sent in a header by
// script, never in a URL or a cookie: a cross-site page can neither read
// it nor make the browser send it, which is what makes the console safe
// from CSRF without tokens of its own.
//
// A gateway with no auth that listens on loopback only (the quickstart)
// lets this host's callers use the admin API without a key (the admin
// package's OpenAccess); the page asks once and then needs no sign-in,
// saying so in a banner. Its charts are inline SVG the page's own script
// draws from the admin API's time series: no chart library, nothing
// fetched from elsewhere.
//
// The files are plain ES modules with no build step, so a change is an
// edit and a reload; TestAssets checks every file the page loads is
// embedded and that no file holds inline script.
package console

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/ui"

// csp allows the console's own files and nothing else: no inline script
// or style, no eval, no framing, no plugins, no form posts elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the console under Prefix.
func Handler() http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // no-referrer would make its POSTs say "Origin: null"
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, Prefix)
		if rest == "" {
			// Relative, so that a proxy serving the gateway under a path
			// keeps it (/x/ui -> /x/ui/).
			w.Header().Set("Location", "ui/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(path.Clean(rest), "/")
		if name == "" {
			name = "index.html"
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.Set("Content-Type", ct)
		_, _ = w.Write(b)
	})
}
