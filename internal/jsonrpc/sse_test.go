package jsonrpc_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// event is an Event with Data as a string, for readable diffs.
type event struct {
	ID, Name, Data string
	Retry          int
}

// readAll reads events until an error and returns them with that error.
func readAll(t testing.TB, r io.Reader, max int) ([]event, error) {
	t.Helper()
	sr := jsonrpc.NewSSEReader(r, max)
	var evs []event
	for {
		ev, err := sr.Next()
		if err != nil {
			if ev != nil {
				t.Errorf("Next returned an event with error %v", err)
			}
			// Errors are sticky.
			if _, err2 := sr.Next(); err2 != err {
				t.Errorf("Next after %v = %v, want the same error", err, err2)
			}
			return evs, err
		}
		evs = append(evs, event{ev.ID, ev.Name, string(ev.Data), ev.Retry})
	}
}

func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case err == io.EOF:
		return "io.EOF"
	case err == io.ErrUnexpectedEOF:
		return "io.ErrUnexpectedEOF"
	case errors.Is(err, jsonrpc.ErrEventTooLarge):
		return "ErrEventTooLarge"
	}
	return err.Error()
}

type sseResult struct {
	Events []event
	Err    string
}

var sseTests = []struct {
	name string
	in   string
	max  int
	want sseResult
}{
	{name: "empty stream", in: "", want: sseResult{Err: "io.EOF"}},
	{name: "one event", in: "data: hello\n\n",
		want: sseResult{[]event{{Data: "hello"}}, "io.EOF"}},
	{name: "multi-line data joined with LF", in: "data: a\ndata: b\ndata:\ndata: c\n\n",
		want: sseResult{[]event{{Data: "a\nb\n\nc"}}, "io.EOF"}},
	{name: "CRLF line endings", in: "event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n",
		want: sseResult{[]event{{Name: "e", Data: "a\nb"}, {Data: "c"}}, "io.EOF"}},
	{name: "CR line endings", in: "event: e\rdata: a\rdata: b\r\rdata: c\r\r",
		want: sseResult{[]event{{Name: "e", Data: "a\nb"}, {Data: "c"}}, "io.EOF"}},
	{name: "mixed line endings", in: "data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\n\n",
		want: sseResult{[]event{{Data: "a\nb\nc"}, {Data: "d"}}, "io.EOF"}},
	{name: "CR CR LF is two line ends and a blank line", in: "data: a\r\r\ndata: b\n\n",
		want: sseResult{[]event{{Data: "a"}, {Data: "b"}}, "io.EOF"}},
	{name: "comments ignored", in: ": keepalive\ndata: a\n: inside\ndata: b\n\n:\n\n",
		want: sseResult{[]event{{Data: "a\nb"}}, "io.EOF"}},
	{name: "event without data skipped", in: "event: ping\nid: 1\n\ndata: x\n\n",
		want: sseResult{[]event{{Data: "x"}}, "io.EOF"}},
	{name: "empty data line dispatches empty data", in: "id: 5\ndata:\n\n",
		want: sseResult{[]event{{ID: "5"}}, "io.EOF"}},
	{name: "id event and retry fields", in: "id: 42\nevent: message\nretry: 3000\ndata: {}\n\n",
		want: sseResult{[]event{{ID: "42", Name: "message", Retry: 3000, Data: "{}"}}, "io.EOF"}},
	{name: "fields reset between events", in: "id: 1\nevent: a\nretry: 10\ndata: x\n\ndata: y\n\n",
		want: sseResult{[]event{{ID: "1", Name: "a", Retry: 10, Data: "x"}, {Data: "y"}}, "io.EOF"}},
	{name: "last id wins", in: "id: 1\nid: 2\ndata: x\n\n",
		want: sseResult{[]event{{ID: "2", Data: "x"}}, "io.EOF"}},
	{name: "id with NUL ignored", in: "id: 1\nid: a\x00b\ndata: x\n\n",
		want: sseResult{[]event{{ID: "1", Data: "x"}}, "io.EOF"}},
	{name: "retry not all digits ignored", in: "retry: 10\nretry: +5\nretry: -1\nretry: 1x\nretry:  7\ndata: x\n\n",
		want: sseResult{[]event{{Retry: 10, Data: "x"}}, "io.EOF"}},
	{name: "retry zero", in: "retry: 10\nretry: 0\ndata: x\n\n",
		want: sseResult{[]event{{Data: "x"}}, "io.EOF"}},
	{name: "field with no colon", in: "data\ndata\n\n",
		want: sseResult{[]event{{Data: "\n"}}, "io.EOF"}},
	{name: "event field with no colon is empty name", in: "event: x\nevent\ndata: d\n\n",
		want: sseResult{[]event{{Data: "d"}}, "io.EOF"}},
	{name: "no space after colon", in: "data:x\nevent:e\nid:7\n\n",
		want: sseResult{[]event{{ID: "7", Name: "e", Data: "x"}}, "io.EOF"}},
	{name: "only one leading space removed", in: "data:  two\ndata: a: b\n\n",
		want: sseResult{[]event{{Data: " two\na: b"}}, "io.EOF"}},
	{name: "unknown fields ignored", in: "foo: bar\nDATA: no\ndata : no\ndata: yes\n\n",
		want: sseResult{[]event{{Data: "yes"}}, "io.EOF"}},
	{name: "leading blank lines", in: "\n\n\r\ndata: x\n\n",
		want: sseResult{[]event{{Data: "x"}}, "io.EOF"}},
	{name: "byte order mark at start stripped", in: "\xEF\xBB\xBFdata: x\n\n",
		want: sseResult{[]event{{Data: "x"}}, "io.EOF"}},
	{name: "byte order mark later kept", in: "data: x\n\n\xEF\xBB\xBFdata: y\n\n",
		want: sseResult{[]event{{Data: "x"}}, "io.EOF"}},
	{name: "event cut off at EOF", in: "data: a\n\ndata: b\n",
		want: sseResult{[]event{{Data: "a"}}, "io.ErrUnexpectedEOF"}},
	{name: "event cut off mid-line at EOF", in: "data: a\n\ndata: b",
		want: sseResult{[]event{{Data: "a"}}, "io.ErrUnexpectedEOF"}},
	{name: "event cut off after CR at EOF", in: "data: a\r",
		want: sseResult{nil, "io.ErrUnexpectedEOF"}},
	{name: "clean EOF after blank line with CR", in: "data: a\r\r",
		want: sseResult{[]event{{Data: "a"}}, "io.EOF"}},
	{name: "data at limit", in: "data: 12345\n\n", max: 5,
		want: sseResult{[]event{{Data: "12345"}}, "io.EOF"}},
	{name: "data over limit", in: "data: 123456\n\n", max: 5,
		want: sseResult{nil, "ErrEventTooLarge"}},
	{name: "joined data over limit", in: "data: 12\ndata: 345\n\n", max: 5,
		want: sseResult{nil, "ErrEventTooLarge"}},
	{name: "joined data at limit", in: "data: 12\ndata: 34\n\n", max: 5,
		want: sseResult{[]event{{Data: "12\n34"}}, "io.EOF"}},
	{name: "limit is per event", in: "data: 12345\n\ndata: 12345\n\n", max: 5,
		want: sseResult{[]event{{Data: "12345"}, {Data: "12345"}}, "io.EOF"}},
	{name: "huge line without terminator", in: "data: " + strings.Repeat("x", 100), max: 10,
		want: sseResult{nil, "ErrEventTooLarge"}},
	{name: "huge comment", in: ":" + strings.Repeat("x", 100) + "\n\ndata: a\n\n", max: 10,
		want: sseResult{nil, "ErrEventTooLarge"}},
	{name: "event after too large is not read", in: "data: 123456789\n\ndata: a\n\n", max: 5,
		want: sseResult{nil, "ErrEventTooLarge"}},
	{name: "many empty data lines over limit", in: strings.Repeat("data:\n", 7) + "\n", max: 5,
		want: sseResult{nil, "ErrEventTooLarge"}},
}

func TestSSEReader(t *testing.T) {
	for _, tt := range sseTests {
		t.Run(tt.name, func(t *testing.T) {
			readers := map[string]io.Reader{
				"whole":    strings.NewReader(tt.in),
				"one byte": iotest.OneByteReader(strings.NewReader(tt.in)),
				"half":     iotest.HalfReader(strings.NewReader(tt.in)),
			}
			for rname, r := range readers {
				evs, err := readAll(t, r, tt.max)
				if diff := cmp.Diff(sseResult{evs, errName(err)}, tt.want); diff != "" {
					t.Errorf("%s reader on %q (-got +want):\n%s", rname, tt.in, diff)
				}
			}
		})
	}
}

// errReader returns data, then err.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestSSEReaderPassesReadErrors(t *testing.T) {
	boom := errors.New("boom")
	evs, err := readAll(t, &errReader{[]byte("data: a\n\ndata: b\n"), boom}, 0)
	if diff := cmp.Diff(evs, []event{{Data: "a"}}); diff != "" {
		t.Errorf("events (-got +want):\n%s", diff)
	}
	if err != boom {
		t.Errorf("error = %v, want %v", err, boom)
	}
}

// TestSSEReaderDoesNotWaitAfterCR checks that an event ending in CR CR is
// delivered without reading further: on a live stream the LF that might
// follow may never come.
func TestSSEReaderDoesNotWaitAfterCR(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	go func() {
		_, _ = pw.Write([]byte("data: a\r\r"))
		// The writer keeps the stream open: a reader that waits for
		// more bytes blocks here until the test closes the pipe.
	}()
	type result struct {
		ev  *jsonrpc.Event
		err error
	}
	done := make(chan result, 1)
	go func() {
		ev, err := jsonrpc.NewSSEReader(pr, 0).Next()
		done <- result{ev, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Next: %v", r.err)
		}
		if diff := cmp.Diff(string(r.ev.Data), "a"); diff != "" {
			t.Errorf("data (-got +want):\n%s", diff)
		}
	case <-time.After(5 * time.Second):
		// Cleanup closes the pipe, which ends the blocked Next.
		t.Fatal("Next still waiting for more bytes after CR CR")
	}
}

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name string
		ev   jsonrpc.Event
		want string
	}{
		{"data only", jsonrpc.Event{Data: []byte(`{"jsonrpc":"2.0"}`)}, "data: {\"jsonrpc\":\"2.0\"}\n\n"},
		{"empty data", jsonrpc.Event{}, "data: \n\n"},
		{"all fields", jsonrpc.Event{ID: "7", Name: "endpoint", Retry: 500, Data: []byte("/m?s=1")}, "id: 7\nevent: endpoint\nretry: 500\ndata: /m?s=1\n\n"},
		{"line breaks split data", jsonrpc.Event{Data: []byte("a\nb\r\nc\rd")}, "data: a\ndata: b\ndata: c\ndata: d\n\n"},
		{"trailing line break", jsonrpc.Event{Data: []byte("a\n")}, "data: a\ndata: \n\n"},
		{"breaks in id and name replaced", jsonrpc.Event{ID: "a\nb", Name: "c\rd", Data: []byte("x")}, "id: a b\nevent: c d\ndata: x\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(jsonrpc.AppendEvent([]byte("x"), &tt.ev))
			if diff := cmp.Diff(got, "x"+tt.want); diff != "" {
				t.Errorf("AppendEvent (-got +want):\n%s", diff)
			}
		})
	}
}

// normaliseBreaks is what any SSE reader makes of line breaks in data.
func normaliseBreaks(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

func TestAppendEventRoundTrip(t *testing.T) {
	datas := []string{"", " ", "x", " leading space", "a\nb", "a\r\nb", "a\rb", "a\n\r\nb",
		"\n", "\r\n", "\r", "\n\n", "trailing\r", "data: nested\n\nevent: x", ": comment", "\xEF\xBB\xBFbom",
		"\x00", `{"jsonrpc":"2.0","result":{"text":"line1\nline2"}}`}
	var stream []byte
	var want []event
	for i, d := range datas {
		ev := jsonrpc.Event{Data: []byte(d)}
		if i%2 == 1 {
			ev.ID, ev.Name, ev.Retry = "id"+d[:min(len(d), 1)], "n", i
		}
		stream = jsonrpc.AppendEvent(stream, &ev)
		want = append(want, event{
			ID:    strings.NewReplacer("\r", " ", "\n", " ").Replace(ev.ID),
			Name:  ev.Name,
			Retry: ev.Retry,
			Data:  normaliseBreaks(d),
		})
	}
	evs, err := readAll(t, bytes.NewReader(stream), 0)
	if diff := cmp.Diff(sseResult{evs, errName(err)}, sseResult{want, "io.EOF"}); diff != "" {
		t.Errorf("AppendEvent then SSEReader (-got +want):\n%s", diff)
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, tt := range sseTests {
		f.Add([]byte(tt.in), uint16(tt.max))
	}
	f.Add([]byte("data: a\r\ndata: b\r\rdata: c\n\nid: 1\x00\nretry: 99999999999999999999\ndata\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, max16 uint16) {
		max := int(max16 % 1024) // 0 means the default
		limit := max
		if limit == 0 {
			limit = jsonrpc.DefaultMaxEventBytes
		}
		whole, wholeErr := readAll(t, bytes.NewReader(in), max)
		for _, ev := range whole {
			if len(ev.Data) > limit {
				t.Fatalf("event of %d bytes returned with limit %d", len(ev.Data), limit)
			}
			if ev.Retry < 0 {
				t.Fatalf("negative retry %d", ev.Retry)
			}
			if strings.ContainsAny(ev.ID+ev.Name, "\r\n") || strings.Contains(ev.ID, "\x00") {
				t.Fatalf("id %q or name %q has a line break or NUL", ev.ID, ev.Name)
			}
		}
		switch wholeErr {
		case io.EOF, io.ErrUnexpectedEOF, jsonrpc.ErrEventTooLarge:
		default:
			t.Fatalf("unexpected error %v", wholeErr)
		}
		// How the bytes arrive must not matter.
		bytewise, byteErr := readAll(t, iotest.OneByteReader(bytes.NewReader(in)), max)
		if diff := cmp.Diff(sseResult{bytewise, errName(byteErr)}, sseResult{whole, errName(wholeErr)}); diff != "" {
			t.Fatalf("one-byte reads differ from whole reads (-got +want):\n%s", diff)
		}
	})
}

// FuzzSSERoundTrip checks that AppendEvent output reads back as the event,
// with line breaks in data normalised to LF.
func FuzzSSERoundTrip(f *testing.F) {
	f.Add([]byte("a\r\nb\rc\n"), "1", "message", uint16(0))
	f.Add([]byte(""), "", "", uint16(3000))
	f.Add([]byte("\r"), "a\nb", "c\rd", uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, id, name string, retry uint16) {
		ev := jsonrpc.Event{ID: id, Name: name, Retry: int(retry), Data: data}
		wire := jsonrpc.AppendEvent(nil, &ev)
		evs, err := readAll(t, bytes.NewReader(wire), 0)
		if err != io.EOF {
			t.Fatalf("reading %q: %v", wire, err)
		}
		breaks := strings.NewReplacer("\r", " ", "\n", " ")
		want := event{
			ID:    breaks.Replace(id),
			Name:  breaks.Replace(name),
			Data:  normaliseBreaks(string(data)),
			Retry: int(retry),
		}
		if strings.Contains(want.ID, "\x00") {
			want.ID = "" // the standard ignores such ids
		}
		if diff := cmp.Diff(evs, []event{want}); diff != "" {
			t.Fatalf("round trip of %q (-got +want):\n%s", wire, diff)
		}
	})
}
