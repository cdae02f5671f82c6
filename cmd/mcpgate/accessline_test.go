package main

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

// slogLine is the line slog's own handler of format f writes for l's
// record: what the access log wrote before it wrote lines itself.
func slogLine(t testing.TB, f lineFormat, l gateway.AccessLine) string {
	t.Helper()
	var buf bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&buf, nil)
	if f == formatJSON {
		h = slog.NewJSONHandler(&buf, nil)
	}
	if err := h.Handle(gateway.AccessLineContext(), l.Record()); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func sampleLine() gateway.AccessLine {
	return gateway.AccessLine{
		Time: time.Date(2026, 12, 4, 6, 30, 1, 120_000_000, time.UTC), Method: "POST", Route: "mcp", Path: "/mcp/echo",
		Status: 200, Bytes: 82, Elapsed: 412 * time.Microsecond,
		Session: "249462c8", MCPMethod: "tools/call", Tool: "echo",
	}
}

// TestAccessLineAsSlogWrites: an access line written by the log's handler
// itself is byte for byte the line slog's text or JSON handler writes for
// its record, for the usual lines (each optional field, times whose
// fractions end in zeros, a local zone), and the handler does write it.
func TestAccessLineAsSlogWrites(t *testing.T) {
	base := sampleLine()
	variants := map[string]func(l *gateway.AccessLine){
		"usual":        func(*gateway.AccessLine) {},
		"whole second": func(l *gateway.AccessLine) { l.Time = l.Time.Truncate(time.Second) },
		"nanoseconds":  func(l *gateway.AccessLine) { l.Time = l.Time.Add(7) },
		"zone":         func(l *gateway.AccessLine) { l.Time = l.Time.In(time.FixedZone("X", -(3*3600 + 1800))) },
		"monotonic":    func(l *gateway.AccessLine) { l.Time = time.Now() },
		"caller":       func(l *gateway.AccessLine) { l.Alias, l.User = "ci-bot", "alice@example.com" },
		"refused": func(l *gateway.AccessLine) {
			l.Status, l.Reason, l.Session, l.MCPMethod, l.Tool = 401, "expired-key", "", "", ""
		},
		"no session":     func(l *gateway.AccessLine) { l.Session = "" },
		"long":           func(l *gateway.AccessLine) { l.Elapsed, l.Bytes = 93*time.Second+450*time.Millisecond, 1<<40 },
		"get":            func(l *gateway.AccessLine) { l.Method, l.Path, l.Status, l.Bytes = "GET", "/mcp", 202, 0 },
		"every optional": func(l *gateway.AccessLine) { l.Alias, l.User, l.Reason = "k", "u", "r" },
		// Printable ASCII that neither handler quotes or escapes (HTML
		// characters included: slog's JSON handler leaves them).
		"punctuation": func(l *gateway.AccessLine) { l.Path, l.Tool = "/mcp/a<b>&c%20#x?y;z~!$'()*+,@[]^`{|}", "x.y-z_w:v/u" },
	}
	for name, change := range variants {
		for _, f := range []lineFormat{formatText, formatJSON} {
			l := base
			change(&l)
			got, ok := appendAccessLine(nil, f, &l)
			if !ok {
				t.Errorf("%s (format %d): not written by the handler itself", name, f)
				continue
			}
			if want := slogLine(t, f, l); string(got) != want {
				t.Errorf("%s (format %d):\n got %q\nwant %q", name, f, got, want)
			}
		}
	}
}

// TestAccessLineLeftToSlog: a value either of slog's handlers would quote
// or escape (a hostile path or tool name: spaces, quotes, a newline that
// would start a forged line, '=', non-ASCII, a control byte), an empty
// one, or a year outside 0-9999 is not written by the fast path, and the
// record slog then writes holds it quoted, on one line.
func TestAccessLineLeftToSlog(t *testing.T) {
	for _, v := range []string{"a b", `a"b`, "a\nlevel=ERROR msg=forged", "a=b", `a\b`, "caf\u00e9", "a\x00b", "a\x7fb", "\xff"} {
		for _, f := range []lineFormat{formatText, formatJSON} {
			for _, field := range []string{"path", "tool", "user"} {
				l := sampleLine()
				switch field {
				case "path":
					l.Path = v
				case "tool":
					l.Tool = v
				case "user":
					l.User = v
				}
				if _, ok := appendAccessLine(nil, f, &l); ok {
					t.Errorf("%s %q (format %d): written by the fast path", field, v, f)
				}
				var out lockedBuffer
				h := newBatchHandler(newLineBatch(&out), f, nil)
				if h.WriteAccessLine(l) {
					t.Errorf("%s %q (format %d): WriteAccessLine took it", field, v, f)
				}
				if line := slogLine(t, f, l); strings.Count(line, "\n") != 1 {
					t.Errorf("%s %q (format %d): slog's line is not one line: %q", field, v, f, line)
				}
			}
		}
	}
	l := sampleLine()
	l.Path = ""
	if _, ok := appendAccessLine(nil, formatText, &l); ok {
		t.Error("an empty path (quoted by the text handler) was written by the fast path")
	}
	l = sampleLine()
	l.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := appendAccessLine(nil, formatJSON, &l); ok {
		t.Error("a year past 9999 was written by the fast path")
	}
}

// TestAccessLineHandlers: only a handler newBatchHandler made, with no
// attributes, groups, ReplaceAttr or AddSource, writes access lines
// itself; the line goes into the batch (written on Flush, as a record's
// would be).
func TestAccessLineHandlers(t *testing.T) {
	var out lockedBuffer
	b := newLineBatch(&out)
	h := newBatchHandler(b, formatJSON, &slog.HandlerOptions{Level: slog.LevelInfo})
	l := sampleLine()
	if !h.WriteAccessLine(l) {
		t.Fatal("the plain JSON handler did not write the line")
	}
	if out.String() != "" {
		t.Fatal("an access line was not batched")
	}
	b.Flush()
	if want := slogLine(t, formatJSON, l); out.String() != want {
		t.Fatalf("batched line %q, want %q", out.String(), want)
	}
	derived := []slog.Handler{
		h.WithAttrs([]slog.Attr{slog.String("component", "access")}),
		h.WithGroup("g"),
		newBatchHandler(b, formatText, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return a }}),
		newBatchHandler(b, formatJSON, &slog.HandlerOptions{AddSource: true}),
	}
	for i, d := range derived {
		if w, ok := d.(gateway.AccessLineWriter); ok && w.WriteAccessLine(l) {
			t.Errorf("handler %d (attributes, a group, ReplaceAttr or AddSource) wrote the line itself", i)
		}
	}
	// The loggers serve builds: the process log (either format) and an
	// access_log.path file.
	for _, format := range []string{"text", "json"} {
		log, err := (&logFlags{format: format, level: "info"}).logger(&out)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := log.Handler().(gateway.AccessLineWriter); !ok || !w.WriteAccessLine(l) {
			t.Errorf("the %s process log does not write access lines itself", format)
		}
	}
}

// FuzzAccessLine: whatever the values, a line the fast path writes is the
// line slog writes for the record, and it is one line.
func FuzzAccessLine(f *testing.F) {
	f.Add("POST", "/mcp/echo", "echo", "alice", int64(1796350000123456789), 200, int64(82), int64(412000), true)
	f.Add("GET", "/mcp", "", "", int64(0), 202, int64(0), int64(0), false)
	f.Add("POST", "/a b", "x\ny", "=", int64(-1), -5, int64(-1), int64(-1), true)
	f.Fuzz(func(t *testing.T, method, path, tool, user string, nanos int64, status int, n, elapsed int64, json bool) {
		l := gateway.AccessLine{
			Time: time.Unix(0, nanos).UTC(), Method: method, Route: "mcp", Path: path, Status: status, Bytes: n,
			Elapsed: time.Duration(elapsed), Tool: tool, User: user,
		}
		f := formatText
		if json {
			f = formatJSON
		}
		got, ok := appendAccessLine(nil, f, &l)
		if !ok {
			return
		}
		if want := slogLine(t, f, l); string(got) != want {
			t.Fatalf("\n got %q\nwant %q", got, want)
		}
		if bytes.Count(got, []byte("\n")) != 1 || got[len(got)-1] != '\n' {
			t.Fatalf("not one line: %q", got)
		}
	})
}

// BenchmarkAccessLine: one access line into the batch, written by the
// handler itself (fast) and through slog's handler (record), for each
// format. The batch is emptied between lines, so nothing is written out.
func BenchmarkAccessLine(b *testing.B) {
	l := sampleLine()
	for _, f := range []lineFormat{formatText, formatJSON} {
		name := map[lineFormat]string{formatText: "text", formatJSON: "json"}[f]
		lb := newLineBatch(io.Discard)
		h := newBatchHandler(lb, f, &slog.HandlerOptions{Level: slog.LevelInfo})
		b.Run(name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !h.WriteAccessLine(l) {
					b.Fatal("not written")
				}
				lb.buf = lb.buf[:0]
			}
		})
		b.Run(name+"/record", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Handle(gateway.AccessLineContext(), l.Record())
				lb.buf = lb.buf[:0]
			}
		})
	}
}
