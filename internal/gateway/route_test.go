package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/policy"
)

// parseServersTests is the S1.3 table plus edge cases; it seeds the fuzzer.
var parseServersTests = []struct {
	path string
	want []string
}{
	// S1.3.
	{"/mcp/sse", nil},
	{"/mcp/sse/", nil},
	{"/mcp/sse/messages", nil},
	{"/mcp/sse/messages/", nil},
	{"/github/mcp", []string{"github"}},
	{"/github/mcp/", []string{"github"}},
	{"/github/mcp/sse", []string{"github"}},
	{"/mcp/a,b", []string{"a", "b"}},
	{"/mcp/a,b/", []string{"a", "b"}},
	{"/mcp/a,b/tools", []string{"a", "b"}},
	{"/mcp/a,b/chat/completions", []string{"a", "b"}},
	{"/mcp/a,b,c", []string{"a", "b", "c"}},
	{"/mcp/a, b ,,c", []string{"a", "b", "c"}},
	{"/mcp/custom_solutions/user_123/chat", []string{"custom_solutions/user_123"}},
	{"/mcp/custom_solutions/user_123", []string{"custom_solutions/user_123"}},
	{"/mcp/custom_solutions/user_123/chat/completions", []string{"custom_solutions/user_123"}},
	{"/mcp/zapier", []string{"zapier"}},
	{"/mcp/zapier/", []string{"zapier"}},
	{"/mcp", nil},
	{"/mcp/", nil},
	{"/", nil},
	{"", nil},
	{"/other", nil},
	{"/other/path/x", nil},

	// Query strings and fragments are not part of the path.
	{"/mcp?servers=a,b", nil},
	{"/mcp/?x=1", nil},
	{"/mcp/sse?sessionId=1", nil},
	{"/mcp/sse/messages?session_id=abc", nil},
	{"/mcp/zapier?x=a,b", []string{"zapier"}},
	{"/mcp/zapier?x=/y/z", []string{"zapier"}},
	{"/mcp/a,b?x=1", []string{"a", "b"}},
	{"/mcp/a,b/tools?cursor=c/d", []string{"a", "b"}},
	{"/github/mcp?x=1", []string{"github"}},
	{"/mcp/zapier#frag,x", []string{"zapier"}},
	{"/mcp/custom_solutions/user_123?x=1", []string{"custom_solutions/user_123"}},

	// Edges.
	{"mcp/zapier", nil},
	{"//mcp/zapier", nil},
	{"/mcp/mcp", []string{"mcp"}},
	{"/mcp/,", nil},
	{"/mcp/a/b,c", []string{"a/b", "c"}},
}

func TestParseServersInPath(t *testing.T) {
	for _, tt := range parseServersTests {
		got := ParseServersInPath(tt.path)
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("ParseServersInPath(%q) (-got +want):\n%s", tt.path, diff)
		}
	}
}

func FuzzParseServersInPath(f *testing.F) {
	for _, tt := range parseServersTests {
		f.Add(tt.path, "x=1")
	}
	f.Add("/mcp/a,,/b,/", "")
	f.Add("/mcp/%2Fetc,b/../x", "a=b,c")
	f.Add("/a/mcp/b,c", "#")
	f.Add(",/mcp", "0")
	f.Fuzz(func(t *testing.T, path, query string) {
		got := ParseServersInPath(path)
		for _, name := range got {
			if name == "" || strings.ContainsAny(name, "?#") {
				t.Fatalf("ParseServersInPath(%q) = %q: bad name %q", path, got, name)
			}
			// In /mcp/<list> the comma separates names. (/<s>/mcp passes
			// a comma through as part of <s>; resolveRoute rejects such a
			// name as unknown.)
			if strings.HasPrefix(path, "/mcp/") && strings.Contains(name, ",") {
				t.Fatalf("ParseServersInPath(%q) = %q: name %q has a comma", path, got, name)
			}
		}
		if got != nil && len(got) == 0 {
			t.Fatalf("ParseServersInPath(%q) = empty non-nil slice", path)
		}
		// A query string never changes the answer.
		if !strings.ContainsAny(path, "?#") {
			withQuery := ParseServersInPath(path + "?" + query)
			if diff := cmp.Diff(withQuery, got); diff != "" {
				t.Fatalf("ParseServersInPath(%q) vs without query (-got +want):\n%s", path+"?"+query, diff)
			}
		}
	})
}

// A route's id (the party of a sessionless caller on it) is computed when
// it resolves, from its path and x-mcp-servers header, and every copy of
// it keeps it: the cached route, the caller's narrowed view of it.
func TestRouteIDResolvedOnce(t *testing.T) {
	g := New(Options{Logger: testLogger(t), Version: "test", Config: &config.Config{ToolNameSeparator: config.DefaultSeparator,
		Servers: map[string]*config.Server{"a": httpServer("http://127.0.0.1:1/mcp"), "b": httpServer("http://127.0.0.1:1/mcp")}}})
	seen := map[string]string{}
	for _, tc := range []struct{ path, header, base string }{
		{"/mcp", "", "/mcp"},
		{"/mcp/sse/messages", "", "/mcp"},
		{"/mcp", "a", "/mcp"},
		{"/mcp", "a, b", "/mcp"},
		{"/mcp/a", "", "/mcp/a"},
		{"/a/mcp", "", "/a/mcp"},
		{"/mcp/a,b", "", "/mcp/a,b"},
	} {
		rt, _, ok := g.routeFor(tc.path, tc.header)
		if !ok {
			t.Fatalf("%s (%q): no route", tc.path, tc.header)
		}
		var header []string
		if tc.header != "" {
			header = []string{}
			for _, s := range strings.Split(tc.header, ",") {
				header = append(header, strings.TrimSpace(s))
			}
		}
		if want := routeID(tc.base, header); rt.id != want {
			t.Errorf("%s (%q): id %q, want %q", tc.path, tc.header, rt.id, want)
		}
		if again, _, _ := g.routeFor(tc.path, tc.header); again.id != rt.id {
			t.Errorf("%s (%q): the cached route's id %q, want %q", tc.path, tc.header, again.id, rt.id)
		}
		narrowed, denied := g.narrow(rt, &policy.Caller{Master: true})
		if denied != nil {
			t.Fatalf("%s (%q): %v", tc.path, tc.header, denied)
		}
		if got := partyOf(nil, "key:x", &narrowed); got != (party{owner: "key:x", route: rt.id}) {
			t.Errorf("%s (%q): the stateless party on the narrowed route is %+v, want route %q", tc.path, tc.header, got, rt.id)
		}
		// Another path or header is another route.
		key := tc.base + "\x00" + strings.Join(header, ",")
		if other, ok := seen[rt.id]; ok && other != key {
			t.Errorf("%s (%q) and %q share the id %q", tc.path, tc.header, other, rt.id)
		}
		seen[rt.id] = key
	}
}

// The anonymous caller's view of a route is compiled once per route and
// policy: the same view on every request, the one narrow would give, and
// a new one once a reload brings a new policy, also for a copy of the
// route kept from before it (a session's).
func TestAnonymousViewCached(t *testing.T) {
	g := New(Options{Logger: testLogger(t), Version: "test", Config: &config.Config{ToolNameSeparator: config.DefaultSeparator,
		Servers: map[string]*config.Server{"a": httpServer("http://127.0.0.1:1/mcp"), "b": httpServer("http://127.0.0.1:1/mcp")}}})
	rt, _, ok := g.routeFor("/mcp", "")
	if !ok {
		t.Fatal("no route")
	}
	first, denied := g.narrowAnonymous(rt)
	if denied != nil {
		t.Fatal(denied)
	}
	want, _ := g.narrow(rt, &policy.Caller{Anonymous: true})
	if diff := cmp.Diff(first.servers, want.servers); diff != "" {
		t.Errorf("servers (-cached +narrow):\n%s", diff)
	}
	again, _ := g.narrowAnonymous(rt)
	if again.view != first.view {
		t.Error("the anonymous view was compiled again on the same policy")
	}
	if allocs := testing.AllocsPerRun(50, func() { _, _ = g.narrowAnonymous(rt) }); allocs != 0 {
		t.Errorf("narrowAnonymous: %v allocations, want none", allocs)
	}
	if _, err := g.Reload(&config.Config{ToolNameSeparator: config.DefaultSeparator,
		Servers: map[string]*config.Server{"a": httpServer("http://127.0.0.1:1/mcp")}}); err != nil {
		t.Fatal(err)
	}
	after, _ := g.narrowAnonymous(rt) // rt kept from before the reload
	if after.view == first.view {
		t.Fatal("the view of the old policy survived a reload")
	}
	if diff := cmp.Diff(after.servers, []string{"a"}); diff != "" {
		t.Errorf("servers after the reload (-got +want):\n%s", diff)
	}
}
