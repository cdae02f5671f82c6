package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/metrics"
)

// logRecords is a slog.Handler keeping every record, for tests that read
// what the API logged.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// take returns the records so far and forgets them.
func (h *logRecords) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.recs
	h.recs = nil
	return out
}

// attrs is r's attributes by key, values as text.
func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// line is r as one text line.
func line(r slog.Record) string {
	var b bytes.Buffer
	_ = slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}).Handle(context.Background(), r)
	return strings.TrimSpace(b.String())
}

// secretMarker is sent in request bodies: no log line may carry it.
const secretMarker = "s3cr3t-b0dy-value"

// Every admin route answers a refusal through the one adapter: the
// status, the JSON error shape ({"error": ..., "details": ...}, nothing
// else) or the authenticator's own failure, Cache-Control no-store, and
// exactly one log line naming the status and path, never the request's
// body. The table must cover every route, so a new route needs a case.
func TestEveryRouteRefusesThroughTheAdapter(t *testing.T) {
	logs := &logRecords{}
	r, api := newRigWith(t, func(o *Options) {
		o.Logger = slog.New(logs)
		// An internal failure: logged with its cause, answered as before.
		o.Stats = func() (metrics.Overview, error) { return metrics.Overview{}, errors.New("metrics registry gone") }
	})
	personal := r.createKey(t, `{"alias":"pat"}`)
	logs.take()

	type refusalCase struct {
		method, path, key, body string
		status                  int
		details                 string // a substring of details ("" for none)
	}
	cases := []refusalCase{
		{"GET", "/openapi.json", personal, "", 403, ""},
		{"POST", "/reload", master, "", 501, "no config file to reload"},
		{"GET", "/keys", personal, "", 403, ""},
		{"GET", "/keys", "", "", 401, ""},
		{"POST", "/keys", master, `{"alias":"` + secretMarker, 400, "invalid JSON"},
		{"POST", "/keys", master, `{"alias":"` + secretMarker + `","bogus":1}`, 400, `unknown field "bogus"`},
		{"POST", "/keys", master, `{"alias":"x","user":"` + strings.Repeat("a", maxBody) + `"}`, 413, "body exceeds"},
		{"GET", "/keys/nobody", master, "", 404, `no key "nobody"`},
		{"PATCH", "/keys/nobody", master, `{"user":"` + secretMarker + `"}`, 404, `no key "nobody"`},
		{"DELETE", "/keys/nobody", master, "", 404, `no key "nobody"`},
		{"GET", "/grants", personal, "", 403, ""},
		{"PUT", "/grants/planet/x", master, `{}`, 400, "kind: must be user, team or role"},
		{"DELETE", "/grants/team/nobody", master, "", 404, "team:nobody"},
		{"GET", "/servers", personal, "", 403, ""},
		{"POST", "/servers", master, `{"name":"x","transport":"stdio","command":"` + secretMarker + `"}`, 400, "stdio servers run a command"},
		{"DELETE", "/servers/calc", master, "", 409, "defined in the config file"},
		{"PATCH", "/servers/nobody", master, `{"url":"` + secretMarker + `"}`, 404, `no runtime server "nobody"`},
		{"GET", "/servers/nobody/preview", master, "", 404, `no server "nobody"`},
		{"GET", "/servers/nobody/tools", master, "", 404, `no server "nobody"`},
		{"POST", "/servers/calc/test", master, "", 501, "cannot test servers"},
		{"PUT", "/servers/calc/tools", master, `{"allow":["` + secretMarker + `"]}`, 409, "defined in the config file"},
		{"GET", "/stats", master, "", 500, "metrics registry gone"},
		// It carries the shared state's last error (an address,
		// perhaps): administrators only.
		{"GET", "/stats", personal, "", 403, ""},
		{"GET", "/sessions", personal, "", 403, ""},
		{"POST", "/sessions/terminate", master, `{}`, 400, ""},
		{"GET", "/toolsets", personal, "", 403, ""},
		{"PUT", "/toolsets/support", master, `{"servers":{}}`, 409, "defined in the config file"},
		{"DELETE", "/toolsets/nobody", master, "", 404, `no toolset "nobody"`},
		{"GET", "/integrity", personal, "", 403, ""},
		{"POST", "/integrity/calc/approve", master, `{"tools":["` + secretMarker + `"]}`, 501, "tool integrity is not wired"},
		{"POST", "/integrity/calc/reject", personal, "", 403, ""},
		{"GET", "/tools?key=nobody", master, "", 404, `no key "nobody"`},
		{"POST", "/tools/call", master, `{"arguments":{"x":"` + secretMarker + `"}}`, 400, "name: required"},
		{"GET", "/explain", master, "", 400, "tool: required"},
		{"GET", "/audit?limit=0", master, "", 400, "limit must be a positive integer"},
		{"GET", "/audit/events?before=x", master, "", 400, "before must be a cursor"},
		{"GET", "/usage?by=planet", master, "", 400, "by: must be key, user or team"},
		{"GET", "/stats/series", personal, "", 403, ""},
		{"GET", "/usage/series?range=1y", master, "", 400, "range: must be 24h, 7d or 30d"},
		{"PUT", "/me/credentials/calc", personal, `{"value":"` + secretMarker + `"}`, 400, "does not take a credential of your own"},
		{"PUT", "/me/credentials/calc", master, `{"value":"` + secretMarker + `"}`, 403, "personal key or token"},
		{"GET", "/me/credentials", master, "", 403, "personal key or token"},
		{"DELETE", "/me/credentials/calc", personal, "", 400, "does not take a credential of your own"},
		{"GET", "/connections", master, "", 400, "no vault configured"},
		{"DELETE", "/connections/key:pat", master, "", 400, "no vault configured"},
		{"DELETE", "/connections/key:pat/calc", master, "", 400, "no vault configured"},
		{"GET", "/me/connections", master, "", 403, "personal key or token"},
		{"GET", "/me/servers", master, "", 403, "personal key or token"},
		{"DELETE", "/me/connections/calc", personal, "", 400, "no vault configured"},
		{"GET", "/nothing", master, "", 404, "no such admin endpoint"},
		{"DELETE", "/openapi.json", master, "", 404, "no such admin endpoint"},
	}

	covered := map[string]bool{}
	for _, tc := range cases {
		name := tc.method + " " + tc.path
		if len(name) > 80 {
			name = name[:80]
		}
		req := httptest.NewRequest(tc.method, Prefix+tc.path, nil)
		if _, pattern := api.mux.Handler(req); pattern != "" {
			covered[pattern] = true
		}
		resp, body := send(t, r.url, tc.method, Prefix+tc.path, tc.key, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%.80s: status %d %s, want %d", name, resp.StatusCode, body, tc.status)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%.80s: Content-Type %q", name, ct)
		}
		if tc.status == http.StatusUnauthorized {
			// The authenticator's own answer, byte for byte.
			if !json.Valid(body) || resp.Header.Get("WWW-Authenticate") == "" && len(body) == 0 {
				t.Errorf("%s: 401 %q", name, body)
			}
		} else {
			var eb errorBody
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&eb); err != nil || eb.Error != http.StatusText(tc.status) && eb.Error != "Could not read the metrics" {
				t.Errorf("%s: body %s (%v), want {error, details}", name, body, err)
			}
			if !strings.Contains(eb.Details, tc.details) {
				t.Errorf("%s: details %q, want %q in them", name, eb.Details, tc.details)
			}
			if resp.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: Cache-Control %q", name, resp.Header.Get("Cache-Control"))
			}
		}
		var mine []slog.Record
		for _, rec := range logs.take() {
			if strings.Contains(line(rec), secretMarker) {
				t.Errorf("%s: a log line carries the request body: %s", name, line(rec))
			}
			if a := attrs(rec); a[attrStatus] != "" {
				mine = append(mine, rec)
				if a[attrStatus] != fmt.Sprint(tc.status) || a[attrPath] != strings.SplitN(Prefix+tc.path, "?", 2)[0] || a[attrMethod] != tc.method {
					t.Errorf("%s: log line %s", name, line(rec))
				}
			}
		}
		if len(mine) != 1 {
			t.Errorf("%s: %d log lines with a status, want 1", name, len(mine))
		}
		if tc.status == 500 && (len(mine) != 1 || mine[0].Level != slog.LevelError || !strings.Contains(line(mine[0]), "metrics registry gone")) {
			t.Errorf("%s: the internal failure's cause is not logged as an error", name)
		}
	}
	for _, rt := range routes {
		if p := rt.method + " " + Prefix + rt.path; !covered[p] {
			t.Errorf("route %s has no refusal case", p)
		}
	}
}

// send makes one request and returns the response (its body read) and
// the body.
func send(t *testing.T, base, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Mcpgate-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// An error a handler returns that is not a refusal is a bug's: a 500 with
// no detail for the client, its cause in the log at error level.
func TestAdapterHidesAnUnexpectedError(t *testing.T) {
	logs := &logRecords{}
	a := New(Options{Logger: slog.New(logs)})
	h := a.handle(func(http.ResponseWriter, *http.Request) error {
		return fmt.Errorf("decrypt entry: %w", errors.New("key k1 mismatch"))
	})
	w := httptest.NewRecorder()
	h(w, httptest.NewRequest("GET", Prefix+"/keys", nil))
	if w.Code != 500 || strings.TrimSpace(w.Body.String()) != `{"error":"Internal Server Error"}` {
		t.Errorf("answer %d %s", w.Code, w.Body)
	}
	recs := logs.take()
	if len(recs) != 1 || recs[0].Level != slog.LevelError || !strings.Contains(line(recs[0]), "key k1 mismatch") || attrs(recs[0])[attrStatus] != "500" {
		t.Errorf("log %v", recs)
	}

	// A refusal with headers keeps them; a wrapped refusal is found.
	h = a.handle(func(http.ResponseWriter, *http.Request) error {
		return fmt.Errorf("terminate: %w", refusal(http.StatusServiceUnavailable, "later").withHeader("Retry-After", "1"))
	})
	w = httptest.NewRecorder()
	h(w, httptest.NewRequest("POST", Prefix+"/sessions/terminate", nil))
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || strings.TrimSpace(w.Body.String()) != `{"error":"Service Unavailable","details":"later"}` {
		t.Errorf("wrapped refusal: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

// No function of the package writes an error and returns ok: a function
// given the ResponseWriter returns no bool, and outside errors.go nothing
// writes a status that is not a success (writeJSON, WriteHeader), builds
// the error body, or writes an authentication failure to w. Refusals go
// through the adapter.
func TestNoHandlerWritesItsOwnError(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	success := map[string]bool{"StatusOK": true, "StatusCreated": true, "StatusNoContent": true, "StatusAccepted": true}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if takesWriter(fd.Type) && returnsBool(fd.Type) {
				t.Errorf("%s: %s takes the ResponseWriter and returns ok: return an error for the adapter instead", fset.Position(fd.Pos()), fd.Name.Name)
			}
			if name == "errors.go" || fd.Name.Name == "writeJSON" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					if takesWriter(n.Type) && returnsBool(n.Type) {
						t.Errorf("%s: a func literal takes the ResponseWriter and returns ok", fset.Position(n.Pos()))
					}
				case *ast.CompositeLit:
					if id, ok := n.Type.(*ast.Ident); ok && id.Name == "errorBody" {
						t.Errorf("%s: %s builds the error body itself", fset.Position(n.Pos()), fd.Name.Name)
					}
				case *ast.CallExpr:
					var status ast.Expr
					switch fn := n.Fun.(type) {
					case *ast.Ident:
						if fn.Name == "writeJSON" && len(n.Args) == 3 {
							status = n.Args[1]
						}
					case *ast.SelectorExpr:
						if fn.Sel.Name == "WriteHeader" && len(n.Args) == 1 {
							status = n.Args[0]
						}
						if fn.Sel.Name == "Write" && len(n.Args) == 1 {
							if id, ok := n.Args[0].(*ast.Ident); ok && id.Name == "w" {
								t.Errorf("%s: %s writes something to w itself (a Failure?)", fset.Position(n.Pos()), fd.Name.Name)
							}
						}
					}
					if status == nil {
						return true
					}
					if sel, ok := status.(*ast.SelectorExpr); !ok || !success[sel.Sel.Name] {
						t.Errorf("%s: %s writes a status that is not a success: return a refusal instead", fset.Position(n.Pos()), fd.Name.Name)
					}
				}
				return true
			})
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files; run from the package directory", checked)
	}
}

// takesWriter reports whether ft has an http.ResponseWriter parameter.
func takesWriter(ft *ast.FuncType) bool {
	for _, p := range ft.Params.List {
		if sel, ok := p.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "ResponseWriter" {
			return true
		}
	}
	return false
}

// returnsBool reports whether ft's last result is a bool.
func returnsBool(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return false
	}
	id, ok := ft.Results.List[len(ft.Results.List)-1].Type.(*ast.Ident)
	return ok && id.Name == "bool"
}
