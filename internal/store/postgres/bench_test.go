package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
)

// BenchmarkAppendToolCalls reports the cost per row of a batch (the audit
// writer's flush) on the test server (fsync off: the server's CPU and the
// round trip, not the disk).
func BenchmarkAppendToolCalls(b *testing.B) {
	for _, n := range []int{1, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := openTemp(b, pgtest.DSN(b))
			ctx := context.Background()
			c := store.ToolCall{KeyAlias: "ci", User: "alice", Team: "eng", Server: "github", Tool: "search",
				Outcome: "ok", DurationMs: 12, SessionIDPrefix: "3f2a9c1b", RequestBytes: 120, ResponseBytes: 2400}
			batch := make([]store.ToolCall, n)
			for i := range batch {
				batch[i] = c
			}
			for b.Loop() {
				if err := s.AppendToolCalls(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
		})
	}
}
