package metrics

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches the handler's output over HTTP, as Prometheus would, and
// parses it.
func scrape(t testing.TB, m *Metrics) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain") // the classic text format
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("scrape: Content-Type %q, want text/plain", ct)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return fams, string(body)
}

// series returns the metric of family name whose labels are exactly
// labels (name=value pairs), or nil.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if cmp.Equal(got, want) {
			return m
		}
	}
	return nil
}

// value returns the counter, gauge or untyped value of a series, failing
// the test when it is absent.
func value(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := series(fams, name, labels...)
	if m == nil {
		t.Fatalf("no series %s%v", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func TestNamesAndTypes(t *testing.T) {
	m := New()
	// Vectors appear only once they have a series.
	m.ObserveRequest("mcp", "POST", 200)
	m.ObserveToolCall("github", "search", "ok", time.Millisecond)
	m.SetUpstreamHealth("github", StateReady)
	m.SetCatalogSize("github", "tools", 3)
	m.ListFailure("github", "tools", "unreachable")
	m.IntegrityChange("github", "tool", "changed")
	fams, _ := scrape(t, m)
	if got := value(t, fams, "mcpgate_integrity_changes_total", "server", "github", "kind", "tool", "event", "changed"); got != 1 {
		t.Errorf("integrity changes of github = %v, want 1", got)
	}
	if got := value(t, fams, "mcpgate_upstream_list_failures_total", "server", "github", "kind", "tools", "fault", "unreachable"); got != 1 {
		t.Errorf("list failures of github = %v, want 1", got)
	}
	for name, typ := range map[string]dto.MetricType{
		"mcpgate_upstream_list_failures_total":    dto.MetricType_COUNTER,
		"mcpgate_http_requests_total":             dto.MetricType_COUNTER,
		"mcpgate_tool_calls_total":                dto.MetricType_COUNTER,
		"mcpgate_tool_call_duration_seconds":      dto.MetricType_HISTOGRAM,
		"mcpgate_upstream_up":                     dto.MetricType_GAUGE,
		"mcpgate_downstream_sessions":             dto.MetricType_GAUGE,
		"mcpgate_catalog_items":                   dto.MetricType_GAUGE,
		"mcpgate_audit_queue_depth":               dto.MetricType_GAUGE,
		"mcpgate_audit_records_dropped_total":     dto.MetricType_COUNTER,
		"mcpgate_ratelimit_degraded":              dto.MetricType_GAUGE,
		"mcpgate_ratelimit_local_decisions_total": dto.MetricType_COUNTER,
		// The Go and process collectors are on the private registry.
		"go_goroutines":                 dto.MetricType_GAUGE,
		"process_cpu_seconds_total":     dto.MetricType_COUNTER,
		"process_resident_memory_bytes": dto.MetricType_GAUGE,
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("%s: not exported", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), typ)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no help text", name)
		}
	}
	// Nothing of ours escapes the namespace.
	for name := range fams {
		if !strings.HasPrefix(name, "mcpgate_") && !strings.HasPrefix(name, "go_") &&
			!strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("unexpected family %s", name)
		}
	}
}

// The log's dropped lines are read from the process when scraped.
func TestLogDrops(t *testing.T) {
	m := New()
	var n int64 = 3
	m.CountLogDrops(func() int64 { return n })
	fams, _ := scrape(t, m)
	if got := value(t, fams, "mcpgate_log_lines_dropped_total"); got != 3 {
		t.Errorf("dropped log lines = %v, want 3", got)
	}
	if typ := fams["mcpgate_log_lines_dropped_total"].GetType(); typ != dto.MetricType_COUNTER {
		t.Errorf("type %v, want a counter", typ)
	}
	n = 5
	if fams, _ = scrape(t, m); value(t, fams, "mcpgate_log_lines_dropped_total") != 5 {
		t.Error("the counter did not follow the process's count")
	}
}

func TestRequests(t *testing.T) {
	m := New()
	for range 3 {
		m.ObserveRequest("mcp", http.MethodPost, 200)
	}
	m.ObserveRequest("mcp", http.MethodPost, 401)
	m.ObserveRequest("sse", http.MethodGet, 200)
	m.ObserveRequest("admin", "DELETE", 404)
	m.ObserveRequest("mcp", "BREW", 405) // a client-chosen method
	m.ObserveRequest("mcp", "PROPFIND", 405)
	m.ObserveRequest("health", http.MethodGet, 0) // nothing written
	fams, _ := scrape(t, m)
	for _, tt := range []struct {
		route, method, code string
		want                float64
	}{
		{"mcp", "POST", "200", 3},
		{"mcp", "POST", "401", 1},
		{"sse", "GET", "200", 1},
		{"admin", "DELETE", "404", 1},
		{"mcp", "OTHER", "405", 2},
		{"health", "GET", "other", 1},
	} {
		if got := value(t, fams, "mcpgate_http_requests_total", "route", tt.route, "method", tt.method, "code", tt.code); got != tt.want {
			t.Errorf("requests{%s,%s,%s} = %v, want %v", tt.route, tt.method, tt.code, got, tt.want)
		}
	}
	if n := len(fams["mcpgate_http_requests_total"].GetMetric()); n != 6 {
		t.Errorf("%d request series, want 6", n)
	}
}

func TestToolCalls(t *testing.T) {
	m := New()
	m.ObserveToolCall("github", "search", "ok", 3*time.Millisecond)
	m.ObserveToolCall("github", "search", "ok", 700*time.Millisecond)
	m.ObserveToolCall("github", "search", "timeout", 60*time.Second)
	m.ObserveToolCall("jira", UnknownTool, "error", 500*time.Microsecond)
	fams, _ := scrape(t, m)

	for _, tt := range []struct {
		server, tool, outcome string
		want                  float64
	}{
		{"github", "search", "ok", 2},
		{"github", "search", "timeout", 1},
		{"jira", "unknown", "error", 1},
	} {
		if got := value(t, fams, "mcpgate_tool_calls_total", "server", tt.server, "tool", tt.tool, "outcome", tt.outcome); got != tt.want {
			t.Errorf("tool_calls{%s,%s,%s} = %v, want %v", tt.server, tt.tool, tt.outcome, got, tt.want)
		}
	}

	s := series(fams, "mcpgate_tool_call_duration_seconds", "server", "github", "tool", "search")
	if s == nil {
		t.Fatal("no latency series for github/search")
	}
	h := s.GetHistogram()
	if h.GetSampleCount() != 3 {
		t.Errorf("sample count %d, want 3", h.GetSampleCount())
	}
	if got, want := h.GetSampleSum(), 0.003+0.7+60; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("sample sum %v, want %v", got, want)
	}
	var bounds []float64
	cum := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	// The text format adds the +Inf bucket.
	if diff := cmp.Diff(bounds, append(slices.Clone(ToolCallBuckets), math.Inf(1))); diff != "" {
		t.Errorf("bucket bounds (-got +want):\n%s", diff)
	}
	if first, last := ToolCallBuckets[0], ToolCallBuckets[len(ToolCallBuckets)-1]; first != 0.001 || last != 60 {
		t.Errorf("buckets span %v..%v, want 1ms..60s", first, last)
	}
	for le, want := range map[float64]uint64{0.001: 0, 0.005: 1, 0.5: 1, 1: 2, 30: 2, 60: 3, math.Inf(1): 3} {
		if cum[le] != want {
			t.Errorf("bucket le=%v: %d, want %d", le, cum[le], want)
		}
	}
	// 500µs falls in the first bucket.
	j := series(fams, "mcpgate_tool_call_duration_seconds", "server", "jira", "tool", "unknown").GetHistogram()
	if j.GetBucket()[0].GetCumulativeCount() != 1 {
		t.Errorf("jira le=0.001 = %d, want 1", j.GetBucket()[0].GetCumulativeCount())
	}
}

func TestUpstreamHealthOneHot(t *testing.T) {
	m := New()
	hot := func(fams map[string]*dto.MetricFamily, server string) []string {
		t.Helper()
		var on []string
		for _, s := range states {
			switch v := value(t, fams, "mcpgate_upstream_up", "server", server, "state", s); v {
			case 1:
				on = append(on, s)
			case 0:
			default:
				t.Errorf("upstream_up{%s,%s} = %v, want 0 or 1", server, s, v)
			}
		}
		return on
	}
	for _, tt := range []struct {
		set  string
		want []string
	}{
		{StateStarting, []string{"starting"}},
		{StateReady, []string{"ready"}},
		{StateDegraded, []string{"degraded"}},
		{StateReady, []string{"ready"}},
		{StateDown, []string{"down"}},
		{"bogus", nil},
	} {
		m.SetUpstreamHealth("github", tt.set)
		m.SetUpstreamHealth("jira", StateReady)
		fams, _ := scrape(t, m)
		if diff := cmp.Diff(hot(fams, "github"), tt.want); diff != "" {
			t.Errorf("after %q (-got +want):\n%s", tt.set, diff)
		}
		if diff := cmp.Diff(hot(fams, "jira"), []string{"ready"}); diff != "" {
			t.Errorf("jira after github %q (-got +want):\n%s", tt.set, diff)
		}
		if n := len(fams["mcpgate_upstream_up"].GetMetric()); n != 8 {
			t.Errorf("%d upstream_up series, want 4 per server", n)
		}
	}
}

func TestGauges(t *testing.T) {
	m := New()
	m.SetSessions(5)
	m.SetSessions(3)
	m.SetCatalogSize("github", "tools", 41)
	m.SetCatalogSize("github", "prompts", 2)
	m.SetCatalogSize("github", "tools", 42)
	m.SetAuditQueueDepth(17)
	m.AuditDropped(3)
	m.AuditDropped(2)
	m.AuditDropped(0)
	m.SetRateLimitDegraded(true)
	m.RateLimitLocal()
	m.RateLimitLocal()
	m.SetAuditExportDepth("siem", 9)
	m.AuditExportDropped("siem", 4)
	m.AuditExportDropped("siem", 0)
	m.AuditExportFailed("siem")
	fams, _ := scrape(t, m)
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mcpgate_downstream_sessions", nil, 3},
		{"mcpgate_catalog_items", []string{"server", "github", "kind", "tools"}, 42},
		{"mcpgate_catalog_items", []string{"server", "github", "kind", "prompts"}, 2},
		{"mcpgate_audit_queue_depth", nil, 17},
		{"mcpgate_audit_records_dropped_total", nil, 5},
		{"mcpgate_ratelimit_degraded", nil, 1},
		{"mcpgate_ratelimit_local_decisions_total", nil, 2},
		{"mcpgate_audit_export_queue_depth", []string{"exporter", "siem"}, 9},
		{"mcpgate_audit_export_dropped_total", []string{"exporter", "siem"}, 4},
		{"mcpgate_audit_export_failures_total", []string{"exporter", "siem"}, 1},
	} {
		if got := value(t, fams, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestForgetServer(t *testing.T) {
	m := New()
	for _, srv := range []string{"github", "jira"} {
		m.ObserveToolCall(srv, "search", "ok", time.Millisecond)
		m.SetUpstreamHealth(srv, StateReady)
		m.SetCatalogSize(srv, "tools", 1)
		m.ListFailure(srv, "tools", "timeout")
	}
	m.ForgetServer("jira")
	fams, text := scrape(t, m)
	if strings.Contains(text, `server="jira"`) {
		t.Errorf("jira series remain after ForgetServer:\n%s", text)
	}
	if value(t, fams, "mcpgate_tool_calls_total", "server", "github", "tool", "search", "outcome", "ok") != 1 {
		t.Error("github series lost")
	}

	// A server added back under the same name starts afresh and is
	// exported again (the cached series were forgotten too).
	m.ObserveToolCall("jira", "search", "ok", time.Millisecond)
	fams, _ = scrape(t, m)
	if got := value(t, fams, "mcpgate_tool_calls_total", "server", "jira", "tool", "search", "outcome", "ok"); got != 1 {
		t.Errorf("jira calls after re-adding = %v, want 1", got)
	}
}

// The raw exposition is what Prometheus reads; check a few lines verbatim.
func TestExpositionText(t *testing.T) {
	m := New()
	m.ObserveToolCall("github", "search", "ok", 2*time.Millisecond)
	_, text := scrape(t, m)
	for _, line := range []string{
		"# TYPE mcpgate_tool_call_duration_seconds histogram",
		`mcpgate_tool_call_duration_seconds_bucket{server="github",tool="search",le="0.001"} 0`,
		`mcpgate_tool_call_duration_seconds_bucket{server="github",tool="search",le="0.0025"} 1`,
		`mcpgate_tool_call_duration_seconds_bucket{server="github",tool="search",le="+Inf"} 1`,
		`mcpgate_tool_call_duration_seconds_count{server="github",tool="search"} 1`,
		`mcpgate_tool_calls_total{outcome="ok",server="github",tool="search"} 1`,
	} {
		if !slices.Contains(strings.Split(text, "\n"), line) {
			t.Errorf("exposition lacks %q", line)
		}
	}
}

func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveRequest("mcp", "POST", 200)
	m.ObserveToolCall("s", "t", "ok", time.Second)
	m.SetUpstreamHealth("s", StateReady)
	m.SetSessions(1)
	m.SetCatalogSize("s", "tools", 1)
	m.SetAuditQueueDepth(1)
	m.AuditDropped(1)
	m.SetRateLimitDegraded(true)
	m.RateLimitLocal()
	m.ForgetServer("s")
}

func TestConcurrentObservations(t *testing.T) {
	m := New()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				m.ObserveToolCall("github", []string{"search", "get"}[i%2], "ok", time.Duration(i)*time.Microsecond)
				m.ObserveRequest("mcp", "POST", 200)
				m.SetUpstreamHealth("github", states[(g+i)%len(states)])
			}
		})
	}
	wg.Wait()
	fams, _ := scrape(t, m)
	if got := value(t, fams, "mcpgate_http_requests_total", "route", "mcp", "method", "POST", "code", "200"); got != 8000 {
		t.Errorf("requests = %v, want 8000", got)
	}
	var calls uint64
	for _, tool := range []string{"search", "get"} {
		calls += series(fams, "mcpgate_tool_call_duration_seconds", "server", "github", "tool", tool).GetHistogram().GetSampleCount()
	}
	if calls != 8000 {
		t.Errorf("latency samples = %d, want 8000", calls)
	}
	var sum float64
	for _, s := range states {
		sum += value(t, fams, "mcpgate_upstream_up", "server", "github", "state", s)
	}
	if sum != 1 {
		t.Errorf("after racing health updates %v states are hot, want 1", sum)
	}
}

func BenchmarkObserveToolCall(b *testing.B) {
	m := New()
	tools := []string{"search", "get", "create_issue", "list_repos"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.ObserveToolCall("github", tools[i%len(tools)], "ok", 12*time.Millisecond)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				m.ObserveToolCall("github", tools[i%len(tools)], "ok", 12*time.Millisecond)
				i++
			}
		})
	})
}

func BenchmarkObserveRequest(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRequest("mcp", http.MethodPost, 200)
	}
}
