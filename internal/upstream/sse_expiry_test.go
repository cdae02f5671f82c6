package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// expiringSSE is a legacy HTTP+SSE server whose sessions end (404 on the
// message endpoint, the stream closed) when a call of tool "end" comes:
// the calls of "slow" in flight then never get their replies (only the
// first "end" does so; later ones run like any tool). It counts
// how often each tool ran.
type expiringSSE struct {
	*httptest.Server
	mu       sync.Mutex
	sessions map[string]chan []byte // session id -> its stream's outbox
	next     int
	ran      map[string]*atomic.Int32
	ended    atomic.Bool // the first call of "end" ended its session
}

func newExpiringSSE(t *testing.T) *expiringSSE {
	s := &expiringSSE{sessions: map[string]chan []byte{}, ran: map[string]*atomic.Int32{"slow": {}, "end": {}, "echo": {}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		out := make(chan []byte, 16)
		s.mu.Lock()
		s.next++
		id := fmt.Sprint(s.next)
		s.sessions[id] = out
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "endpoint", Data: []byte("/messages?sessionId=" + id)}))
		w.(http.Flusher).Flush()
		for {
			select {
			case data, ok := <-out:
				if !ok {
					return // the session ended
				}
				w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "message", Data: data}))
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("POST /messages", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("sessionId")
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		s.mu.Lock()
		out := s.sessions[id]
		s.mu.Unlock()
		if out == nil {
			http.Error(w, "Session not found", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, "bad message", http.StatusBadRequest)
			return
		}
		reply := func(result string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.sessions[id] == out {
				out <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result))
			}
		}
		switch {
		case m.Method == mcpwire.MethodInitialize:
			reply(`{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"expiring","version":"1"}}`)
		case m.Method == mcpwire.MethodToolsCall:
			name, _ := jsonrpc.GetPath(m.Params, "name")
			tool := strings.Trim(string(name), `"`)
			if tool == "end" && s.ended.CompareAndSwap(false, true) {
				// The session is over: this request is refused, and the
				// calls in flight never hear back.
				s.mu.Lock()
				delete(s.sessions, id)
				s.mu.Unlock()
				http.Error(w, "Session not found", http.StatusNotFound)
				// Its stream closes a little later (the 404 is what the
				// client must act on; a stream that ends first is its
				// own, already handled, case).
				time.AfterFunc(50*time.Millisecond, func() { close(out) })
				return
			}
			s.ran[tool].Add(1)
			go func() {
				if tool == "slow" {
					time.Sleep(300 * time.Millisecond)
				}
				reply(`{"content":[{"type":"text","text":"` + tool + `"}]}`)
			}()
		}
		w.WriteHeader(http.StatusAccepted)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// C6.4 on legacy SSE: a 404 on one request ends the session, and that
// request (which never reached a tool) goes again on a new session; the
// calls sent before it may have run, and their replies were due on the
// stream that ended with the session, so they fail as closed and are not
// sent again: no tool runs twice. (Before, every call in flight failed as
// expired and the Manager re-sent them all.)
func TestLegacySSEExpiryDoesNotRunCallsTwice(t *testing.T) {
	up := newExpiringSSE(t)
	m := NewManager(ManagerOptions{Servers: map[string]*config.Server{
		"old": {Name: "old", Transport: config.TransportSSE, URL: up.URL + "/sse", Timeout: 5 * time.Second},
	}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func(tool string) (json.RawMessage, error) {
		return m.Call(ctx, "old", mcpwire.MethodToolsCall, json.RawMessage(`{"name":"`+tool+`","arguments":{}}`))
	}
	if _, err := call("echo"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { _, err := call("slow"); slow <- err }()
	waitFor(t, "the slow call upstream", func() bool { return up.ran["slow"].Load() != 0 })
	// "end" is refused with a 404 and the session ends; the Manager sends
	// it again on a new session, where it runs.
	if res, err := call("end"); err != nil || !strings.Contains(string(res), "end") {
		t.Errorf("the call that met the 404: %s %v, want it served on a new session", res, err)
	}
	if n := up.ran["end"].Load(); n != 1 {
		t.Errorf("end ran %d times, want once", n)
	}
	err := <-slow
	if KindOf(err) != KindClosed || errors.Is(err, ErrSessionExpired) {
		t.Errorf("the call in flight when the session ended: %v (kind %s), want closed, not expired", err, KindOf(err))
	}
	if n := up.ran["slow"].Load(); n != 1 {
		t.Errorf("the slow tool ran %d times, want once", n)
	}
	if res, err := call("echo"); err != nil || !strings.Contains(string(res), "echo") {
		t.Errorf("a call after the expiry: %s %v", res, err)
	}
}
