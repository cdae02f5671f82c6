package gateway

// MCP tasks: a 2025-11-25 session's task-augmented tools/call (or, with
// the 2026-07-28 extension, a call the gateway chooses to make a task) is
// answered at once with a task of the gateway's, and the call runs in the
// background through every stage a plain call passes (policy, budget,
// guardrails, upstream, cost, audit: the audit record is written and the
// cost charged once, when the call ends). The upstream call is plain
// (the gateway runs the task), or itself a task the send stage follows
// when the upstream runs the tool as one (relayed; the blocking bridge
// below uses the same path). The task table (internal/tasks) owns the
// tasks; this file is the glue: which calls become tasks, who owns them,
// and the tasks/* methods of each era.
//
// A task is its creator's: the caller's owner fingerprint on the route
// it was made on (and, for a caller the gateway cannot tell apart from
// others, its session). Its id is sealed to that owner, so another
// caller's tasks/get, tasks/result, tasks/cancel with it is answered as
// for an id that never existed, and tasks/list shows a caller its own
// tasks alone. Messages of the running call (progress, server-initiated
// requests) go to the session that created the task, as for a plain
// call of that session.
//
// With fleet.session_keys the ids are sealed under a key derived from them
// and the table keeps its tasks in the store too (newTaskTable), so any
// replica answers tasks/* for any task, and a task whose replica stopped
// ends failed with the reason.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// taskSettings is server's tasks block (or the defaults).
func (g *Gateway) taskSettings(server string) config.ServerTasks {
	return g.current().cfg.Servers[server].TaskSettings()
}

// tasksOffered says whether sc's client is offered tasks on its route: a
// 2025-11-25 session (the revision that has them in the core protocol)
// or a 2026-07-28 request (the extension), on a route with a server
// whose tasks are not off. /mcp/proxy serves tools alone.
func (g *Gateway) tasksOffered(sc *scope) bool {
	if sc.rt.proxy || (!sc.stateless && (sc.sess == nil || sc.sess.Rev() != mcpwire.Rev20251125)) {
		return false
	}
	for _, s := range sc.rt.servers {
		if g.taskSettings(s).Mode != config.TasksOff {
			return true
		}
	}
	return false
}

// tasksCapability is what the gateway declares of tasks: it answers
// tasks/list and tasks/cancel and runs task-augmented tools/call.
func tasksCapability() map[string]any {
	return map[string]any{
		"list": map[string]any{}, "cancel": map[string]any{},
		"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
	}
}

// taskOwner is who owns the tasks sc's caller makes: ok is false for a
// caller with no owner fingerprint (an operator's call), which makes
// none.
func taskOwner(sc *scope) (tasks.Owner, bool) {
	owner := sc.owner
	if sc.sess != nil {
		owner = sc.sess.Owner()
	}
	if owner == "" {
		return tasks.Owner{}, false
	}
	o := tasks.Owner{Caller: owner, Route: sc.rt.id}
	if o.Route == "" {
		o.Route = routeID(sc.rt.path, sc.rt.header)
	}
	if owner == callers.OwnerAnonymous || strings.HasPrefix(owner, callers.OwnerIP) {
		// The fingerprint does not tell callers apart (one address, or
		// none): the tasks are the session's alone.
		if sc.sess == nil {
			return tasks.Owner{}, false
		}
		o.Session = sc.sess.Hash()
	}
	return o, true
}

// rewriteTaskSupport is a tool of server as a task-capable client is
// shown it: its execution.taskSupport as the upstream lists it, or, when
// the upstream says nothing (or, in mode gateway, forbids it),
// "optional" (the gateway runs the call); none when the server's tasks
// are off.
func (g *Gateway) rewriteTaskSupport(server string, raw []byte) []byte {
	support, has := jsonrpc.GetPath(raw, "execution", "taskSupport")
	if g.taskSettings(server).Mode == config.TasksOff {
		if !has {
			return raw
		}
		exec, _ := jsonrpc.Get(raw, "execution")
		if e, err := jsonrpc.Delete(exec, "taskSupport"); err == nil {
			if r, err := jsonrpc.Set(raw, "execution", e); err == nil {
				return r
			}
		}
		return raw
	}
	if has && len(support) > 0 && string(support) != "null" {
		// In mode gateway the gateway is the task's receiver: what the
		// upstream forbids is only that it runs the tool as a task.
		if g.taskSettings(server).Mode != config.TasksGateway || string(support) != `"`+mcpwire.TaskSupportForbidden+`"` {
			return raw
		}
	}
	if r, err := jsonrpc.SetPath(raw, jsonrpc.String(mcpwire.TaskSupportOptional), "execution", "taskSupport"); err == nil {
		return r
	}
	return raw
}

// taskTTL reads a task-augmented request's task member: ok is false
// when there is none; the ttl it asks for (0: none); or why it is wrong.
func taskTTL(params json.RawMessage) (ttl time.Duration, ok bool, e *jsonrpc.Error) {
	raw, ok := jsonrpc.Get(params, mcpwire.FieldTask)
	if !ok || string(raw) == "null" {
		return 0, false, nil
	}
	var t struct {
		TTL *float64 `json:"ttl"`
	}
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &t) != nil {
		return 0, true, errInvalidParams("Invalid params: task must be an object")
	}
	if t.TTL != nil {
		if *t.TTL < 0 || *t.TTL > float64(365*24*time.Hour/time.Millisecond) {
			return 0, true, errInvalidParams("Invalid params: task.ttl out of range")
		}
		ttl = time.Duration(*t.TTL) * time.Millisecond
	}
	return ttl, true, nil
}

// taskCall answers a task-augmented tools/call when the gateway runs it
// as a task; handled is false when the call is not one it takes (no
// task member, a revision without tasks; in 2026-07-28, a call the
// gateway does not make a task): dispatch then serves it as a plain call.
func (g *Gateway) taskCall(ctx context.Context, sc *scope, m *jsonrpc.Message) (res json.RawMessage, e *jsonrpc.Error, handled bool) {
	if sc.stateless {
		if res, e, ok := g.taskCallExtension(ctx, sc, m); ok {
			return res, e, true
		}
		return g.callWithoutTask(ctx, sc, m)
	}
	ttl, augmented, e := taskTTL(m.Params)
	if !augmented {
		return nil, nil, false
	}
	if sc.sess == nil || sc.sess.Rev() != mcpwire.Rev20251125 {
		// Only 2025-11-25 has tasks in the core protocol.
		return g.callWithoutTask(ctx, sc, m)
	}
	if e != nil {
		return nil, e, true
	}
	if !g.tasksOffered(sc) {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Tasks are not offered on this route"), true
	}
	owner, ok := taskOwner(sc)
	if !ok {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Task-augmented calls need an identified caller"), true
	}
	plain, err := jsonrpc.Delete(m.Params, mcpwire.FieldTask)
	if err != nil {
		return nil, errInvalidParams("Invalid params"), true
	}
	call := &jsonrpc.Message{ID: m.ID, Method: m.Method, Params: plain}
	// The name is resolved now, so that an unknown or hidden tool, or
	// one that is no task, is refused at once; the task's call resolves
	// it again through the policy stage, as any call does.
	_, ref, _, _, rerr := g.resolveName(ctx, sc, plain, catalog.Tools)
	if rerr != nil {
		// Refused (and audited) exactly as the plain call would be.
		res, e := g.callRealTool(ctx, sc, call)
		return res, e, true
	}
	name, _ := jsonrpc.GetString(m.Params, "name")
	settings := g.taskSettings(ref.server)
	if settings.Mode == config.TasksOff {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Tool %s cannot be called as a task", name), true
	}
	var support string
	if it, found, err := g.cat.Lookup(ctx, ref.server, catalog.Tools, ref.name); err == nil && found {
		support = taskSupportOf(withTaskSupport(ctx, it.Raw))
	}
	if support == mcpwire.TaskSupportForbidden && settings.Mode != config.TasksGateway {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Tool %s cannot be called as a task", name), true
	}
	// Relayed: the upstream runs the task, the gateway's follows it
	// (not on per-call upstream sessions: the task would be on one that
	// ended).
	relay := settings.Mode == config.TasksRelay && support != "" && !g.up.PerCall(ref.server) && g.upstreamToolTasks(ctx, ref.server)

	sess := sc.sess
	tout := &taskOut{sess: sess}
	tsc := &scope{g: g, sess: sess, rt: sc.rt, out: tout, caps: sc.caps, owner: sc.owner, logLevel: sc.logLevel}
	run := func(rctx context.Context) tasks.Outcome {
		// A tasks/result of the creating session finds where to send
		// the call's messages while it waits (taskOut).
		id := tasks.ID(rctx)
		tout.setID(id)
		defer g.taskOuts.put(id, sessionParty(sess), tout)()
		// Questions the call asks of the client are moot once the task
		// ends.
		tsc.done = rctx.Done()
		var waiting atomic.Int32
		tsc.asking = func(method string, start bool) {
			// input_required while any question is open.
			switch {
			case start && waiting.Add(1) == 1:
				tasks.Report(rctx, tasks.InputRequired, "Waiting for the client's answer to "+method)
			case !start && waiting.Add(-1) == 0:
				tasks.Report(rctx, tasks.Working, "")
			}
		}
		if relay {
			rctx = withUpstreamTask(rctx, taskTTLOf(settings.TTL, ttl))
		}
		res, e := g.callRealTool(rctx, tsc, call)
		return tasks.Outcome{Result: res, Err: e}
	}
	notify := func(t tasks.Task) {
		// Only the session that made the task hears of it; others of
		// the same caller poll.
		_ = sessionOut{sess}.send(jsonrpc.NewNotification(mcpwire.NotifyTasksStatus, t.JSON()))
	}
	t, err := g.taskTable.Start(ctx, owner, ref.server, tasks.Config{TTL: settings.TTL, MaxPerCaller: settings.MaxPerCaller}, ttl, run, notify)
	if e := g.taskStartError(err, settings, ref.server); e != nil {
		return nil, e, true
	}
	return append(append([]byte(`{"task":`), t.JSON()...), '}'), nil, true
}

// taskTTLOf is the TTL of a gateway task: the caller's, capped at the
// server's.
func taskTTLOf(max, asked time.Duration) time.Duration {
	if asked <= 0 || asked > max {
		return max
	}
	return asked
}

// errTaskNotFound is the answer for any task id the caller does not own,
// whether it exists or not.
func errTaskNotFound() *jsonrpc.Error {
	return errInvalidParams("Failed to retrieve task: Task not found")
}

// taskMethod answers tasks/get, tasks/result, tasks/list and
// tasks/cancel for the caller's own tasks.
func (g *Gateway) taskMethod(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	// tasks/result and tasks/list are 2025-11-25's, tasks/update the
	// extension's.
	handshakeOnly := m.Method == mcpwire.MethodTasksResult || m.Method == mcpwire.MethodTasksList
	extensionOnly := m.Method == mcpwire.MethodTasksUpdate
	if !g.tasksOffered(sc) || (sc.stateless && handshakeOnly) || (!sc.stateless && extensionOnly) {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)
	}
	if sc.stateless {
		return g.taskMethodExtension(sc, m)
	}
	owner, ok := taskOwner(sc)
	if m.Method == mcpwire.MethodTasksList {
		if !ok {
			return []byte(`{"tasks":[]}`), nil
		}
		cursor, _ := jsonrpc.GetString(m.Params, "cursor")
		list, next, err := g.taskTable.List(owner, cursor)
		if errors.Is(err, tasks.ErrStore) {
			return nil, taskStoreError()
		}
		if err != nil {
			return nil, errInvalidParams("Invalid cursor")
		}
		buf := []byte(`{"tasks":[`)
		for i, t := range list {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, t.JSON()...)
		}
		buf = append(buf, ']')
		if next != "" {
			buf = append(append(buf, `,"nextCursor":`...), jsonrpc.String(next)...)
		}
		return append(buf, '}'), nil
	}
	id, _ := jsonrpc.GetString(m.Params, "taskId")
	if !ok || id == "" {
		return nil, errTaskNotFound()
	}
	switch m.Method {
	case mcpwire.MethodTasksGet:
		t, err := g.taskTable.Get(owner, id)
		if errors.Is(err, tasks.ErrStore) {
			return nil, taskStoreError()
		}
		if err != nil {
			return nil, errTaskNotFound()
		}
		return t.JSON(), nil
	case mcpwire.MethodTasksCancel:
		t, err := g.taskTable.Cancel(owner, id)
		if errors.Is(err, tasks.ErrTerminal) {
			cur, _ := g.taskTable.Get(owner, id)
			return nil, errInvalidParams("Cannot cancel task: already in terminal status '%s'", cur.Status)
		}
		if errors.Is(err, tasks.ErrStore) {
			return nil, taskStoreError()
		}
		if err != nil {
			return nil, errTaskNotFound()
		}
		return t.JSON(), nil
	}
	// tasks/result: waits for the end of the call. Meanwhile what the
	// call sends its client (questions of its input_required phase) goes
	// on this request's stream, if the session that made the task asks.
	if tout, ok, _ := g.taskOuts.get(id, sc.party()); ok {
		defer tout.attach(sc.out)()
	}
	t, out, err := g.taskTable.Result(ctx, owner, id)
	switch {
	case errors.Is(err, tasks.ErrNotFound):
		return nil, errTaskNotFound()
	case errors.Is(err, tasks.ErrStore):
		return nil, taskStoreError()
	case err != nil:
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Request cancelled")
	case t.Status == tasks.Cancelled:
		return nil, errInvalidParams("Task %s was cancelled", id)
	case out.Err != nil:
		// The call's own error, as the plain call would have answered.
		return nil, out.Err
	}
	related, _ := json.Marshal(map[string]string{"taskId": id})
	res, err := jsonrpc.SetPath(out.Result, related, "_meta", mcpwire.MetaKeyRelatedTask)
	if err != nil {
		return out.Result, nil
	}
	return res, nil
}

// Upstream tasks. A call goes upstream as a task in two cases: the
// gateway's task relays to a server that runs tasks (mode relay, the
// tool's taskSupport optional or required), or a plain call of a tool
// its server offers only as a task (taskSupport required): the blocking
// bridge, for any client. Either way the send stage creates the task
// upstream and waits for its result (polling tasks/get, then
// tasks/result on the same upstream session), so that guardrails, cost
// and audit see the final result as they see a plain call's; the
// upstream's task id never leaves the gateway.

type taskSupportKey struct{}

// withTaskSupport notes the execution.taskSupport of the tool a call
// resolved to, when the upstream lists one.
func withTaskSupport(ctx context.Context, raw []byte) context.Context {
	if !bytes.Contains(raw, []byte(`"taskSupport"`)) {
		return ctx
	}
	s, _ := jsonrpc.GetPath(raw, "execution", "taskSupport")
	var v string
	if json.Unmarshal(s, &v) != nil || v == "" {
		return ctx
	}
	return context.WithValue(ctx, taskSupportKey{}, v)
}

func taskSupportOf(ctx context.Context) string {
	s, _ := ctx.Value(taskSupportKey{}).(string)
	return s
}

type upstreamTaskKey struct{}

// withUpstreamTask marks a gateway task's call as relayed: it goes
// upstream as a task of ttl.
func withUpstreamTask(ctx context.Context, ttl time.Duration) context.Context {
	return context.WithValue(ctx, upstreamTaskKey{}, ttl)
}

// upstreamTaskParams says whether c goes upstream as a task, and with
// which task member.
func (c *call) upstreamTaskParams() (json.RawMessage, bool) {
	if c.method != mcpwire.MethodToolsCall {
		return nil, false
	}
	if ttl, ok := c.ctx.Value(upstreamTaskKey{}).(time.Duration); ok {
		return []byte(`{"ttl":` + strconv.FormatInt(ttl.Milliseconds(), 10) + `}`), true
	}
	if taskSupportOf(c.ctx) != mcpwire.TaskSupportRequired || c.g.taskSettings(c.server).Mode == config.TasksOff {
		return nil, false
	}
	if _, has := jsonrpc.Get(c.params, mcpwire.FieldTask); has {
		// The client's own task member (a client not offered
		// gateway tasks): passed as it is, as before.
		return nil, false
	}
	return []byte(`{}`), true
}

// upstreamToolTasks says whether server runs task-augmented tools/call.
func (g *Gateway) upstreamToolTasks(ctx context.Context, server string) bool {
	s, release, err := g.up.Acquire(ctx, server)
	if err != nil {
		return false
	}
	defer release()
	caps := s.Info().Caps
	return caps.ToolTasks || caps.TasksExtension && g.up.Stateless(server)
}

// maxUpstreamQuestions bounds the input requests one poll of an upstream
// task may carry: more is a hostile or broken upstream.
const maxUpstreamQuestions = 16

// awaitExtensionTask follows the task handle a 2026-07-28 upstream answered
// a tools/call with (resultType task): it polls tasks/get, puts the
// upstream's inputRequests to the call's client as the upstream's own
// requests would be (relay.HandleRequest: on the client's session, or as
// the questions of its own task or exchange) and answers them with
// tasks/update, and returns the inline result, or the inline error. Its
// status is reported to the gateway's task, if the call is one's. When
// ctx ends first the upstream task is cancelled. The upstream's id never
// reaches the client.
func (g *Gateway) awaitExtensionTask(ctx context.Context, sc *scope, server string, created json.RawMessage) (json.RawMessage, error) {
	id, _ := jsonrpc.GetString(created, "taskId")
	if id == "" {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server answered with a task handle without a taskId")
	}
	// Every tasks/* request must declare the extension too.
	ctx = upstream.WithClientCapabilities(ctx, relayableCapsWith(sc, true))
	idParams, _ := json.Marshal(map[string]string{"taskId": id})
	poll := upstreamPoll(jsonrpc.Get(created, "pollIntervalMs"))
	cancelUpstream := func() { g.cancelUpstreamTask(ctx, server, idParams) }
	answered := map[string]bool{}
	for {
		st, err := g.up.Call(ctx, server, mcpwire.MethodTasksGet, idParams)
		if err != nil {
			if ctx.Err() != nil {
				cancelUpstream()
			}
			return nil, err
		}
		status, _ := jsonrpc.GetString(st, "status")
		msg, _ := jsonrpc.GetString(st, "statusMessage")
		switch tasks.Status(status) {
		case tasks.Completed:
			res, ok := jsonrpc.Get(st, "result")
			if !ok || len(res) == 0 || res[0] != '{' {
				return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's completed task carries no result")
			}
			return res, nil
		case tasks.Failed:
			var e jsonrpc.Error
			if raw, ok := jsonrpc.Get(st, "error"); ok && json.Unmarshal(raw, &e) == nil && e.Message != "" {
				return nil, &e
			}
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's task failed")
		case tasks.Cancelled:
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server cancelled the task")
		case tasks.InputRequired:
			// Not reported to the gateway's task as such: its status is
			// input_required while its client has a question open, which
			// putting the questions to it sets together with them
			// (tasks.Ask, or the asking hook of a handshake-era task). A
			// status reported here, before the questions, showed on
			// tasks/get as input_required with no inputRequests.
			asked, e := g.answerUpstreamTask(ctx, sc, server, id, st, answered)
			if e != nil {
				cancelUpstream()
				return nil, e
			}
			if asked {
				continue // poll at once: the answers may have ended it
			}
			// Nothing new: the upstream has not taken the last answers
			// yet; poll at its pace, not in a loop.
		case tasks.Working:
			tasks.Report(ctx, tasks.Working, msg)
		default:
			cancelUpstream()
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's task has an unknown status")
		}
		select {
		case <-ctx.Done():
			cancelUpstream()
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// answerUpstreamTask puts the input requests of st (a tasks/get result of
// an upstream task) not yet answered to sc's client, at once, and answers
// them upstream with one tasks/update. A question the client refuses or
// cannot answer ends the call with that error.
func (g *Gateway) answerUpstreamTask(ctx context.Context, sc *scope, server, id string, st json.RawMessage, answered map[string]bool) (asked bool, e *jsonrpc.Error) {
	var reqs map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	raw, _ := jsonrpc.Get(st, mcpwire.FieldInputRequests)
	if json.Unmarshal(raw, &reqs) != nil {
		return false, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's task asks for input in a form the gateway cannot read")
	}
	type answer struct {
		key string
		res json.RawMessage
		err *jsonrpc.Error
	}
	var asks []string
	for k, q := range reqs {
		if answered[k] {
			continue
		}
		if !mcpwire.IsInputRequestMethod(q.Method) || len(k) > 256 || (len(q.Params) > 0 && q.Params[0] != '{' && string(q.Params) != "null") {
			return false, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's task asks for input the gateway does not relay")
		}
		asks = append(asks, k)
	}
	if len(asks) == 0 {
		return false, nil
	}
	if len(asks) > maxUpstreamQuestions {
		return false, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server's task asks too many questions at once")
	}
	out := make(chan answer, len(asks))
	for _, k := range asks {
		q := reqs[k]
		go func() {
			res, e := (*relay)(g).HandleRequest(ctx, server, sc, &jsonrpc.Message{Method: q.Method, Params: q.Params})
			out <- answer{k, res, e}
		}()
	}
	responses := map[string]json.RawMessage{}
	var first *jsonrpc.Error
	for range asks {
		a := <-out
		if a.err != nil && first == nil {
			first = a.err
		}
		responses[a.key] = a.res
	}
	if first != nil {
		return false, first
	}
	params, _ := json.Marshal(map[string]any{"taskId": id, mcpwire.FieldInputResponses: responses})
	if _, err := g.up.Call(ctx, server, mcpwire.MethodTasksUpdate, params); err != nil {
		var e *jsonrpc.Error
		if errors.As(err, &e) {
			return false, e
		}
		return false, jsonrpc.NewError(jsonrpc.CodeInternalError, "The server could not be given the client's answers: %v", err)
	}
	for _, k := range asks {
		answered[k] = true
	}
	return true, nil
}

// upstreamPoll is the interval at which to poll an upstream task whose
// handle asks for ms milliseconds (its pollInterval or pollIntervalMs),
// within the bounds below; a second when it asks for none.
func upstreamPoll(ms []byte, ok bool) time.Duration {
	poll := time.Second
	if ok {
		if n, err := strconv.ParseFloat(string(ms), 64); err == nil && n > 0 {
			poll = time.Duration(n) * time.Millisecond
		}
	}
	return min(max(poll, minUpstreamPoll), maxUpstreamPoll)
}

// cancelUpstreamTask asks server to cancel its task (idParams: its
// taskId) when the call following it ended first, whatever became of
// ctx. A cancel that fails leaves the task running upstream until its TTL,
// which the operator is told of.
func (g *Gateway) cancelUpstreamTask(ctx context.Context, server string, idParams json.RawMessage) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := g.up.Call(cctx, server, mcpwire.MethodTasksCancel, idParams); err != nil {
		g.log.Warn("an upstream task could not be cancelled: it runs on until its TTL", "server", server, "error", err)
	}
}

// Bounds of the interval at which an upstream task is polled.
const (
	minUpstreamPoll = 20 * time.Millisecond
	maxUpstreamPoll = 5 * time.Second
)

// awaitUpstreamTask waits for the upstream task created answers names
// and returns its result, as tasks/result gives it, without the
// upstream's related-task member. Its status is reported to the
// gateway's task, if the call is one's. When ctx ends first the upstream
// task is cancelled.
func (g *Gateway) awaitUpstreamTask(ctx context.Context, server string, created json.RawMessage) (json.RawMessage, error) {
	id, ok := jsonrpc.GetString(mustGet(created, mcpwire.FieldTask), "taskId")
	if !ok || id == "" {
		// Not a task: the upstream ran the call at once.
		return created, nil
	}
	idParams, _ := json.Marshal(map[string]string{"taskId": id})
	poll := upstreamPoll(jsonrpc.GetPath(created, mcpwire.FieldTask, "pollInterval"))
	cancelUpstream := func() { g.cancelUpstreamTask(ctx, server, idParams) }
	for {
		st, err := g.up.Call(ctx, server, mcpwire.MethodTasksGet, idParams)
		if err != nil {
			if ctx.Err() != nil {
				cancelUpstream()
			}
			return nil, err
		}
		status, _ := jsonrpc.GetString(st, "status")
		msg, _ := jsonrpc.GetString(st, "statusMessage")
		tasks.Report(ctx, tasks.Status(status), msg)
		if tasks.Status(status).Terminal() || tasks.Status(status) == tasks.InputRequired {
			break
		}
		select {
		case <-ctx.Done():
			cancelUpstream()
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
	// Terminal, or asking for input: tasks/result delivers the
	// upstream's questions (relayed to the caller as a call's are) and
	// returns once the task ends.
	res, err := g.up.Call(ctx, server, mcpwire.MethodTasksResult, idParams)
	if err != nil {
		if ctx.Err() != nil {
			cancelUpstream()
		}
		return nil, err
	}
	if meta, ok := jsonrpc.Get(res, "_meta"); ok {
		if m, err := jsonrpc.Delete(meta, mcpwire.MetaKeyRelatedTask); err == nil {
			if string(m) == "{}" {
				res, _ = jsonrpc.Delete(res, "_meta")
			} else {
				res, _ = jsonrpc.Set(res, "_meta", m)
			}
		}
	}
	return res, nil
}

func mustGet(obj []byte, key string) []byte {
	v, _ := jsonrpc.Get(obj, key)
	return v
}

// The 2026-07-28 tasks extension (io.modelcontextprotocol/tasks). Task
// creation is the server's choice there: for a request that declares the
// extension, the gateway answers with a task handle when the upstream
// runs the tool as a task (relayed, mode relay) or when the server's
// tasks are mode gateway; otherwise the call is answered plainly. A task
// is its caller's (owner fingerprint) on the route, as in 2025-11-25; an
// anonymous or address-only caller, which has no session to bind it to,
// gets none. The gateway's tasks never ask for input (no inputRequests):
// a server request during such a call is refused as from a client
// without the capability.

// callWithoutTask serves, as a plain call, a tools/call that carries a
// task member the gateway does not take (a revision without tasks in the
// core protocol, a 2026-07-28 request that did not declare the
// extension). The member is taken out first: passed on, it would make
// the upstream create a task on the upstream session every caller
// shares, and hand this caller the upstream's own task id, which names
// nothing it can poll through the gateway. handled is false when there
// is no task member.
func (g *Gateway) callWithoutTask(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error, bool) {
	if _, ok := jsonrpc.Get(m.Params, mcpwire.FieldTask); !ok {
		return nil, nil, false
	}
	plain, err := jsonrpc.Delete(m.Params, mcpwire.FieldTask)
	if err != nil {
		return nil, errInvalidParams("Invalid params"), true
	}
	res, e := g.callRealTool(ctx, sc, &jsonrpc.Message{ID: m.ID, Method: m.Method, Params: plain})
	return res, e, true
}

// taskCallExtension is taskCall for a 2026-07-28 request.
func (g *Gateway) taskCallExtension(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error, bool) {
	if !mcpwire.DeclaresTasksExtension(m.Params) || !g.tasksOffered(sc) {
		return nil, nil, false
	}
	owner, ok := taskOwner(sc)
	if !ok {
		return nil, nil, false
	}
	_, ref, _, _, rerr := g.resolveName(ctx, sc, m.Params, catalog.Tools)
	if rerr != nil {
		return nil, nil, false // refused by the plain call, audited
	}
	settings := g.taskSettings(ref.server)
	var support string
	if it, found, err := g.cat.Lookup(ctx, ref.server, catalog.Tools, ref.name); err == nil && found {
		support = taskSupportOf(withTaskSupport(ctx, it.Raw))
	}
	relay := settings.Mode == config.TasksRelay && support != "" && support != mcpwire.TaskSupportForbidden &&
		!g.up.PerCall(ref.server) && g.upstreamToolTasks(ctx, ref.server)
	if !relay && settings.Mode != config.TasksGateway {
		return nil, nil, false
	}
	call := &jsonrpc.Message{ID: m.ID, Method: m.Method, Params: m.Params}
	// The task's questions go to its owner through tasks/get and
	// tasks/update (taskQuestions), as the request's capabilities allow.
	tq := newTaskQuestions()
	tsc := &scope{g: g, rt: sc.rt, out: discardSender{}, stateless: true, owner: sc.owner, logLevel: -1, caps: sc.caps, task: tq}
	makeCall := func(cctx context.Context) tasks.Outcome {
		if relay {
			cctx = withUpstreamTask(cctx, settings.TTL)
		}
		res, e := g.callRealTool(cctx, tsc, call)
		return tasks.Outcome{Result: res, Err: e}
	}
	cfg := tasks.Config{TTL: settings.TTL, MaxPerCaller: settings.MaxPerCaller}
	if settings.AnswerWithin <= 0 {
		run := func(rctx context.Context) tasks.Outcome {
			tsc.done = rctx.Done()
			tq.open(rctx)
			return makeCall(rctx)
		}
		t, err := g.taskTable.Start(ctx, owner, ref.server, cfg, 0, run, nil)
		if e := g.taskStartError(err, settings, ref.server); e != nil {
			return nil, e, true
		}
		return taskHandle(t), nil, true
	}
	return g.answerWithin(ctx, owner, ref.server, cfg, settings, tsc, makeCall)
}

// answerWithin runs a 2026-07-28 call the gateway would make a task and
// waits settings.AnswerWithin for it to end by itself: then it is
// answered plainly and no task is kept (the extension's immediate
// result). Otherwise, or at the upstream's first question, it becomes a
// task and the handle is the answer. The call starts before its task so
// that a quick one leaves nothing behind (no record, nothing counted
// against max_per_caller); a call the table then refuses a task (the
// caller holds too many) is answered plainly when it ends, never cut
// short: it may have acted already.
func (g *Gateway) answerWithin(ctx context.Context, owner tasks.Owner, server string, cfg tasks.Config, settings config.ServerTasks, tsc *scope, makeCall func(context.Context) tasks.Outcome) (json.RawMessage, *jsonrpc.Error, bool) {
	tq := tsc.task
	cctx, cancelCall := context.WithCancel(context.WithoutCancel(ctx))
	tsc.done = cctx.Done()
	outc := make(chan tasks.Outcome, 1)
	if !g.tasks.start(func() {
		defer cancelCall()
		outc <- makeCall(cctx)
	}) {
		cancelCall()
		tq.refuse()
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The gateway is shutting down"), true
	}
	plain := func(out tasks.Outcome) (json.RawMessage, *jsonrpc.Error, bool) {
		return out.Result, out.Err, true
	}
	wait := time.NewTimer(settings.AnswerWithin)
	defer wait.Stop()
	select {
	case out := <-outc:
		tq.refuse()
		return plain(out)
	case <-ctx.Done():
		// The client went away before any answer: the call is
		// cancelled (a 2026-07-28 client cancels by closing its stream).
		cancelCall()
		tq.refuse()
		return nil, jsonrpc.NewError(-32800, "Request cancelled"), true
	case <-tq.asked:
	case <-wait.C:
	}
	run := func(rctx context.Context) tasks.Outcome {
		// The task's end (cancel, TTL, shutdown) ends the call.
		stop := context.AfterFunc(rctx, cancelCall)
		defer stop()
		tq.open(rctx)
		return <-outc
	}
	t, err := g.taskTable.Start(ctx, owner, server, cfg, 0, run, nil)
	if e := g.taskStartError(err, settings, server); e != nil {
		tq.refuse()
		g.log.Debug("a call the gateway would make a task is answered when it ends", "server", server, "reason", e.Message)
		select {
		case out := <-outc:
			return plain(out)
		case <-ctx.Done():
			cancelCall()
			return nil, jsonrpc.NewError(-32800, "Request cancelled"), true
		}
	}
	if cur, _, err := g.taskTable.Peek(owner, t.ID); err == nil {
		t = cur
	}
	return taskHandle(t), nil, true
}

// taskStartError is the answer to a task the table did not start for a
// call to server, nil when it did; a refusal is counted
// (mcpgate_tasks_refused_total).
func (g *Gateway) taskStartError(err error, settings config.ServerTasks, server string) *jsonrpc.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tasks.ErrTooMany):
		g.metrics.TaskRefused(server, "max_per_caller")
		return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Too many tasks for this caller on this server (max_per_caller %d); wait for one to expire", settings.MaxPerCaller)
	case errors.Is(err, tasks.ErrStore):
		g.metrics.TaskRefused(server, "store")
		return taskStoreError()
	}
	return jsonrpc.NewError(jsonrpc.CodeInternalError, "The gateway is shutting down")
}

// taskHandle is the CreateTaskResult of the extension: the task, flat,
// with resultType task (inputRequests only ever on tasks/get).
func taskHandle(t tasks.Task) json.RawMessage {
	t.InputRequests = nil
	res, _ := jsonrpc.Set(extensionTask(t, tasks.Outcome{}), mcpwire.FieldResultType, jsonrpc.String(mcpwire.ResultTask))
	return res
}

// taskQuestions carries the questions of a 2026-07-28 task's call to its
// task (tasks.Ask): the call may ask before its task exists (answerWithin
// starts the call first), and then waits until it does, or is refused
// when it never will.
type taskQuestions struct {
	asked     chan struct{} // closed at the first question
	askedOnce sync.Once
	ready     chan struct{} // closed when run is known (nil: no task)
	readyOnce sync.Once
	run       context.Context // the task's run context, written before ready closes
}

func newTaskQuestions() *taskQuestions {
	return &taskQuestions{asked: make(chan struct{}), ready: make(chan struct{})}
}

// open makes rctx, a task's run context, where questions go.
func (tq *taskQuestions) open(rctx context.Context) {
	tq.readyOnce.Do(func() { tq.run = rctx; close(tq.ready) })
}

// refuse says no task will take questions.
func (tq *taskQuestions) refuse() {
	tq.readyOnce.Do(func() { close(tq.ready) })
}

// ask puts an upstream's request to the task's owner and waits for the
// answer tasks/update brings.
func (tq *taskQuestions) ask(ctx context.Context, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	tq.askedOnce.Do(func() { close(tq.asked) })
	select {
	case <-tq.ready:
	case <-ctx.Done():
		return nil, jsonrpc.NewError(-32800, "Request cancelled")
	}
	if tq.run == nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s refused: the call is not a task its client can answer questions of", msg.Method)
	}
	a, err := tasks.Ask(tq.run, ctx, msg.Method, msg.Params)
	switch {
	case err == nil:
		return a, nil
	case ctx.Err() != nil:
		return nil, jsonrpc.NewError(-32800, "Request cancelled")
	case errors.Is(err, tasks.ErrTooManyQuestions):
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s refused: the task has too many open questions", msg.Method)
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s was not answered: the task ended", msg.Method)
}

// extensionTask is t in the extension's shape (a DetailedTask): ttlMs and
// pollIntervalMs; a completed task carries its result (a tool error
// result included: the extension keeps failed for JSON-RPC errors), a
// failed one its error.
func extensionTask(t tasks.Task, out tasks.Outcome) json.RawMessage {
	status := t.Status
	v := map[string]any{
		"taskId": t.ID, "createdAt": t.Created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.Updated.UTC().Format(time.RFC3339Nano),
		"ttlMs":         t.TTL.Milliseconds(), "pollIntervalMs": t.PollInterval.Milliseconds(),
	}
	if t.StatusMessage != "" {
		v["statusMessage"] = t.StatusMessage
	}
	if status == tasks.InputRequired && len(t.InputRequests) > 0 {
		v["inputRequests"] = t.InputRequests
	}
	switch {
	case status == tasks.Failed && out.Err == nil && out.Result != nil:
		status = tasks.Completed
		v["result"] = out.Result
		delete(v, "statusMessage")
	case status == tasks.Completed:
		v["result"] = out.Result
	case status == tasks.Failed && out.Err != nil:
		v["error"] = out.Err
	case status == tasks.Failed:
		v["error"] = jsonrpc.NewError(jsonrpc.CodeInternalError, "%s", t.StatusMessage)
	}
	v["status"] = status
	b, _ := json.Marshal(v)
	return b
}

// taskMethodExtension answers tasks/get, tasks/update and tasks/cancel of
// a 2026-07-28 request for the caller's own tasks. A request that does not
// declare the extension is told to (-32021, SEP-2575's missing required
// capability).
func (g *Gateway) taskMethodExtension(sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	if !mcpwire.DeclaresTasksExtension(m.Params) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{
			"extensions": map[string]any{mcpwire.ExtensionTasks: map[string]any{}}}})
		return nil, &jsonrpc.Error{Code: mcpwire.CodeMissingRequiredClientCapability,
			Message: "Missing required client capability: extension " + mcpwire.ExtensionTasks, Data: data}
	}
	owner, ok := taskOwner(sc)
	id, _ := jsonrpc.GetString(m.Params, "taskId")
	if !ok || id == "" {
		return nil, errTaskNotFound()
	}
	switch m.Method {
	case mcpwire.MethodTasksGet:
		t, out, err := g.taskTable.Peek(owner, id)
		if errors.Is(err, tasks.ErrStore) {
			return nil, taskStoreError()
		}
		if err != nil {
			return nil, errTaskNotFound()
		}
		return extensionTask(t, out), nil
	case mcpwire.MethodTasksUpdate:
		responses, has := jsonrpc.Get(m.Params, mcpwire.FieldInputResponses)
		if !has {
			return nil, errInvalidParams("Invalid params: tasks/update needs inputResponses")
		}
		err := g.taskTable.Answer(owner, id, responses)
		switch {
		case errors.Is(err, tasks.ErrAnswer):
			return nil, errInvalidParams("Invalid params: %v", err)
		case errors.Is(err, tasks.ErrStore):
			return nil, taskStoreError()
		case err != nil:
			return nil, errTaskNotFound()
		}
		return json.RawMessage(`{}`), nil
	case mcpwire.MethodTasksCancel:
		_, err := g.taskTable.Cancel(owner, id)
		switch {
		case errors.Is(err, tasks.ErrTerminal):
			// Idempotent: the same acknowledgement as for a running
			// task (the extension keeps -32602 for unknown ids).
		case errors.Is(err, tasks.ErrStore):
			return nil, taskStoreError()
		case err != nil:
			return nil, errTaskNotFound()
		}
		return json.RawMessage(`{}`), nil
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)
}

// newTaskTable is the table of the tasks this gateway runs. Its ids are
// sealed under keys derived from fleet.session_keys when there are any, so
// every replica (and this one after a restart) opens them; with a store
// as well, the tasks are kept there (tasks.Shared) and any replica answers
// for any task. Otherwise the key is this process's and the tasks live in
// its memory alone: nothing else could open their ids.
func (g *Gateway) newTaskTable(cfg *config.Config, o Options) *tasks.Table {
	var keys, sealKeys [][]byte
	if g.ring != nil && cfg.Fleet != nil {
		if roots, err := cfg.Fleet.SessionKeyBytes(); err == nil {
			keys, _ = fleet.TaskIDKeys(roots)
			sealKeys, _ = fleet.TaskResultKeys(roots) // seal what the store keeps of each call
		}
	}
	// Every task run here that ends is counted (mcpgate_tasks_ended_total).
	onEnd := func(server, outcome string) { g.metrics.TaskEnded(server, outcome) }
	if len(keys) == 0 || o.Tasks == nil {
		return tasks.NewTable(tasks.Options{Keys: keys, Now: o.Now, OnEnd: onEnd})
	}
	sh := &tasks.Shared{Store: o.Tasks, Replica: g.instance, Logger: g.log, SealKeys: sealKeys}
	switch {
	case g.peers != nil:
		// The registry says which replicas run; a registry that cannot
		// be read says they all do (Peers.Alive).
		sh.Alive = g.peers.Alive
	case o.Replicas != nil || cfg.Store.Driver == config.StorePostgres:
		// Replicas that may share the store but are not in the
		// registry (no fleet.advertise): nobody can tell a stopped
		// replica from a running one, so no task is failed for it (a
		// task whose replica died stays working until its TTL).
		g.log.Warn("the replica registry is not in use (fleet.advertise and the redis state driver): a task whose replica stops stays working until its TTL")
		sh.Alive = func(context.Context, string) bool { return true }
	default:
		// One process on its own SQLite file: a task of another
		// replica id is this store's previous process's, which stopped.
	}
	return tasks.NewTable(tasks.Options{Keys: keys, Now: o.Now, Shared: sh, OnEnd: onEnd})
}

// taskStoreError is the answer when the task store cannot say what became
// of a task: unknown is not "not found".
func taskStoreError() *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeInternalError, "The task store is unavailable; try again")
}

// taskOut carries what a 2025-11-25 gateway task's call sends its client
// (server-initiated requests of its input_required phase, progress, log
// messages): on the stream of a tasks/result of the creating session
// that waits on the task, the spec's side channel, when there is one;
// otherwise, or when that stream is gone, on the session's own stream.
// Requests carry the task in _meta (io.modelcontextprotocol/related-task),
// as the spec asks of every message of a task.
type taskOut struct {
	sess *session

	mu      sync.Mutex // mu guards the fields below
	id      string
	waiting []sender // streams of tasks/result requests waiting, newest last
}

func (o *taskOut) setID(id string) {
	o.mu.Lock()
	o.id = id
	o.mu.Unlock()
}

// attach makes s, a tasks/result request's stream, where messages go
// until the returned function is called.
func (o *taskOut) attach(s sender) (detach func()) {
	o.mu.Lock()
	o.waiting = append(o.waiting, s)
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		for i, w := range o.waiting {
			if w == s {
				o.waiting = append(o.waiting[:i], o.waiting[i+1:]...)
				return
			}
		}
	}
}

func (o *taskOut) send(msg *jsonrpc.Message) error {
	o.mu.Lock()
	id := o.id
	var s sender
	if n := len(o.waiting); n > 0 {
		s = o.waiting[n-1]
	}
	o.mu.Unlock()
	if id != "" && msg.IsRequest() {
		related, _ := json.Marshal(map[string]string{"taskId": id})
		params := msg.Params
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{}`)
		}
		if p, err := jsonrpc.SetPath(params, related, mcpwire.FieldMeta, mcpwire.MetaKeyRelatedTask); err == nil {
			msg = jsonrpc.NewRequest(msg.ID, msg.Method, p)
		}
	}
	if s != nil && s.send(msg) == nil {
		return nil
	}
	return sessionOut{o.sess}.send(msg)
}
