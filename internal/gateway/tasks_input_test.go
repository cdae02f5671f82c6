package gateway

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// askMeta declares the tasks extension and form elicitation.
const askMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// detailedTask is a tasks/get result of the extension.
type detailedTask struct {
	ResultType    string                     `json:"resultType"`
	TaskID        string                     `json:"taskId"`
	Status        string                     `json:"status"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	Result        json.RawMessage            `json:"result"`
	Error         json.RawMessage            `json:"error"`
}

func getTask(t *testing.T, url, key, id, meta string) (detailedTask, rpcReply) {
	t.Helper()
	r := extCall(t, url, key, "tasks/get", id, `"taskId":"`+id+`",`+meta)
	var d detailedTask
	if r.Error == nil {
		if err := json.Unmarshal(r.Result, &d); err != nil {
			t.Fatalf("tasks/get %s", r.Result)
		}
	}
	return d, r
}

func awaitStatus(t *testing.T, url, key, id, status string) detailedTask {
	t.Helper()
	var d detailedTask
	waitFor(t, "status "+status, func() bool {
		d, _ = getTask(t, url, key, id, askMeta)
		return d.Status == status
	})
	return d
}

func newTaskHandle(t *testing.T, r rpcReply) string {
	t.Helper()
	var h detailedTask
	if r.Error != nil || json.Unmarshal(r.Result, &h) != nil || h.ResultType != "task" || h.TaskID == "" {
		t.Fatalf("want a task handle: %+v %s", r.Error, r.Result)
	}
	if h.InputRequests != nil {
		t.Errorf("a handle carries inputRequests: %s", r.Result)
	}
	return h.TaskID
}

// TestTaskInputPhase: an upstream's elicitation during a 2026-07-28 task
// the gateway runs waits on the task: tasks/get shows it as an input
// request (input_required), only the task's owner sees and answers it
// with tasks/update, answers to other keys and malformed answers change
// nothing, and the answer reaches the upstream, whose result completes
// the task. Without the capability declared the question is refused;
// a cancel while a question is open ends the task cancelled.
func TestTaskInputPhase(t *testing.T) {
	up := startSDKUpstream(t, "sdk")
	srv := httpServer(up.http.URL)
	srv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 10}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	bob := keys.add(t, store.Key{Alias: "bob"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"sdk": srv}}})
	url := gw.URL + "/mcp/sdk"

	id := newTaskHandle(t, extCall(t, url, alice, "tools/call", "ask", `"name":"ask","arguments":{"text":"your name?"},`+askMeta))
	d := awaitStatus(t, url, alice, id, "input_required")
	if len(d.InputRequests) != 1 {
		t.Fatalf("inputRequests %v", d.InputRequests)
	}
	var key string
	for k, v := range d.InputRequests {
		key = k
		var q struct {
			Method string `json:"method"`
			Params struct {
				Message string `json:"message"`
			} `json:"params"`
		}
		if json.Unmarshal(v, &q) != nil || q.Method != "elicitation/create" || q.Params.Message != "your name?" {
			t.Fatalf("input request %s", v)
		}
	}

	// Another caller sees nothing and answers nothing.
	if _, r := getTask(t, url, bob, id, askMeta); r.Error == nil || r.Error.Message != "Failed to retrieve task: Task not found" {
		t.Errorf("bob's tasks/get: %+v %s", r.Error, r.Result)
	}
	bobAnswer := `"taskId":"` + id + `","inputResponses":{"` + key + `":{"action":"accept","content":{"name":"Mallory"}}},` + askMeta
	if r := extCall(t, url, bob, "tasks/update", id, bobAnswer); r.Error == nil || r.Error.Message != "Failed to retrieve task: Task not found" {
		t.Errorf("bob's tasks/update: %+v %s", r.Error, r.Result)
	}
	// Malformed answers are refused; an unknown key changes nothing.
	for _, bad := range []string{`[1]`, `{"` + key + `":5}`, `null`, `"x"`} {
		if r := extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":`+bad+`,`+askMeta); r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("inputResponses %s: %+v %s", bad, r.Error, r.Result)
		}
	}
	if r := extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"nope":{"ignored":true}},`+askMeta); r.Error != nil || !strings.Contains(string(r.Result), `"resultType":"complete"`) {
		t.Errorf("an unknown key: %+v %s", r.Error, r.Result)
	}
	if d, _ := getTask(t, url, alice, id, askMeta); d.Status != "input_required" || len(d.InputRequests) != 1 {
		t.Fatalf("after bob's and the unknown answers: %+v", d)
	}

	r := extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"`+key+`":{"action":"accept","content":{"name":"Ann"}}},`+askMeta)
	if r.Error != nil || strings.Contains(string(r.Result), "taskId") {
		t.Fatalf("tasks/update: %+v %s", r.Error, r.Result)
	}
	d = awaitStatus(t, url, alice, id, "completed")
	if !strings.Contains(string(d.Result), `"text":"accept:Ann"`) || d.InputRequests != nil {
		t.Fatalf("result %s %v", d.Result, d.InputRequests)
	}

	// No elicitation declared: the question is refused, never shown.
	id = newTaskHandle(t, extCall(t, url, alice, "tools/call", "ask", `"name":"ask","arguments":{"text":"?"},`+extMeta))
	waitFor(t, "the refused question's task to end", func() bool {
		d, _ = getTask(t, url, alice, id, extMeta)
		if d.InputRequests != nil {
			t.Fatalf("a question for a client without elicitation: %v", d.InputRequests)
		}
		return d.Status == "failed" || d.Status == "completed"
	})
	if d.Status == "completed" && !strings.Contains(string(d.Result), `"isError":true`) {
		t.Errorf("without the capability: %+v", d)
	}

	// A cancel while the question is open.
	id = newTaskHandle(t, extCall(t, url, alice, "tools/call", "ask", `"name":"ask","arguments":{"text":"again?"},`+askMeta))
	awaitStatus(t, url, alice, id, "input_required")
	if r := extCall(t, url, alice, "tasks/cancel", id, `"taskId":"`+id+`",`+askMeta); r.Error != nil {
		t.Fatalf("cancel %+v", r.Error)
	}
	if d, _ := getTask(t, url, alice, id, askMeta); d.Status != "cancelled" || d.InputRequests != nil {
		t.Fatalf("after cancel %+v", d)
	}
}

// TestTaskAnswerWithin: with tasks.answer_within, a call that ends within
// it is answered plainly and leaves no task behind; one whose upstream
// asks first becomes a task at once; one still running at the end of it
// becomes a task; and one the table cannot make a task of (the caller
// holds max_per_caller) is answered plainly when it ends, not refused
// after it may have acted.
func TestTaskAnswerWithin(t *testing.T) {
	up := startSDKUpstream(t, "sdk")
	srv := httpServer(up.http.URL)
	srv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 1, AnswerWithin: 3 * time.Second}
	slowUp, slowSrv := startTaskUpstream(t)
	slowSrv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 1, AnswerWithin: 300 * time.Millisecond}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"sdk": srv, "slowsrv": slowSrv}}})
	url := gw.URL + "/mcp"

	r := extCall(t, url, alice, "tools/call", "sdk__echo", `"name":"sdk__echo","arguments":{"text":"hi"},`+askMeta)
	if r.Error != nil || strings.Contains(string(r.Result), "taskId") || !strings.Contains(string(r.Result), `"resultType":"complete"`) {
		t.Fatalf("a quick call: %+v %s", r.Error, r.Result)
	}
	if n := g.taskTable.Len(); n != 0 {
		t.Fatalf("a quick call left %d tasks", n)
	}

	start := time.Now()
	id := newTaskHandle(t, extCall(t, url, alice, "tools/call", "sdk__ask", `"name":"sdk__ask","arguments":{"text":"name?"},`+askMeta))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a call that asks was made a task after %s, not at its question", d)
	}
	d := awaitStatus(t, url, alice, id, "input_required")
	for k := range d.InputRequests {
		extCall(t, url, alice, "tasks/update", id, `"taskId":"`+id+`","inputResponses":{"`+k+`":{"action":"decline"}},`+askMeta)
	}
	d = awaitStatus(t, url, alice, id, "completed")
	if !strings.Contains(string(d.Result), "decline") {
		t.Errorf("declined: %s", d.Result)
	}

	start = time.Now()
	slowID := newTaskHandle(t, extCall(t, url, alice, "tools/call", "slowsrv__slow", `"name":"slowsrv__slow","arguments":{"text":"a"},`+askMeta))
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a slow call was made a task after %s, before answer_within", d)
	}
	// max_per_caller 1 is reached: the next slow call is answered when it
	// ends.
	var wg sync.WaitGroup
	var second rpcReply
	wg.Add(1)
	go func() {
		defer wg.Done()
		second = extCall(t, url, alice, "tools/call", "slowsrv__slow", `"name":"slowsrv__slow","arguments":{"text":"b"},`+askMeta)
	}()
	time.Sleep(600 * time.Millisecond)
	close(slowUp.release)
	wg.Wait()
	if second.Error != nil || !strings.Contains(string(second.Result), `"text":"slow:b"`) || strings.Contains(string(second.Result), "taskId") {
		t.Fatalf("past max_per_caller: %+v %s", second.Error, second.Result)
	}
	d = awaitStatus(t, url, alice, slowID, "completed")
	if !strings.Contains(string(d.Result), `"text":"slow:a"`) {
		t.Errorf("the slow task: %s", d.Result)
	}
}

// TestTaskMetrics: what an operator sees of tasks. A running task is in
// mcpgate_tasks{status="working"}; a call refused a task (max_per_caller)
// is counted in mcpgate_tasks_refused_total; a task that ends, by its
// outcome, in mcpgate_tasks_ended_total.
func TestTaskMetrics(t *testing.T) {
	slowUp, slowSrv := startTaskUpstream(t)
	slowSrv.Tasks = &config.ServerTasks{Mode: config.TasksGateway, TTL: time.Hour, MaxPerCaller: 1, AnswerWithin: 200 * time.Millisecond}
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	_, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil), Metrics: metrics.New(), MetricsOnMain: true,
		Config: &config.Config{Servers: map[string]*config.Server{"slowsrv": slowSrv}}})
	url := gw.URL + "/mcp"
	has := func(want string) bool { return strings.Contains(scrapeMetrics(t, gw.URL), want) }

	id := newTaskHandle(t, extCall(t, url, alice, "tools/call", "slowsrv__slow", `"name":"slowsrv__slow","arguments":{"text":"a"},`+askMeta))
	if !has(`mcpgate_tasks{status="working"} 1`) {
		t.Errorf("a running task is not in mcpgate_tasks:\n%s", grepLines(scrapeMetrics(t, gw.URL), "mcpgate_tasks"))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		extCall(t, url, alice, "tools/call", "slowsrv__slow", `"name":"slowsrv__slow","arguments":{"text":"b"},`+askMeta)
	})
	deadline := time.Now().Add(5 * time.Second)
	for !has(`mcpgate_tasks_refused_total{reason="max_per_caller",server="slowsrv"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("a call past max_per_caller is not counted:\n%s", grepLines(scrapeMetrics(t, gw.URL), "mcpgate_tasks"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(slowUp.release)
	wg.Wait()
	awaitStatus(t, url, alice, id, "completed")
	text := scrapeMetrics(t, gw.URL)
	if !strings.Contains(text, `mcpgate_tasks_ended_total{outcome="completed",server="slowsrv"} 1`) || !strings.Contains(text, `mcpgate_tasks{status="working"} 0`) {
		t.Errorf("after the task ended:\n%s", grepLines(text, "mcpgate_tasks"))
	}
}

// grepLines is text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
