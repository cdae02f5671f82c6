package sqlite

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// realisticCalls returns n tool-call records shaped like the audit
// writer's batches under load: timed by the writer (a few share a
// millisecond), a handful of keys, servers and tools, one session prefix
// per client session, mostly successes with a few faults, sizes and
// durations of real calls, and a price on some servers' calls. It is
// deterministic, so two runs write the same rows.
func realisticCalls(n int) []store.ToolCall {
	return realisticCallsFrom(time.Date(2026, 12, 3, 21, 0, 0, 0, time.UTC), n)
}

// batchSpan is more than the time realisticCalls' records of one batch span.
const batchSpan = time.Second

func realisticCallsFrom(t0 time.Time, n int) []store.ToolCall {
	keys := []struct{ alias, user, team string }{
		{"ci", "", ""},
		{"alice-laptop", "alice", "eng"},
		{"bob-agent", "bob", "eng"},
		{"support-bot", "", "support"},
	}
	tools := []struct {
		server, tool string
		cost         float64
	}{
		{"github", "search_issues", 0},
		{"github", "create_issue", 0},
		{"github", "get_file_contents", 0},
		{"jira", "search", 0.002},
		{"jira", "create_ticket", 0.01},
		{"search", "web_search", 0.005},
		{"fs", "read_file", 0},
		{"fs", "list_directory", 0},
	}
	calls := make([]store.ToolCall, n)
	for i := range calls {
		k := keys[i*7%len(keys)]
		tl := tools[i*5%len(tools)]
		c := store.ToolCall{
			Time:            t0.Add(time.Duration(i/3) * time.Millisecond),
			KeyAlias:        k.alias,
			User:            k.user,
			Team:            k.team,
			Server:          tl.server,
			Tool:            tl.tool,
			DurationMs:      int64(3 + i*37%900),
			Outcome:         store.OutcomeOK,
			SessionIDPrefix: fmt.Sprintf("%08x", uint32(i%64)*2654435761),
			RequestBytes:    int64(180 + i*13%600),
			ResponseBytes:   int64(400 + i*977%24000),
			Cost:            tl.cost,
		}
		switch i % 16 {
		case 5:
			c.Outcome = store.OutcomeToolError
		case 11:
			c.Outcome, c.ErrorClass = store.FaultTimeout, store.FaultTimeout
			c.ResponseBytes = 0
		case 13:
			c.Outcome, c.ErrorClass, c.Guardrail = store.FaultBlocked, store.FaultBlocked, "no-secrets"
			c.ResponseBytes, c.Cost = 0, 0
		}
		calls[i] = c
	}
	return calls
}

// BenchmarkAuditBatch is the audit writer's path into a SQLite file:
// store.SQLAudit.AppendToolCalls with batches of realistic records (the
// writer sends up to audit.DefaultBatchSize, 1024, and under load mostly
// full or near-full batches). It reports the cost per record: wall time,
// the process's CPU time, bytes and allocations. keyless is a full batch
// of a gateway without keys: no record names a key, user or team.
func BenchmarkAuditBatch(b *testing.B) {
	for _, bb := range []struct {
		n       int
		keyless bool
	}{{64, false}, {128, false}, {256, false}, {1024, false}, {1024, true}} {
		name := fmt.Sprint(bb.n)
		if bb.keyless {
			name += "-keyless"
		}
		b.Run(name, func(b *testing.B) {
			s := openTemp(b, b.TempDir())
			ctx, cancel := context.WithCancel(context.Background()) // the writer's is cancellable too
			defer cancel()
			n := bb.n
			batch := realisticCalls(n)
			if bb.keyless {
				for i := range batch {
					batch[i].KeyAlias, batch[i].User, batch[i].Team = "", "", ""
				}
			}
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0 := cpuTime(b)
			for b.Loop() {
				if err := s.AppendToolCalls(ctx, batch); err != nil {
					b.Fatal(err)
				}
				// The next batch comes later, as in a gateway: its
				// rows go at the end of the time-ordered indexes.
				for i := range batch {
					batch[i].Time = batch[i].Time.Add(batchSpan)
				}
			}
			cpu := cpuTime(b) - cpu0
			runtime.ReadMemStats(&m1)
			records := float64(b.N * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
			b.ReportMetric(float64(cpu.Nanoseconds())/records, "cpu-ns/record")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/records, "B/record")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/records, "allocs/record")
		})
	}
}
