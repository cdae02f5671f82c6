package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// taskBobKey is a second caller of the tasks fleet.
const taskBobKey = "mcpg_fleet-taskbob-0123456789abcdef"

// tasksFleet is two replicas on PostgreSQL and Redis whose one server,
// slow, is the test's own HTTP MCP server at slowURL.
func tasksFleet(t *testing.T, slowURL string) *Fleet {
	t.Helper()
	gw, _ := binaries(t)
	pg := pgtest.Get(t)
	redis := redistest.New(t)
	dir := t.TempDir()
	db := pg.NewDatabase(t)
	f := &Fleet{t: t, gw: gw, dir: dir, cfgPath: filepath.Join(dir, "gw.yaml"),
		DSN: pg.DSN(db, pgtest.Superuser, ""), PG: pg, DB: db, Redis: redis}
	cfg := fmt.Sprintf(`data_dir: ${MCPGATE_DATA_DIR}
store: {driver: postgres, dsn: "${MCPGATE_PG_DSN}"}
state: {driver: redis, url: "${MCPGATE_REDIS_URL}", replicas: 2}
fleet:
  session_keys: [%q]
  advertise: ${MCPGATE_ADVERTISE}
auth:
  master_key: %q
  keys:
    - {alias: alice, key: %q, servers: [slow]}
    - {alias: bob, key: %q, servers: [slow]}
servers:
  slow: {transport: http, url: %q, timeout: 5m}
`, newSessionKey(), masterKey, aliceKey, taskBobKey, slowURL)
	if err := os.WriteFile(f.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		f.Replicas = append(f.Replicas, &Replica{Name: name, Addr: freeAddr(t), f: f,
			dataDir: filepath.Join(dir, "replica-"+name), logPath: filepath.Join(dir, "replica-"+name+".log")})
		r := f.Replicas[len(f.Replicas)-1]
		r.URL = "http://" + r.Addr
	}
	t.Cleanup(func() {
		for _, r := range f.Replicas {
			r.Kill()
		}
	})
	for _, r := range f.Replicas {
		if err := r.startFirst(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestTasksFleet: gateway-run tasks live in PostgreSQL. A task finished
// on replica a is fetched from b after a was killed (SIGKILL); a task
// whose call was still running on a is answered by b as failed, with the
// reason, once a has left the registry (its heartbeat lapses); another
// caller is told of neither.
func TestTasksFleet(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	type args struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "quick"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "quick:" + a.Text}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "wait"}, func(ctx context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		<-ctx.Done() // until the replica calling it dies
		return nil, nil, ctx.Err()
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	f := tasksFleet(t, hs.URL)
	a, b := f.Replicas[0], f.Replicas[1]

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second}
	session := func(r *Replica, key string) *rawSession {
		s, err := newRawSession(ctx, hc, r.URL+"/mcp", key)
		if err != nil {
			t.Fatalf("session on %s: %v", r.Name, err)
		}
		return s
	}
	onA, onB, bobOnB := session(a, aliceKey), session(b, aliceKey), session(b, taskBobKey)
	startTask := func(tool, text string) string {
		t.Helper()
		rep, err := onA.Request(ctx, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"text": text}, "task": map[string]any{"ttl": 600000}})
		var cr struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if err != nil || !rep.OK() || json.Unmarshal(rep.Result, &cr) != nil || cr.Task.TaskID == "" {
			t.Fatalf("task-augmented %s on a: %v %v", tool, rep, err)
		}
		return cr.Task.TaskID
	}
	get := func(s *rawSession, id string) (status, msg string, rep *rpcReply) {
		t.Helper()
		rep, err := s.Request(ctx, "tasks/get", map[string]any{"taskId": id})
		if err != nil {
			t.Fatalf("tasks/get: %v", err)
		}
		var task struct{ Status, StatusMessage string }
		_ = json.Unmarshal(rep.Result, &task)
		return task.Status, task.StatusMessage, rep
	}
	wantNotFound := func(what string, rep *rpcReply, err error) {
		t.Helper()
		if err != nil || rep.Error == nil || rep.Error.Message != "Failed to retrieve task: Task not found" {
			t.Errorf("%s: want task not found, got %v %v", what, rep, err)
		}
	}

	done := startTask("slow__quick", "one")
	running := startTask("slow__wait", "two")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s, _, _ := get(onA, done); s == "completed" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("quick task on a: %s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, _, rep := get(onB, running); s != "working" {
		t.Fatalf("running task on b: %v", rep)
	}
	for _, id := range []string{done, running} {
		rep, err := bobOnB.Request(ctx, "tasks/get", map[string]any{"taskId": id})
		wantNotFound("bob's tasks/get on b", rep, err)
		rep, err = bobOnB.Request(ctx, "tasks/result", map[string]any{"taskId": id})
		wantNotFound("bob's tasks/result on b", rep, err)
	}

	a.Kill()
	killed := time.Now()
	rep, err := onB.Request(ctx, "tasks/result", map[string]any{"taskId": done})
	if err != nil || !rep.OK() || !strings.Contains(string(rep.Result), `"text":"quick:one"`) {
		t.Fatalf("the finished task's result on b after a died: %v %v", rep, err)
	}
	// a's registry entry lapses within the heartbeat TTL (5 s).
	var status, msg string
	for deadline := time.Now().Add(20 * time.Second); ; {
		if status, msg, _ = get(onB, running); status != "working" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if status != "failed" || !strings.Contains(msg, "replica running this task stopped") {
		t.Fatalf("running task on b after a died: %s %q", status, msg)
	}
	t.Logf("b failed a's running task %v after a was killed", time.Since(killed).Round(100*time.Millisecond))
	rep, err = onB.Request(ctx, "tasks/result", map[string]any{"taskId": running})
	if err != nil || rep.Error == nil || !strings.Contains(rep.Error.Message, "replica running this task stopped") {
		t.Fatalf("tasks/result of the failed task: %v %v", rep, err)
	}
	if rep, err := bobOnB.Request(ctx, "tasks/list", map[string]any{}); err != nil || string(rep.Result) != `{"tasks":[]}` {
		t.Errorf("bob lists on b: %v %v", rep, err)
	}
}
