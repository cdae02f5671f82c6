package audit

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
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

// newExporter starts an Exporter and, at the end of the test, closes it
// and checks its goroutine is gone.
func newExporter(t testing.TB, sink Sink, opts ExportOptions) *Exporter {
	t.Helper()
	e := NewExporter(sink, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Close(ctx)
		checkNoGoroutine(t, "audit.(*Exporter).run")
	})
	return e
}

// readLines parses a JSONL file.
func readLines(t testing.TB, path string) []exportRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exportRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r exportRecord
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantRecord(c store.ToolCall, args string) exportRecord {
	r := exportRecord{V: ExportSchemaVersion, Time: c.Time.UTC(), KeyAlias: c.KeyAlias, User: c.User, Team: c.Team,
		Server: c.Server, Tool: c.Tool, DurationMs: c.DurationMs, Outcome: c.Outcome, ErrorClass: c.ErrorClass,
		SessionIDPrefix: c.SessionIDPrefix, RequestBytes: c.RequestBytes, ResponseBytes: c.ResponseBytes}
	if args != "" {
		r.Arguments = json.RawMessage(args)
	}
	return r
}

// The Writer feeds the store and a JSONL exporter: every record reaches
// both, the file is 0600 in a 0700 directory, each line one record with
// the schema version; arguments go to the file only.
func TestJSONLExport(t *testing.T) {
	st := openStore(t)
	path := filepath.Join(t.TempDir(), "logs", "audit", "audit.jsonl")
	sink, err := NewJSONL(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ex := NewExporter(sink, ExportOptions{Name: "jsonl", FlushInterval: 10 * time.Millisecond})
	w := newWriter(t, st, Options{FlushInterval: 10 * time.Millisecond, Exporters: []*Exporter{ex}})
	var want []exportRecord
	for i := range 50 {
		c := call(i)
		if i%5 == 0 {
			args := fmt.Sprintf(`{"q":"n%d"}`, i)
			w.RecordWithArguments(c, json.RawMessage(args))
			want = append(want, wantRecord(c, args))
		} else {
			w.Record(c)
			want = append(want, wantRecord(c, ""))
		}
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkNoGoroutine(t, "audit.(*Exporter).run")
	if diff := cmp.Diff(readLines(t, path), want); diff != "" {
		t.Errorf("exported records (-got +want):\n%s", diff)
	}
	if n := len(listAll(t, st)); n != 50 {
		t.Errorf("store has %d records, want 50", n)
	}
	for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir, filepath.Dir(filepath.Dir(path)): 0o700 | os.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}
	if ex.Dropped() != 0 {
		t.Errorf("%d dropped", ex.Dropped())
	}
}

// Rotation: no file grows past max_size, path.1 .. path.N hold the older
// lines in order, the oldest beyond N are removed, and every line parses.
func TestJSONLRotate(t *testing.T) {
	const maxSize, maxFiles = 2000, 3
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := NewJSONL(path, maxSize, maxFiles)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200 // about 230 bytes a line: 8 lines a file, far more than 4 files
	var batch []Entry
	for i := range n {
		c := call(i)
		c.DurationMs = int64(i) // the sequence number, to check order
		batch = append(batch, Entry{ToolCall: c})
		if len(batch) == 7 || i == n-1 { // batches that straddle rotations
			if err := sink.Send(t.Context(), batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff(names, []string{"audit.jsonl", "audit.jsonl.1", "audit.jsonl.2", "audit.jsonl.3"}); diff != "" {
		t.Fatalf("files (-got +want):\n%s", diff)
	}
	var seq []int64
	for _, name := range []string{"audit.jsonl.3", "audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"} {
		p := filepath.Join(filepath.Dir(path), name)
		fi, _ := os.Stat(p)
		if fi.Size() > maxSize || fi.Mode() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v (want <= %d, 0600)", name, fi.Size(), fi.Mode(), maxSize)
		}
		lines := readLines(t, p)
		if len(lines) == 0 {
			t.Errorf("%s is empty", name)
		}
		for _, r := range lines {
			seq = append(seq, r.DurationMs)
		}
	}
	// The newest lines, contiguous, ending with the last.
	if len(seq) == 0 || seq[len(seq)-1] != n-1 {
		t.Fatalf("sequence %v does not end with %d", seq, n-1)
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] != seq[i-1]+1 {
			t.Fatalf("sequence not contiguous at %d: %v", i, seq)
		}
	}
	// Reopening appends to the live file.
	before := len(readLines(t, path))
	sink, err = NewJSONL(path, maxSize, maxFiles)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Send(t.Context(), []Entry{{ToolCall: call(1)}}); err != nil {
		t.Fatal(err)
	}
	sink.Close()
	if got := len(readLines(t, path)); got != before+1 {
		t.Errorf("after reopening: %d lines, want %d", got, before+1)
	}
}

// hook is an httptest webhook endpoint recording what it receives.
type hook struct {
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	hits    atomic.Int64
	handle  func(n int64, w http.ResponseWriter, r *http.Request) bool // false: answered, don't record
}

func newHook(t testing.TB, handle func(n int64, w http.ResponseWriter, r *http.Request) bool) (*hook, *httptest.Server) {
	h := &hook{handle: handle}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		if h.handle != nil && !h.handle(n, w, r) {
			return
		}
		h.mu.Lock()
		h.bodies = append(h.bodies, body)
		h.headers = append(h.headers, r.Header.Clone())
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return h, srv
}

// records parses the JSON-array bodies received.
func (h *hook) records(t testing.TB) (batches []int, all []exportRecord) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.bodies {
		var rs []exportRecord
		if err := json.Unmarshal(b, &rs); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		batches = append(batches, len(rs))
		all = append(all, rs...)
	}
	return batches, all
}

func TestWebhookBatches(t *testing.T) {
	h, srv := newHook(t, nil)
	sink, err := NewWebhook(WebhookOptions{URL: srv.URL + "/audit?token=url-secret", Headers: map[string]string{"Authorization": "Bearer hdr-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	// A flush interval longer than the test: batches go when full, the
	// rest at Close.
	ex := newExporter(t, sink, ExportOptions{Name: "hook", BatchSize: 10, FlushInterval: time.Hour})
	var want []exportRecord
	for i := range 25 {
		ex.Export(Entry{ToolCall: call(i)})
		want = append(want, wantRecord(call(i), ""))
	}
	if err := ex.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	batches, got := h.records(t)
	if diff := cmp.Diff(batches, []int{10, 10, 5}); diff != "" {
		t.Errorf("batch sizes (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("records (-got +want):\n%s", diff)
	}
	for _, hd := range h.headers {
		if hd.Get("Content-Type") != "application/json" || hd.Get("Authorization") != "Bearer hdr-secret" {
			t.Errorf("headers %v", hd)
		}
	}
}

func TestWebhookNDJSON(t *testing.T) {
	h, srv := newHook(t, nil)
	sink, _ := NewWebhook(WebhookOptions{URL: srv.URL, NDJSON: true})
	ex := newExporter(t, sink, ExportOptions{Name: "hook", BatchSize: 3, FlushInterval: time.Hour})
	for i := range 3 {
		ex.Export(Entry{ToolCall: call(i), Arguments: json.RawMessage(`{"a":1}`)})
	}
	ex.Close(t.Context())
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bodies) != 1 || h.headers[0].Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d bodies, headers %v", len(h.bodies), h.headers)
	}
	lines := strings.Split(strings.TrimSuffix(string(h.bodies[0]), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %q", len(lines), h.bodies[0])
	}
	for _, l := range lines {
		var r exportRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil || string(r.Arguments) != `{"a":1}` || r.V != 1 {
			t.Errorf("line %q: %+v %v", l, r, err)
		}
	}
}

// A 500 is retried (with backoff) and the batch delivered; a 400 is not.
func TestWebhookRetry(t *testing.T) {
	h, srv := newHook(t, func(n int64, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
			return false
		}
		return true
	})
	var failures atomic.Int64
	sink, _ := NewWebhook(WebhookOptions{URL: srv.URL, Backoff: 20 * time.Millisecond})
	ex := newExporter(t, sink, ExportOptions{Name: "hook", BatchSize: 2, OnFailure: func() { failures.Add(1) }})
	ex.Export(Entry{ToolCall: call(1)})
	ex.Export(Entry{ToolCall: call(2)})
	ex.Close(t.Context())
	if _, got := h.records(t); len(got) != 2 || h.hits.Load() != 2 || failures.Load() != 0 || ex.Dropped() != 0 {
		t.Errorf("delivered %d records in %d requests, %d failures, %d dropped; want 2 in 2 (a 500, then 200), 0, 0",
			len(got), h.hits.Load(), failures.Load(), ex.Dropped())
	}

	h.hits.Store(1) // past the first-request 500
	sink, _ = NewWebhook(WebhookOptions{URL: srv.URL + "/bad", Backoff: time.Millisecond})
	ex = newExporter(t, sink, ExportOptions{Name: "bad", BatchSize: 1, OnFailure: func() { failures.Add(1) }})
	ex.Export(Entry{ToolCall: call(1)})
	ex.Close(t.Context())
	if h.hits.Load() != 2 || failures.Load() != 1 || ex.Dropped() != 1 {
		t.Errorf("a 400: %d requests, %d failures, %d dropped; want 1 (no retry), 1, 1", h.hits.Load()-1, failures.Load(), ex.Dropped())
	}
}

// A hung endpoint: each attempt ends at the timeout, the batch is dropped
// and counted, and the log names neither the URL's nor the headers'
// secrets.
func TestWebhookTimeout(t *testing.T) {
	release := make(chan struct{})
	_, srv := newHook(t, func(int64, http.ResponseWriter, *http.Request) bool {
		<-release
		return false
	})
	defer close(release) // before srv.Close (cleanup), which waits for handlers
	var logs bytes.Buffer
	var failures, drops atomic.Int64
	sink, _ := NewWebhook(WebhookOptions{URL: srv.URL + "/x?key=url-secret", Headers: map[string]string{"X-Api-Key": "hdr-secret"},
		Timeout: 100 * time.Millisecond, Attempts: 2, Backoff: 10 * time.Millisecond})
	ex := newExporter(t, sink, ExportOptions{Name: "hung", BatchSize: 5, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnFailure: func() { failures.Add(1) }, OnDrop: func(n int) { drops.Add(int64(n)) }})
	start := time.Now()
	for i := range 5 {
		ex.Export(Entry{ToolCall: call(i)})
	}
	for failures.Load() == 0 && time.Since(start) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	if failures.Load() != 1 || drops.Load() != 5 {
		t.Fatalf("%d failures, %d dropped; want 1, 5", failures.Load(), drops.Load())
	}
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("gave up after %s, want about 2 x 100ms", took)
	}
	ex.Close(t.Context())
	out := logs.String()
	if !strings.Contains(out, "export failed") || !strings.Contains(out, "exporter=hung") {
		t.Errorf("no failure logged: %s", out)
	}
	for _, secret := range []string{"url-secret", "hdr-secret", srv.URL} {
		if strings.Contains(out, secret) {
			t.Errorf("log has %q: %s", secret, out)
		}
	}
}

// Close's deadline ends the wait on a hung endpoint: Close returns soon
// after it, what was queued counts as dropped, and no goroutine stays.
func TestExporterCloseDeadline(t *testing.T) {
	release := make(chan struct{})
	_, srv := newHook(t, func(int64, http.ResponseWriter, *http.Request) bool {
		<-release
		return false
	})
	defer close(release)
	sink, _ := NewWebhook(WebhookOptions{URL: srv.URL, Timeout: time.Hour})
	ex := NewExporter(sink, ExportOptions{Name: "hung", BatchSize: 10})
	for i := range 55 {
		ex.Export(Entry{ToolCall: call(i)})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ex.Close(ctx)
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("Close: %v after %s, want an error soon after 200ms", err, took)
	}
	if ex.Dropped() != 55 {
		t.Errorf("%d dropped, want all 55", ex.Dropped())
	}
	ex.Export(Entry{ToolCall: call(1)}) // after Close: dropped, no panic
	if ex.Dropped() != 56 {
		t.Errorf("a record after Close: %d dropped, want 56", ex.Dropped())
	}
	checkNoGoroutine(t, "audit.(*Exporter).run")
}

// A redirect to another host is refused; one on the same host is followed.
func TestWebhookRedirect(t *testing.T) {
	other, otherSrv := newHook(t, nil)
	h, srv := newHook(t, func(_ int64, w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, otherSrv.URL+"/steal", http.StatusTemporaryRedirect)
			return false
		case "/moved":
			http.Redirect(w, r, "/here", http.StatusPermanentRedirect)
			return false
		}
		return true
	})
	for _, tc := range []struct {
		path    string
		wantErr bool
	}{{"/away", true}, {"/moved", false}} {
		sink, _ := NewWebhook(WebhookOptions{URL: srv.URL + tc.path, Attempts: 1})
		err := sink.Send(t.Context(), []Entry{{ToolCall: call(1)}})
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", tc.path, err, tc.wantErr)
		}
		sink.Close()
	}
	if other.hits.Load() != 0 {
		t.Error("the redirect to another host was followed")
	}
	if _, got := h.records(t); len(got) != 1 {
		t.Errorf("same-host redirect: %d records delivered, want 1", len(got))
	}
}

// Back-pressure: a slow webhook fills its exporter's queue; what does not
// fit is dropped and counted, and Record never waits: neither the store
// nor the call path slows down.
//
// The webhook is stalled, not merely slow, while the records are made:
// with a 100ms one, how many records the exporter took depended on how
// long the loop ran, and under -race on a busy machine (1 to 3s) it
// drained a few hundred and the average Record passed 100µs, though
// nothing waited (CI flake). Stalled, the exporter can take exactly one
// batch and a full queue whatever the speed, and a Record that waited on
// it would never finish: the loop ending is the proof that none waits.
func TestExportBackPressure(t *testing.T) {
	first, rest := make(chan struct{}), make(chan struct{})
	var releaseFirst, releaseRest sync.Once
	openFirst := func() { releaseFirst.Do(func() { close(first) }) }
	openRest := func() { releaseRest.Do(func() { close(rest) }) }
	_, srv := newHook(t, func(n int64, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			<-first
		} else {
			<-rest
		}
		return true
	})
	t.Cleanup(func() { openFirst(); openRest() }) // before srv.Close, which waits for handlers
	var stored atomic.Int64
	fast := &fakeLog{appendCalls: func(_ context.Context, calls []store.ToolCall) error {
		stored.Add(int64(len(calls)))
		return nil
	}}
	var depth atomic.Int64
	// The stalled request must outlast the loop, however slow (the
	// loop's own bound is a minute).
	sink, _ := NewWebhook(WebhookOptions{URL: srv.URL, Timeout: 2 * time.Minute})
	const queue, batch = 100, 10
	ex := NewExporter(sink, ExportOptions{Name: "slow", QueueSize: queue, BatchSize: batch, FlushInterval: 10 * time.Millisecond,
		OnDepth: func(n int) { depth.Store(int64(n)) }})
	w := newWriter(t, fast, Options{QueueSize: 20000, Exporters: []*Exporter{ex}})
	const n = 10000
	var worst, total time.Duration
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		start := time.Now()
		for i := range n {
			t0 := time.Now()
			w.Record(call(i))
			worst = max(worst, time.Since(t0))
		}
		total = time.Since(start)
	}()
	select {
	case <-recorded:
	case <-time.After(time.Minute):
		t.Fatal("Record waits on a stalled exporter: the records were not made in a minute")
	}
	// The first request returns; the exporter reports its backlog (the
	// full queue) before it sends the next batch, which stalls.
	openFirst()
	eventually(func() bool { return depth.Load() >= queue/2 })
	if d := depth.Load(); d < queue/2 {
		t.Errorf("queue depth gauge %d, want the queue about full (%d)", d, queue)
	}
	openRest()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dropped := ex.Dropped()
	t.Logf("%d records: %s total, %s per Record, worst %s; exporter dropped %d, store took %d",
		n, total, total/n, worst, dropped, stored.Load())
	if stored.Load() != n {
		t.Errorf("the store took %d records, want all %d", stored.Load(), n)
	}
	// One batch in the stalled request and a full queue: all the
	// exporter could take.
	if dropped < n-queue-batch {
		t.Errorf("the slow exporter dropped %d, want all but one batch and a full queue (%d) of %d", dropped, n-queue-batch, n)
	}
}

func TestRedactArguments(t *testing.T) {
	patterns := []string{"*token*", "secret*", "password", "*key*", "authorization"}
	tests := []struct{ name, in, want string }{
		{"flat", `{"query":"x","password":"p","limit":5}`, `{"limit":5,"password":"[REDACTED]","query":"x"}`},
		{"nested and case", `{"auth":{"AccessToken":"t","user":"u"},"items":[{"Secret_Value":1,"ok":true},"s"]}`,
			`{"auth":{"AccessToken":"[REDACTED]","user":"u"},"items":[{"Secret_Value":"[REDACTED]","ok":true},"s"]}`},
		{"redacted object whole", `{"api_key":{"id":"k"},"n":1.50}`, `{"api_key":"[REDACTED]","n":1.50}`},
		{"slash in key", `{"x/token":"t"}`, `{"x/token":"[REDACTED]"}`},
		{"array top", `[{"authorization":"Bearer x"}]`, `[{"authorization":"[REDACTED]"}]`},
		{"substring", `{"tokenize":false,"tok":1}`, `{"tok":1,"tokenize":"[REDACTED]"}`}, // *token* errs on the safe side
		{"kept", `{"name":"n","path":"/a"}`, `{"name":"n","path":"/a"}`},
		{"not json", `{"a":`, ``},
		{"empty", ``, ``},
	}
	for _, tc := range tests {
		got := string(RedactArguments(json.RawMessage(tc.in), patterns))
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// checkNoGoroutine fails if a goroutine running fn outlives its test.
func checkNoGoroutine(t testing.TB, fn string) {
	t.Helper()
	var stacks []byte
	for range 100 {
		stacks = stackDump()
		if !bytes.Contains(stacks, []byte(fn)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("leaked %s goroutine:\n%s", fn, stacks)
}

func stackDump() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}

// discardSink takes every batch at once.
type discardSink struct{ n atomic.Int64 }

func (d *discardSink) Send(_ context.Context, b []Entry) error { d.n.Add(int64(len(b))); return nil }
func (d *discardSink) Flush() error                            { return nil }
func (d *discardSink) Close() error                            { return nil }

// BenchmarkRecordExport is BenchmarkRecord's hot path with 0, 1 and 2
// exporters that keep up: what an exporter adds to each Record.
func BenchmarkRecordExport(b *testing.B) {
	for _, n := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("exporters=%d", n), func(b *testing.B) {
			discard := &fakeLog{appendCalls: func(context.Context, []store.ToolCall) error { return nil }}
			var ex []*Exporter
			for i := range n {
				ex = append(ex, NewExporter(&discardSink{}, ExportOptions{Name: fmt.Sprint(i)}))
			}
			w := NewWriter(discard, Options{Exporters: ex})
			c := call(1)
			b.ReportAllocs()
			for b.Loop() {
				w.Record(c)
			}
			b.StopTimer()
			var dropped int64
			for _, e := range ex {
				dropped += e.Dropped()
			}
			w.Close(context.Background())
			b.ReportMetric(float64(dropped)/float64(b.N), "export-dropped/op")
		})
	}
}

// BenchmarkJSONLSend measures the JSONL sink: encoding and writing a
// batch of 100 records (no fsync; that is once per flush interval).
func BenchmarkJSONLSend(b *testing.B) {
	sink, err := NewJSONL(filepath.Join(b.TempDir(), "a.jsonl"), 1<<40, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	batch := make([]Entry, 100)
	for i := range batch {
		batch[i] = Entry{ToolCall: call(i), Arguments: json.RawMessage(`{"query":"x","limit":10}`)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := sink.Send(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
}
