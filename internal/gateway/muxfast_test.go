package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// NewMux hands a path only "/" can match straight to the root handler;
// every request must be answered as the ServeMux alone answers it: the
// same handler, pattern, status and redirect, on routes like the
// binary's (methods, wildcards, subtrees, exact paths).
func TestMuxFastPathAsServeMux(t *testing.T) {
	var routes []Route
	for _, p := range []string{
		"/healthz", "/readyz", "/metrics", "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/",
		"/connect/", "GET /admin/servers/{name}", "POST /admin/keys", "/admin/", "/ui", "/ui/", "/oauth/", "/oauth/connect",
		"/oauth/connect/{$}", "/",
	} {
		routes = append(routes, Route{p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s|%s|%s", p, r.Pattern, r.PathValue("name"))
		})})
	}
	fast, slow := newMux(routes, true), newMux(routes, false)
	if firstSegments(routes) == nil {
		t.Fatal("no fast path for these routes")
	}
	for _, method := range []string{"GET", "POST", "DELETE", "OPTIONS"} {
		for _, target := range []string{
			"/", "/mcp", "/mcp/", "/mcp/echo", "/mcp/echo,other", "/echo/mcp", "/toolset/x/mcp", "/sse", "/messages?sessionId=1",
			"/healthz", "/healthz/", "/healthzz", "/readyz", "/metrics", "/.well-known/oauth-protected-resource",
			"/.well-known/oauth-protected-resource/mcp", "/.well-known/other", "/connect", "/connect/x",
			"/admin", "/admin/", "/admin/servers/a", "/admin/keys", "/ui", "/ui/x", "/oauth", "/oauth/connect", "/oauth/connect/",
			"/%6dcp", "/heal%74hz", "/mcp/a%2Fb", "/x/../y", "//mcp", "/mcp/./x", "/ui%2F", "/Healthz", "/mcp?x=1", "*",
		} {
			var req [2]*http.Request
			for i := range req {
				req[i] = httptest.NewRequest(method, "http://gw.test"+target, nil)
				if target == "*" {
					req[i] = httptest.NewRequest(method, "/", nil)
					req[i].RequestURI, req[i].URL.Path = "*", "*"
				}
			}
			want, got := httptest.NewRecorder(), httptest.NewRecorder()
			slow.ServeHTTP(want, req[0])
			fast.ServeHTTP(got, req[1])
			if want.Code != got.Code || want.Body.String() != got.Body.String() || want.Header().Get("Location") != got.Header().Get("Location") ||
				req[0].Pattern != req[1].Pattern {
				t.Errorf("%s %s: mux %d %q %q (pattern %q), fast path %d %q %q (pattern %q)", method, target,
					want.Code, want.Body, want.Header().Get("Location"), req[0].Pattern,
					got.Code, got.Body, got.Header().Get("Location"), req[1].Pattern)
			}
		}
	}
	for _, bad := range [][]string{{"/", "example.com/x"}, {"/", "/{id}/x"}, {"GET /"}, {"/", "/a%2Fb/"}} {
		var rs []Route
		for _, p := range bad {
			rs = append(rs, Route{p, http.NotFoundHandler()})
		}
		if firstSegments(rs) != nil {
			t.Errorf("%q: a fast path, want none", bad)
		}
	}
}
