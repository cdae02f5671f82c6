package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func reloadServer(u *sdkUpstream) *config.Server {
	return &config.Server{Transport: config.TransportHTTP, URL: u.http.URL, Timeout: 20 * time.Second, ProtocolVersion: config.ProtocolVersionAuto}
}

// reloadFile is a config file's configuration of servers, as config.Parse
// would give it.
func reloadFile(servers map[string]*config.Server, toolsets map[string]*config.Toolset) *config.Config {
	cfg := &config.Config{Listen: "127.0.0.1:0", ToolNameSeparator: config.DefaultSeparator, Servers: servers, Toolsets: toolsets}
	for name, s := range servers {
		s.Name = name
	}
	return cfg
}

// TestReloadServers: a reload adds, removes and replaces the file's
// servers, keeps the runtime ones (unless the file takes their name),
// refuses a file that does not validate without changing anything, and
// tells open sessions their tools changed.
func TestReloadServers(t *testing.T) {
	ua, ub, uc := startSDKUpstream(t, "ua"), startSDKUpstream(t, "ub"), startSDKUpstream(t, "uc")
	g, ts := startGateway(t, reloadFile(map[string]*config.Server{"a": reloadServer(ua), "b": reloadServer(ub)}, nil))
	ctx := context.Background()
	if err := g.AddServer(ctx, "rt", reloadServer(uc), nil); err != nil {
		t.Fatal(err)
	}
	d := &downstream{noRoots: true}
	cs, err := d.client(t).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools := func() []string {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		servers := map[string]bool{}
		for _, tl := range res.Tools {
			s, _, _ := strings.Cut(tl.Name, config.DefaultSeparator)
			servers[s] = true
		}
		var out []string
		for s := range servers {
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	if diff := cmp.Diff(tools(), []string{"a", "b", "rt"}); diff != "" {
		t.Fatalf("servers before (-got +want):\n%s", diff)
	}
	d.mu.Lock()
	before := d.toolsChg
	d.mu.Unlock()

	// A file that does not validate with the runtime objects changes nothing.
	bad := reloadFile(map[string]*config.Server{"a": reloadServer(ua)},
		map[string]*config.Toolset{"ts": {Servers: map[string][]string{"nope": nil}}})
	if _, err := g.Reload(bad); err == nil || g.CheckReload(bad) == nil {
		t.Fatal("a toolset naming an unknown server was accepted")
	}
	if diff := cmp.Diff(g.ServerNames(), []string{"a", "b", "rt"}); diff != "" {
		t.Fatalf("servers after a refused reload (-got +want):\n%s", diff)
	}

	// b goes, c comes (b's upstream under a new name), a's URL changes.
	ch, err := g.Reload(reloadFile(map[string]*config.Server{"a": reloadServer(uc), "c": reloadServer(ub)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ch, ServerChanges{Added: []string{"c"}, Removed: []string{"b"}, Changed: []string{"a"}}); diff != "" {
		t.Errorf("changes (-got +want):\n%s", diff)
	}
	// The client may reuse a listed page until it hears list_changed
	// (2026-07-28 cache hints).
	waitFor(t, "tools/list_changed", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.toolsChg > before
	})
	if diff := cmp.Diff(tools(), []string{"a", "c", "rt"}); diff != "" {
		t.Errorf("servers after (-got +want):\n%s", diff)
	}
	if got := g.sourceOf("rt"); got != "api" {
		t.Errorf("rt's source after the reload: %q, want api", got)
	}
	if got := callText(t, ctx, cs, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hi"}}); got != "uc:hi" {
		t.Errorf("a__echo after the reload: %q, want the new URL's answer uc:hi", got)
	}

	// The file takes the runtime server's name: the file's wins.
	ch, err = g.Reload(reloadFile(map[string]*config.Server{"a": reloadServer(uc), "c": reloadServer(ub), "rt": reloadServer(ua)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ch, ServerChanges{Changed: []string{"rt"}}); diff != "" {
		t.Errorf("changes (-got +want):\n%s", diff)
	}
	if got := g.sourceOf("rt"); got != "config" {
		t.Errorf("rt's source: %q, want config", got)
	}
	// Only the tool policy of a: its upstream session stays, its tools
	// change at once.
	since := g.up.Health()["a"].Since
	d.mu.Lock()
	before = d.toolsChg
	d.mu.Unlock()
	hidden := reloadServer(uc)
	hidden.Tools = &config.ToolPolicy{Deny: []string{"add"}}
	ch, err = g.Reload(reloadFile(map[string]*config.Server{"a": hidden, "c": reloadServer(ub), "rt": reloadServer(ua)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ch, ServerChanges{Changed: []string{"a"}}); diff != "" {
		t.Errorf("changes (-got +want):\n%s", diff)
	}
	if got := g.up.Health()["a"].Since; !got.Equal(since) {
		t.Errorf("a's upstream session was replaced for a tool policy change (since %v, was %v)", got, since)
	}
	waitFor(t, "tools/list_changed", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.toolsChg > before
	})
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if slices.Contains(names, "a__add") || !slices.Contains(names, "a__echo") {
		t.Errorf("tools after a's deny: %v; want a__echo without a__add", names)
	}
	// The same file again changes nothing.
	hidden = reloadServer(uc)
	hidden.Tools = &config.ToolPolicy{Deny: []string{"add"}}
	if ch, err := g.Reload(reloadFile(map[string]*config.Server{"a": hidden, "c": reloadServer(ub), "rt": reloadServer(ua)}, nil)); err != nil || !ch.Empty() {
		t.Errorf("reload of the same file: %+v, %v", ch, err)
	}
}
