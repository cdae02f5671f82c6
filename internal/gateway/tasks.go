package gateway

// MCP tasks (2025-11-25, experimental) run by the gateway itself: a
// handshake-era client's task-augmented tools/call is answered at once
// with a task, and the call runs in the background through every stage a
// plain call passes (policy, budget, guardrails, upstream, cost, audit:
// the audit record is written and the cost charged once, when the call
// ends). The task table (internal/tasks) owns the tasks; this file is the
// glue: which calls become tasks, who owns them, and the tasks/* methods.
//
// A task is its creator's: the caller's owner fingerprint on the route
// it was made on (and, for a caller the gateway cannot tell apart from
// others, its session). Its id is sealed to that owner, so another
// caller's tasks/get, tasks/result, tasks/cancel with it is answered as
// for an id that never existed, and tasks/list shows a caller its own
// tasks alone. Messages of the running call (progress, server-initiated
// requests) go to the session that created the task, as for a plain
// call of that session.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// taskSettings is server's tasks block (or the defaults).
func (g *Gateway) taskSettings(server string) config.ServerTasks {
	return g.current().cfg.Servers[server].TaskSettings()
}

// tasksOffered says whether sc's client is offered tasks on its route: a
// 2025-11-25 session (the revision that has them in the core protocol),
// on a route with a server whose tasks are not off. /mcp/proxy serves
// tools alone.
func (g *Gateway) tasksOffered(sc *scope) bool {
	if sc.stateless || sc.sess == nil || sc.rt.proxy || sc.sess.Rev() != mcpwire.Rev20251125 {
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

// taskToolSupport is what a tool of server offers a task-capable client:
// its execution.taskSupport as the upstream lists it, or, when the
// upstream says nothing, "optional" (the gateway runs the call); nothing
// when the server's tasks are off.
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
		return raw
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
// as a task; handled is false when the call is not one it takes (a
// 2026-07-28 request, a client not offered tasks): dispatch then serves
// it as before.
func (g *Gateway) taskCall(ctx context.Context, sc *scope, m *jsonrpc.Message) (res json.RawMessage, e *jsonrpc.Error, handled bool) {
	ttl, augmented, e := taskTTL(m.Params)
	if !augmented || !g.tasksOffered(sc) {
		return nil, nil, false
	}
	if e != nil {
		return nil, e, true
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
	if it, found, err := g.cat.Lookup(ctx, ref.server, catalog.Tools, ref.name); err == nil && found {
		if s, _ := jsonrpc.GetPath([]byte(it.Raw), "execution", "taskSupport"); string(s) == `"`+mcpwire.TaskSupportForbidden+`"` {
			return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Tool %s cannot be called as a task", name), true
		}
	}

	sess := sc.sess
	tsc := &scope{g: g, sess: sess, rt: sc.rt, out: sessionOut{sess}, caps: sc.caps, owner: sc.owner, logLevel: sc.logLevel}
	run := func(rctx context.Context) tasks.Outcome {
		// Questions the call asks of the client are moot once the task
		// ends.
		tsc.done = rctx.Done()
		res, e := g.callRealTool(rctx, tsc, call)
		return tasks.Outcome{Result: res, Err: e}
	}
	notify := func(t tasks.Task) {
		// Only the session that made the task hears of it; others of
		// the same caller poll.
		_ = sessionOut{sess}.send(jsonrpc.NewNotification(mcpwire.NotifyTasksStatus, t.JSON()))
	}
	t, err := g.taskTable.Start(ctx, owner, ref.server, tasks.Config{TTL: settings.TTL, MaxPerCaller: settings.MaxPerCaller}, ttl, run, notify)
	switch {
	case errors.Is(err, tasks.ErrTooMany):
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Too many tasks for this caller on this server (max_per_caller %d); wait for one to expire", settings.MaxPerCaller), true
	case err != nil:
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The gateway is shutting down"), true
	}
	return append(append([]byte(`{"task":`), t.JSON()...), '}'), nil, true
}

// errTaskNotFound is the answer for any task id the caller does not own,
// whether it exists or not.
func errTaskNotFound() *jsonrpc.Error {
	return errInvalidParams("Failed to retrieve task: Task not found")
}

// taskMethod answers tasks/get, tasks/result, tasks/list and
// tasks/cancel for the caller's own tasks.
func (g *Gateway) taskMethod(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	if !g.tasksOffered(sc) {
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)
	}
	owner, ok := taskOwner(sc)
	if m.Method == mcpwire.MethodTasksList {
		if !ok {
			return []byte(`{"tasks":[]}`), nil
		}
		cursor, _ := jsonrpc.GetString(m.Params, "cursor")
		list, next, err := g.taskTable.List(owner, cursor)
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
		if err != nil {
			return nil, errTaskNotFound()
		}
		return t.JSON(), nil
	}
	// tasks/result: waits for the end of the call.
	t, out, err := g.taskTable.Result(ctx, owner, id)
	switch {
	case errors.Is(err, tasks.ErrNotFound):
		return nil, errTaskNotFound()
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
