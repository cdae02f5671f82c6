package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// limitCase is an upstream of one transport that can send a message of
// any size (the fake's flood tool), and what the transport does after
// refusing one: whether the same session goes on.
type limitCase struct {
	name        string
	start       func(t *testing.T) *config.Server
	sameSession bool
}

var limitCases = []limitCase{
	// A discarded line leaves the framing intact: the session goes on.
	{"stdio", func(t *testing.T) *config.Server { return stdioServer(t, "raw", nil) }, true},
	// Each reply is its own HTTP response: closing it costs nothing else.
	{"streamable-sse", func(t *testing.T) *config.Server { return newStreamableFake(t).server("up") }, true},
	{"streamable-json", func(t *testing.T) *config.Server {
		f := newStreamableFake(t)
		f.jsonReplies = true
		return f.server("up")
	}, true},
	// The stream, cut off mid-event, is the session: a new one is made.
	{"sse", func(t *testing.T) *config.Server { return newSSEFake(t).server("up") }, false},
}

func flood(ctx context.Context, s caller, size int, mode string) (string, error) {
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, []byte(fmt.Sprintf(`{"name":"flood","arguments":{"size":%d,"text":%q}}`, size, mode)))
	if err != nil {
		return "", err
	}
	return resultText(res)
}

// managerCaller adapts Manager.Call to flood's parameter.
type managerCaller struct {
	m      *Manager
	server string
}

func (c managerCaller) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return c.m.Call(ctx, c.server, method, params)
}

// checkTooLarge asserts err is the refusal of a message over limit (S23).
func checkTooLarge(t *testing.T, err error, limit int) {
	t.Helper()
	var tl *MessageTooLargeError
	if !errors.As(err, &tl) || tl.Limit != limit {
		t.Fatalf("err = %v, want the message limit of %d bytes", err, limit)
	}
	if f := Classify(err); f.Class != FaultInvalidResponse {
		t.Errorf("fault = %q, want invalid_response", f.Class)
	}
	want := fmt.Sprintf("upstream message exceeds the %s limit (limits.max_upstream_message)", formatSize(limit))
	if !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to say %q", err, want)
	}
}

// An upstream message over limits.max_upstream_message fails its call
// with invalid_response naming the limit, alike on every transport; the
// session goes on where the transport allows, else the Manager makes a
// new one, and the next call succeeds.
func TestMessageLimitEveryTransport(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range limitCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			// A 2 MiB message under -race on a loaded machine can take
			// longer than the fakes' 5 s: the limit is the subject here.
			srv.Timeout = 30 * time.Second
			m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": srv}, MaxMessageBytes: limit})
			t.Cleanup(func() { m.Close() })
			ctx := context.Background()
			before, err := m.Session(ctx, "up")
			if err != nil {
				t.Fatal(err)
			}
			// Just under the limit passes: the whole message is limit bytes.
			overhead := len(`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":""}]}}`)
			if got, err := flood(ctx, managerCaller{m, "up"}, limit-overhead, ""); err != nil || len(got) != limit-overhead {
				t.Fatalf("message of exactly the limit: %d bytes, %v", len(got), err)
			}
			for _, mode := range []string{"", "id-last"} {
				_, err := flood(ctx, managerCaller{m, "up"}, 2*limit, mode)
				checkTooLarge(t, err, limit)
			}
			if got, err := callEcho(ctx, m, "up", "after"); err != nil || got != "after" {
				t.Fatalf("call after the refusal: %q, %v", got, err)
			}
			after, err := m.Session(ctx, "up")
			if err != nil {
				t.Fatal(err)
			}
			if same := after == before; same != tc.sameSession {
				t.Errorf("same session after the refusal = %v, want %v", same, tc.sameSession)
			}
		})
	}
}

// On stdio an oversized reply fails its own call only: a call in flight
// beside it gets its answer, and an oversized notification fails nothing.
func TestStdioOversizedLineFailsOnlyItsCall(t *testing.T) {
	const limit = 1 << 20
	for _, mode := range []string{"", "id-last", "notify"} {
		t.Run("mode="+mode, func(t *testing.T) {
			s := connect(t, Options{Server: stdioServer(t, "raw", nil), MaxMessageBytes: limit})
			ctx := context.Background()
			pid, err := callTool(ctx, s, "pid", "")
			if err != nil {
				t.Fatal(err)
			}
			other := make(chan error, 1)
			go func() {
				got, err := callTool(ctx, s, "notify", `{"delay_ms":300}`)
				if err == nil && got != "notified" {
					err = fmt.Errorf("got %q", got)
				}
				other <- err
			}()
			waitFor(t, "the other call in flight", func() bool { return inFlight(t, s) == 1 })
			got, err := flood(ctx, s, 3*limit, mode)
			if mode == "notify" {
				if err != nil || got != "after" {
					t.Errorf("call whose server sent an oversized notification: %q, %v", got, err)
				}
			} else {
				checkTooLarge(t, err, limit)
			}
			if err := <-other; err != nil {
				t.Errorf("call in flight beside the oversized message: %v", err)
			}
			if again, err := callTool(ctx, s, "pid", ""); err != nil || again != pid {
				t.Errorf("process after the refusal: %q (was %q), %v", again, pid, err)
			}
		})
	}
}

// Refusing a 100 MiB reply costs memory bounded by the limit, not the
// reply (S23: RSS stays under 100 MiB): the peak RSS of the process and
// the heap in use are measured while each transport refuses one, at the
// default limit.
func TestOversizedReplyMemoryBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector multiplies memory use")
	}
	const size = 100 << 20
	for _, tc := range limitCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			srv.Timeout = 30 * time.Second
			m := NewManager(ManagerOptions{Servers: map[string]*config.Server{"up": srv}})
			t.Cleanup(func() { m.Close() })
			ctx := context.Background()
			if _, err := callEcho(ctx, m, "up", "warm"); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			debug.FreeOSMemory()
			baseRSS := rssBytes(t, "VmRSS")
			resetPeakRSS()
			var peakHeap atomic.Uint64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peakHeap.Load() {
						peakHeap.Store(ms.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
			})
			start := time.Now()
			_, err := flood(ctx, managerCaller{m, "up"}, size, "")
			took := time.Since(start)
			close(stop)
			wg.Wait()
			checkTooLarge(t, err, DefaultMaxMessageBytes)
			peak := rssBytes(t, "VmHWM")
			t.Logf("refused a %d MiB reply in %v: RSS %.1f MiB before, peak %.1f MiB; heap in use peak %.1f MiB",
				size>>20, took.Round(time.Millisecond), mib(baseRSS), mib(peak), mib(peakHeap.Load()))
			if peak >= 100<<20 {
				t.Errorf("peak RSS %.1f MiB while refusing a 100 MiB reply, want under 100 MiB", mib(peak))
			}
			if got, err := callEcho(ctx, m, "up", "after"); err != nil || got != "after" {
				t.Errorf("call after the refusal: %q, %v", got, err)
			}
		})
	}
}

func mib[N int | uint64](n N) float64 { return float64(n) / (1 << 20) }

// rssBytes reads a memory figure of this process from /proc/self/status.
func rssBytes(t *testing.T, field string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		if runtime.GOOS != "linux" {
			t.Skipf("no /proc on %s: %v", runtime.GOOS, err)
		}
		t.Fatalf("read /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", field, v)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
