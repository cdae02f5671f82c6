package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Tokens of the OAuth upstream: distinctive, so that a leak is found.
const (
	tokGood      = "tok-GOOD-5b1e9c"
	tokWrong     = "tok-WRONG-77aa01"
	tokForbidden = "tok-FORBIDDEN-3c4d"
	tokRevoked   = "tok-REVOKED-9f0e" // good for initialize, refused once revoked
	testAS       = "https://as.example.test"
)

var allTokens = []string{tokGood, tokWrong, tokForbidden, tokRevoked}

// oauthUpstream is an MCP server that wants Authorization: Bearer tokGood
// (or tokRevoked until revoked is set), answers tokForbidden 403 and
// anything else 401 with its own challenge, and serves its RFC 9728
// metadata naming testAS.
func oauthUpstream(t *testing.T, revoked *atomic.Bool) *httptest.Server {
	t.Helper()
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"resource":%q,"authorization_servers":[%q],"scopes_supported":["read","write"]}`, ts.URL+"/mcp", testAS)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/mcp" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch auth := r.Header.Get("Authorization"); {
		case auth == "Bearer "+tokGood, auth == "Bearer "+tokRevoked && (!revoked.Load() || m.Method == "initialize" || !m.IsRequest()):
		case auth == "Bearer "+tokForbidden:
			w.WriteHeader(http.StatusForbidden)
			return
		default:
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+ts.URL+`/.well-known/oauth-protected-resource/mcp"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_token"}`)
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"pt","version":"0"}}`
		case "tools/list":
			result = `{"tools":[{"name":"whoami","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			result = `{"content":[{"type":"text","text":"hello"}]}`
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"nope"}}`, m.ID.Raw())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// plainUpstream is a server with gateway-owned (no) credentials.
func plainUpstream(t *testing.T) *httptest.Server {
	return mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"plain","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"ping","inputSchema":{"type":"object"}}]}`
		}
		return `{"content":[{"type":"text","text":"pong"}]}`
	})
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

func callTool(name string) string {
	return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + name + `","arguments":{}}}`
}

func upBearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// closedURL is an http URL nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}

// S9.2, S10: a passthrough server's single-server routes challenge a
// caller without a token with the gateway's metadata, which mirrors the
// upstream's; a refused token is 401 invalid_token (403 stays 403), at
// initialize and on a later call; a good token in either header works;
// on /mcp a tokenless passthrough server is left out. No token value is
// in any response or log line.
func TestPassthroughAuthChallenges(t *testing.T) {
	var revoked atomic.Bool
	up := oauthUpstream(t, &revoked)
	plain := plainUpstream(t)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pt := httpServer(up.URL + "/mcp")
	pt.Auth = &config.Auth{Type: config.AuthPassthrough}
	down := httpServer(closedURL(t))
	down.Auth = &config.Auth{Type: config.AuthPassthrough}
	_, gw := startGatewayWith(t, Options{Logger: logger, Config: &config.Config{Servers: map[string]*config.Server{
		"pt": pt, "plain": httpServer(plain.URL), "down": down}}})

	var bodies []string
	post := func(t *testing.T, path string, hdr map[string]string, body string) (int, http.Header, []byte) {
		t.Helper()
		st, h, b := rpc(t, gw.URL+path, hdr, body)
		bodies = append(bodies, string(b), fmt.Sprint(h))
		return st, h, b
	}
	prm := func(route string) string { return gw.URL + "/.well-known/oauth-protected-resource" + route }

	t.Run("no token", func(t *testing.T) {
		for _, route := range []string{"/mcp/pt", "/pt/mcp"} {
			for _, body := range []string{initBody, listTools} {
				st, h, b := post(t, route, nil, body)
				want := `Bearer resource_metadata="` + prm(route) + `"`
				if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != want {
					t.Errorf("%s: %d %q %s; want 401 %q", route, st, h.Get("WWW-Authenticate"), b, want)
				}
				if h.Get(mcpwire.HeaderSessionID) != "" {
					t.Errorf("%s: a session started", route)
				}
			}
		}
	})

	t.Run("metadata mirrors the upstream's", func(t *testing.T) {
		for _, route := range []string{"/mcp/pt", "/pt/mcp"} {
			resp, err := http.Get(prm(route))
			if err != nil {
				t.Fatal(err)
			}
			var md struct {
				Resource             string   `json:"resource"`
				AuthorizationServers []string `json:"authorization_servers"`
				Scopes               []string `json:"scopes_supported"`
			}
			err = json.NewDecoder(resp.Body).Decode(&md)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || md.Resource != gw.URL+route ||
				fmt.Sprint(md.AuthorizationServers) != "["+testAS+"]" || fmt.Sprint(md.Scopes) != "[read write]" {
				t.Errorf("%s: %d %+v %v", route, resp.StatusCode, md, err)
			}
		}
		// No metadata for routes that are not a single passthrough server.
		for _, route := range []string{"/mcp", "/mcp/plain", "/mcp/pt,plain"} {
			resp, err := http.Get(prm(route))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %d, want 404", route, resp.StatusCode)
			}
		}
	})

	t.Run("refused token", func(t *testing.T) {
		for _, body := range []string{initBody, listTools} {
			st, h, b := post(t, "/mcp/pt", upBearer(tokWrong), body)
			want := `Bearer resource_metadata="` + prm("/mcp/pt") + `", error="invalid_token"`
			if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != want {
				t.Errorf("wrong token: %d %q %s; want 401 %q", st, h.Get("WWW-Authenticate"), b, want)
			}
		}
		st, h, b := post(t, "/mcp/pt", map[string]string{"X-Mcp-pt-Authorization": "Bearer " + tokForbidden}, listTools)
		if st != http.StatusForbidden || h.Get("WWW-Authenticate") != "" || !strings.Contains(string(b), `"Forbidden"`) {
			t.Errorf("forbidden token: %d %q %s", st, h.Get("WWW-Authenticate"), b)
		}
	})

	t.Run("good token", func(t *testing.T) {
		for _, hdr := range []map[string]string{upBearer(tokGood), {"X-Mcp-pt-Authorization": "Bearer " + tokGood, "Authorization": "Bearer " + tokWrong}} {
			st, _, b := post(t, "/mcp/pt", hdr, listTools)
			if st != http.StatusOK || !strings.Contains(string(b), `"whoami"`) {
				t.Errorf("tools/list %v: %d %s", hdr, st, b)
			}
			st, h, b := post(t, "/mcp/pt", hdr, initBody)
			sid := h.Get(mcpwire.HeaderSessionID)
			if st != http.StatusOK || sid == "" {
				t.Fatalf("initialize: %d %s", st, b)
			}
			withSID := map[string]string{mcpwire.HeaderSessionID: sid}
			for k, v := range hdr {
				withSID[k] = v
			}
			st, _, b = post(t, "/mcp/pt", withSID, callTool("whoami"))
			if st != http.StatusOK || !strings.Contains(string(b), `"hello"`) {
				t.Errorf("tools/call on the session: %d %s", st, b)
			}
		}
	})

	t.Run("refused on a later call", func(t *testing.T) {
		st, h, b := post(t, "/mcp/pt", upBearer(tokRevoked), initBody)
		sid := h.Get(mcpwire.HeaderSessionID)
		if st != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %s", st, b)
		}
		revoked.Store(true)
		defer revoked.Store(false)
		hdr := upBearer(tokRevoked)
		hdr[mcpwire.HeaderSessionID] = sid
		st, h, b = post(t, "/mcp/pt", hdr, callTool("whoami"))
		want := `Bearer resource_metadata="` + prm("/mcp/pt") + `", error="invalid_token"`
		if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != want {
			t.Errorf("tools/call after revocation: %d %q %s; want 401 %q", st, h.Get("WWW-Authenticate"), b, want)
		}
	})

	t.Run("unreachable upstream lets the request through", func(t *testing.T) {
		st, _, b := post(t, "/mcp/down", upBearer(tokGood), listTools)
		if st != http.StatusOK {
			t.Errorf("tools/list on an unreachable passthrough server: %d %s", st, b)
		}
	})

	t.Run("merged route", func(t *testing.T) {
		st, _, b := post(t, "/mcp", nil, listTools)
		if st != http.StatusOK || strings.Contains(string(b), "pt__") || !strings.Contains(string(b), `"plain__ping"`) {
			t.Errorf("tools/list without a token: %d %s", st, b)
		}
		st, _, b = post(t, "/mcp", nil, callTool("plain__ping"))
		if st != http.StatusOK || !strings.Contains(string(b), `"pong"`) {
			t.Errorf("plain call without a token: %d %s", st, b)
		}
		st, _, b = post(t, "/mcp", nil, callTool("pt__whoami"))
		if st != http.StatusOK || !strings.Contains(string(b), "Unknown tool") {
			t.Errorf("pt call without a token: %d %s", st, b)
		}
		// Authorization names no server: on a merged route it is nobody's
		// token (hole 12), only X-Mcp-pt-Authorization is pt's.
		st, _, b = post(t, "/mcp", upBearer(tokGood), listTools)
		if st != http.StatusOK || strings.Contains(string(b), "pt__") || !strings.Contains(string(b), `"plain__ping"`) {
			t.Errorf("tools/list with Authorization only: %d %s", st, b)
		}
		ptBearer := func(tok string) map[string]string {
			return map[string]string{"X-Mcp-pt-Authorization": "Bearer " + tok}
		}
		st, _, b = post(t, "/mcp", ptBearer(tokGood), listTools)
		if st != http.StatusOK || !strings.Contains(string(b), `"pt__whoami"`) || !strings.Contains(string(b), `"plain__ping"`) {
			t.Errorf("tools/list with a token: %d %s", st, b)
		}
		st, _, b = post(t, "/mcp", ptBearer(tokRevoked), callTool("pt__whoami"))
		if st != http.StatusOK || !strings.Contains(string(b), `"hello"`) {
			t.Errorf("pt call with a token: %d %s", st, b)
		}
		revoked.Store(true)
		defer revoked.Store(false)
		st, h, b := post(t, "/mcp", ptBearer(tokRevoked), callTool("pt__whoami"))
		if st != http.StatusOK || h.Get("WWW-Authenticate") != "" || !strings.Contains(string(b), "refused the caller's token") {
			t.Errorf("refused pt call on /mcp: %d %q %s", st, h.Get("WWW-Authenticate"), b)
		}
	})

	for _, tok := range allTokens {
		for _, b := range bodies {
			if strings.Contains(b, tok) {
				t.Errorf("a response carries the token %s: %s", tok, b)
			}
		}
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the log carries the token %s", tok)
		}
	}
}

// A caller with a gateway key in X-Mcpgate-Api-Key keeps Authorization
// for its upstream token; without one it is challenged like anyone; a
// gateway key in Authorization is not an upstream token.
func TestPassthroughAuthWithGatewayKey(t *testing.T) {
	var revoked atomic.Bool
	up := oauthUpstream(t, &revoked)
	pt := httpServer(up.URL + "/mcp")
	pt.Auth = &config.Auth{Type: config.AuthPassthrough}
	keys := &memKeys{}
	key := keys.add(t, store.Key{Alias: "k"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Config: &config.Config{Servers: map[string]*config.Server{"pt": pt}}})

	st, _, b := rpc(t, gw.URL+"/mcp/pt", map[string]string{callers.HeaderAPIKey: key, "Authorization": "Bearer " + tokGood}, listTools)
	if st != http.StatusOK || !strings.Contains(string(b), `"whoami"`) {
		t.Errorf("key and upstream token: %d %s", st, b)
	}
	want := `Bearer resource_metadata="` + gw.URL + `/.well-known/oauth-protected-resource/mcp/pt"`
	st, h, b := rpc(t, gw.URL+"/mcp/pt", map[string]string{callers.HeaderAPIKey: key}, listTools)
	if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != want {
		t.Errorf("key, no upstream token: %d %q %s", st, h.Get("WWW-Authenticate"), b)
	}
	st, h, b = rpc(t, gw.URL+"/mcp/pt", map[string]string{"Authorization": "Bearer " + key}, listTools)
	if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != want {
		t.Errorf("key in Authorization, no upstream token: %d %q %s", st, h.Get("WWW-Authenticate"), b)
	}
	st, _, b = rpc(t, gw.URL+"/mcp/pt", map[string]string{"Authorization": "Bearer " + key, "X-Mcp-pt-Authorization": "Bearer " + tokGood}, listTools)
	if st != http.StatusOK || !strings.Contains(string(b), `"whoami"`) {
		t.Errorf("key in Authorization, upstream token in X-Mcp-pt-Authorization: %d %s", st, b)
	}
}
