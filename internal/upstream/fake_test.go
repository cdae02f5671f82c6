package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// The upstream servers of these tests are written here on raw JSON, so
// that faults can be injected, and run for real: as a child process (the
// test binary re-executed, see TestMain) for stdio, as httptest servers for
// streamable HTTP and legacy SSE. sdk_test.go has the go-sdk peers.

// envServerMode makes the test binary act as a stdio MCP server.
const envServerMode = "UPSTREAM_TEST_SERVER"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(envServerMode); mode {
	case "":
	case "raw":
		runStdioFake()
		os.Exit(0)
	case "sdk":
		runStdioSDK()
		os.Exit(0)
	case "mute":
		// Reads its input and never answers (initialize included), as a
		// server stuck before serving does.
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", envServerMode, mode)
		os.Exit(2)
	}
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(2 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines of package upstream leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to d for every goroutine running package code
// (not test code) to end, and returns the stacks of those that did not.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, line := range strings.Split(g, "\n") {
				line = strings.TrimSpace(line)
				if strings.Contains(line, "/internal/upstream/") && !strings.Contains(line, "_test.go") {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fake is a scriptable MCP server core shared by the three transports.
// Tools (by name): echo {text}, notify {delay_ms}, ask (a roots/list
// round trip), slow (never answers), garbage (a non-JSON message and no
// reply), big {size}, die (stdio: exit), pid, env {name}, cancelled (the
// cancellations received so far), init (the initialize params received).
type fake struct {
	version      string // protocolVersion to answer; "" echoes the offer
	instructions *string

	mu        sync.Mutex
	waiters   map[string]chan *jsonrpc.Message
	inflight  map[string]context.CancelFunc
	cancelled []string
	init      json.RawMessage
	nextAsk   int
	// flood writes one message, streamed from the reader, on the
	// transport (the tool flood); a request's context may carry its own
	// (floodKey), for a reply on that request's stream.
	flood func(msg io.Reader)
}

type floodKey struct{}

// floodMessage is a reply to id whose text is size bytes, produced as it
// is read: the fakes stream it and never hold it. idLast puts the id after
// the result, as the TypeScript SDK writes its messages.
func floodMessage(id jsonrpc.ID, size int, idLast bool) io.Reader {
	head := `{"jsonrpc":"2.0","id":` + id.Raw() + `,"result":{"content":[{"type":"text","text":"`
	tail := `"}]}}`
	if idLast {
		head = `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"`
		tail = `"}]},"id":` + id.Raw() + `}`
	}
	return io.MultiReader(strings.NewReader(head), io.LimitReader(xs{}, int64(size)), strings.NewReader(tail))
}

// floodNotification is a log message of size bytes.
func floodNotification(size int) io.Reader {
	return io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`),
		io.LimitReader(xs{}, int64(size)), strings.NewReader(`"}}`))
}

// xs reads as an endless run of 'x'.
type xs struct{}

var xBlock = bytes.Repeat([]byte("x"), 64<<10)

func (xs) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], xBlock)
	}
	return n, nil
}

func newFake() *fake {
	return &fake{waiters: map[string]chan *jsonrpc.Message{}, inflight: map[string]context.CancelFunc{}}
}

// emitter writes a message to the client on the stream the request came
// on; raw bytes are written as they are.
type emitter func(data []byte)

func emitMsg(emit emitter, m *jsonrpc.Message) { emit(jsonrpc.Encode(m)) }

// handle processes one client message. Requests are answered through emit
// (after any related messages); it blocks for as long as the tool runs.
func (f *fake) handle(ctx context.Context, m *jsonrpc.Message, emit emitter) {
	switch {
	case m.IsResponse():
		f.mu.Lock()
		ch := f.waiters[m.ID.Raw()]
		delete(f.waiters, m.ID.Raw())
		f.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	case m.IsNotification():
		if m.Method == mcpwire.NotifyCancelled {
			rid, _ := jsonrpc.Get(m.Params, "requestId")
			f.mu.Lock()
			f.cancelled = append(f.cancelled, string(m.Params))
			cancel := f.inflight[string(rid)]
			f.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.inflight[m.ID.Raw()] = cancel
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.inflight, m.ID.Raw())
		f.mu.Unlock()
	}()
	result, rpcErr := f.result(ctx, m, emit)
	if ctx.Err() != nil || (result == nil && rpcErr == nil) {
		return
	}
	if rpcErr != nil {
		emitMsg(emit, jsonrpc.NewErrorResponse(m.ID, rpcErr))
		return
	}
	emitMsg(emit, jsonrpc.NewResult(m.ID, result))
}

func textResult(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}})
	return b
}

func (f *fake) result(ctx context.Context, m *jsonrpc.Message, emit emitter) (json.RawMessage, *jsonrpc.Error) {
	switch m.Method {
	case mcpwire.MethodInitialize:
		f.mu.Lock()
		f.init = m.Params
		f.mu.Unlock()
		v := f.version
		if v == "" {
			v, _ = jsonrpc.GetString(m.Params, "protocolVersion")
		}
		res := map[string]any{
			"protocolVersion": v,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": true}, "logging": map[string]any{}},
			"serverInfo":      map[string]any{"name": "fake", "version": "1"},
		}
		if f.instructions != nil {
			res["instructions"] = *f.instructions
		}
		b, _ := json.Marshal(res)
		return b, nil
	case mcpwire.MethodToolsList:
		return json.RawMessage(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`), nil
	case mcpwire.MethodToolsCall:
	default:
		return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found")
	}
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Text    string `json:"text"`
			DelayMS int    `json:"delay_ms"`
			ThenMS  int    `json:"then_ms"` // notify: how long after its progress it answers
			Size    int    `json:"size"`
			Name    string `json:"name"`
		} `json:"arguments"`
	}
	_ = json.Unmarshal(m.Params, &p)
	args := p.Arguments
	switch p.Name {
	case "echo":
		return textResult(args.Text), nil
	case "notify":
		if !sleepCtx(ctx, time.Duration(args.DelayMS)*time.Millisecond) {
			return nil, nil
		}
		emitMsg(emit, jsonrpc.NewNotification(mcpwire.NotifyMessage, json.RawMessage(`{"level":"info","data":"hello"}`)))
		if tok, ok := jsonrpc.GetPath(m.Params, "_meta", "progressToken"); ok {
			emitMsg(emit, jsonrpc.NewNotification(mcpwire.NotifyProgress,
				json.RawMessage(`{"progressToken":`+string(tok)+`,"progress":1}`)))
		}
		if !sleepCtx(ctx, time.Duration(args.ThenMS)*time.Millisecond) {
			return nil, nil
		}
		return textResult("notified"), nil
	case "ask":
		reply, err := f.ask(ctx, emit, mcpwire.MethodRootsList)
		if err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "ask: %v", err)
		}
		if reply.Error != nil {
			return textResult(fmt.Sprintf("error %d", reply.Error.Code)), nil
		}
		return textResult(string(reply.Result)), nil
	case "slow":
		<-ctx.Done()
		return nil, nil
	case "garbage":
		emit([]byte("secret-invalid-json"))
		return nil, nil
	case "big":
		// Built by hand: json.Marshal of 16 MiB is slow under -race.
		b := make([]byte, 0, args.Size+64)
		b = append(b, `{"content":[{"type":"text","text":"`...)
		b = append(b, strings.Repeat("x", args.Size)...)
		return append(b, `"}]}`...), nil
	case "flood":
		// A message too large to hold: text "id-last" puts the reply's id
		// at its end, "notify" sends a log message that large and then a
		// small reply.
		flood := f.flood
		if fn, ok := ctx.Value(floodKey{}).(func(io.Reader)); ok {
			flood = fn
		}
		if flood == nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "flood: not on this transport")
		}
		if args.Text == "notify" {
			flood(floodNotification(args.Size))
			return textResult("after"), nil
		}
		flood(floodMessage(m.ID, args.Size, args.Text == "id-last"))
		return nil, nil
	case "die":
		os.Exit(3)
	case "pid":
		return textResult(strconv.Itoa(os.Getpid())), nil
	case "spawn":
		// A grandchild in the server's process group, as a server that runs
		// helpers has: stopping the server must stop it too.
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "spawn: %v", err)
		}
		return textResult(strconv.Itoa(cmd.Process.Pid)), nil
	case "env":
		v, ok := os.LookupEnv(args.Name)
		if !ok {
			v = "<unset>"
		}
		return textResult(v), nil
	case "cancelled":
		f.mu.Lock()
		defer f.mu.Unlock()
		return textResult(strings.Join(f.cancelled, "\n")), nil
	case "init":
		f.mu.Lock()
		defer f.mu.Unlock()
		return textResult(string(f.init)), nil
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool %q", p.Name)
}

// ask sends a request to the client and waits for its response.
func (f *fake) ask(ctx context.Context, emit emitter, method string) (*jsonrpc.Message, error) {
	f.mu.Lock()
	f.nextAsk++
	id := jsonrpc.StringID("srv-" + strconv.Itoa(f.nextAsk))
	ch := make(chan *jsonrpc.Message, 1)
	f.waiters[id.Raw()] = ch
	f.mu.Unlock()
	emitMsg(emit, jsonrpc.NewRequest(id, method, json.RawMessage(`{}`)))
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Second):
		return nil, fmt.Errorf("no answer to %s", method)
	}
}

// runStdioFake serves the fake on stdin/stdout, with the same unbounded
// line reading as the client.
func runStdioFake() {
	f := newFake()
	if v := os.Getenv("UPSTREAM_TEST_VERSION"); v != "" {
		f.version = v
	}
	if os.Getenv("UPSTREAM_TEST_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Fprintln(os.Stderr, "fake stdio server ready")
	var wmu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(data []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		out.Write(data)
		out.WriteByte('\n')
		out.Flush()
	}
	f.flood = func(msg io.Reader) {
		wmu.Lock()
		defer wmu.Unlock()
		io.Copy(out, msg)
		out.WriteByte('\n')
		out.Flush()
	}
	br := bufio.NewReaderSize(os.Stdin, 64<<10)
	ctx := context.Background()
	for {
		line, err := readLine(br, 64<<20)
		if len(bytes.TrimSpace(line)) > 0 {
			if bytes.Contains(line, []byte("\n")) {
				fmt.Fprintln(os.Stderr, "raw newline in a message")
				os.Exit(4)
			}
			m, derr := jsonrpc.Decode(line)
			if derr != nil {
				fmt.Fprintln(os.Stderr, "bad message:", derr)
				os.Exit(4)
			}
			if m.IsRequest() {
				go f.handle(ctx, m, emit)
			} else {
				f.handle(ctx, m, emit)
			}
		}
		if err != nil {
			if os.Getenv("UPSTREAM_TEST_LINGER") != "" {
				select {} // outlive stdin: only a signal ends us
			}
			return
		}
	}
}

// stdioServer is the config of a stdio upstream running this test binary.
func stdioServer(t testing.TB, mode string, env map[string]string) *config.Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := map[string]string{envServerMode: mode}
	for k, v := range env {
		e[k] = v
	}
	return &config.Server{Name: "stdio-" + mode, Transport: config.TransportStdio, Command: exe, Env: e, Timeout: 5 * time.Second}
}

// streamableFake serves the fake over streamable HTTP.
type streamableFake struct {
	*fake
	t   testing.TB
	srv *httptest.Server

	jsonReplies bool // answer requests with a JSON body instead of SSE
	allowGet    bool // serve the standalone GET stream (else 405)
	// hook may take over a POST; it returns true when it answered.
	hook func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool
	// onGet and onDelete may take over those methods likewise.
	onGet, onDelete func(w http.ResponseWriter, r *http.Request) bool

	mu       sync.Mutex
	sessions int
	session  string
	requests []seenRequest
	deleted  []string
	get      chan []byte // messages for the GET stream

	pendingReply []byte // TestStreamResumption
}

type seenRequest struct {
	Method, SessionID, Version, Accept string
}

// newStreamableFake starts the server after applying configure.
func newStreamableFake(t testing.TB, configure ...func(*httptest.Server)) *streamableFake {
	s := &streamableFake{fake: newFake(), t: t, get: make(chan []byte, 16)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	for _, fn := range configure {
		fn(s.srv)
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *streamableFake) server(name string) *config.Server {
	return &config.Server{Name: name, Transport: config.TransportHTTP, URL: s.srv.URL + "/mcp", Timeout: 5 * time.Second}
}

func (s *streamableFake) seen() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *streamableFake) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodDelete:
		if s.onDelete != nil && s.onDelete(w, r) {
			return
		}
		s.mu.Lock()
		s.deleted = append(s.deleted, r.Header.Get(mcpwire.HeaderSessionID))
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodGet:
		if s.onGet != nil && s.onGet(w, r) {
			return
		}
		if !s.allowGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case data := <-s.get:
				w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "message", Data: data}))
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}
	body, _ := io.ReadAll(r.Body)
	m, err := jsonrpc.Decode(body)
	if err != nil {
		http.Error(w, "bad message", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, seenRequest{
		Method:    m.Method,
		SessionID: r.Header.Get(mcpwire.HeaderSessionID),
		Version:   r.Header.Get(mcpwire.HeaderProtocolVersion),
		Accept:    r.Header.Get("Accept"),
	})
	if m.Method == mcpwire.MethodInitialize {
		s.sessions++
		s.session = fmt.Sprintf("session-%d", s.sessions)
		w.Header().Set(mcpwire.HeaderSessionID, s.session)
	}
	s.mu.Unlock()
	if s.hook != nil && s.hook(w, r, m) {
		return
	}
	if !m.IsRequest() {
		s.handle(r.Context(), m, func([]byte) {})
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if s.jsonReplies {
		var reply []byte
		ctx := context.WithValue(r.Context(), floodKey{}, func(msg io.Reader) {
			w.Header().Set("Content-Type", "application/json")
			io.Copy(w, msg) // chunked: no length said up front
		})
		s.handle(ctx, m, func(data []byte) { reply = data })
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	var wmu sync.Mutex
	ctx := context.WithValue(r.Context(), floodKey{}, func(msg io.Reader) {
		wmu.Lock()
		defer wmu.Unlock()
		io.WriteString(w, "event: message\ndata: ")
		io.Copy(w, msg)
		io.WriteString(w, "\n\n")
		w.(http.Flusher).Flush()
	})
	s.handle(ctx, m, func(data []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "message", Data: data}))
		w.(http.Flusher).Flush()
	})
	// Like real servers, end the stream a moment after the reply.
	time.Sleep(5 * time.Millisecond)
}

// sseFake serves the fake over the legacy HTTP+SSE transport.
type sseFake struct {
	*fake
	srv *httptest.Server

	endpoint string // overrides the endpoint event's data

	mu     sync.Mutex
	stream chan []byte    // the open stream's outbox; nil: none
	raw    chan io.Reader // the open stream's raw outbox (floods)
	drop   chan struct{}
}

func newSSEFake(t testing.TB) *sseFake {
	s := &sseFake{fake: newFake()}
	s.flood = func(msg io.Reader) {
		// The stream open now, never one the client hung up on: a
		// shared channel let an old stream's handler, not yet aware its
		// client had gone, take the message and lose it.
		s.mu.Lock()
		raw := s.raw
		s.mu.Unlock()
		select {
		case raw <- msg:
		case <-time.After(5 * time.Second): // no stream to write it on
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", s.serveStream)
	mux.HandleFunc("POST /messages", s.servePost)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sseFake) server(name string) *config.Server {
	return &config.Server{Name: name, Transport: config.TransportSSE, URL: s.srv.URL + "/sse", Timeout: 5 * time.Second}
}

// dropStream ends the open SSE stream.
func (s *sseFake) dropStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drop != nil {
		close(s.drop)
		s.drop = nil
	}
}

func (s *sseFake) serveStream(w http.ResponseWriter, r *http.Request) {
	out := make(chan []byte, 64)
	raw := make(chan io.Reader)
	drop := make(chan struct{})
	s.mu.Lock()
	s.stream, s.raw, s.drop = out, raw, drop
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ep := s.endpoint
	if ep == "" {
		ep = "/messages?sessionId=abc"
	}
	w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "endpoint", Data: []byte(ep)}))
	w.(http.Flusher).Flush()
	for {
		select {
		case data := <-out:
			w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "message", Data: data}))
			w.(http.Flusher).Flush()
		case msg := <-raw:
			io.WriteString(w, "event: message\ndata: ")
			if _, err := io.Copy(w, msg); err != nil {
				return // the client hung up mid-event
			}
			io.WriteString(w, "\n\n")
			w.(http.Flusher).Flush()
		case <-drop:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *sseFake) servePost(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m, err := jsonrpc.Decode(body)
	if err != nil {
		http.Error(w, "bad message", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	out := s.stream
	s.mu.Unlock()
	emit := func(data []byte) { out <- data }
	w.WriteHeader(http.StatusAccepted)
	if m.IsRequest() {
		go s.handle(context.Background(), m, emit)
	} else {
		s.handle(context.Background(), m, emit)
	}
}

// recorder is a Handler that records what reaches it.
type recorder struct {
	mu            sync.Mutex
	notifications []delivered
	requests      []delivered
	answer        func(msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error)
}

type delivered struct {
	server, method string
	origin         any
}

func (h *recorder) HandleNotification(_ context.Context, server string, origin any, msg *jsonrpc.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notifications = append(h.notifications, delivered{server, msg.Method, origin})
}

func (h *recorder) HandleRequest(_ context.Context, server string, origin any, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	h.mu.Lock()
	h.requests = append(h.requests, delivered{server, msg.Method, origin})
	answer := h.answer
	h.mu.Unlock()
	if answer != nil {
		return answer(msg)
	}
	return json.RawMessage(`{"roots":[{"uri":"file:///work"}]}`), nil
}

func (h *recorder) got() (notes, reqs []delivered) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.notifications), slices.Clone(h.requests)
}

// logBuffer captures log output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// connect opens a session and closes it at cleanup.
func connect(t testing.TB, opts Options) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Connect(ctx, opts)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*conn)
}

// callTool calls a tool and returns the text of its first content item.
func callTool(ctx context.Context, s Session, name string, args string) (string, error) {
	if args == "" {
		args = "{}"
	}
	params := `{"name":` + string(jsonrpc.String(name)) + `,"arguments":` + args + `}`
	res, err := s.Call(ctx, mcpwire.MethodToolsCall, json.RawMessage(params))
	if err != nil {
		return "", err
	}
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) == 0 {
		return "", fmt.Errorf("unexpected result %.200s", res)
	}
	return r.Content[0].Text, nil
}
