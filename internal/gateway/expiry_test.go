package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// shortSessions is a streamable-HTTP upstream that ends each session after
// it served three tool calls: the next request with that id gets 404 and
// a JSON-RPC error, as the MCP transport says a server that forgot a
// session answers. It counts initializes and tool runs.
type shortSessions struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int // session id -> tool calls served
	next  int
	inits atomic.Int32
	runs  atomic.Int32
}

func newShortSessions(t *testing.T) *shortSessions {
	u := &shortSessions{calls: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		sid := r.Header.Get(mcpwire.HeaderSessionID)
		u.mu.Lock()
		if m.Method == mcpwire.MethodInitialize {
			u.next++
			sid = fmt.Sprint("s", u.next)
			u.calls[sid] = 0
			u.inits.Add(1)
		}
		n, known := u.calls[sid]
		if known && m.Method == mcpwire.MethodToolsCall {
			if n >= 3 {
				delete(u.calls, sid)
				known = false
			} else {
				u.calls[sid] = n + 1
			}
		}
		u.mu.Unlock()
		if !known {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32001,"message":"Session not found"}}`, m.ID.Raw())
			return
		}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		switch m.Method {
		case mcpwire.MethodInitialize:
			w.Header().Set(mcpwire.HeaderSessionID, sid)
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"short","version":"0"}}`
		case mcpwire.MethodToolsList:
			result = `{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`
		case mcpwire.MethodToolsCall:
			u.runs.Add(1)
			result = `{"content":[{"type":"text","text":"ok"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}))
	t.Cleanup(u.Close)
	return u
}

// C6.4, C11.2 through /mcp: an upstream that ends its sessions after every
// three calls is healthy, and every expiry is recovered, however soon
// after the last one and with 64 callers meeting it at once; no call runs
// twice. (Calls 7 and 8 of 8 failed with "Session not found", and with 64
// concurrent callers across an expiry every call failed.)
func TestEverySessionExpiryRecovered(t *testing.T) {
	up := newShortSessions(t)
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"short": httpServer(up.URL + "/mcp")}})
	const callBody = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"short__echo","arguments":{}}}`
	want := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"ok"}]}}`, id)
	}
	for i := range 12 {
		if code, _, body := rpc(t, gw.URL+"/mcp", nil, fmt.Sprintf(callBody, i)); code != 200 || strings.TrimSpace(string(body)) != want(i) {
			t.Fatalf("sequential call %d: %d %s", i+1, code, body)
		}
	}
	before := up.runs.Load()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for c := range 64 {
		wg.Go(func() {
			for k := range 3 {
				id := 1000 + c*10 + k
				if code, _, body := rpc(t, gw.URL+"/mcp", nil, fmt.Sprintf(callBody, id)); code != 200 || strings.TrimSpace(string(body)) != want(id) {
					if failed.Add(1) <= 3 {
						t.Errorf("concurrent call %d: %d %s", id, code, body)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 192 concurrent calls failed", n)
	}
	if runs := up.runs.Load() - before; runs != 192 {
		t.Errorf("the tool ran %d times for 192 calls", runs)
	}
	t.Logf("%d upstream sessions for %d calls", up.inits.Load(), up.runs.Load())
}
