package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// captureSink keeps copies of what it is sent.
type captureSink struct {
	mu      sync.Mutex
	entries []Entry
}

func (c *captureSink) Send(_ context.Context, b []Entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range b {
		e.Arguments = bytes.Clone(e.Arguments)
		c.entries = append(c.entries, e)
	}
	return nil
}
func (c *captureSink) Flush() error { return nil }
func (c *captureSink) Close() error { return nil }

const rawSecret = "hunter2-s3cr3t-value"

// Arguments handed over raw (RecordWithRawArguments, and its durable
// form) reach every exporter redacted, the same as RedactArguments would
// have made them on the call's path; no Sink gets the raw ones, the store
// and its files never hold them, and the caller reusing its buffer after
// the call changes nothing.
func TestRawArgumentsRedactedOffPath(t *testing.T) {
	st := openStore(t)
	sinks := []*captureSink{{}, {}}
	var exs []*Exporter
	for i, s := range sinks {
		exs = append(exs, NewExporter(s, ExportOptions{Name: fmt.Sprint("capture", i), FlushInterval: 5 * time.Millisecond}))
	}
	jsonlPath := filepath.Join(t.TempDir(), "audit.jsonl")
	jl, err := NewJSONL(jsonlPath, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	exs = append(exs, NewExporter(jl, ExportOptions{Name: "jsonl", FlushInterval: 5 * time.Millisecond}))
	w := newWriter(t, st, Options{FlushInterval: 5 * time.Millisecond, Exporters: exs})
	patterns := []string{"*token*", "password", "*key*"}
	inputs := []string{
		`{"password":"` + rawSecret + `","q":"x"}`,
		`{"auth":{"AccessToken":"` + rawSecret + `"},"items":[{"api_key":"` + rawSecret + `"}]}`,
		`{"Password":{"nested":"` + rawSecret + `"}}`,
		`{"password":"` + rawSecret + `"`, // not JSON: not exported at all
		`[{"x/token":"` + rawSecret + `"}]`,
	}
	const n = 40
	buf := make([]byte, 0, 256)
	for i := range n {
		in := inputs[i%len(inputs)]
		buf = append(buf[:0], in...)
		c := call(i)
		if i%2 == 0 {
			w.RecordWithRawArguments(c, buf, patterns)
		} else if err := w.RecordDurableWithRawArguments(t.Context(), c, buf, patterns); err != nil {
			t.Fatal(err)
		}
		// The caller's buffer is the request's: reused at once, here
		// with the secret in a key no pattern matches.
		copy(buf, strings.Repeat(`{"plain":"`+rawSecret+`"}`, 4))
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for si, s := range sinks {
		if len(s.entries) != n {
			t.Fatalf("sink %d got %d entries, want %d", si, len(s.entries), n)
		}
		for _, e := range s.entries {
			if e.raw != nil {
				t.Errorf("sink %d got an entry still holding raw arguments", si)
			}
			want := RedactArguments(json.RawMessage(inputs[e.RequestBytes%int64(len(inputs))]), patterns)
			if !bytes.Equal(e.Arguments, want) {
				t.Errorf("sink %d, record %d: arguments %s, want %s", si, e.RequestBytes, e.Arguments, want)
			}
			if bytes.Contains(e.Arguments, []byte(rawSecret)) {
				t.Errorf("sink %d, record %d: the secret reached the sink: %s", si, e.RequestBytes, e.Arguments)
			}
		}
	}
	// The exported file, the store's files: no secret.
	files := []string{jsonlPath}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(st.Path() + "*")
	files = append(files, m...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(rawSecret)) {
			t.Errorf("%s holds the secret", f)
		}
	}
	if got := len(readLines(t, jsonlPath)); got != n {
		t.Errorf("the JSONL file has %d records, want %d", got, n)
	}
}

// Without exporters, raw arguments are not even copied: nothing sees them.
func TestRawArgumentsNoExporter(t *testing.T) {
	w := newWriter(t, openStore(t), Options{})
	c := store.ToolCall{Server: "s", Tool: "t", Outcome: "ok", Time: time.Unix(1, 0)}
	raw, patterns := json.RawMessage(`{"password":"`+rawSecret+`"}`), []string{"password"}
	allocs := testing.AllocsPerRun(100, func() { w.RecordWithRawArguments(c, raw, patterns) })
	if allocs > 0 {
		t.Errorf("RecordWithRawArguments without exporters allocates %.0f times per call, want 0", allocs)
	}
}

// BenchmarkRecordArguments compares the caller's cost of redacting on the
// call's path (RecordWithArguments after RedactArguments) with handing the
// raw arguments over (RecordWithRawArguments).
func BenchmarkRecordArguments(b *testing.B) {
	args := json.RawMessage(`{"query":"select * from issues where state = 'open'","limit":50,"auth":{"token":"abc"},"labels":["bug","p1"]}`)
	patterns := []string{"*token*", "password", "*key*", "authorization", "secret*"}
	c := store.ToolCall{Server: "github", Tool: "search", Outcome: "ok", Time: time.Unix(1, 0)}
	for _, raw := range []bool{false, true} {
		b.Run(map[bool]string{false: "redact-on-path", true: "raw"}[raw], func(b *testing.B) {
			ex := NewExporter(&discardSink{}, ExportOptions{QueueSize: 1 << 20})
			w := NewWriter(&fakeLog{appendCalls: func(context.Context, []store.ToolCall) error { return nil }},
				Options{QueueSize: 1 << 20, Exporters: []*Exporter{ex}})
			b.ReportAllocs()
			for b.Loop() {
				if raw {
					w.RecordWithRawArguments(c, args, patterns)
				} else {
					w.RecordWithArguments(c, RedactArguments(args, patterns))
				}
			}
			b.StopTimer()
			w.Close(context.Background())
		})
	}
}
