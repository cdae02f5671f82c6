package metrics

import (
	"math"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// Overview sums a server's tools and outcomes, and its quantiles come
// from the merged histogram.
func TestServerStats(t *testing.T) {
	m := New()
	for range 98 {
		m.ObserveToolCall("a", "x", "ok", 3*time.Millisecond)
	}
	m.ObserveToolCall("a", "y", "upstream_error", 3*time.Millisecond)
	m.ObserveToolCall("a", "y", "timeout", 40*time.Second)
	m.ObserveToolCall("b", "z", "ok", 200*time.Millisecond)
	// A denied call names no server: no row of its own, nobody's error.
	m.ObserveToolCall("", UnknownTool, "denied", time.Millisecond)
	ov, err := m.Overview()
	if err != nil {
		t.Fatal(err)
	}
	st := ov.Servers
	if len(st) != 2 || st[0].Server != "a" || st[1].Server != "b" {
		t.Fatalf("stats %+v", st)
	}
	a, b := st[0], st[1]
	if a.Calls != 100 || a.Errors != 2 || b.Calls != 1 || b.Errors != 0 {
		t.Errorf("counts a=%+v b=%+v", a, b)
	}
	// 3 ms falls in a bucket whose bounds hold it; the median is there.
	if a.P50ms <= 0 || a.P50ms > 5 {
		t.Errorf("a p50 %v ms, want within the 3 ms bucket", a.P50ms)
	}
	if a.P99ms < a.P50ms {
		t.Errorf("a p99 %v < p50 %v", a.P99ms, a.P50ms)
	}
	if b.P50ms < 100 || b.P50ms > 250 || math.IsNaN(b.P99ms) {
		t.Errorf("b quantiles %v %v", b.P50ms, b.P99ms)
	}
}

// Overview reads each drop counter back: nothing before a drop, then each
// kind with its count, exporters by name (only those that dropped).
func TestLosses(t *testing.T) {
	m := New()
	var logDrops atomic.Int64
	m.CountLogDrops(logDrops.Load)
	m.SetAuditExportDepth("quiet", 3) // an exporter that dropped nothing
	ov, err := m.Overview()
	if err != nil {
		t.Fatal(err)
	}
	l := ov.Losses
	if l.AuditRecords != 0 || l.AuditUnconfirmed != 0 || l.LogLines != 0 || len(l.ExportRecords) != 0 {
		t.Fatalf("losses before any drop: %+v", l)
	}
	m.AuditDropped(5)
	m.AuditDropped(2)
	m.AuditUnconfirmed()
	m.AuditExportDropped("siem", 4)
	m.AuditExportDropped("siem", 1)
	m.AuditExportDropped("archive", 9)
	m.AuditExportDropped("quiet", 0)
	logDrops.Store(40)
	if ov, err = m.Overview(); err != nil {
		t.Fatal(err)
	}
	l = ov.Losses
	want := Losses{AuditRecords: 7, AuditUnconfirmed: 1, LogLines: 40, ExportRecords: map[string]uint64{"siem": 5, "archive": 9}}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("losses %+v, want %+v", l, want)
	}
	var none *Metrics
	if ov, err := none.Overview(); err != nil || ov.Servers != nil || ov.Losses.AuditRecords != 0 || ov.Losses.ExportRecords == nil {
		t.Fatalf("no metrics: %+v %v", ov, err)
	}
}
