package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/examples/echo/echoserver"
)

func TestRunAgainstEcho(t *testing.T) {
	srv := httptest.NewServer(echoserver.Handler())
	defer srv.Close()

	res, err := Run(context.Background(), Options{
		URL:         srv.URL + "/mcp",
		Concurrency: 4,
		Duration:    300 * time.Millisecond,
		Warmup:      50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res)
	if res.Calls <= 0 {
		t.Errorf("calls = %d, want > 0", res.Calls)
	}
	if res.Errors != 0 {
		t.Errorf("errors = %d, want 0; samples: %q", res.Errors, res.ErrorSamples)
	}
	if res.CallsPerSec <= 0 || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Errorf("bad stats: %+v", res)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
}

func TestRunCallsLimit(t *testing.T) {
	srv := httptest.NewServer(echoserver.Handler())
	defer srv.Close()
	res, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 3, Calls: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 100 || res.Errors != 0 {
		t.Errorf("calls=%d errors=%d, want 100, 0", res.Calls, res.Errors)
	}
}

// sseServer answers initialize and tools/call over SSE, with a progress
// notification before the reply, and sets isError when the text is "fail".
// It requires the session id it issued.
func sseServer(t *testing.T, deletes *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			} `json:"params"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if req.Method != "initialize" && r.Header.Get("Mcp-Session-Id") != "s1" {
			http.Error(w, "no session", http.StatusNotFound)
			return
		}
		if len(req.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		var result string
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sse","version":"0"}}`
		case "tools/call":
			isErr := req.Params.Arguments.Text == "fail"
			result = `{"content":[{"type":"text","text":"x"}],"isError":` + map[bool]string{true: "true", false: "false"}[isErr] + `}`
		default:
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"+string(req.ID)+",\"error\":{\"code\":-32601,\"message\":\"nope\"}}\n\n")
			return
		}
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n")
		io.WriteString(w, "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"+string(req.ID)+",\"result\":"+result+"}\n\n")
	}))
}

func TestRunSSE(t *testing.T) {
	var deletes atomic.Int32
	srv := sseServer(t, &deletes)
	defer srv.Close()
	res, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls == 0 || res.Errors != 0 {
		t.Errorf("calls=%d errors=%d samples=%q", res.Calls, res.Errors, res.ErrorSamples)
	}
	if deletes.Load() != 2 {
		t.Errorf("DELETEs = %d, want 2", deletes.Load())
	}

	// isError results and JSON-RPC errors count as errors.
	for _, o := range []Options{
		{Arguments: map[string]any{"text": "fail"}},
		{Tool: "other"}, // answered as tools/call, text "" -> ok
	} {
		o.URL, o.Calls = srv.URL, 10
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(10)
		if o.Tool == "other" {
			want = 0
		}
		if res.Errors != want {
			t.Errorf("%+v: errors = %d, want %d (%q)", o, res.Errors, want, res.ErrorSamples)
		}
	}
}

func TestRunErrors(t *testing.T) {
	// A server that initializes fine, then answers 500.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(b), `"initialize"`):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"x","version":"0"}}}`)
		case strings.Contains(string(b), `notifications/`):
			w.WriteHeader(http.StatusAccepted)
		default:
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Options{URL: srv.URL, Calls: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 5 || res.Errors != 5 || len(res.ErrorSamples) == 0 || !strings.Contains(res.ErrorSamples[0], "500") {
		t.Errorf("got %+v", res)
	}

	// Nothing listening: Run fails.
	srv.Close()
	if _, err := Run(context.Background(), Options{URL: srv.URL, Calls: 1}); err == nil {
		t.Error("Run against closed server: no error")
	}
}

func TestFindSSEReply(t *testing.T) {
	body := []byte("event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\n\n" + // garbage
		"data: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{\"ok\":1}}\n")
	got, err := findSSEReply(body, []byte("7"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"jsonrpc\":\"2.0\",\n\"id\":7,\"result\":{\"ok\":1}}"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := findSSEReply(body, []byte("9")); err == nil {
		t.Error("missing id: no error")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(d[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %d", p)
	}
}
