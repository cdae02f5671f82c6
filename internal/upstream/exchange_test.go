package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// A streamable session closed while calls hang on the upstream ends them
// at once, whether the upstream has not answered the POST at all or holds
// its SSE stream open without the reply: Close cancels each call's
// exchange (exchange.go), which aborts its I/O. The upstream sees every
// request's connection go.
func TestCloseEndsCallsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers bool // the upstream sends the stream's headers first
	}{{"no response", false}, {"open stream", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const calls = 4
			f := newStreamableFake(t)
			arrived := make(chan struct{}, calls)
			gone := make(chan struct{}, calls)
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
				if m.Method != mcpwire.MethodToolsCall {
					return false
				}
				if tc.headers {
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
				}
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-release:
				}
				return true
			}
			s := connect(t, Options{Server: f.server("http")})
			errs := make(chan error, calls)
			for range calls {
				go func() {
					_, err := callTool(context.Background(), s, "echo", `{"text":"x"}`)
					errs <- err
				}()
			}
			for range calls {
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatal("the calls did not reach the upstream")
				}
			}
			closed := make(chan struct{})
			go func() { s.Close(); close(closed) }()
			for range calls {
				select {
				case err := <-errs:
					if KindOf(err) != KindClosed || !errors.Is(err, ErrClosed) {
						t.Errorf("err = %v (kind %v), want the session's close", err, KindOf(err))
					}
				case <-time.After(3 * time.Second):
					t.Fatal("a call in flight outlived Close")
				}
			}
			select {
			case <-closed:
			case <-time.After(3 * time.Second):
				t.Fatal("Close did not return")
			}
			for range calls {
				select {
				case <-gone:
				case <-time.After(3 * time.Second):
					t.Fatal("the upstream still holds a request of the closed session")
				}
			}
			if n := exchangesInFlight(s); n != 0 {
				t.Errorf("%d exchanges still tracked after Close", n)
			}
		})
	}
}

// Answered calls leave no exchange behind (each is tracked only while its
// request is in flight or draining), and a session closed right after
// an answer that left its stream open does not wait out the drain.
func TestExchangesEndWithTheirCalls(t *testing.T) {
	f := newStreamableFake(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f.hook = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
		if m.Method != mcpwire.MethodToolsCall {
			return false
		}
		// The reply, then the stream stays open: the drain reads on.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		reply := jsonrpc.NewResult(m.ID, []byte(`{"content":[{"type":"text","text":"hi"}]}`))
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "message", Data: jsonrpc.Encode(reply)}))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	}
	s := connect(t, Options{Server: f.server("http")})
	for range 3 {
		if out, err := callTool(context.Background(), s, "echo", `{}`); err != nil || out != "hi" {
			t.Fatalf("call = %q, %v", out, err)
		}
	}
	// Three drains (initialize's ends 5 ms after its reply).
	if !eventually(func() bool { return exchangesInFlight(s) == 3 }) {
		t.Errorf("%d exchanges tracked while 3 drain, want 3", exchangesInFlight(s))
	}
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > streamDrain/2 {
		t.Errorf("Close took %v: it waited for the drains instead of ending them", d)
	}
	if n := exchangesInFlight(s); n != 0 {
		t.Errorf("%d exchanges still tracked after Close", n)
	}
}

func exchangesInFlight(s *conn) int {
	t := s.t.(*streamable)
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.exchanges)
}

// The exchange is a context other code may build on: a child context and
// an AfterFunc end with it, a stopped AfterFunc never runs, and its
// values are the call's.
func TestExchangeContext(t *testing.T) {
	type key struct{}
	parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	defer cancelParent(nil)
	var x exchange
	x.vals = parent
	if x.Value(key{}) != "v" {
		t.Errorf("Value = %v, want the call's", x.Value(key{}))
	}
	child, cancelChild := context.WithCancel(&x)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(&x, func() { close(ran) })
	stopped := context.AfterFunc(&x, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Error("stop reported the function already started")
	}
	// The call's own cancellation cause is not the exchange's.
	cancelParent(errReadTimeout)
	if x.Err() != nil {
		t.Fatalf("the exchange ended with the call's context: %v", x.Err())
	}
	x.cancel()
	x.cancel() // once only
	for _, c := range []<-chan struct{}{x.Done(), child.Done(), ran} {
		select {
		case <-c:
		case <-time.After(3 * time.Second):
			t.Fatal("not ended by cancel")
		}
	}
	if !errors.Is(child.Err(), context.Canceled) || context.Cause(&x) != context.Canceled || context.Cause(child) != context.Canceled {
		t.Errorf("err = %v, cause %v / %v, want context.Canceled", child.Err(), context.Cause(&x), context.Cause(child))
	}
	// Registering after the end runs at once.
	late := make(chan struct{})
	context.AfterFunc(&x, func() { close(late) })
	select {
	case <-late:
	case <-time.After(3 * time.Second):
		t.Fatal("an AfterFunc registered after the end did not run")
	}
}
