package policy_test

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/policy"
)

// testRules are the rules every test shares: three servers with some
// configured allow/deny, two toolsets, two access groups (plus names that
// are not configured, which must be ignored).
func testRules() policy.Rules {
	return policy.Rules{
		Servers: []string{"github", "calc", "docs", "calc"}, // unsorted, duplicated
		ServerTools: map[string]policy.ServerTools{
			"calc": {Deny: []string{"rm"}},
			"docs": {Allow: []string{"search", "read"}, Deny: []string{"read"}},
			"nope": {Deny: []string{"x"}},
		},
		Toolsets: map[string]map[string][]string{
			"support": {"calc": {"add"}, "docs": {"search", "read"}, "github": {"issues"}, "nope": {"x"}},
			"ops":     {"github": {"pr", "delete_repo"}, "calc": {"rm", "sub"}},
		},
		AccessGroups: map[string][]string{
			"readonly": {"docs"},
			"eng":      {"github", "calc", "nope"},
		},
	}
}

// catalog is what each upstream offers, as the gateway would list it.
var catalog = map[string][]string{
	"calc":   {"add", "sub", "rm"},
	"docs":   {"search", "read", "write"},
	"github": {"issues", "pr", "delete_repo"},
}

type pair struct{ server, tool string }

func compiled(tb testing.TB) *policy.Policy {
	tb.Helper()
	return policy.Compile(testRules())
}

func mustView(tb testing.TB, p *policy.Policy, c *policy.Caller, rt policy.Route) *policy.View {
	tb.Helper()
	v, d := p.View(c, rt)
	if d != nil {
		tb.Fatalf("View(%+v, %+v) refused: %+v", c, rt, d)
	}
	return v
}

// Callers used across tests.
var (
	master    = &policy.Caller{Alias: "master", Master: true}
	anonymous = &policy.Caller{Anonymous: true}
	admin     = &policy.Caller{Alias: "admin", Admin: true, Servers: []string{"calc"}}
	noMCP     = &policy.Caller{Alias: "nomcp", NoMCP: true, Toolsets: []string{"support"}}
	keyAll    = &policy.Caller{Alias: "all"}
	keyCalc   = &policy.Caller{Alias: "calcdocs", Servers: []string{"calc", "docs", "nope"}}
	keyNone   = &policy.Caller{Alias: "none", Servers: []string{}}
	keyTools  = &policy.Caller{Alias: "tools", Tools: map[string][]string{"calc": {"add"}, "github": {}}}
	keyDeny   = &policy.Caller{Alias: "deny", DenyTools: map[string][]string{"github": {"delete_repo"}, "calc": {"add"}}}
	keyTS     = &policy.Caller{Alias: "ts", Servers: []string{"docs"}, Toolsets: []string{"support"},
		DenyTools: map[string][]string{"github": {"issues"}}, Tools: map[string][]string{"calc": {}}}
	keyGroup = &policy.Caller{Alias: "group", Servers: []string{}, AccessGroups: []string{"readonly", "ghost"}}
	keyMixed = &policy.Caller{Alias: "mixed", Servers: []string{"calc"}, AccessGroups: []string{"readonly"},
		Toolsets: []string{"ops"}, Tools: map[string][]string{"docs": {"write", "read"}}}
)

func TestServers(t *testing.T) {
	p := compiled(t)
	tests := []struct {
		name   string
		caller *policy.Caller
		route  policy.Route
		want   []string
	}{
		{"master", master, policy.Route{}, []string{"calc", "docs", "github"}},
		{"anonymous", anonymous, policy.Route{}, []string{"calc", "docs", "github"}},
		{"admin is limited by its list", admin, policy.Route{}, []string{"calc"}},
		{"no-mcp", noMCP, policy.Route{}, []string{}},
		{"servers nil", keyAll, policy.Route{}, []string{"calc", "docs", "github"}},
		{"explicit, unknown ignored", keyCalc, policy.Route{}, []string{"calc", "docs"}},
		{"empty", keyNone, policy.Route{}, []string{}},
		{"access group, unknown group ignored", keyGroup, policy.Route{}, []string{"docs"}},
		{"servers and group union", keyMixed, policy.Route{}, []string{"calc", "docs"}},
		{"nil caller fails closed", nil, policy.Route{}, []string{}},
		{"path two", keyAll, policy.Route{Servers: []string{"github", "calc"}}, []string{"calc", "github"}},
		{"header narrows", keyAll, policy.Route{Header: []string{"docs", "nope"}}, []string{"docs"}},
		{"header never widens", keyCalc, policy.Route{Header: []string{"github", "calc"}}, []string{"calc"}},
		{"header outside path", keyAll, policy.Route{Servers: []string{"calc"}, Header: []string{"docs"}}, []string{}},
		{"empty header selects none", keyAll, policy.Route{Header: []string{}}, []string{}},
		{"toolset", keyTS, policy.Route{Toolset: "support"}, []string{"calc", "docs", "github"}},
		{"toolset keeps groups, not servers", keyMixed, policy.Route{Toolset: "ops"}, []string{"calc", "docs", "github"}},
		{"toolset without groups", &policy.Caller{Servers: []string{"docs"}, Toolsets: []string{"ops"}}, policy.Route{Toolset: "ops"}, []string{"calc", "github"}},
		{"toolset master", master, policy.Route{Toolset: "ops"}, []string{"calc", "github"}},
		{"toolset header", keyTS, policy.Route{Toolset: "support", Header: []string{"docs"}}, []string{"docs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := mustView(t, p, tc.caller, tc.route)
			if got := v.Servers(); !slices.Equal(got, tc.want) {
				t.Errorf("Servers() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestToolDecision(t *testing.T) {
	p := compiled(t)
	mcp := policy.Route{}
	tests := []struct {
		name     string
		caller   *policy.Caller
		route    policy.Route
		server   string
		tool     string
		allowed  bool
		wantRule string
	}{
		// Who may use a server.
		{"master", master, mcp, "github", "delete_repo", true, "master key"},
		{"master obeys config deny", master, mcp, "calc", "rm", false, "server deny list (servers.calc.tools.deny)"},
		{"anonymous", anonymous, mcp, "calc", "add", true, "anonymous caller"},
		{"anonymous obeys config allow", anonymous, mcp, "docs", "write", false, "server allow list (servers.docs.tools.allow)"},
		{"no-mcp", noMCP, mcp, "calc", "add", false, "no-mcp key"},
		{"no-mcp wins over master", &policy.Caller{Master: true, NoMCP: true}, mcp, "calc", "add", false, "no-mcp key"},
		{"servers nil", keyAll, mcp, "github", "pr", true, "key grants all servers"},
		{"servers listed", keyCalc, mcp, "calc", "add", true, "key servers list"},
		{"servers not listed", keyCalc, mcp, "github", "pr", false, "server not granted to key"},
		{"servers empty", keyNone, mcp, "calc", "add", false, "server not granted to key"},
		{"admin not widened off toolsets", admin, mcp, "docs", "search", false, "server not granted to key"},
		{"access group", keyGroup, mcp, "docs", "search", true, "access group 'readonly'"},
		{"access group other server", keyGroup, mcp, "calc", "add", false, "server not granted to key"},
		{"own list before group", keyMixed, mcp, "calc", "add", true, "key servers list"},
		{"nil caller", nil, mcp, "calc", "add", false, "server not granted to key"},
		{"unknown server", master, mcp, "nope", "x", false, "unknown server"},
		{"unknown tool is just not denied", master, mcp, "github", "zzz", true, "master key"},

		// Server tool lists from config; deny wins over allow.
		{"config deny", keyAll, mcp, "calc", "rm", false, "server deny list (servers.calc.tools.deny)"},
		{"config allow", keyAll, mcp, "docs", "search", true, "key grants all servers"},
		{"config allow misses", keyAll, mcp, "docs", "write", false, "server allow list (servers.docs.tools.allow)"},
		{"config deny beats allow", keyAll, mcp, "docs", "read", false, "server deny list (servers.docs.tools.deny)"},

		// Key tool lists.
		{"key tools allow", keyTools, mcp, "calc", "add", true, "key grants all servers"},
		{"key tools allow misses", keyTools, mcp, "calc", "sub", false, "key tools allow list"},
		{"key tools empty list", keyTools, mcp, "github", "pr", false, "key tools allow list"},
		{"key tools server missing = all", keyTools, mcp, "docs", "search", true, "key grants all servers"},
		{"key deny_tools", keyDeny, mcp, "github", "delete_repo", false, "key deny_tools"},
		{"key deny_tools others kept", keyDeny, mcp, "github", "pr", true, "key grants all servers"},
		{"key deny beats key allow", &policy.Caller{Tools: map[string][]string{"calc": {"add"}}, DenyTools: map[string][]string{"calc": {"add"}}}, mcp, "calc", "add", false, "key deny_tools"},
		{"config before key", keyDeny, mcp, "calc", "rm", false, "server deny list (servers.calc.tools.deny)"},
		{"master ignores key lists", &policy.Caller{Master: true, DenyTools: map[string][]string{"calc": {"add"}}, Servers: []string{}}, mcp, "calc", "add", true, "master key"},

		// Routes.
		{"single server", keyAll, policy.Route{Servers: []string{"calc"}}, "calc", "add", true, "key grants all servers"},
		{"not on route", keyAll, policy.Route{Servers: []string{"calc"}}, "docs", "search", false, "server not on route"},
		{"header narrows", keyAll, policy.Route{Header: []string{"docs"}}, "calc", "add", false, "server not selected by x-mcp-servers"},
		{"header never widens", keyCalc, policy.Route{Header: []string{"calc", "github"}}, "github", "pr", false, "server not granted to key"},
		{"path before header", keyAll, policy.Route{Servers: []string{"calc", "github"}, Header: []string{"github", "docs"}}, "docs", "search", false, "server not on route"},
		{"path and header", keyAll, policy.Route{Servers: []string{"calc", "github"}, Header: []string{"github", "docs"}}, "github", "pr", true, "key grants all servers"},

		// Toolset routes.
		{"toolset pair", keyTS, policy.Route{Toolset: "support"}, "docs", "search", true, "toolset 'support'"},
		{"toolset excludes tool", keyTS, policy.Route{Toolset: "support"}, "calc", "sub", false, "toolset 'support' does not include tool"},
		{"toolset obeys key deny_tools", keyTS, policy.Route{Toolset: "support"}, "github", "issues", false, "key deny_tools"},
		{"toolset grant beats key tools allow", keyTS, policy.Route{Toolset: "support"}, "calc", "add", true, "toolset 'support'"},
		{"toolset obeys config deny", keyTS, policy.Route{Toolset: "support"}, "docs", "read", false, "server deny list (servers.docs.tools.deny)"},
		{"toolset obeys config deny (ops)", master, policy.Route{Toolset: "ops"}, "calc", "rm", false, "server deny list (servers.calc.tools.deny)"},
		{"toolset master narrowed", master, policy.Route{Toolset: "ops"}, "docs", "search", false, "toolset 'ops' does not include server"},
		{"toolset master pair", master, policy.Route{Toolset: "ops"}, "calc", "sub", true, "toolset 'ops'"},
		{"toolset admin", admin, policy.Route{Toolset: "ops"}, "github", "pr", true, "toolset 'ops'"},
		{"toolset anonymous", anonymous, policy.Route{Toolset: "support"}, "github", "issues", true, "toolset 'support'"},
		{"toolset drops key servers", &policy.Caller{Servers: []string{"docs"}, Toolsets: []string{"ops"}}, policy.Route{Toolset: "ops"}, "docs", "search", false, "toolset 'ops' does not include server"},
		{"toolset keeps access group", keyMixed, policy.Route{Toolset: "ops"}, "docs", "write", false, "server allow list (servers.docs.tools.allow)"},
		{"toolset header", keyTS, policy.Route{Toolset: "support", Header: []string{"docs"}}, "calc", "add", false, "server not selected by x-mcp-servers"},

		// Access groups on toolset routes: outside the toolset, the key's
		// ordinary rules; inside, the toolset narrows.
		{"group server on toolset", &policy.Caller{AccessGroups: []string{"readonly"}, Toolsets: []string{"ops"}}, policy.Route{Toolset: "ops"}, "docs", "search", true, "access group 'readonly'"},
		{"group server keeps key tools", &policy.Caller{AccessGroups: []string{"readonly"}, Toolsets: []string{"ops"}, Tools: map[string][]string{"docs": {}}}, policy.Route{Toolset: "ops"}, "docs", "search", false, "key tools allow list"},
		{"group server inside toolset is narrowed", &policy.Caller{AccessGroups: []string{"eng"}, Toolsets: []string{"support"}}, policy.Route{Toolset: "support"}, "github", "pr", false, "toolset 'support' does not include tool"},
		{"group server inside toolset pair", &policy.Caller{AccessGroups: []string{"eng"}, Toolsets: []string{"support"}}, policy.Route{Toolset: "support"}, "github", "issues", true, "toolset 'support'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := mustView(t, p, tc.caller, tc.route)
			want := policy.Decision{Allowed: tc.allowed, Rule: tc.wantRule}
			if got := v.Tool(tc.server, tc.tool); got != want {
				t.Errorf("Tool(%q, %q) = %+v, want %+v", tc.server, tc.tool, got, want)
			}
			if got := p.Explain(tc.caller, tc.route, tc.server, tc.tool).Decision; got != want {
				t.Errorf("Explain(%q, %q).Decision = %+v, want %+v", tc.server, tc.tool, got, want)
			}
		})
	}
}

func TestPromptAndResource(t *testing.T) {
	p := compiled(t)
	tests := []struct {
		name     string
		caller   *policy.Caller
		route    policy.Route
		server   string
		allowed  bool
		wantRule string
	}{
		{"granted server", keyCalc, policy.Route{}, "calc", true, "key servers list"},
		{"not granted", keyCalc, policy.Route{}, "github", false, "server not granted to key"},
		{"tool lists do not filter", keyTools, policy.Route{}, "github", true, "key grants all servers"},
		{"config lists do not filter", keyAll, policy.Route{}, "docs", true, "key grants all servers"},
		{"access group", keyGroup, policy.Route{}, "docs", true, "access group 'readonly'"},
		{"no-mcp", noMCP, policy.Route{}, "calc", false, "no-mcp key"},
		{"not on route", keyAll, policy.Route{Servers: []string{"calc"}}, "docs", false, "server not on route"},
		{"header", keyAll, policy.Route{Header: []string{"calc"}}, "docs", false, "server not selected by x-mcp-servers"},
		{"unknown server", master, policy.Route{}, "nope", false, "unknown server"},
		{"toolset exposes tools only", keyTS, policy.Route{Toolset: "support"}, "docs", false, "toolset route exposes tools only"},
		{"toolset, group server too", keyMixed, policy.Route{Toolset: "ops"}, "docs", false, "toolset route exposes tools only"},
		{"toolset, master", master, policy.Route{Toolset: "ops"}, "calc", false, "toolset route exposes tools only"},
		{"toolset, server outside", master, policy.Route{Toolset: "ops"}, "docs", false, "toolset 'ops' does not include server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := mustView(t, p, tc.caller, tc.route)
			want := policy.Decision{Allowed: tc.allowed, Rule: tc.wantRule}
			if got := v.Prompt(tc.server, "greet"); got != want {
				t.Errorf("Prompt = %+v, want %+v", got, want)
			}
			if got := v.Resource(tc.server, "file:///x"); got != want {
				t.Errorf("Resource = %+v, want %+v", got, want)
			}
		})
	}
}

// TestToolsetGates pins the exact S7 messages and the order of the gates.
func TestToolsetGates(t *testing.T) {
	p := compiled(t)
	const (
		noMCPMsg = "API key is scoped to no MCP servers; toolset access is denied."
	)
	tests := []struct {
		name    string
		caller  *policy.Caller
		toolset string
		want    *policy.Denied // nil = allowed
	}{
		{"no-mcp", noMCP, "support", &policy.Denied{Status: 403, Message: noMCPMsg, Rule: "no-mcp key"}},
		{"no-mcp admin", &policy.Caller{Admin: true, NoMCP: true}, "support", &policy.Denied{Status: 403, Message: noMCPMsg, Rule: "no-mcp key"}},
		{"no-mcp master", &policy.Caller{Master: true, NoMCP: true}, "support", &policy.Denied{Status: 403, Message: noMCPMsg, Rule: "no-mcp key"}},
		{"no-mcp before unknown", noMCP, "nope", &policy.Denied{Status: 403, Message: noMCPMsg, Rule: "no-mcp key"}},
		{"not granted", keyAll, "support", &policy.Denied{Status: 403, Message: "API key does not have access to toolset 'support'.", Rule: "toolset 'support' not granted to key"}},
		{"granted another", keyMixed, "support", &policy.Denied{Status: 403, Message: "API key does not have access to toolset 'support'.", Rule: "toolset 'support' not granted to key"}},
		{"empty grants", &policy.Caller{Toolsets: []string{}}, "ops", &policy.Denied{Status: 403, Message: "API key does not have access to toolset 'ops'.", Rule: "toolset 'ops' not granted to key"}},
		{"nil caller", nil, "ops", &policy.Denied{Status: 403, Message: "API key does not have access to toolset 'ops'.", Rule: "toolset 'ops' not granted to key"}},
		{"ungranted unknown is 403, not 404", keyAll, "nope", &policy.Denied{Status: 403, Message: "API key does not have access to toolset 'nope'.", Rule: "toolset 'nope' not granted to key"}},
		{"granted unknown", &policy.Caller{Toolsets: []string{"nope"}}, "nope", &policy.Denied{Status: 404, Message: "Unknown toolset 'nope'.", Rule: "unknown toolset 'nope'"}},
		{"admin unknown", admin, "nope", &policy.Denied{Status: 404, Message: "Unknown toolset 'nope'.", Rule: "unknown toolset 'nope'"}},
		{"master unknown", master, "nope", &policy.Denied{Status: 404, Message: "Unknown toolset 'nope'.", Rule: "unknown toolset 'nope'"}},
		{"granted", keyTS, "support", nil},
		{"admin without grant", admin, "support", nil},
		{"master", master, "ops", nil},
		{"anonymous", anonymous, "ops", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, d := p.View(tc.caller, policy.Route{Toolset: tc.toolset})
			if !reflect.DeepEqual(d, tc.want) {
				t.Fatalf("View denied = %+v, want %+v", d, tc.want)
			}
			if d != nil {
				if v != nil {
					t.Errorf("View returned a view with a refusal")
				}
				if d.Error() != d.Message {
					t.Errorf("Error() = %q, want the message", d.Error())
				}
				e := p.Explain(tc.caller, policy.Route{Toolset: tc.toolset}, "calc", "add")
				if !reflect.DeepEqual(e.Denied, d) || e.Decision != (policy.Decision{Rule: d.Rule}) {
					t.Errorf("Explain = %+v, want refusal %+v", e, d)
				}
				return
			}
			if v.Toolset() != tc.toolset {
				t.Errorf("Toolset() = %q, want %q", v.Toolset(), tc.toolset)
			}
		})
	}
	if http.StatusForbidden != 403 || http.StatusNotFound != 404 {
		t.Fatal("status constants changed")
	}
}

// TestNamedServerRefused: a path naming a server the caller may not use is
// answered exactly like a path naming a server that does not exist.
func TestNamedServerRefused(t *testing.T) {
	p := compiled(t)
	tests := []struct {
		name     string
		caller   *policy.Caller
		servers  []string
		header   []string
		refused  string // "" = not refused
		wantRule string
	}{
		{"unknown", keyAll, []string{"nope"}, nil, "nope", "unknown server"},
		{"not granted", keyCalc, []string{"github"}, nil, "github", "server not granted to key"},
		{"empty key", keyNone, []string{"calc"}, nil, "calc", "server not granted to key"},
		{"no-mcp", noMCP, []string{"calc"}, nil, "calc", "no-mcp key"},
		{"one of several", keyCalc, []string{"calc", "github"}, nil, "github", "server not granted to key"},
		{"header does not rescue", keyCalc, []string{"calc", "github"}, []string{"calc"}, "github", "server not granted to key"},
		{"granted", keyCalc, []string{"calc", "docs"}, nil, "", ""},
		{"granted by group", keyGroup, []string{"docs"}, nil, "", ""},
		{"header narrowing is silent", keyCalc, []string{"calc"}, []string{"github", "nope"}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := policy.Route{Servers: tc.servers, Header: tc.header}
			v, d := p.View(tc.caller, rt)
			if tc.refused == "" {
				if d != nil {
					t.Fatalf("refused: %+v", d)
				}
				return
			}
			want := &policy.Denied{Status: http.StatusNotFound, Message: policy.UnknownServerMessage(tc.refused), Rule: tc.wantRule}
			if v != nil || !reflect.DeepEqual(d, want) {
				t.Fatalf("View = %v, %+v; want nil, %+v", v, d, want)
			}
		})
	}
	// Same status and message shape, whichever reason.
	_, unknown := p.View(keyCalc, policy.Route{Servers: []string{"zzz"}})
	_, hidden := p.View(keyCalc, policy.Route{Servers: []string{"github"}})
	if unknown.Status != hidden.Status || unknown.Message != `Unknown MCP server "zzz"` || hidden.Message != `Unknown MCP server "github"` {
		t.Errorf("unknown = %+v, hidden = %+v: not indistinguishable", unknown, hidden)
	}
}

// matrixCallers and matrixRoutes span every kind of caller and route.
var matrixCallers = []*policy.Caller{
	master, anonymous, admin, noMCP, keyAll, keyCalc, keyNone, keyTools, keyDeny, keyTS, keyGroup, keyMixed, nil,
	{Alias: "group+toolset", AccessGroups: []string{"eng"}, Toolsets: []string{"support", "ops"}, DenyTools: map[string][]string{"github": {"pr"}}},
}

var matrixRoutes = []policy.Route{
	{},                                    // /mcp
	{Servers: []string{"calc"}},           // /mcp/calc
	{Servers: []string{"docs"}},           // /docs/mcp
	{Servers: []string{"github", "calc"}}, // /mcp/github,calc
	{Servers: []string{"nope"}},           // unknown server
	{Toolset: "support"},                  // /toolset/support/mcp
	{Toolset: "ops"},                      // /toolset/ops/mcp
	{Toolset: "nope"},                     // unknown toolset
	{Header: []string{"docs", "github"}},  // /mcp + x-mcp-servers
	{Header: []string{}},                  // x-mcp-servers present, empty
	{Servers: []string{"calc", "github"}, Header: []string{"github", "docs"}},
	{Toolset: "support", Header: []string{"docs", "calc"}},
}

// TestMatrix: for every caller x route x tool, the listing (built from
// View.Servers and FilterTools, as the gateway builds tools/list) and the
// call gate (View.Tool) agree, and Explain decides by the same rule.
func TestMatrix(t *testing.T) {
	p := compiled(t)
	probes := []pair{{"nope", "x"}, {"calc", "zzz"}, {"", ""}}
	for s, tools := range catalog {
		for _, tool := range tools {
			probes = append(probes, pair{s, tool})
		}
	}
	visible := 0
	for _, c := range matrixCallers {
		for _, rt := range matrixRoutes {
			name := "nil"
			if c != nil {
				name = c.Alias
				if name == "" {
					name = "anonymous"
				}
			}
			t.Run(fmt.Sprintf("%s/%+v", name, rt), func(t *testing.T) {
				v, denied := p.View(c, rt)
				listed := map[pair]bool{}
				for _, s := range v.Servers() { // nil view: none
					for _, tool := range policy.FilterTools(v, catalog[s], func(tool string) (string, string) { return s, tool }) {
						listed[pair{s, tool}] = true
					}
				}
				servers := v.Servers()
				for _, pr := range probes {
					call := v.Tool(pr.server, pr.tool)
					// Probes outside the catalog cannot be listed; they
					// still go through Explain below.
					if slices.Contains(catalog[pr.server], pr.tool) && call.Allowed != listed[pr] {
						t.Errorf("%v: listed=%v but call=%+v", pr, listed[pr], call)
					}
					if call.Allowed {
						visible++
						if !slices.Contains(servers, pr.server) {
							t.Errorf("%v allowed on a server missing from Servers() %q", pr, servers)
						}
					}
					if call.Rule == "" {
						t.Errorf("%v: decision without a rule", pr)
					}
					e := p.Explain(c, rt, pr.server, pr.tool)
					want := call
					if denied != nil {
						want = policy.Decision{Rule: denied.Rule}
						if call.Allowed {
							t.Errorf("%v allowed on a refused route", pr)
						}
					}
					if e.Decision != want {
						t.Errorf("%v: Explain decided %+v, Tool %+v; steps %+v", pr, e.Decision, want, e.Steps)
					}
					if !slices.Equal(e.Servers, servers) {
						t.Errorf("Explain servers %q, View %q", e.Servers, servers)
					}
					if denied == nil && !e.Decision.Allowed && !hasFailedStep(e.Steps, e.Decision.Rule) {
						t.Errorf("%v: deciding rule %q is not a failed step in %+v", pr, e.Decision.Rule, e.Steps)
					}
					// Prompts and resources follow the server, never tools.
					pd, rd := v.Prompt(pr.server, "p"), v.Resource(pr.server, "u")
					wantPR := slices.Contains(servers, pr.server) && v.Toolset() == ""
					if pd.Allowed != wantPR || rd != pd {
						t.Errorf("%v: Prompt %+v, Resource %+v, want allowed=%v", pr, pd, rd, wantPR)
					}
				}
			})
		}
	}
	if visible == 0 {
		t.Fatal("matrix allowed nothing: the fixture is broken")
	}
}

func hasFailedStep(steps []policy.Step, rule string) bool {
	for _, s := range steps {
		if !s.Passed {
			return s.Rule == rule // the first failure decides
		}
	}
	return false
}

func TestExplainSteps(t *testing.T) {
	p := compiled(t)
	c := &policy.Caller{Alias: "k", Servers: []string{"calc"}, Tools: map[string][]string{"github": {"pr"}},
		DenyTools: map[string][]string{"github": {"pr"}}}
	e := p.Explain(c, policy.Route{Header: []string{"github"}}, "github", "pr")
	want := policy.Explanation{
		Caller: "k", Server: "github", Tool: "pr",
		Decision: policy.Decision{Rule: "server not granted to key"},
		Servers:  []string{},
		Steps: []policy.Step{
			{Check: "server configured", Passed: true, Rule: "unknown server"},
			{Check: "server granted", Passed: false, Rule: "server not granted to key"},
			{Check: "x-mcp-servers", Passed: true, Rule: "server not selected by x-mcp-servers"},
			{Check: "key deny_tools", Passed: false, Rule: "key deny_tools"},
			{Check: "key tools", Passed: true, Rule: "key tools allow list"},
		},
	}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("Explain =\n%+v\nwant\n%+v", e, want)
	}

	e = p.Explain(keyTS, policy.Route{Toolset: "support", Servers: []string{"calc"}}, "calc", "sub")
	wantSteps := []policy.Step{
		{Check: "no-mcp sentinel", Passed: true, Rule: "no-mcp key"},
		{Check: "toolset grant", Passed: true, Rule: "toolset 'support' granted to key"},
		{Check: "toolset configured", Passed: true, Rule: "unknown toolset 'support'"},
		{Check: "path names 'calc'", Passed: true, Rule: "toolset 'support'"},
		{Check: "server configured", Passed: true, Rule: "unknown server"},
		{Check: "server on route", Passed: true, Rule: "server not on route"},
		{Check: "server granted", Passed: true, Rule: "toolset 'support'"},
		{Check: "server deny list", Passed: true, Rule: "server deny list (servers.calc.tools.deny)"},
		{Check: "toolset tools", Passed: false, Rule: "toolset 'support' does not include tool"},
	}
	if !reflect.DeepEqual(e.Steps, wantSteps) || e.Decision.Rule != "toolset 'support' does not include tool" {
		t.Errorf("Explain steps =\n%+v\nwant\n%+v (decision %+v)", e.Steps, wantSteps, e.Decision)
	}

	e = p.Explain(master, policy.Route{}, "nope", "x")
	if e.Decision != (policy.Decision{Rule: "unknown server"}) || len(e.Steps) != 1 {
		t.Errorf("unknown server: %+v", e)
	}
	if e := p.Explain(nil, policy.Route{}, "calc", "add"); e.Caller != "" || e.Decision.Allowed {
		t.Errorf("nil caller: %+v", e)
	}
}

// TestViewIsACopy: a View does not change when the Caller or Rules it was
// built from are modified afterwards.
func TestViewIsACopy(t *testing.T) {
	r := testRules()
	p := policy.Compile(r)
	c := &policy.Caller{Servers: []string{"calc"}, Tools: map[string][]string{"calc": {"add"}}, DenyTools: map[string][]string{"calc": {"sub"}}}
	v := mustView(t, p, c, policy.Route{})
	c.Servers[0] = "github"
	c.Tools["calc"][0] = "sub"
	c.DenyTools["calc"][0] = "add"
	r.ServerTools["calc"].Deny[0] = "add"
	if d := v.Tool("calc", "add"); !d.Allowed {
		t.Errorf("calc add = %+v after modifying the caller", d)
	}
	if d := v.Tool("calc", "sub"); d.Allowed {
		t.Errorf("calc sub = %+v after modifying the caller", d)
	}
	s := v.Servers()
	s[0] = "zzz"
	if got := v.Servers(); !slices.Equal(got, []string{"calc"}) {
		t.Errorf("Servers() = %q after modifying a returned slice", got)
	}
}

func TestNilView(t *testing.T) {
	var v *policy.View
	if v.Servers() != nil || v.Toolset() != "" || v.Tool("calc", "add").Allowed || v.Prompt("calc", "p").Allowed || v.Resource("calc", "u").Allowed {
		t.Error("a nil view allowed something")
	}
	if got := policy.FilterTools(v, []string{"a"}, func(s string) (string, string) { return "calc", s }); len(got) != 0 {
		t.Errorf("FilterTools(nil) = %q", got)
	}
}

// TestLongLists exercises the hashed sets (lists longer than a few names).
func TestLongLists(t *testing.T) {
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("t%02d", i))
	}
	p := policy.Compile(policy.Rules{
		Servers:     []string{"s"},
		ServerTools: map[string]policy.ServerTools{"s": {Allow: many[:30], Deny: many[20:25]}},
	})
	c := &policy.Caller{Tools: map[string][]string{"s": many[10:]}, DenyTools: map[string][]string{"s": many[26:29]}}
	v := mustView(t, p, c, policy.Route{})
	var got []string
	for _, tool := range many {
		if v.Tool("s", tool).Allowed {
			got = append(got, tool)
		}
	}
	want := []string{"t10", "t11", "t12", "t13", "t14", "t15", "t16", "t17", "t18", "t19", "t25", "t29"}
	if !slices.Equal(got, want) {
		t.Errorf("allowed %q, want %q", got, want)
	}
}

func TestConcurrentUse(t *testing.T) {
	p := compiled(t)
	v := mustView(t, p, keyMixed, policy.Route{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				v.Tool("calc", "add")
				v.Servers()
				p.View(keyTS, policy.Route{Toolset: "support"})
				p.Explain(keyTS, policy.Route{Toolset: "support"}, "calc", "add")
			}
		})
	}
	wg.Wait()
}

// benchRules: 10 servers x 20 tools, with config lists, a toolset and
// groups, so a View and 200 decisions do realistic work.
func benchRules() (policy.Rules, []pair) {
	r := policy.Rules{
		ServerTools:  map[string]policy.ServerTools{},
		Toolsets:     map[string]map[string][]string{"ts": {}},
		AccessGroups: map[string][]string{"g": {"s7", "s8"}},
	}
	var tools []pair
	for s := range 10 {
		name := fmt.Sprintf("s%d", s)
		r.Servers = append(r.Servers, name)
		var all []string
		for i := range 20 {
			all = append(all, fmt.Sprintf("tool_%d_%d", s, i))
			tools = append(tools, pair{name, all[i]})
		}
		r.ServerTools[name] = policy.ServerTools{Deny: all[:2]}
		if s%2 == 0 {
			r.ServerTools[name] = policy.ServerTools{Allow: all[:15], Deny: all[:2]}
		}
		r.Toolsets["ts"][name] = all[5:12]
	}
	return r, tools
}

func BenchmarkViewTools200(b *testing.B) {
	r, tools := benchRules()
	p := policy.Compile(r)
	c := &policy.Caller{
		Servers:      []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6"},
		AccessGroups: []string{"g"},
		Toolsets:     []string{"ts"},
		Tools:        map[string][]string{"s1": {"tool_1_3", "tool_1_4", "tool_1_5"}},
		DenyTools:    map[string][]string{"s2": {"tool_2_9"}, "s3": {"tool_3_1"}},
	}
	for _, bc := range []struct {
		name string
		rt   policy.Route
	}{
		{"mcp", policy.Route{}},
		{"toolset", policy.Route{Toolset: "ts"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				v, _ := p.View(c, bc.rt)
				for _, t := range tools {
					if v.Tool(t.server, t.tool).Allowed {
						n++
					}
				}
			}
			if n == 0 {
				b.Fatal("nothing allowed")
			}
		})
	}
}

func BenchmarkTool(b *testing.B) {
	r, tools := benchRules()
	p := policy.Compile(r)
	v, _ := p.View(&policy.Caller{DenyTools: map[string][]string{"s2": {"tool_2_9"}}}, policy.Route{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t := tools[i%len(tools)]
		v.Tool(t.server, t.tool)
		i++
	}
}
