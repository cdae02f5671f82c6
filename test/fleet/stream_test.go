package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testStreaming: scenario 1 with a streaming upstream (server-everything
// over stdio). One go-sdk session through the balancer makes three
// long-running calls at once, so round robin puts one on each replica;
// each call's progress notifications arrive while it runs (the replica
// streams them over SSE and the balancer flushes them), not all with the
// result.
func testStreaming(t *testing.T, f *Fleet) {
	needNode(t)
	const (
		steps    = 3
		duration = 0.9 // seconds
	)
	var (
		mu       sync.Mutex
		progress = map[string][]time.Time{} // token -> arrival times
	)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		tok := fmt.Sprint(req.Params.ProgressToken)
		progress[tok] = append(progress[tok], time.Now())
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs := sdkConnectWith(t, ctx, f.LB.URL+"/mcp", streamKey, revStateful, opts)
	f.LB.ResetCounts()
	var wg sync.WaitGroup
	done := make([]time.Time, len(f.Replicas))
	for i := range f.Replicas {
		wg.Go(func() {
			p := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": duration, "steps": steps}}
			p.SetProgressToken(fmt.Sprintf("call-%d", i))
			res, err := cs.CallTool(ctx, p)
			done[i] = time.Now()
			if err != nil || res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "completed") {
				t.Errorf("call %d: %v %+v", i, err, res)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range f.Replicas {
		got := progress[fmt.Sprintf("call-%d", i)]
		// The last notification may come after the result (the upstream
		// sends it just before): the earlier ones may not.
		if len(got) < steps-1 {
			t.Errorf("call %d: %d progress notifications, want at least %d", i, len(got), steps-1)
			continue
		}
		if lead := done[i].Sub(got[0]); lead < 300*time.Millisecond {
			t.Errorf("call %d: its first progress notification came %v before the result; want it while the call ran (streamed, not buffered)", i, lead)
		}
	}
	served, failed := f.LB.Counts()
	for _, r := range f.Replicas {
		if served[r.Name] == 0 || failed[r.Name] != 0 {
			t.Errorf("replica %s served %d requests (%d failed) of the streaming calls", r.Name, served[r.Name], failed[r.Name])
		}
	}
	t.Logf("requests per replica %v", served)
}
