package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// linkLocalListener listens on an IPv6 link-local address of this host
// (fe80::/10) and returns it with its address, zone included (the
// listener's own Addr drops it); ok is false when the host has none.
func linkLocalListener(t *testing.T) (l net.Listener, addr string, ok bool) {
	t.Helper()
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil || !pfx.Addr().IsLinkLocalUnicast() || !pfx.Addr().Is6() {
				continue
			}
			host := pfx.Addr().WithZone(ifc.Name).String()
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err == nil {
				_, port, _ := net.SplitHostPort(l.Addr().String())
				return l, net.JoinHostPort(host, port), true
			}
		}
	}
	return nil, "", false
}

// zoneURL is an http URL of the host:port addr, its zone escaped.
func zoneURL(addr, path string) string {
	return "http://" + strings.Replace(addr, "%", "%25", 1) + path
}

// countingMCP is an MCP server that counts every request it gets.
func countingMCP(hits *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&m)
		if m.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		res := map[string]any{"tools": []any{map[string]any{"name": "whoami", "inputSchema": map[string]any{"type": "object"}}}}
		if m.Method == "initialize" {
			res = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "n", "version": "1"}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": res})
	})
}

// A server added through the admin API may not reach link-local or cloud
// metadata addresses: a URL naming one literally is refused when it is
// added (400, naming the field); a name is judged on the address it
// resolves to when dialled, so a name resolving to a link-local address
// is served but its calls fail with a clear error and the target gets
// nothing, while the same name resolving to a loopback address (a
// private location, which stays allowed) is reached. The config file's
// servers are the operator's and keep every address.
func TestRuntimeServerLinkLocalRefused(t *testing.T) {
	clearAdminEnv(t)
	var llHits, loHits atomic.Int64
	ll, llZoned, haveLL := linkLocalListener(t)
	llAddr := "169.254.169.254:80" // no listener: the guard refuses before any packet
	if haveLL {
		srv := &http.Server{Handler: countingMCP(&llHits)}
		go srv.Serve(ll)
		t.Cleanup(func() { srv.Close() })
		llAddr = llZoned
	} else {
		t.Log("no link-local address on this host: the name resolves to 169.254.169.254, with nothing to receive there")
	}
	lo := httptest.NewServer(countingMCP(&loHits))
	t.Cleanup(lo.Close)

	// mcp.cloud.test resolves to the link-local server, mcp.lan.test to
	// the loopback one: the address the guard judges, as a resolver's
	// answer would be.
	t.Cleanup(oauth.SetTestResolver(func(address string) string {
		host, port, _ := net.SplitHostPort(address)
		switch host {
		case "mcp.cloud.test":
			return llAddr
		case "mcp.lan.test":
			return net.JoinHostPort("127.0.0.1", port)
		}
		return address
	}))
	_, loPort, _ := net.SplitHostPort(strings.TrimPrefix(lo.URL, "http://"))

	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master}}
	if haveLL {
		// The operator's own server on the link-local address is served.
		cfg.Servers = map[string]*config.Server{"file": {Name: "file", Transport: config.TransportHTTP, URL: zoneURL(llAddr, "/mcp"), Timeout: 5 * time.Second}}
	}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()
	add := func(name, url string, extra string) (int, string) {
		t.Helper()
		return rest(t, http.MethodPost, hs.URL+"/admin/v1/servers", master,
			`{"name":"`+name+`","transport":"http","url":"`+url+`","timeout":"5s"`+extra+`}`)
	}
	call := func(route string) (string, string) {
		t.Helper()
		st, _, out := post(t, hs.URL+route, master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if st != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", route, st, out)
		}
		return out, out
	}

	const refused = "link-local and cloud metadata addresses are refused for servers added through the admin API"
	literal := []struct{ name, url, extra, field string }{
		{"imds", "http://169.254.169.254/latest/meta-data/", "", "url"},
		{"imdsv6", "http://[fd00:ec2::254]/latest/meta-data/", "", "url"},
		{"alibaba", "http://100.100.100.200/latest/meta-data/", "", "url"},
		{"gcp", "http://metadata.google.internal/computeMetadata/v1/", "", "url"},
		{"mapped", "http://[::ffff:169.254.169.254]/", "", "url"},
		{"token", "http://mcp.lan.test:" + loPort + "/mcp", `,"auth":{"type":"oauth2","client_id":"gw","client_secret":"s3cret-Zq","token_url":"http://169.254.169.254/token"}`, "auth.token_url"},
	}
	if haveLL {
		literal = append(literal, struct{ name, url, extra, field string }{"linklocal", zoneURL(llAddr, "/mcp"), "", "url"})
	}
	for _, tc := range literal {
		code, body := add(tc.name, tc.url, tc.extra)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.field+": "+refused) {
			t.Errorf("add %s (%s): HTTP %d %s", tc.name, tc.url, code, body)
		}
	}
	if llHits.Load() != 0 {
		t.Errorf("the link-local server got %d requests from refused additions", llHits.Load())
	}

	// By name: accepted, and judged at the dial.
	if code, body := add("cloud", "http://mcp.cloud.test:80/mcp", ""); code != http.StatusCreated {
		t.Fatalf("add cloud: HTTP %d %s", code, body)
	}
	if code, body := add("lan", "http://mcp.lan.test:"+loPort+"/mcp", ""); code != http.StatusCreated {
		t.Fatalf("add lan: HTTP %d %s", code, body)
	}
	out, _ := call("/mcp/cloud")
	var res struct {
		Error *struct {
			Message string `json:"message"`
			Data    struct {
				Fault string `json:"fault"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error == nil ||
		!strings.Contains(res.Error.Message, refused) || res.Error.Data.Fault != "unreachable" {
		t.Errorf("cloud: %s", out)
	}
	if strings.Contains(out, strings.Split(llAddr, "%")[0]) {
		t.Errorf("the error names the resolved address: %s", out)
	}
	if llHits.Load() != 0 {
		t.Errorf("the link-local server got %d requests", llHits.Load())
	}
	// The token request of a runtime server has the same guard: its
	// token_url by a name that resolves to the link-local address.
	if code, body := add("tok", "http://mcp.lan.test:"+loPort+"/mcp",
		`,"auth":{"type":"oauth2","client_id":"gw","client_secret":"s3cret-Zq","token_url":"http://mcp.cloud.test:80/token"}`); code != http.StatusCreated {
		t.Fatalf("add tok: HTTP %d %s", code, body)
	}
	before := loHits.Load()
	if out, _ := call("/mcp/tok"); !strings.Contains(out, "oauth2 token endpoint: "+refused) || strings.Contains(out, "s3cret-Zq") {
		t.Errorf("tok: %s", out)
	}
	if llHits.Load() != 0 || loHits.Load() != before {
		t.Errorf("requests went out: link-local %d, the MCP server %d", llHits.Load(), loHits.Load()-before)
	}
	if out, _ := call("/mcp/lan"); !strings.Contains(out, "whoami") || loHits.Load() == 0 {
		t.Errorf("lan (loopback, allowed): %s", out)
	}
	if haveLL {
		if out, _ := call("/mcp/file"); !strings.Contains(out, "whoami") || llHits.Load() == 0 {
			t.Errorf("the config file's link-local server: %s", out)
		}
	}
}

// runtime_servers.allow_link_local lets an operator who means it serve
// runtime servers there.
func TestRuntimeServerLinkLocalAllowed(t *testing.T) {
	clearAdminEnv(t)
	ll, llAddr, ok := linkLocalListener(t)
	if !ok {
		// CI's machines have one (eth0's fe80::); elsewhere the refused
		// case above still runs against 169.254.169.254.
		if os.Getenv("CI") == "true" {
			t.Fatal("no link-local address to listen on, and CI=true requires this check")
		}
		t.Skip("no link-local address on this host")
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: countingMCP(&hits)}
	go srv.Serve(ll)
	t.Cleanup(func() { srv.Close() })
	const master = "master-key-0123456789"
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Auth: &config.CallerAuth{MasterKey: master},
		RuntimeServers: config.RuntimeServers{AllowLinkLocal: true}}
	stk, hs := gatewayAt(t, cfg, nil, "")
	defer stk.close(context.Background())
	defer hs.Close()
	url := zoneURL(llAddr, "/mcp")
	if code, body := rest(t, http.MethodPost, hs.URL+"/admin/v1/servers", master, `{"name":"ll","transport":"http","url":"`+url+`"}`); code != http.StatusCreated {
		t.Fatalf("add: HTTP %d %s", code, body)
	}
	if st, _, out := post(t, hs.URL+"/mcp/ll", master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); st != http.StatusOK || !strings.Contains(out, "whoami") || hits.Load() == 0 {
		t.Errorf("HTTP %d %s", st, out)
	}
}
