package audit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// crashChildEnv, when set to a directory, makes TestAcknowledgedSurviveKill
// the child process: it writes durable records to a store there and
// prints the number of each one acknowledged, until it is killed.
const crashChildEnv = "MCPGATE_AUDIT_CRASH_CHILD"

// Every record RecordDurable acknowledged is in the store after the
// process is killed (SIGKILL, no Close, no deferred code) and the store
// reopened: an acknowledged record is committed, not queued. Acknowledged
// records come from 8 concurrent callers, so they are group commits, with
// plain records queued among them.
func TestAcknowledgedSurviveKill(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedSurviveKill$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < 300 {
		n, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		acked[n] = true
	}
	// Killed mid-stream: records are being written and acknowledged.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("the child acknowledged %d records before it stopped", len(acked))
	}

	s, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	have := map[int64]bool{}
	for _, c := range listAll(t, s) {
		if c.RequestBytes >= 0 {
			have[c.RequestBytes] = true
		}
	}
	for n := range acked {
		if !have[n] {
			t.Errorf("record %d was acknowledged, and is not in the store after the kill", n)
		}
	}
	t.Logf("%d acknowledged, %d in the store after the kill", len(acked), len(have))
}

func crashChild(dir string) {
	s, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := NewWriter(s, Options{FlushInterval: 50 * time.Millisecond})
	acks := make(chan int64, 64)
	var seq atomic.Int64
	for range 8 {
		go func() {
			for {
				n := seq.Add(1)
				plain := call(int(n))
				plain.RequestBytes = -1 // a plain record beside each durable one
				plain.ResponseBytes = n
				w.Record(plain)
				if err := w.RecordDurable(context.Background(), call(int(n))); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				acks <- n
			}
		}()
	}
	bw := bufio.NewWriter(os.Stdout)
	for n := range acks {
		// Printed only after the commit: the parent counts what was
		// acknowledged.
		fmt.Fprintln(bw, n)
		bw.Flush()
	}
}

// Records queued (not durable) before Close are all in the store when
// Close returns, and after the store is reopened.
func TestQueuedWrittenByClose(t *testing.T) {
	dir := t.TempDir()
	s, err := sqlite.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(s, Options{FlushInterval: time.Hour, BatchSize: 512})
	const n = 2000
	for i := range n {
		w.Record(call(i))
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := listAll(t, s)
	seen := make([]bool, n)
	for _, c := range got {
		seen[c.RequestBytes] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("record %d queued before Close is not in the reopened store (%d of %d are)", i, len(got), n)
		}
	}
}

// syncLog tells the batches the writer asks to be synced from the others.
type syncLog struct {
	store.AuditLog
	synced, plain atomic.Int64 // records
}

func (l *syncLog) AppendToolCalls(ctx context.Context, calls []store.ToolCall) error {
	l.plain.Add(int64(len(calls)))
	return l.AuditLog.AppendToolCalls(ctx, calls)
}

func (l *syncLog) AppendToolCallsSync(ctx context.Context, calls []store.ToolCall) error {
	l.synced.Add(int64(len(calls)))
	return l.AuditLog.(store.SyncAuditLog).AppendToolCallsSync(ctx, calls)
}

// A batch a durable record waits for is committed with
// AppendToolCallsSync; batches of plain records only are not (they pay
// no sync).
func TestDurableBatchSynced(t *testing.T) {
	s := openStore(t)
	l := &syncLog{AuditLog: s}
	w := newWriter(t, l, Options{FlushInterval: 10 * time.Millisecond})
	for i := range 10 {
		w.Record(call(i))
	}
	waitFor(t, "the plain records written", func() bool { return l.plain.Load() == 10 })
	if err := w.RecordDurable(t.Context(), call(10)); err != nil {
		t.Fatal(err)
	}
	if got := l.synced.Load(); got != 1 {
		t.Errorf("%d records synced, want the durable one", got)
	}
	if got := l.plain.Load(); got != 10 {
		t.Errorf("%d records written without sync, want the 10 plain ones", got)
	}
	if got := len(listAll(t, s)); got != 11 {
		t.Errorf("%d records in the store, want 11", got)
	}
}

// A store without store.SyncAuditLog gets AppendToolCalls for a durable
// record's batch too.
func TestDurableBatchWithoutSync(t *testing.T) {
	var n atomic.Int64
	f := &fakeLog{appendCalls: func(ctx context.Context, calls []store.ToolCall) error {
		n.Add(int64(len(calls)))
		return nil
	}}
	w := newWriter(t, f, Options{})
	if err := w.RecordDurable(t.Context(), call(1)); err != nil || n.Load() != 1 {
		t.Errorf("a store without SyncAuditLog: %v, %d records", err, n.Load())
	}
}
