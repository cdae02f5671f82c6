package gateway

import (
	"context"
	"encoding/json"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// compileGuards compiles the guardrails of every server and route.
func compileGuards(cfg *config.Config) (servers, routes map[string]*guard.Set) {
	servers, routes = map[string]*guard.Set{}, map[string]*guard.Set{}
	for name, srv := range cfg.Servers {
		if s := guard.Compile(srv.Guardrails); s != nil {
			servers[name] = s
		}
	}
	for path, rc := range cfg.Routes {
		if rc == nil {
			continue
		}
		if s := guard.Compile(rc.Guardrails); s != nil {
			routes[path] = s
		}
	}
	return servers, routes
}

// guardChain is what a tools/call of server on sc's route passes: the
// server's guardrails, then the route's.
func (g *Gateway) guardChain(sc *scope, server string) guard.Chain {
	st := g.current()
	if len(st.guards) == 0 && len(st.routeGuards) == 0 {
		return nil // none configured: nothing built per call
	}
	ch := guard.Chain{st.guards[server]}
	if sc != nil && sc.rt != nil {
		path := sc.rt.path
		if path == "" {
			// The legacy /sse endpoint and stdio serve the whole gateway,
			// as /mcp does: they get its guardrails, or a client could
			// skip them by choosing the older transport.
			path = "/mcp"
		}
		ch = append(ch, st.routeGuards[path])
	}
	return ch
}

// guardCall builds the checks' view of a call.
func guardCall(ctx context.Context, server string, params json.RawMessage) guard.Call {
	tool, _ := jsonrpc.GetString(params, "name")
	c := guard.Call{Server: server, Tool: tool}
	if cl := callers.FromContext(ctx); cl != nil {
		c.Alias, c.User = cl.Alias, cl.User
	}
	return c
}

// guardNote carries the guardrail that blocked a call to its audit record.
type guardNote struct{ name string }

type guardNoteKey struct{}

func withGuardrail(ctx context.Context, b *guard.Block) context.Context {
	return context.WithValue(ctx, guardNoteKey{}, guardNote{truncate(b.Guardrail, store.MaxGuardrailName)})
}

func guardrailOf(ctx context.Context) string {
	n, _ := ctx.Value(guardNoteKey{}).(guardNote)
	return n.name
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// preChecks runs the pre checks of c's chain: params comes back with the
// arguments as they go upstream, or blocked is why the call is refused.
func (c *call) preChecks(params json.RawMessage) (json.RawMessage, *guard.Block) {
	args, _ := jsonrpc.Get(params, "arguments")
	out, rep := c.guards.Pre(c.ctx, *c.gcall, args)
	c.guardReport(guard.PhasePre, rep)
	if rep.Block != nil {
		return params, rep.Block
	}
	if len(args) > 0 && string(out) != string(args) {
		if p, err := jsonrpc.Set(params, "arguments", out); err == nil {
			params = p
		} else {
			// Never send unredacted arguments because a rewrite failed.
			return params, &guard.Block{Guardrail: "arguments", Kind: "redact", Phase: guard.PhasePre, Reason: "arguments could not be rewritten"}
		}
	}
	return params, nil
}

// postChecks runs the post checks of c's chain on a final result.
func (c *call) postChecks(res json.RawMessage) (json.RawMessage, *guard.Block) {
	if mcpwire.ResultTypeOf(res) == mcpwire.ResultInputRequired {
		// Not the result yet: the call's final answer comes later and
		// passes here then.
		return res, nil
	}
	out, rep := c.guards.Post(c.ctx, *c.gcall, res)
	c.guardReport(guard.PhasePost, rep)
	if rep.Block != nil {
		return nil, rep.Block
	}
	return out, nil
}

func (c *call) guardReport(phase string, rep guard.Report) {
	m := c.g.metrics
	if m == nil {
		return
	}
	server := c.gcall.Server
	if rep.Block != nil {
		m.GuardrailBlock(server, rep.Block.Guardrail, phase)
	}
	for name, n := range rep.Redactions {
		m.GuardrailRedactions(server, name, phase, n)
	}
	for _, name := range rep.Failed {
		m.GuardrailWebhookFailure(server, name)
	}
}

// blockedResult is the tool error a blocked call answers with: it names
// the guardrail, never what it matched (S21).
func blockedResult(ctx context.Context, b *guard.Block) json.RawMessage {
	tracing.NoteOutcome(ctx, tracing.OutcomeRefused, "guardrail")
	res, _ := json.Marshal(map[string]any{
		"content": []map[string]any{{"type": "text", "text": b.Message()}},
		"isError": true,
	})
	return res
}
