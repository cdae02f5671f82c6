package tasks

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
	"github.com/mcpgate/mcpgate/internal/store/postgres/pgtest"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// TestMain stops the PostgreSQL server of the tests that start one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// backends opens, for each store backend, the stores of two replicas over
// one database: on PostgreSQL two pools (as two processes), on SQLite one
// store (a file has one process).
var backends = []struct {
	name string
	open func(t testing.TB) (a, b store.Tasks)
}{
	{"sqlite", func(t testing.TB) (store.Tasks, store.Tasks) {
		st, err := sqlite.Open(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, st
	}},
	{"postgres", func(t testing.TB) (store.Tasks, store.Tasks) {
		dsn := pgtest.DSN(t)
		var out [2]store.Tasks
		for i := range out {
			st, err := postgres.Open(t.Context(), dsn, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			out[i] = st
		}
		return out[0], out[1]
	}},
}

// max_per_caller holds across replicas under load: many tasks started at
// once by one caller on two replicas, never more than the limit in.
func TestSharedMaxPerCallerConcurrent(t *testing.T) {
	const limit, perReplica = 4, 24
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			sa, sb := be.open(t)
			key := []byte("0123456789abcdef0123456789abcdef")
			reg := &replicas{live: map[string]bool{"A": true, "B": true}}
			var tables []*Table
			for i, st := range []store.Tasks{sa, sb} {
				tb := NewTable(Options{Keys: [][]byte{key}, Shared: &Shared{Store: st, Replica: string(rune('A' + i)), Alive: reg.alive, Watch: 50 * time.Millisecond}})
				t.Cleanup(tb.Close)
				tables = append(tables, tb)
			}
			release := make(chan struct{})
			defer close(release)
			cfg := Config{TTL: time.Minute, MaxPerCaller: limit}
			var wg sync.WaitGroup
			var started, refused atomic.Int64
			start := make(chan struct{})
			for _, tb := range tables {
				for range perReplica {
					wg.Go(func() {
						<-start
						_, err := tb.Start(t.Context(), alice, "s", cfg, 0, block(release, `{"content":[]}`), nil)
						switch {
						case err == nil:
							started.Add(1)
						case errors.Is(err, ErrTooMany):
							refused.Add(1)
						default:
							t.Errorf("Start: %v", err)
						}
					})
				}
			}
			close(start)
			wg.Wait()
			if started.Load() != limit || refused.Load() != 2*perReplica-limit {
				t.Fatalf("%d started, %d refused; want %d and %d", started.Load(), refused.Load(), limit, 2*perReplica-limit)
			}
			for _, tb := range tables {
				if list, _, err := tb.List(alice, ""); err != nil || len(list) != limit {
					t.Fatalf("List = %d tasks, %v; want %d", len(list), err, limit)
				}
			}
			// Refused starts left nothing behind in either table.
			if n := tables[0].Len() + tables[1].Len(); n != limit {
				t.Fatalf("the tables hold %d tasks, want %d", n, limit)
			}
			// The limit is per caller: bob still gets his.
			if _, err := tables[1].Start(t.Context(), bob, "s", cfg, 0, block(release, `{}`), nil); err != nil {
				t.Fatalf("another caller's task: %v", err)
			}
		})
	}
}

// BenchmarkTaskCreate: a task's row created with and without the limit
// (CreateTaskWithin's count in the same step), on each backend; owners
// rotate over 100, so each holds up to b.N/100 rows.
func BenchmarkTaskCreate(b *testing.B) {
	for _, be := range backends {
		for _, limit := range []int{0, 1 << 30} {
			b.Run(fmt.Sprintf("%s/limit=%v", be.name, limit > 0), func(b *testing.B) {
				st, _ := be.open(b)
				now := time.Now().UTC().Truncate(time.Millisecond)
				i := 0
				for b.Loop() {
					i++
					r := store.TaskRecord{ID: fmt.Sprintf("%032x", i), Owner: ownerPrint(Owner{Caller: fmt.Sprint(i % 100), Route: "r1"}),
						Route: "r1", Server: "s", Status: store.TaskWorking, CreatedAt: now, UpdatedAt: now,
						TTL: time.Hour, ExpiresAt: now.Add(time.Hour)}
					if err := st.CreateTaskWithin(b.Context(), r, limit); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
