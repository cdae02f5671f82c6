package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// TestOffFeaturesAllocateNothing: a feature that is not configured costs
// the call path nothing (issue 25). Each hook a tools/call passes for
// tracing, guardrails, budgets, the fleet, per-person credentials, the
// debug header and the access log is run as the call runs it, on a
// gateway with none of them, and must not allocate.
func TestOffFeaturesAllocateNothing(t *testing.T) {
	g := New(Options{Logger: testLogger(t), Version: "test", Config: &config.Config{ToolNameSeparator: config.DefaultSeparator,
		Servers: map[string]*config.Server{"echo": httpServer("http://127.0.0.1:1/mcp")}}})
	rt, _, ok := g.routeFor("/mcp/echo", "")
	if !ok {
		t.Fatal("no route")
	}
	r := httptest.NewRequest(http.MethodPost, "/mcp/echo", strings.NewReader("{}"))
	r.Header.Set("Mcp-Session-Id", "s")
	r, err := g.authenticate(r)
	if err != nil {
		t.Fatal(err)
	}
	if rt, err = g.narrowFor(r, rt); err != nil {
		t.Fatal(err)
	}
	ctx := r.Context()
	params := json.RawMessage(`{"name":"echo","arguments":{"text":"hi"}}`)
	sc := &scope{g: g, rt: &rt, owner: "o"}
	c := &call{g: g, ctx: ctx, sc: sc, method: "tools/call", server: "echo", upName: "echo", params: params, res: json.RawMessage(`{}`)}
	hdr := http.Header{}

	for _, tc := range []struct {
		feature string
		hook    func()
	}{
		{"tracing", func() {
			if g.tracer != nil {
				t.Fatal("a tracer without tracing configured")
			}
			tracing.InjectHeader(ctx, hdr)
			tracing.NoteOutcome(ctx, tracing.OutcomeError, "x")
			tracing.NoteCaller(ctx, "alias", "user")
		}},
		{"guardrails", func() { c.guardBefore(); c.guardAfter() }},
		{"budgets", func() { c.reserve(); c.charge(); c.cleanup() }},
		{"fleet", func() {
			if g.newResumable(nil) != nil || g.fleetOn() {
				t.Fatal("fleet on without fleet configured")
			}
			g.touchSessionState(nil)
			g.markSessionLive(ctx, nil)
		}},
		{"per-person credentials", func() {
			if st := g.current(); st.passthrough || st.userKeys || st.exchange {
				t.Fatal("caller credentials on without any configured")
			}
			_ = g.withoutTokenless(r, rt)
			if _, err := g.passthroughGate(r, rt); err != nil {
				t.Fatal(err)
			}
			if err := g.exchangeGate(r, rt); err != nil {
				t.Fatal(err)
			}
		}},
		{"debug header", func() {
			if g.wantsDebug(r) {
				t.Fatal("debug without the header")
			}
			noteDebugSession(ctx, nil)
		}},
		{"access log", func() {
			if g.access != nil {
				t.Fatal("an access log without one configured")
			}
			noteMCP(ctx, "tools/call", "echo")
			noteCaller(ctx, "alias", "user")
			noteSession(ctx, nil)
			noteRefusal(ctx, "x")
		}},
	} {
		if n := testing.AllocsPerRun(100, tc.hook); n != 0 {
			t.Errorf("%s off: %v allocations per call, want none", tc.feature, n)
		}
	}
	if c.fail != nil || c.blocked != nil || c.rsv != nil {
		t.Errorf("the off hooks changed the call: fail %v, blocked %v, reservation %v", c.fail, c.blocked, c.rsv)
	}
}

// serverInfoJSON writes what json.Marshal of serverInfo writes, for
// plain names and for ones json.Marshal escapes.
func TestServerInfoJSONAsMarshal(t *testing.T) {
	for _, tc := range []struct {
		single, version string
		prefixed        bool
	}{
		{"", "1.2.3", true}, {"echo", "dev", false}, {"a<b>&c", "v\"1\\", false}, {"é", "\x01", false}, {"x", "", false},
	} {
		g := &Gateway{version: tc.version}
		sc := &scope{rt: &route{prefixed: tc.prefixed, single: tc.single}}
		want, _ := json.Marshal(g.serverInfo(sc))
		if got := g.serverInfoJSON(sc); string(got) != string(want) {
			t.Errorf("serverInfoJSON(%q, %q) = %s, json.Marshal says %s", tc.single, tc.version, got, want)
		}
	}
}
