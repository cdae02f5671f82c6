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
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// taskServer is an upstream that runs tasks (2025-11-25), on raw bytes:
// job may run as a task, must only as one (its tasks end at once),
// plain never. A job task ends when released.
type taskServer struct {
	mu        sync.Mutex
	n         int
	tasks     map[string]*upTask
	calls     []string // tools/call as "name task=<task member>"
	released  bool
	cancelled chan string
}

type upTask struct {
	text, status string
}

func startTaskServer(t *testing.T) (*taskServer, *config.Server) {
	s := &taskServer{tasks: map[string]*upTask{}, cancelled: make(chan string, 4)}
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		s.mu.Lock()
		defer s.mu.Unlock()
		id, _ := jsonrpc.GetString(m.Params, "taskId")
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "tasks-1")
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"tasky","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"job","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}},` +
				`{"name":"must","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},` +
				`{"name":"plain","inputSchema":{"type":"object"}},` +
				`{"name":"nope","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"}}]}`
		case "tools/call":
			name, _ := jsonrpc.GetString(m.Params, "name")
			text, _ := jsonrpc.GetString(mustGet(m.Params, "arguments"), "text")
			task, augmented := jsonrpc.Get(m.Params, "task")
			s.calls = append(s.calls, name+" task="+string(task))
			if !augmented {
				if name == "must" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"must runs as a task"}}`, m.ID.Raw())
					return ""
				}
				return `{"content":[{"type":"text","text":"now:` + text + `"}]}`
			}
			s.n++
			tid := fmt.Sprintf("up-%d", s.n)
			st := &upTask{text: text, status: "working"}
			if name == "must" {
				st.status = "completed"
			}
			s.tasks[tid] = st
			return `{"task":{"taskId":"` + tid + `","status":"working","createdAt":"2025-11-25T10:00:00Z","lastUpdatedAt":"2025-11-25T10:00:00Z","ttl":60000,"pollInterval":20}}`
		case "tasks/get", "tasks/result", "tasks/cancel":
			st, ok := s.tasks[id]
			if !ok {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no such task"}}`, m.ID.Raw())
				return ""
			}
			if st.status == "working" && s.released {
				st.status = "completed"
			}
			switch m.Method {
			case "tasks/cancel":
				st.status = "cancelled"
				s.cancelled <- id
			case "tasks/result":
				return `{"content":[{"type":"text","text":"job:` + st.text + `"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"` + id + `"}}}`
			}
			return `{"taskId":"` + id + `","status":"` + st.status + `","createdAt":"2025-11-25T10:00:00Z","lastUpdatedAt":"2025-11-25T10:00:00Z","ttl":60000,"pollInterval":20}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"nope"}}`, m.ID.Raw())
		return ""
	})
	srv := httpServer(up.URL + "/mcp")
	srv.ProtocolVersion = "2025-11-25"
	return s, srv
}

func (s *taskServer) release() { s.mu.Lock(); s.released = true; s.mu.Unlock() }

func (s *taskServer) callLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// TestRelayedTask: a task-augmented call of a tool whose upstream runs
// tasks creates the task upstream; the client holds only the gateway's
// sealed id (the upstream's never reaches it), polls it, and gets the
// upstream's result; another caller gets nothing; the call is audited
// once, with the final result.
func TestRelayedTask(t *testing.T) {
	up, srv := startTaskServer(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	bob := keys.add(t, store.Key{Alias: "bob"})
	aud := &memAudit{}
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Audit: aud,
		Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv}}})
	url := gw.URL + "/mcp/tasky"
	a, _ := newTaskClient(t, url, alice, "2025-11-25")
	b, _ := newTaskClient(t, url, bob, "2025-11-25")
	if r := a.call("tools/list", map[string]any{}); !strings.Contains(string(r.Result), `"name":"must","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}`) ||
		!strings.Contains(string(r.Result), `"name":"plain","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}`) {
		t.Fatalf("tools/list %s", r.Result)
	}

	id := a.startTask("job", "x")["taskId"].(string)
	if strings.Contains(id, "up-") {
		t.Fatalf("the upstream's id reached the client: %s", id)
	}
	waitFor(t, "the upstream task", func() bool { return len(up.callLog()) == 1 })
	if got := up.callLog()[0]; got != `job task={"ttl":60000}` {
		t.Fatalf("upstream call %s", got)
	}
	if s := a.status(id); s != "working" {
		t.Fatalf("status %s", s)
	}
	wantNotFound(t, "bob get", b.call("tasks/get", map[string]string{"taskId": id}))
	wantNotFound(t, "bob result", b.call("tasks/result", map[string]string{"taskId": id}))
	wantNotFound(t, "bob cancel", b.call("tasks/cancel", map[string]string{"taskId": id}))
	wantNotFound(t, "the upstream's id", a.call("tasks/get", map[string]string{"taskId": "up-1"}))
	up.release()
	r := a.call("tasks/result", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), `"text":"job:x"`) ||
		!strings.Contains(string(r.Result), `"io.modelcontextprotocol/related-task":{"taskId":"`+id+`"}`) || strings.Contains(string(r.Result), "up-1") {
		t.Fatalf("tasks/result %+v %s", r.Error, r.Result)
	}
	waitFor(t, "the audit record", func() bool { return len(aud.records()) == 1 })
	if rec := aud.records()[0]; rec.Tool != "job" || rec.Outcome != store.OutcomeOK {
		t.Errorf("audit %+v", rec)
	}

	// A tool the upstream does not run as a task is run by the gateway.
	pid := a.startTask("plain", "p")["taskId"].(string)
	if r := a.call("tasks/result", map[string]string{"taskId": pid}); !strings.Contains(string(r.Result), `"text":"now:p"`) {
		t.Fatalf("plain tool's task %+v %s", r.Error, r.Result)
	}
	if got := up.callLog(); got[len(got)-1] != "plain task=" {
		t.Errorf("plain tool called upstream as %s", got[len(got)-1])
	}
}

// TestRelayedTaskCancel: tasks/cancel of a relayed task cancels the
// upstream's.
func TestRelayedTaskCancel(t *testing.T) {
	up, srv := startTaskServer(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv}}})
	a, _ := newTaskClient(t, gw.URL+"/mcp", alice, "2025-11-25")
	id := a.startTask("tasky__job", "c")["taskId"].(string)
	waitFor(t, "the upstream task", func() bool { return len(up.callLog()) == 1 })
	if r := a.call("tasks/cancel", map[string]string{"taskId": id}); r.Error != nil || !strings.Contains(string(r.Result), `"status":"cancelled"`) {
		t.Fatalf("cancel %+v %s", r.Error, r.Result)
	}
	select {
	case got := <-up.cancelled:
		if got != "up-1" {
			t.Fatalf("cancelled upstream %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream task was not cancelled")
	}
}

// TestBlockingTaskBridge: a client without tasks (2025-06-18, the go-sdk
// in 2026-07-28) or one that does not ask for one (2025-11-25) calls a
// tool the upstream runs only as a task: the gateway creates the task
// upstream, waits, and answers with its result, as a plain call.
func TestBlockingTaskBridge(t *testing.T) {
	up, srv := startTaskServer(t)
	aud := &memAudit{}
	_, gw := startGatewayWith(t, Options{Audit: aud, Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv}}})
	for _, rev := range []string{"2025-06-18", "2025-11-25"} {
		sid := initSessionRev(t, gw.URL+"/mcp/tasky", rev)
		_, _, body := rpc(t, gw.URL+"/mcp/tasky", map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": rev},
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"must","arguments":{"text":"`+rev+`"}}}`)
		var r rpcReply
		_ = json.Unmarshal(body, &r)
		if r.Error != nil || string(r.Result) != `{"content":[{"type":"text","text":"job:`+rev+`"}]}` {
			t.Fatalf("%s: bridged call %s", rev, body)
		}
	}
	// The go-sdk client (v1.8.0, no tasks) in the stateless era.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := connectTo(t, ctx, gw.URL+"/mcp/tasky", nil, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q", v)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "must", Arguments: map[string]any{"text": "stateless"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "job:stateless" {
		t.Fatalf("stateless bridged call: %+v %v", res, err)
	}
	if got := up.callLog(); len(got) != 3 || got[0] != "must task={}" || got[2] != "must task={}" {
		t.Errorf("upstream calls %v", got)
	}
	waitFor(t, "audit", func() bool { return len(aud.records()) == 3 })
}

func initSessionRev(t *testing.T, url, rev string) string {
	t.Helper()
	_, h, body := rpc(t, url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+rev+`","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	sid := h.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s", body)
	}
	rpc(t, url, map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": rev}, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// TestTaskSupportForbidden: in mode relay a tool the upstream forbids as
// a task stays forbidden (listed so, refused with -32601); in mode
// gateway the gateway runs it as a task (listed optional).
func TestTaskSupportForbidden(t *testing.T) {
	_, relay := startTaskServer(t)
	_, gwMode := startTaskServer(t)
	gwMode.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 10}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"rl": relay, "gm": gwMode}}})
	a, _ := newTaskClient(t, gw.URL+"/mcp", alice, "2025-11-25")
	r := a.call("tools/list", map[string]any{})
	if !strings.Contains(string(r.Result), `"name":"rl__nope","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"}`) ||
		!strings.Contains(string(r.Result), `"name":"gm__nope","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}`) {
		t.Fatalf("tools/list %s", r.Result)
	}
	r = a.call("tools/call", map[string]any{"name": "rl__nope", "arguments": map[string]any{}, "task": map[string]any{}})
	if r.Error == nil || r.Error.Code != -32601 {
		t.Errorf("forbidden in relay mode: %+v %s", r.Error, r.Result)
	}
	id := a.startTask("gm__nope", "g")["taskId"].(string)
	if r := a.call("tasks/result", map[string]string{"taskId": id}); r.Error != nil || !strings.Contains(string(r.Result), `"text":"now:g"`) {
		t.Errorf("forbidden in gateway mode: %+v %s", r.Error, r.Result)
	}
}

// extMeta is the _meta of a 2026-07-28 request that declares the tasks
// extension.
const extMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// extCall sends a 2026-07-28 request of key and returns its result or
// error.
func extCall(t *testing.T, url, key, method, name, params string) rpcReply {
	t.Helper()
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, callers.HeaderAPIKey: key}
	if name != "" {
		h["Mcp-Name"] = name
	}
	_, body := statelessPost(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{`+params+`}}`)
	var r rpcReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%s: %s", method, body)
	}
	return r
}

// TestTasksExtension: a 2026-07-28 request that declares the tasks
// extension gets a task handle (resultType task) for a tool its upstream
// runs as a task (relayed) and for a server in mode gateway; polls it
// with tasks/get until the result is inline; another caller can neither
// poll, update nor cancel it; a request without the extension, or a
// tool neither relayed nor gateway-run, is answered plainly.
func TestTasksExtension(t *testing.T) {
	up, srv := startTaskServer(t)
	_, gwSrv := startTaskServer(t)
	gwSrv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 10}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	bob := keys.add(t, store.Key{Alias: "bob"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv, "gm": gwSrv}}})
	url := gw.URL + "/mcp"

	if r := extCall(t, url, alice, "server/discover", "", extMeta); !strings.Contains(string(r.Result), `"extensions":{"io.modelcontextprotocol/tasks":{}}`) {
		t.Fatalf("discover %s", r.Result)
	}
	r := extCall(t, url, alice, "tools/call", "tasky__job", `"name":"tasky__job","arguments":{"text":"e"},`+extMeta)
	var handle struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
		Status     string `json:"status"`
		TTLMs      int64  `json:"ttlMs"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &handle) != nil || handle.ResultType != "task" || handle.Status != "working" || handle.TTLMs != 3600000 {
		t.Fatalf("handle %+v %s", r.Error, r.Result)
	}
	waitFor(t, "the upstream task", func() bool { return len(up.callLog()) == 1 })
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		r := extCall(t, url, bob, m, "", `"taskId":"`+handle.TaskID+`","inputResponses":{},`+extMeta)
		if r.Error == nil || r.Error.Message != "Failed to retrieve task: Task not found" {
			t.Errorf("bob %s: %+v %s", m, r.Error, r.Result)
		}
	}
	if r := extCall(t, url, alice, "tasks/update", "", `"taskId":"`+handle.TaskID+`","inputResponses":{},`+extMeta); r.Error != nil {
		t.Errorf("tasks/update %+v", r.Error)
	}
	up.release()
	var got struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	waitFor(t, "completed", func() bool {
		r := extCall(t, url, alice, "tasks/get", "", `"taskId":"`+handle.TaskID+`",`+extMeta)
		return r.Error == nil && json.Unmarshal(r.Result, &got) == nil && got.Status == "completed"
	})
	if !strings.Contains(string(got.Result), `"text":"job:e"`) {
		t.Fatalf("inline result %s", got.Result)
	}

	// Mode gateway: a tool the upstream does not run as a task.
	r = extCall(t, url, alice, "tools/call", "gm__plain", `"name":"gm__plain","arguments":{"text":"g"},`+extMeta)
	if r.Error != nil || json.Unmarshal(r.Result, &handle) != nil || handle.ResultType != "task" {
		t.Fatalf("gateway-mode handle %+v %s", r.Error, r.Result)
	}
	waitFor(t, "completed", func() bool {
		r := extCall(t, url, alice, "tasks/get", "", `"taskId":"`+handle.TaskID+`",`+extMeta)
		return r.Error == nil && json.Unmarshal(r.Result, &got) == nil && got.Status == "completed"
	})
	if !strings.Contains(string(got.Result), `"text":"now:g"`) {
		t.Fatalf("gateway-mode result %s", got.Result)
	}
	// Cancel is idempotent: a finished task is acknowledged as a running
	// one and stays as it ended (the extension keeps -32602 for unknown
	// ids).
	if r := extCall(t, url, alice, "tasks/cancel", "", `"taskId":"`+handle.TaskID+`",`+extMeta); r.Error != nil {
		t.Errorf("cancel of a completed task: %+v", r.Error)
	}
	if r := extCall(t, url, alice, "tasks/get", "", `"taskId":"`+handle.TaskID+`",`+extMeta); r.Error != nil || json.Unmarshal(r.Result, &got) != nil || got.Status != "completed" {
		t.Errorf("after the cancel of a completed task: %+v %s", r.Error, r.Result)
	}
	// The task methods need the extension declared in the request.
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		r := extCall(t, url, alice, m, "", `"taskId":"`+handle.TaskID+`","inputResponses":{},`+statelessMetaJSON)
		if r.Error == nil || r.Error.Code != -32021 || !strings.Contains(string(r.Error.Data), `"io.modelcontextprotocol/tasks"`) {
			t.Errorf("%s without the extension: %+v %s", m, r.Error, r.Result)
		}
	}

	// Plain answers: no extension declared; a tool not relayed in relay
	// mode.
	if r := extCall(t, url, alice, "tools/call", "tasky__job", `"name":"tasky__job","arguments":{"text":"p"},`+statelessMetaJSON); r.Error != nil || !strings.Contains(string(r.Result), `"text":"now:p"`) {
		t.Errorf("without the extension: %+v %s", r.Error, r.Result)
	}
	if r := extCall(t, url, alice, "tools/call", "tasky__plain", `"name":"tasky__plain","arguments":{"text":"q"},`+extMeta); r.Error != nil || !strings.Contains(string(r.Result), `"text":"now:q"`) {
		t.Errorf("a plain tool: %+v %s", r.Error, r.Result)
	}
	// 2025-11-25's methods are not the extension's.
	if r := extCall(t, url, alice, "tasks/result", "", `"taskId":"`+handle.TaskID+`",`+extMeta); r.Error == nil {
		t.Errorf("tasks/result in 2026-07-28: %s", r.Result)
	}
}

// TestTaskMemberWithoutTasks: a client whose revision has no tasks
// (2025-06-18) sends a task member anyway: the call is served plainly,
// the member never reaches the upstream (which would create a task on the
// upstream session all callers share), and no upstream task id reaches
// the client.
func TestTaskMemberWithoutTasks(t *testing.T) {
	up, srv := startTaskServer(t)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv}}})
	sid := initSessionRev(t, gw.URL+"/mcp/tasky", "2025-06-18")
	_, _, body := rpc(t, gw.URL+"/mcp/tasky", map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"},
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"job","arguments":{"text":"old"},"task":{"ttl":1000}}}`)
	var r rpcReply
	_ = json.Unmarshal(body, &r)
	if r.Error != nil || string(r.Result) != `{"content":[{"type":"text","text":"now:old"}]}` {
		t.Fatalf("plain call with a task member: %s", body)
	}
	if got := up.callLog(); len(got) != 1 || got[0] != "job task=" {
		t.Fatalf("upstream calls %v", got)
	}
}

// TestTasksAndAppsExtensionsTogether: a 2026-07-28 route with a server
// that runs tasks and one that serves views declares both extensions;
// neither hides the other.
func TestTasksAndAppsExtensionsTogether(t *testing.T) {
	_, srv := startTaskServer(t)
	weather := appsUpstream(t, "weather", nil)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"tasky": srv, "weather": httpServer(weather.http.URL)}}})
	r := extCall(t, gw.URL+"/mcp", alice, "server/discover", "", extMeta)
	for _, ext := range []string{mcpwire.ExtensionTasks, mcpwire.ExtUI} {
		if _, ok := jsonrpc.GetPath(r.Result, "capabilities", "extensions", ext); !ok {
			t.Errorf("discover lacks extension %s: %s", ext, r.Result)
		}
	}
}

// TestRelayedTaskCancelWhileCreating: a gateway task cancelled while its
// upstream task is being created still cancels the upstream's task once
// the creation answers (before, the cancelled request dropped the handle
// and the upstream task ran on, owned by nobody).
func TestRelayedTaskCancelWhileCreating(t *testing.T) {
	creating, proceed := make(chan struct{}), make(chan struct{})
	cancelled := make(chan string, 2)
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		id, _ := jsonrpc.GetString(m.Params, "taskId")
		switch m.Method {
		case "initialize":
			return `{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"slowcreate","version":"0"}}`
		case "tools/list":
			return `{"tools":[{"name":"job","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}]}`
		case "tools/call":
			close(creating)
			<-proceed
			return `{"task":{"taskId":"up-slow","status":"working","createdAt":"2025-11-25T10:00:00Z","lastUpdatedAt":"2025-11-25T10:00:00Z","ttl":60000,"pollInterval":20}}`
		case "tasks/get":
			return `{"taskId":"` + id + `","status":"working","createdAt":"2025-11-25T10:00:00Z","lastUpdatedAt":"2025-11-25T10:00:00Z","ttl":60000}`
		case "tasks/cancel":
			cancelled <- id
			return `{"taskId":"` + id + `","status":"cancelled","createdAt":"2025-11-25T10:00:00Z","lastUpdatedAt":"2025-11-25T10:00:00Z","ttl":60000}`
		}
		return `{}`
	})
	srv := httpServer(up.URL)
	srv.ProtocolVersion = "2025-11-25"
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"s": srv}}})
	a, _ := newTaskClient(t, gw.URL+"/mcp/s", alice, "2025-11-25")
	id := a.startTask("job", "x")["taskId"].(string)
	<-creating
	if r := a.call("tasks/cancel", map[string]string{"taskId": id}); r.Error != nil {
		t.Fatalf("cancel %+v", r.Error)
	}
	close(proceed)
	select {
	case got := <-cancelled:
		if got != "up-slow" {
			t.Fatalf("cancelled %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream task created during the cancel was never cancelled")
	}
}
