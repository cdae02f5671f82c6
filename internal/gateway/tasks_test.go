package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// taskUpstream is a go-sdk server (v1.8.0 has no tasks: an upstream the
// gateway bridges) whose tool slow waits for release, or for its call's
// cancellation, which it reports.
type taskUpstream struct {
	release   chan struct{}
	cancelled chan string
	started   chan string // a slow call's text once it runs (dropped when full)
}

func startTaskUpstream(t *testing.T) (*taskUpstream, *config.Server) {
	u := &taskUpstream{release: make(chan struct{}), cancelled: make(chan string, 8), started: make(chan string, 16)}
	srv := mcp.NewServer(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		select {
		case u.started <- a.Text:
		default:
		}
		select {
		case <-u.release:
			return textResult("slow:" + a.Text), nil, nil
		case <-ctx.Done():
			u.cancelled <- a.Text
			return nil, nil, ctx.Err()
		}
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "broken"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it broke"}}}, nil, nil
	})
	return u, httpServer(serveSDK(t, srv).URL)
}

// taskClient is one raw 2025-11-25 session of a key on a route.
type taskClient struct {
	t   *testing.T
	url string
	hdr map[string]string
}

func newTaskClient(t *testing.T, url, key, rev string) (*taskClient, json.RawMessage) {
	t.Helper()
	return newTaskClientCaps(t, url, key, rev, `{}`)
}

func newTaskClientCaps(t *testing.T, url, key, rev, caps string) (*taskClient, json.RawMessage) {
	t.Helper()
	hdr := map[string]string{callers.HeaderAPIKey: key}
	_, h, body := rpc(t, url, hdr, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+rev+`","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"0"}}}`)
	sid := h.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s", body)
	}
	hdr["Mcp-Session-Id"] = sid
	hdr["MCP-Protocol-Version"] = rev
	rpc(t, url, hdr, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var init struct {
		Result struct {
			Capabilities json.RawMessage `json:"capabilities"`
		} `json:"result"`
	}
	_ = json.Unmarshal(body, &init)
	return &taskClient{t: t, url: url, hdr: hdr}, init.Result.Capabilities
}

type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (c *taskClient) call(method string, params any) rpcReply {
	c.t.Helper()
	p, _ := json.Marshal(params)
	_, _, body := rpc(c.t, c.url, c.hdr, fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":%q,"params":%s}`, method, p))
	var r rpcReply
	if err := json.Unmarshal(body, &r); err != nil {
		c.t.Fatalf("%s: %v: %s", method, err, body)
	}
	return r
}

// startTask makes a task-augmented call and returns its task.
func (c *taskClient) startTask(tool, text string) map[string]any {
	c.t.Helper()
	r := c.call("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"text": text}, "task": map[string]any{"ttl": 60000}})
	var cr struct {
		Task map[string]any `json:"task"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &cr) != nil || cr.Task["taskId"] == nil {
		c.t.Fatalf("task-augmented call: %+v %s", r.Error, r.Result)
	}
	return cr.Task
}

func (c *taskClient) status(id string) string {
	c.t.Helper()
	r := c.call("tasks/get", map[string]string{"taskId": id})
	var task map[string]any
	if r.Error != nil || json.Unmarshal(r.Result, &task) != nil {
		c.t.Fatalf("tasks/get: %+v %s", r.Error, r.Result)
	}
	return task["status"].(string)
}

func wantNotFound(t *testing.T, what string, r rpcReply) {
	t.Helper()
	if r.Error == nil || r.Error.Code != -32602 || r.Error.Message != "Failed to retrieve task: Task not found" {
		t.Errorf("%s: want task not found, got %+v %s", what, r.Error, r.Result)
	}
}

// TestGatewayRunTasks: a task-capable client calls a tool of an upstream
// without tasks; the gateway runs it as a task, polled, listed, fetched
// and cancelled by its owner alone, from any of its sessions on the
// route; the call is audited once, when it ends.
func TestGatewayRunTasks(t *testing.T) {
	up, srv := startTaskUpstream(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	bob := keys.add(t, store.Key{Alias: "bob"})
	aud := &memAudit{}
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: aud,
		Config: &config.Config{Servers: map[string]*config.Server{"plain": srv}}})
	url := gw.URL + "/mcp/plain"

	a, caps := newTaskClient(t, url, alice, "2025-11-25")
	if !strings.Contains(string(caps), `"tasks":{"cancel":{},"list":{},"requests":{"tools":{"call":{}}}}`) {
		t.Fatalf("capabilities: %s", caps)
	}
	if r := a.call("tools/list", map[string]any{}); !strings.Contains(string(r.Result), `"execution":{"taskSupport":"optional"}`) {
		t.Fatalf("tools/list: %s", r.Result)
	}
	b, _ := newTaskClient(t, url, bob, "2025-11-25")

	task := a.startTask("slow", "one")
	id := task["taskId"].(string)
	if task["status"] != "working" || task["ttl"].(float64) != 60000 || !strings.HasPrefix(id, tasks.IDPrefix) {
		t.Fatalf("created %v", task)
	}
	if s := a.status(id); s != "working" {
		t.Fatalf("status %s", s)
	}
	if n := len(aud.records()); n != 0 {
		t.Fatalf("audited before the call ended: %d", n)
	}

	// Bob can neither see, poll, fetch nor cancel it; an altered id
	// names nothing, for anyone.
	altered := id[:len(id)-2] + map[bool]string{true: "AA", false: "AB"}[!strings.HasSuffix(id, "AA")]
	for _, tid := range []string{id, altered} {
		wantNotFound(t, "bob get", b.call("tasks/get", map[string]string{"taskId": tid}))
		wantNotFound(t, "bob result", b.call("tasks/result", map[string]string{"taskId": tid}))
		wantNotFound(t, "bob cancel", b.call("tasks/cancel", map[string]string{"taskId": tid}))
	}
	wantNotFound(t, "alice altered", a.call("tasks/get", map[string]string{"taskId": altered}))
	if r := b.call("tasks/list", map[string]any{}); string(r.Result) != `{"tasks":[]}` {
		t.Errorf("bob lists %s", r.Result)
	}
	// The same task on another route of the same caller: not there.
	a2, _ := newTaskClient(t, gw.URL+"/mcp", alice, "2025-11-25")
	wantNotFound(t, "alice on /mcp", a2.call("tasks/get", map[string]string{"taskId": id}))
	if s := a.status(id); s != "working" {
		t.Fatalf("after bob: %s", s)
	}

	// Alice polls from a new session of hers: the first one is gone.
	again, _ := newTaskClient(t, url, alice, "2025-11-25")
	del, _ := http.NewRequest(http.MethodDelete, url, nil)
	for k, v := range a.hdr {
		del.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(del); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE the first session: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	a = again
	if r := again.call("tasks/list", map[string]any{}); !strings.Contains(string(r.Result), id) {
		t.Fatalf("alice lists %s", r.Result)
	}
	close(up.release)
	r := again.call("tasks/result", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"slow:one"`) ||
		!strings.Contains(string(r.Result), `"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}`) {
		t.Fatalf("tasks/result: %+v %s", r.Error, r.Result)
	}
	if s := a.status(id); s != "completed" {
		t.Fatalf("status after result %s", s)
	}
	waitFor(t, "the audit record", func() bool { return len(aud.records()) == 1 })
	if rec := aud.records()[0]; rec.Tool != "slow" || rec.Server != "plain" || rec.Outcome != store.OutcomeOK {
		t.Errorf("audit %+v", rec)
	}
	r = a.call("tasks/cancel", map[string]string{"taskId": id})
	if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "'completed'") {
		t.Errorf("cancel of a completed task: %+v", r.Error)
	}

	// A tool error result fails the task; tasks/result still gives it.
	bt := a.startTask("broken", "x")
	r = a.call("tasks/result", map[string]string{"taskId": bt["taskId"].(string)})
	if r.Error != nil || !strings.Contains(string(r.Result), `"isError":true`) {
		t.Errorf("broken result: %+v %s", r.Error, r.Result)
	}
	if s := a.status(bt["taskId"].(string)); s != "failed" {
		t.Errorf("broken status %s", s)
	}
}

// TestGatewayRunTaskCancel: tasks/cancel cancels the upstream call, and
// the task stays cancelled.
func TestGatewayRunTaskCancel(t *testing.T) {
	up, srv := startTaskUpstream(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	aud := &memAudit{}
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: aud,
		Config: &config.Config{Servers: map[string]*config.Server{"plain": srv}}})
	a, _ := newTaskClient(t, gw.URL+"/mcp", alice, "2025-11-25")
	id := a.startTask("plain__slow", "two")["taskId"].(string)
	var wg sync.WaitGroup
	var res rpcReply
	wg.Go(func() { res = a.call("tasks/result", map[string]string{"taskId": id}) })
	time.Sleep(50 * time.Millisecond)
	r := a.call("tasks/cancel", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), `"status":"cancelled"`) {
		t.Fatalf("cancel: %+v %s", r.Error, r.Result)
	}
	select {
	case got := <-up.cancelled:
		if got != "two" {
			t.Fatalf("cancelled %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
	wg.Wait()
	if res.Error == nil || !strings.Contains(res.Error.Message, "cancelled") {
		t.Errorf("waiting tasks/result: %+v %s", res.Error, res.Result)
	}
	if s := a.status(id); s != "cancelled" {
		t.Errorf("status %s", s)
	}
	// The cancelled call has its one audit record.
	waitFor(t, "the audit record", func() bool { return len(aud.records()) == 1 })
	if rec := aud.records()[0]; rec.Tool != "slow" || rec.Outcome == store.OutcomeOK {
		t.Errorf("audit of the cancelled call %+v", rec)
	}
}

// TestTasksPerEraAndMode: tasks are offered to 2025-11-25 sessions only,
// and not for a server whose tasks are off; max_per_caller holds.
func TestTasksPerEraAndMode(t *testing.T) {
	up, srv := startTaskUpstream(t)
	defer close(up.release)
	srv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 1}
	_, off := startTaskUpstream(t)
	off.Tasks = &config.ServerTasks{Mode: config.TasksOff, TTL: time.Hour, MaxPerCaller: 1}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"plain": srv, "off": off}}})

	old, caps := newTaskClient(t, gw.URL+"/mcp", alice, "2025-06-18")
	if strings.Contains(string(caps), "tasks") {
		t.Errorf("2025-06-18 capabilities: %s", caps)
	}
	if r := old.call("tasks/list", map[string]any{}); r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("2025-06-18 tasks/list: %+v", r.Error)
	}
	if r := old.call("tools/list", map[string]any{}); strings.Contains(string(r.Result), "taskSupport") {
		t.Errorf("2025-06-18 tools/list: %s", r.Result)
	}

	offOnly, caps := newTaskClient(t, gw.URL+"/mcp/off", alice, "2025-11-25")
	if strings.Contains(string(caps), "tasks") {
		t.Errorf("off route capabilities: %s", caps)
	}
	if r := offOnly.call("tools/call", map[string]any{"name": "slow", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}}); r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("task call on a route without tasks: %+v %s", r.Error, r.Result)
	}

	a, caps := newTaskClient(t, gw.URL+"/mcp", alice, "2025-11-25")
	if !strings.Contains(string(caps), `"tasks"`) {
		t.Errorf("mixed route capabilities: %s", caps)
	}
	r := a.call("tools/list", map[string]any{})
	var list struct {
		Tools []struct {
			Name      string         `json:"name"`
			Execution map[string]any `json:"execution"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Result, &list)
	for _, tl := range list.Tools {
		offered := tl.Execution["taskSupport"] == "optional"
		if offered != strings.HasPrefix(tl.Name, "plain__") {
			t.Errorf("tool %s execution %v", tl.Name, tl.Execution)
		}
	}
	r = a.call("tools/call", map[string]any{"name": "off__slow", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
	if r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("task call to an off server: %+v %s", r.Error, r.Result)
	}
	a.startTask("plain__slow", "first")
	r = a.call("tools/call", map[string]any{"name": "plain__slow", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
	if r.Error == nil || !strings.Contains(r.Error.Message, "max_per_caller 1") {
		t.Errorf("second task past max_per_caller: %+v %s", r.Error, r.Result)
	}
	r = a.call("tools/call", map[string]any{"name": "plain__slow", "arguments": map[string]any{"text": "x"}, "task": "soon"})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("task not an object: %+v", r.Error)
	}
	// An unknown tool is refused at once, as a plain call is.
	r = a.call("tools/call", map[string]any{"name": "plain__nope", "arguments": map[string]any{}, "task": map[string]any{}})
	if r.Error == nil || !strings.Contains(r.Error.Message, "Unknown tool") {
		t.Errorf("unknown tool: %+v %s", r.Error, r.Result)
	}
}

// TestTaskBudgetChargedOnce: a task's call is charged once, when it
// ends: a budget of two calls runs two tasks, and the third task fails
// with the budget's refusal (its call never reaches the upstream).
func TestTaskBudgetChargedOnce(t *testing.T) {
	up, srv := startTaskUpstream(t)
	close(up.release)
	srv.Tools = &config.ToolPolicy{Costs: map[string]float64{"*": 1}}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice", BudgetAmount: 2, BudgetPeriod: store.BudgetDay})
	aud := &memAudit{}
	usage := func(context.Context, string, time.Time) (float64, error) { return 0, nil }
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Usage: usage, Audit: aud,
		Config: &config.Config{Servers: map[string]*config.Server{"plain": srv}}})
	a, _ := newTaskClient(t, gw.URL+"/mcp/plain", alice, "2025-11-25")
	for i := range 2 {
		id := a.startTask("slow", fmt.Sprint(i))["taskId"].(string)
		if r := a.call("tasks/result", map[string]string{"taskId": id}); r.Error != nil {
			t.Fatalf("task %d: %+v", i, r.Error)
		}
	}
	id := a.startTask("slow", "third")["taskId"].(string)
	r := a.call("tasks/result", map[string]string{"taskId": id})
	if r.Error == nil || !strings.Contains(r.Error.Message, "Budget exceeded") {
		t.Fatalf("third task: %+v %s", r.Error, r.Result)
	}
	if s := a.status(id); s != "failed" {
		t.Errorf("third status %s", s)
	}
	waitFor(t, "three audit records", func() bool { return len(aud.records()) == 3 })
	var costs float64
	for _, rec := range aud.records() {
		costs += rec.Cost
	}
	if costs != 2 {
		t.Errorf("audited cost %v, want 2", costs)
	}
}

// TestTaskStatusNotification: the end of a task is told to the session
// that made it (notifications/tasks/status on its GET stream), and to no
// other session of the same caller.
func TestTaskStatusNotification(t *testing.T) {
	up, srv := startTaskUpstream(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"plain": srv}}})
	url := gw.URL + "/mcp/plain"
	a, _ := newTaskClient(t, url, alice, "2025-11-25")
	other, _ := newTaskClient(t, url, alice, "2025-11-25")
	aMsgs, otherMsgs := a.stream(), other.stream()
	id := a.startTask("slow", "n")["taskId"].(string)
	close(up.release)
	select {
	case m := <-aMsgs:
		if !strings.Contains(m, `"method":"notifications/tasks/status"`) || !strings.Contains(m, id) || !strings.Contains(m, `"status":"completed"`) {
			t.Fatalf("notification %s", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tasks/status")
	}
	select {
	case m := <-otherMsgs:
		t.Fatalf("another session heard %s", m)
	case <-time.After(200 * time.Millisecond):
	}
}

// stream opens the session's GET stream; its messages arrive on the
// channel until the test ends.
func (c *taskClient) stream() <-chan string {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range c.hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET stream: %v %v", err, resp)
	}
	out := make(chan string, 16)
	done := make(chan struct{})
	c.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer resp.Body.Close()
		r := jsonrpc.NewSSEReader(resp.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > 0 {
				select {
				case out <- string(ev.Data):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// TestTaskQuestionsReachOnlyTheOwner: an upstream's elicitation during a
// gateway-run task goes to the session that made the task; another
// session of the same caller cannot answer it (refused as an unknown
// id); the owner's answer completes the task.
func TestTaskQuestionsReachOnlyTheOwner(t *testing.T) {
	up := startSDKUpstream(t, "sdk")
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"sdk": httpServer(up.http.URL)}}})
	url := gw.URL + "/mcp/sdk"
	const caps = `{"elicitation":{"form":{}}}`
	a, _ := newTaskClientCaps(t, url, alice, "2025-11-25", caps)
	other, _ := newTaskClientCaps(t, url, alice, "2025-11-25", caps)
	aMsgs, otherMsgs := a.stream(), other.stream()
	id := a.startTask("ask", "your name?")["taskId"].(string)
	var ask struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	for ask.Method != "elicitation/create" {
		select {
		case m := <-aMsgs:
			// The task's status (input_required) may come first.
			if err := json.Unmarshal([]byte(m), &ask); err != nil || (ask.Method != "elicitation/create" && ask.Method != "notifications/tasks/status") {
				t.Fatalf("owner's stream: %s", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the question did not reach the task's session")
		}
	}
	if s := a.status(id); s != "input_required" {
		t.Errorf("status while asking %s", s)
	}
	answer := `{"jsonrpc":"2.0","id":` + string(ask.ID) + `,"result":{"action":"accept","content":{"name":"Ann"}}}`
	if code, _, body := rpc(t, url, other.hdr, answer); code != http.StatusBadRequest {
		t.Fatalf("another session answered: %d %s", code, body)
	}
	if s := a.status(id); s != "input_required" {
		t.Fatalf("status after the foreign answer %s", s)
	}
	if code, _, body := rpc(t, url, a.hdr, answer); code != http.StatusAccepted {
		t.Fatalf("owner's answer: %d %s", code, body)
	}
	r := a.call("tasks/result", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"accept:Ann"`) {
		t.Fatalf("result %+v %s", r.Error, r.Result)
	}
	select {
	case m := <-otherMsgs:
		t.Fatalf("another session heard %s", m)
	default:
	}
}

// FuzzTaskTTL: the task member of a tools/call is read without panic;
// a ttl is never negative; what is not an object is refused.
func FuzzTaskTTL(f *testing.F) {
	for _, s := range []string{`{"name":"x","task":{}}`, `{"task":{"ttl":60000}}`, `{"task":{"ttl":-1}}`, `{"task":"soon"}`,
		`{"task":null}`, `{"task":{"ttl":1e300}}`, `{"task":{"ttl":"1"}}`, `{}`, `{"task":[]}`, `{"task":{"ttl":0.5}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, params string) {
		ttl, augmented, e := taskTTL(json.RawMessage(params))
		if ttl < 0 {
			t.Fatalf("negative ttl %v", ttl)
		}
		if !augmented && e != nil {
			t.Fatalf("refused a call without a task: %v", e)
		}
		if e != nil && strings.Contains(e.Message, params) && len(params) > 8 {
			t.Fatalf("the error echoes the params: %v", e)
		}
	})
}

// TestTaskQuestionsOnTasksResult: while the session that made a
// 2025-11-25 task waits on its tasks/result, the task's questions go on
// that request's stream (the spec's side channel for input_required),
// not the session's GET stream, each carrying the task in _meta
// (io.modelcontextprotocol/related-task); the answer completes the task
// and the same stream ends with its result.
func TestTaskQuestionsOnTasksResult(t *testing.T) {
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "later", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ask_later"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: a.Text, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		return textResult(fmt.Sprintf("%s:%v", res.Action, res.Content["name"])), nil, nil
	})
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"later": httpServer(serveSDK(t, srv).URL)}}})
	url := gw.URL + "/mcp/later"
	a, _ := newTaskClientCaps(t, url, alice, "2025-11-25", `{"elicitation":{"form":{}}}`)
	getMsgs := a.stream()
	id := a.startTask("ask_later", "name?")["taskId"].(string)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":"r","method":"tasks/result","params":{"taskId":"`+id+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range a.hdr {
		req.Header.Set(k, v)
	}
	events := make(chan string, 8)
	go func() {
		defer close(events)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		r := jsonrpc.NewSSEReader(resp.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > 0 {
				events <- string(ev.Data)
			}
		}
	}()
	waitFor(t, "tasks/result to wait on the task", func() bool {
		n := 0
		g.taskOuts.each(func(o *taskOut) {
			o.mu.Lock()
			n += len(o.waiting)
			o.mu.Unlock()
		})
		return n == 1
	})
	close(release)

	var ask struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]struct {
				TaskID string `json:"taskId"`
			} `json:"_meta"`
		} `json:"params"`
	}
	select {
	case ev := <-events:
		if err := json.Unmarshal([]byte(ev), &ask); err != nil || ask.Method != "elicitation/create" {
			t.Fatalf("tasks/result stream: %s", ev)
		}
	case <-ctx.Done():
		t.Fatal("no question on the tasks/result stream")
	}
	if got := ask.Params.Meta["io.modelcontextprotocol/related-task"].TaskID; got != id {
		t.Errorf("related-task %q, want %q", got, id)
	}
	answer := `{"jsonrpc":"2.0","id":` + string(ask.ID) + `,"result":{"action":"accept","content":{"name":"Ann"}}}`
	if code, _, body := rpc(t, url, a.hdr, answer); code != http.StatusAccepted {
		t.Fatalf("answer: %d %s", code, body)
	}
	var final string
	for ev := range events {
		final = ev
	}
	if !strings.Contains(final, `"text":"accept:Ann"`) || !strings.Contains(final, `"id":"r"`) {
		t.Fatalf("tasks/result ended with %s", final)
	}
	for {
		select {
		case m := <-getMsgs:
			if strings.Contains(m, `"method":"elicitation/create"`) {
				t.Fatalf("the question also went on the GET stream: %s", m)
			}
		default:
			return
		}
	}
}

// TestTaskQuestionsNotOnAnotherSessionsTasksResult: another session of the
// same caller may wait on the task's tasks/result (2025-11-25 lets a
// caller fetch its tasks from any of its sessions), but the task's
// questions never go on that stream: only the creating session may answer
// them (the taskOuts entry is that session's party). They go on the
// creating session's GET stream.
func TestTaskQuestionsNotOnAnotherSessionsTasksResult(t *testing.T) {
	release := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "later", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ask_later"}, func(ctx context.Context, req *mcp.CallToolRequest, a textArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: a.Text, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		return textResult(fmt.Sprintf("%s:%v", res.Action, res.Content["name"])), nil, nil
	})
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"later": httpServer(serveSDK(t, srv).URL)}}})
	url := gw.URL + "/mcp/later"
	const caps = `{"elicitation":{"form":{}}}`
	a, _ := newTaskClientCaps(t, url, alice, "2025-11-25", caps)
	other, _ := newTaskClientCaps(t, url, alice, "2025-11-25", caps)
	aMsgs := a.stream()
	id := a.startTask("ask_later", "name?")["taskId"].(string)

	otherResult := make(chan rpcReply, 1)
	go func() { otherResult <- other.call("tasks/result", map[string]string{"taskId": id}) }()
	// The request has no observable wait state of its own: give it time
	// to reach the point where it would attach.
	time.Sleep(300 * time.Millisecond)
	n := 0
	g.taskOuts.each(func(o *taskOut) {
		o.mu.Lock()
		n += len(o.waiting)
		o.mu.Unlock()
	})
	if n != 0 {
		t.Fatalf("another session's tasks/result was made the task's side channel (%d)", n)
	}
	close(release)
	var ask struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	for ask.Method != "elicitation/create" {
		select {
		case m := <-aMsgs:
			_ = json.Unmarshal([]byte(m), &ask)
		case <-time.After(10 * time.Second):
			t.Fatal("the question did not reach the creating session")
		}
	}
	answer := `{"jsonrpc":"2.0","id":` + string(ask.ID) + `,"result":{"action":"accept","content":{"name":"Ann"}}}`
	if code, _, body := rpc(t, url, other.hdr, answer); code != http.StatusBadRequest {
		t.Fatalf("the other session answered: %d %s", code, body)
	}
	if code, _, body := rpc(t, url, a.hdr, answer); code != http.StatusAccepted {
		t.Fatalf("owner's answer: %d %s", code, body)
	}
	select {
	case r := <-otherResult:
		if r.Error != nil || !strings.Contains(string(r.Result), `"text":"accept:Ann"`) {
			t.Fatalf("the other session's tasks/result: %+v %s", r.Error, r.Result)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other session's tasks/result never ended")
	}
}
