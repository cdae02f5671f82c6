// Command chaosup is the upstream MCP server of the chaos suite
// (test/chaos): a well-behaved one with a fast and a slow tool, or a hostile
// one whose tools/call misbehaves in one chosen way, over streamable HTTP or
// stdio. It speaks just enough of the handshake era (initialize, tools/list,
// tools/call, ping, session ids, DELETE) for the gateway to use it, and
// nothing else: it exists to be killed, restarted and made to misbehave.
//
//	chaosup -transport http -listen 127.0.0.1:0 [-mode normal|big|sseforever|half]
//	chaosup -transport stdio
//
// Tools: fast (answers at once), slow ({"ms": N}: answers after N ms).
// Modes change tools/call of fast only (slow stays well-behaved, to show
// the upstream is usable after the fault):
//
//	big         a JSON reply of -big bytes (default 100 MiB); on stdio, one line
//	sseforever  an SSE stream of log notifications, every 20 ms, never a reply
//	half        half of a JSON reply (Content-Length of the whole), then silence
//
// The HTTP server logs "listening on http://ADDR" to stderr once it accepts.
// An unknown session id gets 404, as a restarted real server answers.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type server struct {
	mode string
	big  int64

	mu       sync.Mutex
	sessions map[string]bool
}

func main() {
	transport := flag.String("transport", "http", "http or stdio")
	listen := flag.String("listen", "127.0.0.1:0", "listen address (http)")
	mode := flag.String("mode", "normal", "normal, big, sseforever or half")
	big := flag.Int64("big", 100<<20, "reply size in bytes (mode big)")
	flag.Parse()
	s := &server{mode: *mode, big: *big, sessions: map[string]bool{}}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch *transport {
	case "stdio":
		s.serveStdio(ctx)
	case "http":
		s.serveHTTP(ctx, *listen)
	default:
		log.Fatalf("unknown transport %q", *transport)
	}
}

// result answers a request that behaves (everything but a hostile
// tools/call); ok is false for an unknown method.
func (s *server) result(ctx context.Context, m *message) (any, bool) {
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.ProtocolVersion == "" {
			p.ProtocolVersion = "2025-06-18"
		}
		return map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "chaosup", "version": "1"},
		}, true
	case "ping":
		return map[string]any{}, true
	case "tools/list":
		schema := map[string]any{"type": "object"}
		return map[string]any{"tools": []any{
			map[string]any{"name": "fast", "description": "answers at once", "inputSchema": schema},
			map[string]any{"name": "slow", "description": "answers after ms milliseconds", "inputSchema": schema},
		}}, true
	case "tools/call":
		var p struct {
			Name      string `json:"name"`
			Arguments struct {
				MS int `json:"ms"`
			} `json:"arguments"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.Name == "slow" && p.Arguments.MS > 0 {
			select {
			case <-time.After(time.Duration(p.Arguments.MS) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": p.Name + " ok"}}}, true
	}
	return nil, false
}

func reply(id json.RawMessage, res any, ok bool) []byte {
	var out map[string]any
	if ok {
		out = map[string]any{"jsonrpc": "2.0", "id": id, "result": res}
	} else {
		out = map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32601, "message": "Method not found"}}
	}
	b, _ := json.Marshal(out)
	return b
}

// serveStdio answers line-delimited JSON-RPC on stdin/stdout, each request
// on its own goroutine (slow calls overlap).
func (s *server) serveStdio(ctx context.Context) {
	var wmu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var wg sync.WaitGroup
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil || len(m.ID) == 0 || m.Method == "" {
			continue // notifications and answers: nothing to say
		}
		wg.Go(func() {
			if s.mode == "big" && isCall(&m, "fast") {
				wmu.Lock()
				defer wmu.Unlock()
				s.writeBig(out, m.ID)
				out.WriteByte('\n')
				out.Flush()
				return
			}
			res, ok := s.result(ctx, &m)
			b := reply(m.ID, res, ok)
			wmu.Lock()
			defer wmu.Unlock()
			out.Write(b)
			out.WriteByte('\n')
			out.Flush()
		})
	}
	wg.Wait()
}

func (s *server) serveHTTP(ctx context.Context, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", s.handle)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	switch r.Method {
	case http.MethodGet:
		http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
		return
	case http.MethodDelete:
		s.mu.Lock()
		delete(s.sessions, sid)
		s.mu.Unlock()
		return
	case http.MethodPost:
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var m message
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&m); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if m.Method == "initialize" {
		b := make([]byte, 16)
		rand.Read(b)
		sid = hex.EncodeToString(b)
		s.mu.Lock()
		s.sessions[sid] = true
		s.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", sid)
	} else {
		s.mu.Lock()
		known := s.sessions[sid]
		s.mu.Unlock()
		if !known {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}`))
			return
		}
	}
	if len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if s.mode != "normal" && isCall(&m, "fast") {
		s.hostile(w, r, &m)
		return
	}
	res, ok := s.result(r.Context(), &m)
	w.Header().Set("Content-Type", "application/json")
	w.Write(reply(m.ID, res, ok))
}

// isCall reports whether m calls tool.
func isCall(m *message, tool string) bool {
	if m.Method != "tools/call" {
		return false
	}
	var p struct {
		Name string `json:"name"`
	}
	return json.Unmarshal(m.Params, &p) == nil && p.Name == tool
}

// bigParts are what comes before and after the text of a big reply.
func bigParts(id json.RawMessage) (head, tail string) {
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"`, `"}]}}`
}

func (s *server) bigLen(id json.RawMessage) int64 {
	head, tail := bigParts(id)
	return int64(len(head)) + s.big + int64(len(tail))
}

// writeBig writes a reply to id whose text is s.big bytes, stopping at the
// first write error (the reader gave up).
func (s *server) writeBig(w io.Writer, id json.RawMessage) {
	head, tail := bigParts(id)
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for left := s.big; left > 0; left -= int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
			return
		}
	}
	io.WriteString(w, tail)
}

func (s *server) hostile(w http.ResponseWriter, r *http.Request, m *message) {
	flush := func() { http.NewResponseController(w).Flush() }
	switch s.mode {
	case "big":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.FormatInt(s.bigLen(m.ID), 10))
		s.writeBig(w, m.ID)
	case "sseforever":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		ev := []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"tick\"}}\n\n")
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if _, err := w.Write(ev); err != nil {
				return
			}
			flush()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
	case "half":
		full := reply(m.ID, map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat("y", 4096)}}}, true)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(full)))
		w.WriteHeader(http.StatusOK)
		w.Write(full[:len(full)/2])
		flush()
		<-r.Context().Done()
	}
}
