package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connect(t *testing.T, ctx context.Context, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(newHandler(slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	client := mcp.NewClient(&mcp.Implementation{Name: "calc-test", Version: "0"}, opts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) (string, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("%s: %v", params.Name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: content %+v", params.Name, res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text, res
}

func TestCalc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := connect(t, ctx, nil)

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if got, want := strings.Join(names, ","), "add,divide,multiply,now,sleep,subtract"; got != want {
		t.Errorf("tools = %s, want %s", got, want)
	}

	for _, tc := range []struct {
		tool string
		a, b float64
		want string
	}{
		{"add", 2, 3, "5"},
		{"subtract", 2, 3.5, "-1.5"},
		{"multiply", 4, 2.5, "10"},
		{"divide", 1, 4, "0.25"},
	} {
		got, res := call(t, ctx, cs, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"a": tc.a, "b": tc.b}})
		if got != tc.want || res.IsError {
			t.Errorf("%s(%v, %v) = %q (isError %v), want %q", tc.tool, tc.a, tc.b, got, res.IsError, tc.want)
		}
		if sc, ok := res.StructuredContent.(map[string]any); !ok || sc["result"] == nil {
			t.Errorf("%s: structured content %#v", tc.tool, res.StructuredContent)
		}
	}

	got, res := call(t, ctx, cs, &mcp.CallToolParams{Name: "divide", Arguments: map[string]any{"a": 1, "b": 0}})
	if !res.IsError || !strings.Contains(got, "division by zero") {
		t.Errorf("divide by zero: %q isError=%v", got, res.IsError)
	}
	// Missing arguments are a tool error too (schema validation).
	if _, res := call(t, ctx, cs, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1}}); !res.IsError {
		t.Error("add without b: no isError")
	}

	got, res = call(t, ctx, cs, &mcp.CallToolParams{Name: "now", Arguments: map[string]any{"timezone": "Asia/Tokyo"}})
	ts, err := time.Parse(time.RFC3339, got)
	if err != nil || res.IsError || !strings.HasSuffix(got, "+09:00") || time.Since(ts).Abs() > time.Minute {
		t.Errorf("now(Asia/Tokyo) = %q (%v)", got, err)
	}
	if got, _ = call(t, ctx, cs, &mcp.CallToolParams{Name: "now"}); !strings.HasSuffix(got, "Z") {
		t.Errorf("now() = %q, want UTC", got)
	}
	if _, res = call(t, ctx, cs, &mcp.CallToolParams{Name: "now", Arguments: map[string]any{"timezone": "Mars/Olympus"}}); !res.IsError {
		t.Error("unknown timezone: no isError")
	}
}

func TestSleepProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		progress []float64
	)
	cs := connect(t, ctx, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.ProgressToken == "tok" {
				progress = append(progress, req.Params.Progress)
			}
		},
	})
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 200}}
	params.SetProgressToken("tok")
	start := time.Now()
	got, res := call(t, ctx, cs, params)
	if res.IsError || !strings.HasPrefix(got, "slept ") || time.Since(start) < 200*time.Millisecond {
		t.Errorf("sleep: %q isError=%v after %v", got, res.IsError, time.Since(start))
	}
	// Notifications are handled asynchronously by the client: the last one
	// may land just after the result.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(progress)
		mu.Unlock()
		if n >= progressSteps || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	if len(progress) != progressSteps || slices.Max(progress) != progressSteps {
		t.Errorf("progress = %v, want 1..%d", progress, progressSteps)
	}
	mu.Unlock()

	// Without a token: no notifications, same result.
	if got, res := call(t, ctx, cs, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 10}}); res.IsError || !strings.HasPrefix(got, "slept") {
		t.Errorf("sleep without token: %q", got)
	}
	if _, res := call(t, ctx, cs, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": -1}}); !res.IsError {
		t.Error("negative sleep: no isError")
	}
}
