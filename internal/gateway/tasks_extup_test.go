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

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
)

// extTaskUpstream is a raw 2026-07-28 server with the tasks extension:
// its tool job (taskSupport required) runs only as a task, which asks
// the client one elicitation through inputRequests and answers with the
// name it got; sneaky answers every call with a task handle, asked for
// or not (a hostile or careless server).
type extTaskUpstream struct {
	mu        sync.Mutex
	answers   map[string]json.RawMessage // task id -> inputResponses of its tasks/update
	undeclare []string                   // tasks/* requests that did not declare the extension
	cancelled []string
	n         int
}

func startExtTaskUpstream(t *testing.T) (*extTaskUpstream, *config.Server) {
	u := &extTaskUpstream{answers: map[string]json.RawMessage{}}
	now := time.Now().UTC().Format(time.RFC3339)
	handle := func(id string) string {
		return `{"resultType":"task","taskId":"` + id + `","status":"working","createdAt":"` + now + `","lastUpdatedAt":"` + now + `","ttlMs":60000,"pollIntervalMs":20}`
	}
	declares := func(m *jsonrpc.Message) bool {
		_, ok := jsonrpc.GetPath(m.Params, "_meta", "io.modelcontextprotocol/clientCapabilities", "extensions", "io.modelcontextprotocol/tasks")
		return ok
	}
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		u.mu.Lock()
		defer u.mu.Unlock()
		if strings.HasPrefix(m.Method, "tasks/") && !declares(m) {
			u.undeclare = append(u.undeclare, m.Method)
		}
		id, _ := jsonrpc.GetString(m.Params, "taskId")
		if strings.HasPrefix(m.Method, "tasks/") && r.Header.Get("Mcp-Name") != id {
			// SEP-2663's routing header, checked as a strict server does.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32020,"message":"Mcp-Name does not match taskId"}}`, m.ID.Raw())
			return ""
		}
		switch m.Method {
		case "server/discover":
			return `{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"extensions":{"io.modelcontextprotocol/tasks":{}}},"serverInfo":{"name":"ext","version":"1"},"ttlMs":0,"cacheScope":"public"}`
		case "tools/list":
			return `{"resultType":"complete","ttlMs":0,"cacheScope":"public","tools":[
				{"name":"job","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},
				{"name":"sneaky","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			u.n++
			if name, _ := jsonrpc.GetString(m.Params, "name"); name == "sneaky" {
				return handle(fmt.Sprintf("up-sneaky-%d", u.n))
			}
			if !declares(m) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32021,"message":"Missing required client capability","data":{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`, m.ID.Raw())
				return ""
			}
			return handle(fmt.Sprintf("up-job-%d", u.n))
		case "tasks/get":
			if strings.HasPrefix(id, "up-sneaky") {
				return `{"resultType":"complete","taskId":"` + id + `","status":"completed","createdAt":"` + now + `","lastUpdatedAt":"` + now + `","ttlMs":60000,"result":{"content":[{"type":"text","text":"sneaky done"}]}}`
			}
			if a, ok := u.answers[id]; ok {
				name, _ := jsonrpc.GetPath(a, "who", "content", "name")
				return `{"resultType":"complete","taskId":"` + id + `","status":"completed","createdAt":"` + now + `","lastUpdatedAt":"` + now + `","ttlMs":60000,"result":{"content":[{"type":"text","text":"hello ` + strings.Trim(string(name), `"`) + `"}]}}`
			}
			return `{"resultType":"complete","taskId":"` + id + `","status":"input_required","createdAt":"` + now + `","lastUpdatedAt":"` + now + `","ttlMs":60000,
				"inputRequests":{"who":{"method":"elicitation/create","params":{"mode":"form","message":"who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}}}}`
		case "tasks/update":
			a, _ := jsonrpc.Get(m.Params, "inputResponses")
			u.answers[id] = append(json.RawMessage(nil), a...)
			return `{"resultType":"complete"}`
		case "tasks/cancel":
			u.cancelled = append(u.cancelled, id)
			return `{"resultType":"complete"}`
		}
		return `{"resultType":"complete"}`
	})
	cfg := httpServer(up.URL)
	cfg.ProtocolVersion = "2026-07-28"
	return u, cfg
}

// TestExtensionUpstreamTask: a 2026-07-28 upstream that runs a tool only
// as a task (the tasks extension) serves clients of both eras: a go-sdk
// client's plain call (handshake era and 2026-07-28) is answered plainly,
// the upstream's question put to it as its own elicitation; a 2026-07-28
// client declaring the extension gets the gateway's task, whose
// inputRequests carry the upstream's question and whose tasks/update
// answers it. A task handle the upstream sends unasked is followed, and
// its id never reaches any client.
func TestExtensionUpstreamTask(t *testing.T) {
	up, srv := startExtTaskUpstream(t)
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"ext": srv}}})
	url := gw.URL + "/mcp/ext"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	asked := make(chan string, 4)
	copts := &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params.Message
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ann"}}, nil
	}}
	for _, era := range []*mcp.ClientSessionOptions{handshakeEra, nil} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, copts).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: headerRT{withKey(alice)}}}, era)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "job", Arguments: map[string]any{}})
		if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "hello Ann" {
			t.Fatalf("era %v: plain call of a task-only tool: %v %+v", era, err, res)
		}
		if q := <-asked; q != "who?" {
			t.Errorf("the client was asked %q", q)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "sneaky", Arguments: map[string]any{}})
		if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "sneaky done" {
			t.Fatalf("era %v: an unasked task handle: %v %+v", era, err, res)
		}
		cs.Close()
	}

	// A 2026-07-28 client declaring the extension: the gateway's task.
	id := newTaskHandle(t, extCall(t, url, alice, "tools/call", "job", `"name":"job","arguments":{},`+askMeta))
	if strings.Contains(id, "up-") {
		t.Fatalf("the upstream's task id reached the client: %s", id)
	}
	d := awaitStatus(t, url, alice, id, "input_required")
	if len(d.InputRequests) == 0 {
		// The upstream's status was once reported before its questions
		// were put to the client: input_required with nothing to answer.
		t.Fatalf("input_required without inputRequests: %+v", d)
	}
	var key string
	for k, v := range d.InputRequests {
		key = k
		if !strings.Contains(string(v), `"message":"who?"`) {
			t.Fatalf("input request %s", v)
		}
	}
	r := extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"`+key+`":{"action":"accept","content":{"name":"Bo"}}},`+askMeta)
	if r.Error != nil {
		t.Fatalf("tasks/update %+v", r.Error)
	}
	d = awaitStatus(t, url, alice, id, "completed")
	if !strings.Contains(string(d.Result), `"text":"hello Bo"`) || strings.Contains(string(d.Result), "up-") {
		t.Fatalf("result %s", d.Result)
	}
	// The raw sneaky handle, to a request without the extension.
	r = extCall(t, url, alice, "tools/call", "sneaky", `"name":"sneaky","arguments":{},`+statelessMetaJSON)
	if r.Error != nil || !strings.Contains(string(r.Result), "sneaky done") || strings.Contains(string(r.Result), "up-sneaky") {
		t.Fatalf("sneaky to a 2026-07-28 client: %+v %s", r.Error, r.Result)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.undeclare) != 0 {
		t.Errorf("tasks requests without the extension declared: %v", up.undeclare)
	}
}

// TestTaskOverMRTRUpstream: a 2026-07-28 upstream without tasks answers
// a gateway task's call input_required with two questions: both show on
// the task's tasks/get at once, answered one at a time (the answered one
// leaves at once), and the call is retried with both answers and the
// upstream's requestState; the task completes with the retry's result.
func TestTaskOverMRTRUpstream(t *testing.T) {
	var mu sync.Mutex
	var retry json.RawMessage
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) string {
		switch m.Method {
		case "server/discover":
			return `{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"m","version":"1"},"ttlMs":0,"cacheScope":"public"}`
		case "tools/list":
			return `{"resultType":"complete","ttlMs":0,"cacheScope":"public","tools":[{"name":"two","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			resp, ok := jsonrpc.Get(m.Params, "inputResponses")
			if !ok {
				q := `{"method":"elicitation/create","params":{"mode":"form","message":"%s","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}}`
				return `{"resultType":"input_required","requestState":"st1","inputRequests":{"a":` + fmt.Sprintf(q, "first?") + `,"b":` + fmt.Sprintf(q, "second?") + `}}`
			}
			mu.Lock()
			retry = append(json.RawMessage(nil), m.Params...)
			mu.Unlock()
			a, _ := jsonrpc.GetPath(resp, "a", "content", "name")
			b, _ := jsonrpc.GetPath(resp, "b", "content", "name")
			return `{"resultType":"complete","content":[{"type":"text","text":"a=` + strings.Trim(string(a), `"`) + ` b=` + strings.Trim(string(b), `"`) + `"}]}`
		}
		return `{"resultType":"complete"}`
	})
	srv := httpServer(up.URL)
	srv.ProtocolVersion = "2026-07-28"
	srv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 10, AnswerWithin: 2 * time.Second}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"m": srv}}})
	url := gw.URL + "/mcp/m"

	start := time.Now()
	id := newTaskHandle(t, extCall(t, url, alice, "tools/call", "two", `"name":"two","arguments":{},`+askMeta))
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("the questions made the call a task after %s", d)
	}
	var d detailedTask
	waitFor(t, "two questions", func() bool {
		d, _ = getTask(t, url, alice, id, askMeta)
		return len(d.InputRequests) == 2
	})
	keyOf := map[string]string{}
	for k, v := range d.InputRequests {
		if strings.Contains(string(v), "first?") {
			keyOf["a"] = k
		} else {
			keyOf["b"] = k
		}
	}
	extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"`+keyOf["a"]+`":{"action":"accept","content":{"name":"Ann"}}},`+askMeta)
	d, _ = getTask(t, url, alice, id, askMeta)
	if _, still := d.InputRequests[keyOf["a"]]; still || d.Status != "input_required" || len(d.InputRequests) != 1 {
		t.Fatalf("after one answer: %+v", d)
	}
	extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"`+keyOf["b"]+`":{"action":"accept","content":{"name":"Bo"}}},`+askMeta)
	d = awaitStatus(t, url, alice, id, "completed")
	if !strings.Contains(string(d.Result), `"text":"a=Ann b=Bo"`) {
		t.Fatalf("result %s", d.Result)
	}
	mu.Lock()
	defer mu.Unlock()
	if st, _ := jsonrpc.GetString(retry, "requestState"); st != "st1" {
		t.Errorf("the retry's requestState %q", st)
	}
}
