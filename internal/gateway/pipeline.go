package gateway

// The tools/call pipeline: every stage a tool call passes, in order, in
// one list, run by one runner. Every front (streamable HTTP, legacy SSE,
// stdio, a 2026-07-28 request, a hop from another replica, an operator's
// call) reaches it through dispatch, and call_tool of a search route
// through the same entry, so none can skip a stage.
//
//	policy      the name, among what the caller may call on the route
//	            -> server and upstream name (unknown and hidden alike)
//	budget      the caller's budget: refused when spent, else the call's
//	            expected cost reserved (guard.Budgets)
//	guard_pre   guardrails before: arguments redacted, or the call
//	            blocked (answered with a tool error, never sent)
//	upstream    the call goes to its server: progress token mapped, bound
//	            to the session, an older client's questions answered
//	guard_post  guardrails after, on the final result
//	cost        what the call cost; the reservation is settled with it
//	audit       metrics and the audit record
//	trace       the outcome on the message's span and the debug line; an
//	            upstream failure becomes the client's error
//
// A stage that ends the call (c.fail: an unknown or hidden name, a spent
// budget, a server whose list cannot be read) skips the stages after it
// but for audit: every tools/call that reaches dispatch ends with exactly
// one audit record and one tool-call metric sample, with its fault class
// (store.FaultClasses), whichever stage ended it. A call a pre guardrail
// blocked passes the later stages, which record it and send nothing.
// Other methods that go upstream (prompts/get,
// resources/read, completion/complete, subscriptions) run the upstream
// and trace stages alone (forward): they are neither budgeted, guarded
// nor audited.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// callStage is one step of a call: each reads and updates the call, and
// sets c.fail to refuse it (runStage says which method runs it).
type callStage uint8

const (
	stagePolicy callStage = iota
	stageBudget
	stageGuardPre
	stageUpstream
	stageGuardPost
	stageCost
	stageAudit
	stageTrace
)

var stageNames = [...]string{
	stagePolicy: "policy", stageBudget: "budget", stageGuardPre: "guard_pre", stageUpstream: "upstream",
	stageGuardPost: "guard_post", stageCost: "cost", stageAudit: "audit", stageTrace: "trace",
}

func (s callStage) String() string { return stageNames[s] }

// toolCallStages is the order every tools/call passes.
var toolCallStages = []callStage{
	stagePolicy, stageBudget, stageGuardPre, stageUpstream,
	stageGuardPost, stageCost, stageAudit, stageTrace,
}

// forwardStages is what another method's call passes once its server is
// known (forward).
var forwardStages = []callStage{stageUpstream, stageTrace}

// runStage runs stage s of c. A switch rather than a table of functions:
// the call then stays on its caller's stack.
func (c *call) runStage(s callStage) {
	switch s {
	case stagePolicy:
		c.checkPolicy()
	case stageBudget:
		c.reserve()
	case stageGuardPre:
		c.guardBefore()
	case stageUpstream:
		c.send()
	case stageGuardPost:
		c.guardAfter()
	case stageCost:
		c.charge()
	case stageAudit:
		c.record()
	case stageTrace:
		c.trace()
	}
}

// call is one request on its way through the stages.
type call struct {
	g      *Gateway
	ctx    context.Context // what each stage added: verified server, origin, guardrail note
	sc     *scope
	method string
	server string          // policy: the item's server
	upName string          // policy: the item's upstream name
	params json.RawMessage // as they go upstream, rewritten by each stage

	rsv     *guard.Reservation // budget: the claim to settle; nil: none
	forget  func()             // upstream: drops the mapped progress token
	guards  guard.Chain        // guard_pre: the chain, for guard_post too
	gcall   *guard.Call        // guard_pre: the checks' view of the call
	blocked *guard.Block       // guard_pre: the call was blocked, never sent

	start time.Time       // the audited call's start: upstream, or guard_pre for a blocked one
	res   json.RawMessage // the result the client gets
	err   error           // upstream: the call's failure
	cost  float64         // cost: what the budget was charged and the record says

	fail  *jsonrpc.Error // the client's error: no later stage runs but audit
	fault string         // the fault class of the stage that set fail (store.Fault*)

	// up is the upstream call's context, with what it carries (origin,
	// capabilities, log level): set once by send, then only read. Kept
	// here, it costs no allocation of its own.
	up upstream.CallContext
	// nc is what record uses as WithoutCancel of the call's context
	// (detached).
	nc noCancel
}

// run passes c through stages in order, then releases what they held. A
// stage that ends the call skips the rest, but for the audit stage when
// the list has one: the call's end is recorded whichever way it came.
func (c *call) run(stages []callStage) (json.RawMessage, *jsonrpc.Error) {
	defer c.cleanup()
	for i, s := range stages {
		c.runSeen(s)
		if c.fail != nil {
			if s < stageAudit && slices.Contains(stages[i+1:], stageAudit) {
				c.runSeen(stageAudit)
			}
			return nil, c.fail
		}
	}
	return c.res, nil
}

// runSeen runs stage s, telling the test hook first.
func (c *call) runSeen(s callStage) {
	if seen := c.g.stageSeen.Load(); seen != nil {
		(*seen)(c.method, s.String())
	}
	c.runStage(s)
}

// cleanup runs when the call has its answer, whichever stage gave it: the
// progress token is forgotten and a reservation never settled (refused
// or failed before its cost was known) is given back.
func (c *call) cleanup() {
	if c.forget != nil {
		c.forget()
	}
	if c.rsv != nil {
		c.settle(0)
	}
}

// toolsCall runs a tools/call of a real tool through every stage, also
// saying which item its name resolved to.
func (g *Gateway) toolsCall(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, toolRef, *jsonrpc.Error) {
	c := call{g: g, ctx: ctx, sc: sc, method: m.Method, params: m.Params, start: time.Now()}
	res, e := c.run(toolCallStages)
	return res, toolRef{c.server, c.upName}, e
}

// forward sends a request of another method upstream to server, with
// progress-token mapping and the request's scope as origin.
func (g *Gateway) forward(ctx context.Context, sc *scope, server, method string, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	c := call{g: g, ctx: ctx, sc: sc, method: method, server: server, params: params}
	return c.run(forwardStages)
}

// checkPolicy resolves the tool's name among the items the caller may
// call on the route (resolveName); a name it may not see fails as an
// unknown one (denied). A server whose list cannot be read fails the call
// with its fault, recorded against that server.
func (c *call) checkPolicy() {
	ctx, ref, params, why, e := c.g.resolveName(c.ctx, c.sc, c.params, catalog.Tools)
	if e != nil {
		c.fail, c.fault, c.server = e, why.class, why.server
		return
	}
	c.ctx, c.server, c.upName, c.params = ctx, ref.server, ref.name, params
}

// reserve claims the call's expected cost from its caller's budget
// before anything else runs for it (budget.go): a spent budget refuses
// it.
func (c *call) reserve() {
	rsv, e := c.reserveBudget()
	if e != nil {
		tracing.NoteOutcome(c.ctx, tracing.OutcomeRefused, "budget")
		c.fail, c.fault = e, store.FaultRefused
		return
	}
	c.rsv = rsv
}

// guardBefore runs the pre checks of the server's and the route's
// guardrails (S21) before anything goes upstream: the arguments may be
// redacted, or the call blocked, answered with a tool error naming the
// guardrail; a blocked call is audited and costs nothing.
func (c *call) guardBefore() {
	ch := c.g.guardChain(c.sc, c.server)
	if ch.Empty() {
		return
	}
	gcall := guardCall(c.ctx, c.server, c.params)
	c.guards, c.gcall = ch, &gcall
	start := time.Now()
	p, blocked := c.preChecks(c.params)
	if blocked != nil {
		c.blocked, c.start = blocked, start
		c.ctx = withGuardrail(c.ctx, blocked)
		c.res = blockedResult(c.ctx, blocked)
		return
	}
	c.params = p
}

// send makes the call upstream (nothing for a blocked call): the
// client's progress token mapped to one this gateway owns, the
// 2026-07-28 request fields taken out, the context bound to the caller's
// session (origin, capabilities, log level). A 2026-07-28 upstream's
// questions are asked of an older client on its session (S18.2).
func (c *call) send() {
	if c.blocked != nil {
		return
	}
	g, sc := c.g, c.sc
	if tok, ok := jsonrpc.GetPath(c.params, "_meta", "progressToken"); ok && len(tok) > 0 && string(tok) != "null" {
		upTok, forget := g.mintProgress(sc, c.server, tok, tracing.MessageSpan(c.ctx))
		c.forget = forget
		p, err := jsonrpc.SetPath(c.params, []byte(upTok), "_meta", "progressToken")
		if err != nil {
			c.fail, c.fault = errInvalidParams("Invalid params"), store.FaultDenied
			return
		}
		c.params = p
	}
	if sc.stateless {
		c.params = stripStatelessMeta(c.params)
	}
	task, upTask := c.upstreamTaskParams()
	// A 2026-07-28 upstream takes no task member: the request declares
	// its tasks extension instead, and the upstream decides.
	upStateless := upTask && g.up.Stateless(c.server)
	if upTask && !upStateless {
		p, err := jsonrpc.Set(c.params, mcpwire.FieldTask, task)
		if err != nil {
			c.fail, c.fault = errInvalidParams("Invalid params"), store.FaultDenied
			return
		}
		c.params = p
	}
	c.start = time.Now()
	tracing.NoteServer(c.ctx, c.server)
	ctx := g.bind(c.ctx, sc)
	c.up.Values = upstream.CallValuesFrom(ctx)
	c.up.Values.Origin = sc
	c.up.Values.ClientCapabilities = relayableCapsWith(sc, upStateless)
	if l := sc.logLevelName(); l != "" {
		c.up.Values.LogLevel = l
	}
	c.up.Context = ctx
	ctx = &c.up
	c.ctx = ctx
	callCtx := ctx
	if upTask {
		// The task is created upstream even if the call is cancelled
		// while the creation is under way: its handle must come back,
		// or nothing could cancel the upstream's task (the await below
		// cancels it at once when ctx has ended). The server's timeout
		// still bounds the request.
		callCtx = context.WithoutCancel(ctx)
	}
	res, err := g.callConnecting(callCtx, sc, c.server, c.method, c.params)
	switch {
	case err == nil && c.method == mcpwire.MethodToolsCall && g.up.Stateless(c.server) && mcpwire.ResultTypeOf(res) == mcpwire.ResultTask:
		// A 2026-07-28 upstream's task handle, asked for or not: the
		// gateway follows it, and its id never reaches the client
		// (tasks.go).
		res, err = g.awaitExtensionTask(ctx, sc, c.server, res)
	case err == nil && upTask:
		// Created upstream: its result is the call's (tasks.go).
		res, err = g.awaitUpstreamTask(ctx, c.server, res)
	}
	if err == nil && (!sc.stateless || sc.task != nil) && mcpwire.AllowsInputRequired(c.method) && mcpwire.ResultTypeOf(res) == mcpwire.ResultInputRequired {
		// S18.2: a stateless upstream's questions, asked of this handshake-era
		// client on its session, or, for a 2026-07-28 task's call, of the
		// task's owner through tasks/get and tasks/update; it sees one
		// ordinary result.
		res, err = g.answerInputs(ctx, sc, c.server, c.method, c.params, res)
	}
	if err == nil && g.up.Stateless(c.server) {
		res = g.ownResult(sc, res)
	}
	c.res, c.err = res, err
}

// guardAfter runs the post checks on the final result, streamed or not:
// it goes to the client from here. A blocked result becomes the tool
// error naming the guardrail.
func (c *call) guardAfter() {
	if c.err != nil || c.guards == nil || c.blocked != nil {
		return
	}
	out, blocked := c.postChecks(c.res)
	if blocked != nil {
		c.ctx = withGuardrail(c.ctx, blocked)
		out = blockedResult(c.ctx, blocked)
	}
	c.res = out
}

// charge prices a call that went upstream and settles its reservation
// with that cost: one cost for the budget and the audit record. A blocked
// call cost nothing; its reservation is released (cleanup).
func (c *call) charge() {
	if c.blocked != nil {
		return
	}
	c.cost = c.callCost()
	if c.rsv != nil {
		c.settle(c.cost)
	}
}

// upstreamRPCError is the JSON-RPC error the upstream (or the client,
// answering the upstream's question) answered the call with, or nil.
func (c *call) upstreamRPCError() *jsonrpc.Error {
	if c.err == nil {
		return nil // and nothing escapes to errors.As
	}
	var rpcErr *jsonrpc.Error
	errors.As(c.err, &rpcErr)
	return rpcErr
}

// trace notes how the call ended on its span and in the debug log, and
// turns an upstream failure into the client's error: the upstream's own
// JSON-RPC error is relayed as it is, any other failure is classified
// (upstreamFault).
func (c *call) trace() {
	g := c.g
	if c.blocked != nil {
		c.logLine("blocked")
		return
	}
	if c.err == nil {
		c.logLine("ok")
		return
	}
	if rpcErr := c.upstreamRPCError(); rpcErr != nil {
		outcome := "upstream_error"
		if ce := (*clientError)(nil); errors.As(c.err, &ce) {
			outcome = "client_error"
		}
		tracing.NoteOutcome(c.ctx, tracing.OutcomeError, outcome)
		c.logLine(outcome)
		c.fail = rpcErr
		return
	}
	if errors.Is(c.err, context.Canceled) {
		c.logLine("cancelled")
	} else {
		// Strict: the caller gets the error, so the log line is debug
		// (C7.2); a read timeout was already warned about with its
		// target and budget (C7.3).
		g.log.Debug("upstream call failed", "server", c.server, "method", c.method, "fault", upstream.Classify(c.err).Class, "error", c.err, "elapsed", time.Since(c.start))
	}
	c.fail = g.upstreamFault(c.ctx, c.sc, c.server, c.err)
}
