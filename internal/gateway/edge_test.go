package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// hostRequest POSTs body to url with the Host header host ("" leaves the
// URL's) and hdr, and returns the status and body.
func hostRequest(t *testing.T, url, host string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serveOn starts g on a real listener bound to listen, told to g as
// serve does, and returns its base URL.
func serveOn(t *testing.T, g *Gateway, listen string) string {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		// 127.0.0.2 and the names in /etc/hosts are loopback on every
		// Linux machine CI runs on: there a failure to bind is a failure.
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot listen on %s: %v", listen, err)
		}
		t.Skipf("cannot listen on %s here: %v", listen, err)
	}
	g.Listening(ln.Addr())
	ts := httptest.NewUnstartedServer(g)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// newEdgeGateway builds (without serving) a gateway for cfg with one
// upstream, alpha, that counts the tools/call requests it gets.
func newEdgeGateway(t *testing.T, cfg *config.Config, auth Authenticator) (*Gateway, *int32) {
	t.Helper()
	var mu sync.Mutex
	calls := new(int32)
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"alpha","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"ping","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			mu.Lock()
			*calls++
			mu.Unlock()
		}
		return `{"content":[{"type":"text","text":"pong"}]}`
	})
	if cfg.Servers == nil {
		cfg.Servers = map[string]*config.Server{}
	}
	cfg.Servers["alpha"] = httpServer(up.URL + "/mcp")
	cfg.ToolNameSeparator = config.DefaultSeparator
	for name, s := range cfg.Servers {
		s.Name, s.Timeout, s.ProtocolVersion = name, 20*time.Second, config.ProtocolVersionAuto
	}
	// The admin API where the binary mounts it: /readyz's details ask for
	// its resource.
	g := New(Options{Config: cfg, Logger: testLogger(t), Version: "test", Authenticator: auth, AdminPath: "/admin/v1"})
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	t.Cleanup(func() {
		cancel()
		ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = g.Close(ctx)
	})
	return g, calls
}

// loopbackNameFromHosts is a name other than localhost that the hosts file
// maps to a loopback address ("" when there is none): a name that
// resolves to loopback without any DNS traffic.
func loopbackNameFromHosts() string {
	f, err := os.Open("/etc/hosts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) < 2 || !netaddr.IsLoopbackHost(fields[0]) || !strings.HasPrefix(fields[0], "127.") {
			continue
		}
		for _, name := range fields[1:] {
			if !netaddr.IsLoopbackHost(name) {
				return name
			}
		}
	}
	return ""
}

// Hole 7: the DNS-rebinding guard is on whenever the listener bound
// loopback, whatever the listen address's spelling; a rebinding page's
// Host is refused before anything reaches an upstream, and the gateway's
// own names (and allowed_hosts) are served.
func TestHostGuardOnBoundLoopback(t *testing.T) {
	listens := []string{"LOCALHOST:0", "127.0.0.2:0"}
	if name := loopbackNameFromHosts(); name != "" {
		listens = append(listens, name+":0")
	}
	for _, listen := range listens {
		t.Run(listen, func(t *testing.T) {
			g, calls := newEdgeGateway(t, &config.Config{Listen: listen, AllowedHosts: []string{"mcp.internal"}}, nil)
			base := serveOn(t, g, listen)
			if !g.loopback.Load() {
				t.Fatalf("listening on %s (bound %s): not judged loopback", listen, base)
			}
			call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"alpha__ping","arguments":{}}}`
			for _, host := range []string{"attacker.example", "attacker.example:80", "localhost.attacker.example", "127.1", "0x7f.1"} {
				code, body := hostRequest(t, base+"/mcp", host, nil, call)
				if code != http.StatusForbidden || !strings.Contains(body, `"message":"Invalid Host header"`) {
					t.Errorf("Host %s: %d %s, want 403 Invalid Host header", host, code, body)
				}
			}
			if *calls != 0 {
				t.Errorf("a refused Host reached the upstream (%d calls)", *calls)
			}
			port := base[strings.LastIndexByte(base, ':'):]
			for _, host := range []string{"", "localhost" + port, "LOCALHOST" + port, "mcp.internal"} {
				code, body := hostRequest(t, base+"/mcp", host, nil, call)
				if code != http.StatusOK || !strings.Contains(body, "pong") {
					t.Errorf("Host %q: %d %s, want the call served", host, code, body)
				}
			}
		})
	}
}

// The guard judges the bound address, not the text: a listen address
// whose text does not name loopback but which bound loopback turns it on.
func TestListeningDecidesLoopback(t *testing.T) {
	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	g, _ := newEdgeGateway(t, &config.Config{Listen: "gw.internal.example:4000"}, nil)
	// Served before the gateway is told where it listens: its text alone.
	unbound := httptest.NewServer(g)
	t.Cleanup(unbound.Close)
	if code, body := hostRequest(t, unbound.URL+"/mcp", "attacker.example", nil, ping); code != http.StatusOK {
		t.Fatalf("a DNS name's text was judged loopback: Host attacker.example got %d %s", code, body)
	}
	base := serveOn(t, g, "127.0.0.1:0")
	code, body := hostRequest(t, base+"/mcp", "attacker.example", nil, ping)
	if code != http.StatusForbidden || !strings.Contains(body, "Invalid Host header") {
		t.Errorf("bound loopback, Host attacker.example: %d %s", code, body)
	}
	g.Listening(&net.TCPAddr{IP: net.IPv4zero, Port: 4000})
	if code, body := hostRequest(t, base+"/mcp", "attacker.example", nil, ping); code != http.StatusOK {
		t.Errorf("0.0.0.0 judged loopback: Host attacker.example got %d %s", code, body)
	}
}

// signJWT is a JWT of is for subject with audience aud, valid an hour.
func (is *jwtIssuer) signJWT(t *testing.T, subject, aud string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: is.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: is.srv.URL, Subject: subject, Audience: jwt.Audience{aud},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Hole 5: the audience a JWT must carry never comes from the Host header.
// The same IdP issued tokens for other services; sent with those
// services' Host, they are refused on every kind of listener, and the
// upstream never sees the call, while a token for the gateway's own
// resource is served.
func TestJWTAudienceNotFromHost(t *testing.T) {
	is := newJWTIssuer(t)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping","arguments":{}}}`
	build := func(t *testing.T, listen string, allowed []string) (*Gateway, *int32) {
		issuer := config.OIDCIssuer{Issuer: is.srv.URL, Claims: config.ClaimPaths{}.OrDefaults()}
		cfg := &config.Config{Listen: listen, AllowedHosts: allowed,
			Auth: &config.CallerAuth{OIDC: []config.OIDCIssuer{issuer}, Grants: []config.Grant{{User: "alice"}, {User: "mallory"}}}}
		verifier := oauth.NewVerifier(oauth.VerifierOptions{Issuers: cfg.Auth.OIDC, Logger: testLogger(t)})
		auth := callers.New(callers.Options{Tokens: verifier, Grants: cfg.Auth.Grants, Logger: testLogger(t)})
		t.Cleanup(func() { auth.Close() })
		return newEdgeGateway(t, cfg, auth)
	}
	refused := func(t *testing.T, url, host, tok string, calls *int32) {
		t.Helper()
		code, body := hostRequest(t, url, host, map[string]string{"Authorization": "Bearer " + tok}, call)
		if code == http.StatusOK || strings.Contains(body, "pong") {
			t.Errorf("Host %s with a token for another service: %d %s, want it refused", host, code, body)
		}
		if code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("Host %s: status %d, want 401 (audience) or 403 (Host guard)", host, code)
		}
		if *calls != 0 {
			t.Errorf("Host %s: the upstream got %d calls", host, *calls)
		}
	}

	t.Run("beyond loopback without public_url", func(t *testing.T) {
		// A Config that skipped validation (which requires public_url
		// here): no own base URL, so no token matches.
		g, calls := build(t, "0.0.0.0:4000", nil)
		srv := httptest.NewServer(g) // the gateway believes its listen text
		t.Cleanup(srv.Close)
		refused(t, srv.URL+"/mcp/alpha", "tools.other.example", is.signJWT(t, "mallory", "http://tools.other.example/mcp/alpha"), calls)
	})
	t.Run("loopback, another local service's port", func(t *testing.T) {
		g, calls := build(t, "127.0.0.1:0", nil)
		base := serveOn(t, g, "127.0.0.1:0")
		refused(t, base+"/mcp/alpha", "localhost:9", is.signJWT(t, "mallory", "http://localhost:9/mcp/alpha"), calls)
		refused(t, base+"/mcp/alpha", "127.0.0.1:9", is.signJWT(t, "mallory", "http://127.0.0.1:9/mcp/alpha"), calls)
		// The gateway's own resource is served: the victim's work goes on.
		code, body := hostRequest(t, base+"/mcp/alpha", "", map[string]string{"Authorization": "Bearer " + is.signJWT(t, "alice", base+"/mcp/alpha")}, call)
		if code != http.StatusOK || !strings.Contains(body, "pong") || *calls != 1 {
			t.Errorf("the gateway's own audience: %d %s (upstream calls %d)", code, body, *calls)
		}
	})
	t.Run("loopback, an allowed host", func(t *testing.T) {
		g, calls := build(t, "127.0.0.1:0", []string{"tools.other.example"})
		base := serveOn(t, g, "127.0.0.1:0")
		refused(t, base+"/mcp/alpha", "tools.other.example", is.signJWT(t, "mallory", "http://tools.other.example/mcp/alpha"), calls)
		// The metadata names the listener, not the Host's port.
		req, _ := http.NewRequest(http.MethodGet, base+"/.well-known/oauth-protected-resource/mcp/alpha", nil)
		req.Host = "tools.other.example:9"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var md struct{ Resource string }
		_ = json.NewDecoder(resp.Body).Decode(&md)
		if want := "http://tools.other.example" + base[strings.LastIndexByte(base, ':'):] + "/mcp/alpha"; md.Resource != want {
			t.Errorf("metadata resource %q, want %q", md.Resource, want)
		}
	})
}

// Hole 11: an anonymous /readyz probe learns readiness only; an
// administrator gets the details. An upstream's dial error names its
// address and stays out of the anonymous answer.
func TestReadyzAnonymous(t *testing.T) {
	const master = "mk_readyz_master_key_0123456789abcdef"
	// An external issuer whose tokens carry the gateway-wide audience
	// gw-client (auth.oidc[].audience): good on every MCP route, never on
	// the admin API, so never the details either.
	is := newJWTIssuer(t)
	oidc := []config.OIDCIssuer{{Issuer: is.srv.URL, Audience: "gw-client", Claims: config.ClaimPaths{}.OrDefaults()}}
	grants := []config.Grant{{User: "root", Admin: true}}
	verifier := oauth.NewVerifier(oauth.VerifierOptions{Issuers: oidc, Logger: testLogger(t)})
	auth := callers.New(callers.Options{MasterKey: master, Tokens: verifier, Grants: grants, Logger: testLogger(t)})
	t.Cleanup(func() { auth.Close() })
	g, _ := newEdgeGateway(t, &config.Config{Auth: &config.CallerAuth{OIDC: oidc, Grants: grants},
		Servers: map[string]*config.Server{"gone": httpServer("http://127.0.0.1:1/mcp")}}, auth)
	base := serveOn(t, g, "127.0.0.1:0") // loopback: the gateway knows its own base, the admin API's resource
	wide := is.token(t, "root")
	if code, body := hostRequest(t, base+"/mcp/alpha", "", map[string]string{"Authorization": "Bearer " + wide}, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping","arguments":{}}}`); code != http.StatusOK || !strings.Contains(body, "pong") {
		t.Fatalf("the gateway-wide token on an MCP route: %d %s, want it served", code, body)
	}
	get := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A call makes the gateway try gone.
	hostRequest(t, base+"/mcp/gone", "", map[string]string{"Authorization": "Bearer " + master}, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	waitFor(t, "gone down", func() bool {
		_, body := get(map[string]string{"Authorization": "Bearer " + master})
		return strings.Contains(body, "connection refused")
	})
	for name, hdr := range map[string]map[string]string{
		"no credential":      nil,
		"a wrong key":        {"Authorization": "Bearer mk_not_the_master_key_0123456789"},
		"a wrong header key": {"X-Mcpgate-Api-Key": "nope"},
		"an administrator's token with the gateway-wide audience": {"Authorization": "Bearer " + wide},
	} {
		code, body := get(hdr)
		if code != http.StatusOK {
			t.Errorf("%s: %d %s", name, code, body)
		}
		var doc struct {
			Ready   bool                         `json:"ready"`
			Servers map[string]map[string]string `json:"servers"`
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil || !doc.Ready || doc.Servers["gone"]["state"] != "down" || doc.Servers["alpha"] == nil {
			t.Errorf("%s: %s: want ready with each server's state", name, body)
		}
		for _, leak := range []string{"last_error", "since", "127.0.0.1", ":1", "dial", "refused", "connect"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the anonymous answer has %q: %s", name, leak, body)
			}
		}
		for _, entry := range doc.Servers {
			if len(entry) != 1 {
				t.Errorf("%s: a server entry with more than its state: %v", name, entry)
			}
		}
	}
	code, body := get(map[string]string{"Authorization": "Bearer " + master})
	if code != http.StatusOK || !strings.Contains(body, `"last_error":"upstream gone: POST http://127.0.0.1:1/mcp: dial tcp 127.0.0.1:1: connect: connection refused"`) ||
		!strings.Contains(body, `"since":`) {
		t.Errorf("admin: %d %s, want the details", code, body)
	}
	// A token naming the admin API itself is an administrator's, as there.
	code, body = get(map[string]string{"Authorization": "Bearer " + is.signJWT(t, "root", base+"/admin/v1")})
	if code != http.StatusOK || !strings.Contains(body, `"last_error":`) {
		t.Errorf("an administrator's token for the admin API: %d %s, want the details", code, body)
	}
}

// Hole 11: a caller's JSON-RPC error for a failing upstream names the
// server and the fault class, never its address; the log keeps the cause.
func TestFaultErrorWithoutAddresses(t *testing.T) {
	var logs syncBuffer
	_, gw := startGatewayWith(t, Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config: &config.Config{Servers: map[string]*config.Server{"gone": httpServer("http://127.0.0.1:1/mcp")}}})
	_, _, body := rpc(t, gw.URL+"/mcp/gone", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}`)
	var resp struct {
		Error *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Fault  string `json:"fault"`
				Server string `json:"server"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.Error == nil {
		t.Fatalf("want a JSON-RPC error, got %s", body)
	}
	if e := resp.Error; e.Code != -32603 || e.Message != "upstream gone: connection refused" || e.Data.Fault != "unreachable" || e.Data.Server != "gone" {
		t.Errorf("error %d %q %+v, want -32603 \"upstream gone: connection refused\" unreachable gone", e.Code, e.Message, e.Data)
	}
	if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "dial") {
		t.Errorf("the caller's error names the upstream's address: %s", body)
	}
	if !strings.Contains(logs.String(), "dial tcp 127.0.0.1:1") {
		t.Errorf("the log lost the cause:\n%s", logs.String())
	}
}
