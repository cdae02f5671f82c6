package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestStoreUnwritable (issue 10, chaos 6; SPEC S16.3): the store's disk
// fills up under the gateway. Root ignores permissions, and a read-only
// directory or file does not stop writes through descriptors SQLite
// already holds, so the data directory is a small tmpfs of its own that
// the test fills (every write that needs a new block then fails with
// ENOSPC) and later empties.
//
// While the disk is full every call is still served; the audit writer
// reports the store error in the log and keeps the records (retrying),
// which shows in /metrics as queue depth (or, past the queue, as drops);
// once the disk has room again, the records of the outage and every later
// one are written. Drops, if any, are counted exactly.
func TestStoreUnwritable(t *testing.T) {
	const (
		before = 100 // calls with a healthy disk
		during = 400 // calls with a full disk
		after  = 100 // calls once it has room again
	)
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dataDir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		// CI runs as root and must run this case: there a failed mount
		// is a failure, not a skip. A developer without CAP_SYS_ADMIN
		// is told why the case did not run.
		if os.Getenv("CI") != "" || os.Geteuid() == 0 {
			t.Fatalf("mount a tmpfs for the data directory: %v", err)
		}
		t.Skipf("cannot mount a tmpfs for the data directory (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dataDir, syscall.MNT_DETACH) })
	steady := startUpstream(t, "", "normal")
	g := startGateway(t, gatewayConfig(dataDir, httpServer("steady", steady.url(), "5s")), dataDir, "steady")
	db := filepath.Join(dataDir, "mcpgate.db")

	phase := func(name string, n int) []*client {
		clients := g.mustConnect(t, "/mcp", 4)
		rec := &recorder{}
		work(context.Background(), clients, "steady", "steady__fast", nil, time.Millisecond, n/len(clients), rec)
		bad := 0
		for _, r := range rec.all() {
			if !r.ok() {
				bad++
				if bad <= 5 {
					t.Errorf("%s: call not served: %v", name, r)
				}
			}
		}
		if got := len(rec.all()); got != n {
			t.Errorf("%s: %d calls made, want %d", name, got, n)
		}
		return clients
	}
	// rowsOf counts the audit rows of the sessions of clients.
	rowsOf := func(clients []*client) int {
		rows, err := auditRows(db)
		if err != nil {
			t.Fatalf("read the audit table: %v", err)
		}
		n := 0
		for _, c := range clients {
			for _, k := range rows[c.sid[:8]] {
				n += k
			}
		}
		return n
	}
	waitRows := func(clients []*client, want int, within time.Duration) int {
		deadline := time.Now().Add(within)
		for {
			n := rowsOf(clients)
			if n >= want || time.Now().After(deadline) {
				return n
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	first := phase("before", before)
	if n := waitRows(first, before, 5*time.Second); n != before {
		t.Fatalf("healthy disk: %d audit rows for %d calls", n, before)
	}
	base := g.baseline(t)

	// Fill the disk.
	filler := filepath.Join(dataDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for i := 0; i < 1024; i++ {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the data directory: %v, want ENOSPC", err)
	}
	full := time.Now()

	// Calls on a full disk, with /metrics watched.
	var maxDepth, dropsDuring float64
	mctx, mcancel := context.WithCancel(context.Background())
	var mwg sync.WaitGroup
	mwg.Go(func() {
		for mctx.Err() == nil {
			if m, err := g.metrics(); err == nil {
				maxDepth = max(maxDepth, m["mcpgate_audit_queue_depth"])
				dropsDuring = max(dropsDuring, m["mcpgate_audit_records_dropped_total"])
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	second := phase("disk full", during)
	time.Sleep(1500 * time.Millisecond) // the writer's flush interval, and its retries
	mcancel()
	mwg.Wait()
	storeErrors := g.logLines(`"msg":"audit:`)
	t.Logf("disk full: %d audit log lines, max queue depth %.0f, drops %.0f", len(storeErrors), maxDepth, dropsDuring)
	for i, l := range storeErrors {
		if i == 3 {
			break
		}
		t.Logf("  %s", l)
	}
	if len(storeErrors) == 0 {
		t.Errorf("no audit store error in the log while the disk was full")
	}
	if maxDepth == 0 && dropsDuring == 0 {
		t.Errorf("/metrics showed neither audit queue depth nor drops while the disk was full")
	}

	// Room again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	// The writer's retries back off to 5 s: the backlog is written within
	// that of the disk having room.
	n2 := waitRows(second, during, 7*time.Second)
	flowed := time.Since(freed)
	third := phase("after", after)
	n3 := waitRows(third, after, 5*time.Second)
	m, err := g.metrics()
	if err != nil {
		t.Fatal(err)
	}
	drops := m["mcpgate_audit_records_dropped_total"]
	t.Logf("disk full for %v; afterwards %d/%d rows of the outage's calls (written %v after the disk had room), %d/%d of the later ones; %.0f records dropped in all",
		freed.Sub(full).Round(time.Millisecond), n2, during, flowed.Round(time.Millisecond), n3, after, drops)
	t.Logf("FIGURE store-full: %d of %d outage records kept, %.0f dropped, max queue depth %.0f, backlog written %d ms after the disk had room; later records written %d/%d",
		n2, during, drops, maxDepth, flowed.Milliseconds(), n3, after)
	if n2 == during && len(g.logLines(`"msg":"audit: the store takes tool calls again"`)) == 0 {
		t.Errorf("the backlog was written but the log does not say the store recovered")
	}
	if n3 != after {
		t.Errorf("once the disk had room: %d audit rows for %d calls", n3, after)
	}
	if n2 != during {
		t.Errorf("%d of the %d calls made while the disk was full have an audit row: the writer did not keep and retry the rest (its queue holds 4096)",
			n2, during)
	}
	if lost := float64(during - n2); drops != lost {
		t.Errorf("%.0f records counted as dropped, %0.f missing", drops, lost)
	}
	if strings.Contains(g.tail(200), `"level":"ERROR","msg":"panic`) {
		t.Error("the gateway panicked")
	}
	g.checkBaseline(t, base)
}
