package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestFleet runs the scenarios of issue 14 §4 on one fleet, in order; each
// leaves the fleet whole (every replica up, Redis up) for the next.
func TestFleet(t *testing.T) {
	oldKey := newSessionKey()
	f := newFleet(t, 3, oldKey)

	t.Run("session continues on every replica", func(t *testing.T) { testSessionContinues(t, f) })
	t.Run("typescript client through the balancer", func(t *testing.T) { testTypeScriptClient(t, f) })
	t.Run("streaming upstream through the balancer", func(t *testing.T) { testStreaming(t, f) })
	t.Run("server request answered on another replica", func(t *testing.T) { testServerRequestAcrossReplicas(t, f) })
	t.Run("stream resumed on another replica", func(t *testing.T) { testResumeOnAnotherReplica(t, f) })
	t.Run("runtime key seen by every replica", func(t *testing.T) { testRuntimeKey(t, f) })
	t.Run("admin change on one replica in force on the others", func(t *testing.T) { testAdminAcrossReplicas(t, f) })
	t.Run("admin sessions are the fleet's", func(t *testing.T) { testFleetSessionAdmin(t, f) })
	t.Run("rate limit is global", func(t *testing.T) { testGlobalRateLimit(t, f) })
	t.Run("redis outage", func(t *testing.T) { testRedisOutage(t, f) })
	t.Run("budget is the fleet's", func(t *testing.T) { testFleetBudget(t, f) })
	t.Run("redis outage: what was removed or ended stays so", func(t *testing.T) { testRedisOutageHolds(t, f) })
	t.Run("postgres outage: ends are refused, not half made", func(t *testing.T) { testPostgresOutageRefuses(t, f) })
	t.Run("replica killed under load", func(t *testing.T) { testKillReplica(t, f) })
	t.Run("replica stopped under load", func(t *testing.T) { testGracefulStop(t, f) })
	t.Run("session key rotation", func(t *testing.T) { testKeyRotation(t, f, oldKey) })
}

// transcript is what a client saw of a fixed sequence of requests, as
// JSON, for comparing one process with the fleet.
type transcript map[string]string

// exercise runs the fixed sequence on cs: lists, several tool calls (one
// a tool error), the prompt and the resources.
func exercise(t *testing.T, ctx context.Context, cs *mcp.ClientSession) transcript {
	t.Helper()
	out := transcript{}
	keep := func(name string, v any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// ttlMs is what remains of a cached list's lifetime: it differs
		// between any two requests, on one process or many.
		b, _ := json.Marshal(v)
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			if _, ok := m["ttlMs"]; ok {
				m["ttlMs"] = "(varies)"
			}
			b, _ = json.Marshal(m)
		}
		out[name] = string(b)
	}
	tools, err := cs.ListTools(ctx, nil)
	keep("tools/list", tools, err)
	for _, c := range []struct {
		name string
		args map[string]any
	}{
		{"notes__list_notes", map[string]any{}},
		{"notes__get_note", map[string]any{"title": "alpha"}},
		{"notes__get_note", map[string]any{"title": "beta"}},
		{"notes__search_notes", map[string]any{"query": "milk"}},
		{"notes__get_note", map[string]any{"title": "no such note"}},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		args, _ := json.Marshal(c.args)
		keep("tools/call "+c.name+" "+string(args), res, err)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	keep("prompts/list", prompts, err)
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__summarize_notes", Arguments: map[string]string{"query": "milk"}})
	keep("prompts/get", prompt, err)
	resources, err := cs.ListResources(ctx, nil)
	keep("resources/list", resources, err)
	templates, err := cs.ListResourceTemplates(ctx, nil)
	keep("resources/templates/list", templates, err)
	if len(resources.Resources) == 0 {
		t.Fatal("resources/list: none")
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources.Resources[0].URI})
	keep("resources/read", read, err)
	return out
}

// testSessionContinues: scenario 1. The go-sdk client, unmodified, through
// the balancer: initialize lands on one replica and every later request of
// the session on the next, so the session is continued on all three; what
// it sees equals what the same client sees of one replica alone. Both
// revisions: a stateful session (2025-11-25) and the stateless default.
func testSessionContinues(t *testing.T, f *Fleet) {
	for _, rev := range []string{revStateful, revStateless} {
		t.Run(rev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			single := sdkConnect(t, ctx, f.Replicas[0].URL+"/mcp", aliceKey, rev)
			want := exercise(t, ctx, single)
			single.Close()

			f.LB.ResetCounts()
			cs := sdkConnect(t, ctx, f.LB.URL+"/mcp", aliceKey, rev)
			if got := cs.InitializeResult().ProtocolVersion; got != rev {
				t.Errorf("negotiated %s, want %s", got, rev)
			}
			got := exercise(t, ctx, cs)
			if d := cmp.Diff(got, want); d != "" {
				t.Errorf("through the balancer vs one replica (-got +want):\n%s", d)
			}
			if rev == revStateful && cs.ID() == "" {
				t.Error("no session id")
			}
			served, failed := f.LB.Counts()
			for _, r := range f.Replicas {
				if served[r.Name] < 3 || failed[r.Name] != 0 {
					t.Errorf("replica %s served %d requests (%d failed); want every replica to serve the session", r.Name, served[r.Name], failed[r.Name])
				}
			}
			t.Logf("%s: requests per replica %v", rev, served)
		})
	}
}
