// Package loadgen is a load generator for MCP servers that speak the
// streamable HTTP transport.
//
// It talks raw JSON-RPC over HTTP (no SDK in the loop) so that the numbers
// measure the server, not a client library. Each worker opens its own MCP
// session (initialize + notifications/initialized), keeps the Mcp-Session-Id
// the server issued, if any, and then issues tools/call requests back to back
// until the run ends. Replies may be application/json or text/event-stream.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultProtocolVersion is the protocol version asked for in initialize.
const DefaultProtocolVersion = "2025-06-18"

// Options configures a run.
type Options struct {
	// URL is the MCP endpoint, e.g. http://127.0.0.1:4200/mcp.
	URL string
	// Concurrency is the number of workers, each with its own session and
	// at most one request in flight. Default 1.
	Concurrency int
	// Duration is how long calls are measured for, after Warmup. Default
	// 10s. Ignored when Calls > 0.
	Duration time.Duration
	// Calls, if > 0, ends the run after this many measured calls in total
	// (across all workers) instead of after Duration.
	Calls int64
	// Warmup is how long calls are made, and not measured, before the
	// measurement starts.
	Warmup time.Duration
	// Tool is the tool to call. Default "echo".
	Tool string
	// Arguments are the tool arguments. If nil and Tool is "echo",
	// {"text":"hello"} is used; otherwise {}.
	Arguments map[string]any
	// ProtocolVersion is the version asked for in initialize. Default
	// DefaultProtocolVersion.
	ProtocolVersion string
	// Header holds extra headers sent with every request (e.g.
	// Authorization).
	Header http.Header
	// Timeout bounds each HTTP request. Default 30s.
	Timeout time.Duration
	// Client is the HTTP client to use. If nil, one tuned for Concurrency
	// is made (see NewClient).
	Client *http.Client
	// NoDelete skips the DELETE that ends each worker's session.
	NoDelete bool
}

// Result is the outcome of a run. Latencies cover measured calls only,
// successful or not.
type Result struct {
	URL         string
	Tool        string
	Concurrency int
	// Elapsed is the length of the measurement window: from the end of
	// warmup until the last measured call finished.
	Elapsed time.Duration
	// Calls is the number of measured calls, errors included.
	Calls int64
	// Errors counts measured calls that failed: transport error, HTTP
	// status other than 200, a JSON-RPC error, a tool result with
	// isError:true, or an unreadable reply.
	Errors      int64
	CallsPerSec float64
	P50         time.Duration
	P90         time.Duration
	P99         time.Duration
	Max         time.Duration
	Mean        time.Duration
	// ErrorSamples holds up to a few distinct error messages.
	ErrorSamples []string
}

// MarshalJSON reports latencies in milliseconds.
func (r Result) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return json.Marshal(struct {
		URL          string   `json:"url"`
		Tool         string   `json:"tool"`
		Concurrency  int      `json:"concurrency"`
		ElapsedSec   float64  `json:"elapsed_s"`
		Calls        int64    `json:"calls"`
		Errors       int64    `json:"errors"`
		CallsPerSec  float64  `json:"calls_per_sec"`
		P50          float64  `json:"p50_ms"`
		P90          float64  `json:"p90_ms"`
		P99          float64  `json:"p99_ms"`
		Max          float64  `json:"max_ms"`
		Mean         float64  `json:"mean_ms"`
		ErrorSamples []string `json:"error_samples,omitempty"`
	}{r.URL, r.Tool, r.Concurrency, r.Elapsed.Seconds(), r.Calls, r.Errors, r.CallsPerSec,
		ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max), ms(r.Mean), r.ErrorSamples})
}

// String renders the result for humans.
func (r Result) String() string {
	return fmt.Sprintf("url=%s tool=%s c=%d elapsed=%s\ncalls=%d calls/s=%.1f errors=%d\nlatency p50=%s p90=%s p99=%s max=%s mean=%s",
		r.URL, r.Tool, r.Concurrency, r.Elapsed.Round(time.Millisecond),
		r.Calls, r.CallsPerSec, r.Errors,
		round(r.P50), round(r.P90), round(r.P99), round(r.Max), round(r.Mean))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(100 * time.Nanosecond)
	}
}

// NewClient returns an HTTP client tuned for a load generator with the given
// number of workers: enough idle connections per host that every worker
// keeps its own, no compression, HTTP/1.1.
func NewClient(workers int, timeout time.Duration) *http.Client {
	if workers < 1 {
		workers = 1
	}
	t := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        2 * workers,
		MaxIdleConnsPerHost: 2 * workers,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     16 << 10,
		ReadBufferSize:      16 << 10,
	}
	return &http.Client{Transport: t, Timeout: timeout}
}

// Run runs the load and reports the result. It returns an error if the run
// could not be done at all (bad options, or a worker could not open its
// session); failures of individual calls are counted in Result.Errors.
// Cancelling ctx ends the run early: Run then returns what was measured so
// far together with ctx's error.
func Run(ctx context.Context, opts Options) (Result, error) {
	if opts.URL == "" {
		return Result{}, errors.New("loadgen: no URL")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Duration <= 0 {
		opts.Duration = 10 * time.Second
	}
	if opts.Tool == "" {
		opts.Tool = "echo"
	}
	if opts.Arguments == nil {
		if opts.Tool == "echo" {
			opts.Arguments = map[string]any{"text": "hello"}
		} else {
			opts.Arguments = map[string]any{}
		}
	}
	if opts.ProtocolVersion == "" {
		opts.ProtocolVersion = DefaultProtocolVersion
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	client := opts.Client
	if client == nil {
		client = NewClient(opts.Concurrency, opts.Timeout)
		defer client.CloseIdleConnections()
	}
	params, err := json.Marshal(map[string]any{"name": opts.Tool, "arguments": opts.Arguments})
	if err != nil {
		return Result{}, fmt.Errorf("loadgen: arguments: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Open all sessions first, so that session setup is not measured.
	workers := make([]*worker, opts.Concurrency)
	var wg sync.WaitGroup
	initErrs := make([]error, len(workers))
	for i := range workers {
		w := &worker{opts: &opts, client: client, params: params}
		workers[i] = w
		wg.Go(func() { initErrs[i] = w.open(ctx) })
	}
	wg.Wait()
	if err := errors.Join(initErrs...); err != nil {
		for _, w := range workers {
			w.close()
		}
		return Result{}, fmt.Errorf("loadgen: opening sessions: %w", err)
	}

	start := time.Now()
	measureFrom := start.Add(opts.Warmup)
	var deadline time.Time
	if opts.Calls <= 0 {
		deadline = measureFrom.Add(opts.Duration)
	}
	var tickets atomic.Int64
	run := &runState{measureFrom: measureFrom, deadline: deadline, limit: opts.Calls, tickets: &tickets}
	for _, w := range workers {
		wg.Go(func() { w.loop(ctx, run) })
	}
	wg.Wait()
	end := time.Now()
	for _, w := range workers {
		wg.Go(w.close)
	}
	wg.Wait()

	res := Result{URL: opts.URL, Tool: opts.Tool, Concurrency: opts.Concurrency}
	var lat []time.Duration
	seen := map[string]bool{}
	var lastEnd time.Time
	for _, w := range workers {
		res.Calls += int64(len(w.lat))
		res.Errors += w.errors
		lat = append(lat, w.lat...)
		if w.lastEnd.After(lastEnd) {
			lastEnd = w.lastEnd
		}
		for _, s := range w.errSamples {
			if !seen[s] && len(res.ErrorSamples) < 5 {
				seen[s] = true
				res.ErrorSamples = append(res.ErrorSamples, s)
			}
		}
	}
	if lastEnd.IsZero() {
		lastEnd = end
	}
	if lastEnd.After(measureFrom) {
		res.Elapsed = lastEnd.Sub(measureFrom)
	}
	if res.Elapsed > 0 {
		res.CallsPerSec = float64(res.Calls) / res.Elapsed.Seconds()
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.P50 = percentile(lat, 0.50)
		res.P90 = percentile(lat, 0.90)
		res.P99 = percentile(lat, 0.99)
		res.Max = lat[len(lat)-1]
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		res.Mean = sum / time.Duration(len(lat))
	}
	return res, ctx.Err()
}

// percentile returns the p-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

type runState struct {
	measureFrom time.Time
	deadline    time.Time // zero when limit > 0
	limit       int64
	tickets     *atomic.Int64
}

type worker struct {
	opts    *Options
	client  *http.Client
	params  []byte
	session string
	version string
	nextID  int64

	req     []byte       // request body scratch
	body    bytes.Buffer // response body scratch
	idBuf   []byte
	lat     []time.Duration
	lastEnd time.Time
	errors  int64

	errSamples []string
}

// open initializes the worker's session.
func (w *worker) open(ctx context.Context) error {
	init, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": 0, "method": "initialize",
		"params": map[string]any{
			"protocolVersion": w.opts.ProtocolVersion,
			"capabilities":    map[string]any{},
			"clientInfo":      map[string]any{"name": "mcpgate-bench", "version": "1.0.0"},
		},
	})
	resp, err := w.post(ctx, init)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	w.session = resp.Header.Get("Mcp-Session-Id")
	msg, err := w.readReply(resp, []byte("0"))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var r struct {
		Result *struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
		Error *rpcError `json:"error"`
	}
	if err := json.Unmarshal(msg, &r); err != nil {
		return fmt.Errorf("initialize: decoding reply: %w", err)
	}
	if r.Error != nil {
		return fmt.Errorf("initialize: %w", r.Error)
	}
	if r.Result == nil {
		return errors.New("initialize: reply has no result")
	}
	w.version = r.Result.ProtocolVersion

	resp, err = w.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("notifications/initialized: HTTP %s", resp.Status)
	}
	return nil
}

// close ends the worker's session, if it has one.
func (w *worker) close() {
	if w.session == "" || w.opts.NoDelete {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, w.opts.URL, nil)
	if err != nil {
		return
	}
	w.setHeaders(req)
	if resp, err := w.client.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (w *worker) loop(ctx context.Context, run *runState) {
	w.lat = make([]time.Duration, 0, 4096)
	for ctx.Err() == nil {
		t0 := time.Now()
		measured := !t0.Before(run.measureFrom)
		if measured {
			if run.limit > 0 {
				if run.tickets.Add(1) > run.limit {
					return
				}
			} else if !t0.Before(run.deadline) {
				return
			}
		}
		err := w.call(ctx)
		t1 := time.Now()
		if ctx.Err() != nil {
			return // cancelled: the call's outcome says nothing about the server
		}
		if !measured {
			continue
		}
		w.lat = append(w.lat, t1.Sub(t0))
		w.lastEnd = t1
		if err != nil {
			w.errors++
			if len(w.errSamples) < 5 {
				w.errSamples = append(w.errSamples, err.Error())
			}
		}
	}
}

// call makes one tools/call and checks the reply.
func (w *worker) call(ctx context.Context) error {
	w.nextID++
	w.idBuf = strconv.AppendInt(w.idBuf[:0], w.nextID, 10)
	w.req = append(w.req[:0], `{"jsonrpc":"2.0","id":`...)
	w.req = append(w.req, w.idBuf...)
	w.req = append(w.req, `,"method":"tools/call","params":`...)
	w.req = append(w.req, w.params...)
	w.req = append(w.req, '}')

	resp, err := w.post(ctx, w.req)
	if err != nil {
		return err
	}
	msg, err := w.readReply(resp, w.idBuf)
	if err != nil {
		return err
	}
	return checkToolReply(msg, w.idBuf)
}

func (w *worker) setHeaders(req *http.Request) {
	h := req.Header
	for k, v := range w.opts.Header {
		h[k] = v
	}
	if w.session != "" {
		h["Mcp-Session-Id"] = []string{w.session}
	}
	if w.version != "" {
		h["Mcp-Protocol-Version"] = []string{w.version}
	}
}

func (w *worker) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.opts.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Accept"] = []string{"application/json, text/event-stream"}
	w.setHeaders(req)
	return w.client.Do(req)
}

// readReply reads the whole response body and returns the JSON-RPC message
// answering id. The returned slice aliases w.body.
func (w *worker) readReply(resp *http.Response, id []byte) ([]byte, error) {
	defer resp.Body.Close()
	w.body.Reset()
	_, err := w.body.ReadFrom(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s: %s", resp.Status, truncate(w.body.Bytes(), 200))
	}
	ct := resp.Header.Get("Content-Type")
	if isEventStream(ct) {
		return findSSEReply(w.body.Bytes(), id)
	}
	return w.body.Bytes(), nil
}

func isEventStream(ct string) bool {
	return len(ct) >= len("text/event-stream") && ct[:len("text/event-stream")] == "text/event-stream"
}

// findSSEReply scans an SSE body for the event whose data is the JSON-RPC
// response with the given id (skipping notifications and other messages).
func findSSEReply(body []byte, id []byte) ([]byte, error) {
	var data []byte
	check := func() []byte {
		if len(data) == 0 {
			return nil
		}
		var env struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(data, &env) == nil && env.Method == "" && bytes.Equal(env.ID, id) {
			return data
		}
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0: // end of event
			if msg := check(); msg != nil {
				return msg, nil
			}
			data = data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if msg := check(); msg != nil {
		return msg, nil
	}
	return nil, fmt.Errorf("no reply with id %s in event stream: %s", id, truncate(body, 200))
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// checkToolReply reports an error if msg is not the reply to id, is a
// JSON-RPC error, or is a tool result with isError set.
func checkToolReply(msg, id []byte) error {
	var r struct {
		ID     json.RawMessage `json:"id"`
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
		Error *rpcError `json:"error"`
	}
	if err := json.Unmarshal(msg, &r); err != nil {
		return fmt.Errorf("decoding reply: %w: %s", err, truncate(msg, 200))
	}
	if r.Error != nil {
		return r.Error
	}
	if !bytes.Equal(r.ID, id) {
		return fmt.Errorf("reply id %s, want %s", r.ID, id)
	}
	if r.Result == nil {
		return fmt.Errorf("reply has no result: %s", truncate(msg, 200))
	}
	if r.Result.IsError {
		return fmt.Errorf("tool error: %s", truncate(msg, 200))
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
