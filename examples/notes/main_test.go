package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// notesBinary builds the notes command once per test run.
func notesBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "notes-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "notes")
		if runtime.GOOS == "windows" {
			binPath += ".exe"
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binPath, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("go build: %s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building notes: %v", buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// connect starts the notes server as a child process and connects to it.
func connect(t *testing.T, ctx context.Context, opts *mcp.ClientOptions, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(notesBinary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "notes-test", Version: "0"}, opts)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v (stderr: %s)", err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("close: %v", err)
		}
		if s := stderr.String(); s != "" {
			t.Logf("server stderr:\n%s", s)
		}
	})
	return cs
}

func callText(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

func TestNotesOverStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "notes.json")

	listChanged := make(chan struct{}, 16)
	cs := connect(t, ctx, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			listChanged <- struct{}{}
		},
	}, "-file", file)

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if got, want := strings.Join(names, ","), "add_note,delete_note,get_note,list_notes,search_notes"; got != want {
		t.Errorf("tools = %s, want %s", got, want)
	}

	if text, isErr := callText(t, ctx, cs, "add_note", map[string]any{"title": "groceries", "body": "milk, eggs"}); isErr || !strings.Contains(text, "added") {
		t.Errorf("add_note: %q isError=%v", text, isErr)
	}
	select {
	case <-listChanged:
	case <-time.After(10 * time.Second):
		t.Error("no notifications/resources/list_changed after add_note")
	}
	callText(t, ctx, cs, "add_note", map[string]any{"title": "todo list", "body": "write tests"})

	if text, isErr := callText(t, ctx, cs, "get_note", map[string]any{"title": "groceries"}); isErr || text != "milk, eggs" {
		t.Errorf("get_note: %q isError=%v", text, isErr)
	}
	if text, _ := callText(t, ctx, cs, "list_notes", nil); text != "- groceries\n- todo list\n" {
		t.Errorf("list_notes: %q", text)
	}
	if text, _ := callText(t, ctx, cs, "search_notes", map[string]any{"query": "TESTS"}); text != "- todo list\n" {
		t.Errorf("search_notes: %q", text)
	}
	if text, isErr := callText(t, ctx, cs, "get_note", map[string]any{"title": "nope"}); !isErr {
		t.Errorf("get_note of missing note: %q, want isError", text)
	}

	// Resources: each note is listed; the template reads any note.
	rl, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range rl.Resources {
		uris = append(uris, r.URI)
	}
	if got, want := strings.Join(uris, ","), "notes://groceries,notes://todo%20list"; got != want {
		t.Errorf("resources = %s, want %s", got, want)
	}
	tl, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.ResourceTemplates) != 1 || tl.ResourceTemplates[0].URITemplate != "notes://{title}" {
		t.Errorf("templates = %+v", tl.ResourceTemplates)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://todo%20list"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "write tests" {
		t.Errorf("read resource: %+v", rr.Contents)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://missing"}); err == nil {
		t.Error("reading a missing note: no error")
	}

	// Prompt.
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize_notes", Arguments: map[string]string{"query": "milk"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Messages) != 1 || !strings.Contains(pr.Messages[0].Content.(*mcp.TextContent).Text, "## groceries") ||
		strings.Contains(pr.Messages[0].Content.(*mcp.TextContent).Text, "todo") {
		t.Errorf("prompt: %+v", pr.Messages[0].Content)
	}

	// Delete.
	if text, isErr := callText(t, ctx, cs, "delete_note", map[string]any{"title": "todo list"}); isErr {
		t.Errorf("delete_note: %q", text)
	}
	if _, isErr := callText(t, ctx, cs, "delete_note", map[string]any{"title": "todo list"}); !isErr {
		t.Error("deleting twice: no isError")
	}
	cs.Close()

	// The remaining note was saved and is served again after a restart.
	cs2 := connect(t, ctx, nil, "-file", file)
	if text, _ := callText(t, ctx, cs2, "list_notes", nil); text != "- groceries\n" {
		t.Errorf("after restart, list_notes: %q", text)
	}
	rr, err = cs2.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://groceries"})
	if err != nil || rr.Contents[0].Text != "milk, eggs" {
		t.Errorf("after restart, read: %v %+v", err, rr)
	}
}

func TestStore(t *testing.T) {
	file := filepath.Join(t.TempDir(), "n.json")
	s, err := OpenStore(file)
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.Put("a", "1"); !created || err != nil {
		t.Fatalf("Put new: %v %v", created, err)
	}
	if created, err := s.Put("a", "2"); created || err != nil {
		t.Fatalf("Put existing: %v %v", created, err)
	}
	if _, err := s.Put(" ", "x"); err == nil {
		t.Error("empty title accepted")
	}
	s2, err := OpenStore(file)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s2.Get("a"); err != nil || n.Body != "2" {
		t.Errorf("reloaded: %+v %v", n, err)
	}
	if err := s2.Delete("b"); err == nil {
		t.Error("deleting a missing note: no error")
	}
}

func TestURI(t *testing.T) {
	for _, title := range []string{"plain", "with space", "slash/and?query#frag", "ünï", "50%", "a+b"} {
		uri := noteURI(title)
		got, ok := titleFromURI(uri)
		if !ok || got != title {
			t.Errorf("titleFromURI(noteURI(%q)) = %q, %v (uri %s)", title, got, ok, uri)
		}
	}
	if _, ok := titleFromURI("file:///x"); ok {
		t.Error("file URI accepted")
	}
}
