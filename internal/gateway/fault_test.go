package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// faultyUpstream is a streamable-HTTP upstream whose tools fail in every
// way an upstream can: the tool name says how.
func faultyUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	return mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "f-1")
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"faulty","version":"0"}}`
		case "tools/list":
			var tools []string
			for _, n := range []string{"ok", "slow", "nap", "unauth", "forbidden", "limited", "unavailable", "broken", "rpc408", "html", "badjson"} {
				tools = append(tools, `{"name":"`+n+`","inputSchema":{"type":"object"}}`)
			}
			return `{"tools":[` + strings.Join(tools, ",") + `]}`
		}
		name, _ := jsonrpc.GetString(m.Params, "name")
		switch name {
		case "ok":
			return `{"content":[{"type":"text","text":"fine"}]}`
		case "slow":
			<-r.Context().Done()
		case "nap":
			time.Sleep(300 * time.Millisecond)
			return `{"content":[{"type":"text","text":"rested"}]}`
		case "unauth":
			w.WriteHeader(http.StatusUnauthorized)
		case "forbidden":
			w.WriteHeader(http.StatusForbidden)
		case "limited":
			w.WriteHeader(http.StatusTooManyRequests)
		case "unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "broken":
			w.WriteHeader(http.StatusInternalServerError)
		case "rpc408":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":408,"message":"upstream says: request timeout"}}`, m.ID.Raw())
		case "html":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>secret-page</html>")
		case "badjson":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, "secret-invalid-json")
		}
		return ""
	})
}

// Every way an upstream can fail reaches the downstream as one fault class
// with its HTTP status (C6.6), with the real cause in words and without
// body text; the upstream's own JSON-RPC error (408 included) is relayed
// as it is (C6.2).
func TestFaultClassesAtTheEdge(t *testing.T) {
	up := faultyUpstream(t)
	srv := httpServer(up.URL + "/mcp")
	srv.Timeout = 300 * time.Millisecond
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{
		"f":    srv,
		"gone": httpServer("http://127.0.0.1:1/mcp"),
	}}})
	tests := []struct {
		tool          string
		code          int64
		fault         string
		status        int
		msgHas        string
		relayedNoData bool
	}{
		{"f__slow", -32001, "timeout", 504, "timed out after 0.3s", false},
		{"f__unauth", -32603, "auth", 401, "HTTP 401", false},
		{"f__forbidden", -32603, "auth", 403, "HTTP 403", false},
		{"f__limited", -32603, "rate_limited", 429, "HTTP 429", false},
		{"f__unavailable", -32603, "upstream_error", 503, "HTTP 503", false},
		{"f__broken", -32603, "upstream_error", 502, "HTTP 500", false},
		{"f__html", -32603, "invalid_response", 502, "unsupported content type", false},
		{"f__badjson", -32603, "invalid_response", 502, "invalid MCP response", false},
		{"gone__x", -32603, "unreachable", 502, "connection refused", false},
		{"f__rpc408", 408, "", 0, "upstream says: request timeout", true},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			_, _, body := rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tc.tool+`","arguments":{}}}`)
			var resp struct {
				Error *struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
					Data    *struct {
						Fault  string `json:"fault"`
						Status int    `json:"status"`
						Server string `json:"server"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &resp); err != nil || resp.Error == nil {
				t.Fatalf("want a JSON-RPC error, got %s", body)
			}
			e := resp.Error
			t.Logf("%s -> %d %s", tc.tool, e.Code, e.Message)
			if e.Code != tc.code || !strings.Contains(e.Message, tc.msgHas) {
				t.Errorf("error %d %q, want %d containing %q", e.Code, e.Message, tc.code, tc.msgHas)
			}
			if strings.Contains(string(body), "secret") {
				t.Errorf("the upstream's body leaked: %s", body)
			}
			if tc.relayedNoData {
				if e.Data != nil {
					t.Errorf("relayed upstream error carries gateway data: %s", body)
				}
				return
			}
			if e.Data == nil || e.Data.Fault != tc.fault || e.Data.Status != tc.status {
				t.Errorf("data %s, want fault %s status %d", body, tc.fault, tc.status)
			}
			server := strings.Split(tc.tool, "__")[0]
			if e.Data != nil && e.Data.Server != server || !strings.Contains(e.Message, server) {
				t.Errorf("the error does not name server %s: %s", server, body)
			}
			if strings.Contains(e.Message, "timed out") != (tc.fault == "timeout") {
				t.Errorf("only a timeout may say it timed out: %q", e.Message)
			}
		})
	}
	// The gateway keeps serving after all that.
	_, _, body := rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"f__ok","arguments":{}}}`)
	if !strings.Contains(string(body), "fine") {
		t.Errorf("after the faults: %s", body)
	}
}

// Listing is strict on a single-server route (the caller gets the
// upstream's failure, logged at debug) and lenient on a merged route (the
// failing server is left out, logged at error): C7.2, C8.2, S6.6.
func TestListingStrictAndLenient(t *testing.T) {
	up := faultyUpstream(t)
	var logs syncBuffer
	_, gw := startGatewayWith(t, Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config: &config.Config{Servers: map[string]*config.Server{
			"f":    httpServer(up.URL + "/mcp"),
			"gone": httpServer("http://127.0.0.1:1/mcp"),
		}}})
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

	_, _, body := rpc(t, gw.URL+"/mcp", nil, list)
	if !strings.Contains(string(body), `"f__ok"`) || strings.Contains(string(body), `"error"`) {
		t.Errorf("merged list: %s", body)
	}
	if !regexp.MustCompile(`level=ERROR msg="upstream (list failed|unavailable); left out" server=gone`).MatchString(logs.String()) {
		t.Errorf("a lenient failure must be logged at error:\n%s", logs.String())
	}

	logs.Reset()
	_, _, body = rpc(t, gw.URL+"/mcp/gone", nil, list)
	if !strings.Contains(string(body), `"fault":"unreachable"`) || strings.Contains(string(body), `"tools"`) {
		t.Errorf("single-server list: %s", body)
	}
	if strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), `level=DEBUG msg="upstream list failed" server=gone`) {
		t.Errorf("a strict failure must be logged at debug only:\n%s", logs.String())
	}
}

// Issue 24 §1: a server a listing leaves out is counted, lenient (merged
// route) or strict (its own route), by server, kind and fault class; a
// listing the servers gave counts nothing.
func TestListFailuresAreCounted(t *testing.T) {
	up := faultyUpstream(t)
	m := metrics.New()
	_, gw := startGatewayWith(t, Options{Metrics: m, Config: &config.Config{Servers: map[string]*config.Server{
		"f":    httpServer(up.URL + "/mcp"),
		"gone": httpServer("http://127.0.0.1:1/mcp"),
	}}})
	count := func(server string) float64 {
		t.Helper()
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, f := range fams {
			if f.GetName() != "mcpgate_upstream_list_failures_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range mt.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["server"] == server && labels["kind"] == "tools" && labels["fault"] == "unreachable" {
					n += mt.GetCounter().GetValue()
				} else if labels["server"] == server {
					t.Errorf("a list failure of %s counted as %v", server, labels)
				}
			}
		}
		return n
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	if _, _, body := rpc(t, gw.URL+"/mcp", nil, list); !strings.Contains(string(body), `"f__ok"`) {
		t.Fatalf("merged list: %s", body)
	}
	if n := count("gone"); n != 1 {
		t.Errorf("after a merged list leaving gone out: %v failures counted, want 1", n)
	}
	if _, _, body := rpc(t, gw.URL+"/mcp/gone", nil, list); !strings.Contains(string(body), `"fault":"unreachable"`) {
		t.Fatalf("single-server list: %s", body)
	}
	if n := count("gone"); n != 2 {
		t.Errorf("after gone's own list failed: %v failures counted, want 2", n)
	}
	if n := count("f"); n != 0 {
		t.Errorf("f listed fine, yet %v failures counted", n)
	}
}

// Issue 24 §1: a server that is down shows as down, since when, and why
// in a word (its fault class), to an administrator on /readyz and in the
// admin API's server status; calls failing on it again do not move the
// time it went down.
func TestDownServerShowsSinceAndFault(t *testing.T) {
	const master = "mk_down_since_master_key_0123456789abcdef"
	auth := callers.New(callers.Options{MasterKey: master, Logger: testLogger(t)})
	t.Cleanup(func() { auth.Close() })
	g, gw := startGatewayWith(t, Options{Authenticator: auth, Config: &config.Config{Servers: map[string]*config.Server{
		"gone": httpServer("http://127.0.0.1:1/mcp"),
	}}})
	hdr := map[string]string{"Authorization": "Bearer " + master}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gone__x","arguments":{}}}`
	type entry struct {
		State, Since, Fault, LastError string
	}
	ready := func() entry {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, gw.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Servers map[string]map[string]string `json:"servers"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		s := doc.Servers["gone"]
		return entry{s["state"], s["since"], s["fault"], s["last_error"]}
	}
	status := func() entry {
		for _, s := range g.ServersStatus().Servers {
			if s.Name == "gone" {
				return entry{s.State, s.Since, s.Fault, s.LastError}
			}
		}
		t.Fatal("gone is not in the server status")
		return entry{}
	}
	rpc(t, gw.URL+"/mcp", hdr, call)
	first := ready()
	if first.State != "down" || first.Fault != "unreachable" || first.Since == "" {
		t.Fatalf("/readyz after a failed call: %+v, want down since a time, fault unreachable", first)
	}
	if st := status(); st != first {
		t.Errorf("admin server status %+v, /readyz %+v: want the same", st, first)
	}
	// Fail again past the first reconnect backoff (a new dial), and in a
	// later second: since shows seconds.
	time.Sleep(300 * time.Millisecond)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	rpc(t, gw.URL+"/mcp", hdr, call)
	if again := ready(); again.State != "down" || again.Since != first.Since || again.Fault != "unreachable" {
		t.Errorf("/readyz after failing again: %+v, want down since %s (the first failure)", again, first.Since)
	}
}

// Issue 24 §1: the records of failed calls go through the same audit
// writer to the store; with audit.durable each is committed before its
// answer (none acknowledged and lost), denied ones included, and none
// holds an argument.
func TestFailedCallsReachTheStore(t *testing.T) {
	up := faultyUpstream(t)
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := audit.NewWriter(st, audit.Options{})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	_, gw := startGatewayWith(t, Options{Audit: w, Config: &config.Config{
		Audit: config.Audit{Durable: new(true)},
		Servers: map[string]*config.Server{
			"f":    httpServer(up.URL + "/mcp"),
			"gone": httpServer("http://127.0.0.1:1/mcp"),
		}}})
	const secret = "s3cr3t-argument-value"
	for i, tc := range []struct{ tool, server, class string }{
		{"gone__x", "gone", store.FaultUnreachable},
		{"f__broken", "f", store.FaultUpstreamError},
		{"f__nope", "", store.FaultDenied},
		{"", "", store.FaultDenied},
	} {
		rpc(t, gw.URL+"/mcp", nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"token":%q}}}`, i+1, tc.tool, secret))
		// Answered: the record is in the store already.
		calls, _, err := st.ListToolCalls(t.Context(), store.ToolCallFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != i+1 {
			t.Fatalf("%q answered with %d records in the store, want %d: %+v", tc.tool, len(calls), i+1, calls)
		}
		r := calls[0] // newest first
		if r.Server != tc.server || r.Tool != strings.TrimPrefix(tc.tool, "f__") && r.Tool != tc.tool || r.Outcome != tc.class || r.ErrorClass != tc.class {
			t.Errorf("%q: stored %+v, want server %q, outcome and class %s", tc.tool, r, tc.server, tc.class)
		}
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("%q: an argument reached the store: %+v", tc.tool, r)
		}
	}
}

// Issue 24 §1: a call its client gave up on (the HTTP request went away
// mid-call) is recorded once, as cancelled, against its server.
func TestCancelledCallIsRecorded(t *testing.T) {
	up := faultyUpstream(t)
	aud := &memAudit{}
	m := metrics.New()
	_, gw := startGatewayWith(t, Options{Audit: aud, Metrics: m, Config: &config.Config{Servers: map[string]*config.Server{
		"f": httpServer(up.URL + "/mcp"),
	}}})
	// The catalog first, so that the call is in the upstream stage when
	// the client leaves.
	rpc(t, gw.URL+"/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"f__slow","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("the slow call answered %d before the client left", resp.StatusCode)
		}
	}
	waitFor(t, "the cancelled call's record", func() bool { return len(aud.records()) > 0 })
	time.Sleep(100 * time.Millisecond) // a second record would come now
	recs := aud.records()
	if len(recs) != 1 || recs[0].Server != "f" || recs[0].Tool != "slow" || recs[0].Outcome != store.FaultCancelled || recs[0].ErrorClass != store.FaultCancelled {
		t.Errorf("records %+v, want one: f/slow cancelled", recs)
	}
	if n := toolCalls(t, m, "f", store.FaultCancelled); n != 1 {
		t.Errorf("%v cancelled samples for f, want 1", n)
	}
}
