package metrics

import (
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
)

// ServerStat is one server's tool calls since the process started, read
// back from the metrics (the console's overview; rates are the reader's
// differences between two reads).
type ServerStat struct {
	Server string  `json:"server"`
	Calls  uint64  `json:"calls"`
	Errors uint64  `json:"errors"` // every outcome but ok
	P50ms  float64 `json:"p50_ms"` // from the latency histogram; 0 without calls
	P99ms  float64 `json:"p99_ms"`
}

// Overview is what the console's overview reads of the metrics (GET
// /admin/v1/stats): each server's tool calls, and what was lost.
type Overview struct {
	Servers []ServerStat
	Losses  Losses
}

// Overview reads the servers' tool calls and the losses from one gather
// of the registry.
func (m *Metrics) Overview() (Overview, error) {
	out := Overview{Losses: Losses{ExportRecords: map[string]uint64{}}}
	if m == nil {
		return out, nil
	}
	fams, err := m.reg.Gather()
	if err != nil {
		return out, err
	}
	out.Servers = serverStats(fams)
	out.Losses = losses(fams)
	return out, nil
}

// serverStats sums the tool-call series per server, sorted by server.
func serverStats(fams []*dto.MetricFamily) []ServerStat {
	by := map[string]*ServerStat{}
	buckets := map[string][]*dto.Bucket{}
	counts := map[string]uint64{} // samples, the implicit +Inf bucket
	stat := func(s string) *ServerStat {
		if by[s] == nil {
			by[s] = &ServerStat{Server: s}
		}
		return by[s]
	}
	for _, f := range fams {
		switch f.GetName() {
		case Namespace + "_tool_calls_total":
			for _, mt := range f.GetMetric() {
				if label(mt, "server") == "" {
					continue // calls of names no server has (denied): no server's row
				}
				s := stat(label(mt, "server"))
				n := uint64(mt.GetCounter().GetValue())
				s.Calls += n
				if label(mt, "outcome") != "ok" {
					s.Errors += n
				}
			}
		case Namespace + "_tool_call_duration_seconds":
			for _, mt := range f.GetMetric() {
				srv := label(mt, "server")
				if srv == "" {
					continue
				}
				stat(srv)
				buckets[srv] = addBuckets(buckets[srv], mt.GetHistogram().GetBucket())
				counts[srv] += mt.GetHistogram().GetSampleCount()
			}
		}
	}
	out := make([]ServerStat, 0, len(by))
	for srv, s := range by {
		s.P50ms = quantile(buckets[srv], counts[srv], 0.5) * 1000
		s.P99ms = quantile(buckets[srv], counts[srv], 0.99) * 1000
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ServerStat) int {
		switch {
		case a.Server < b.Server:
			return -1
		case a.Server > b.Server:
			return 1
		}
		return 0
	})
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// addBuckets adds b's cumulative counts to acc (the same bucket bounds:
// every series of one histogram vec has them).
func addBuckets(acc, b []*dto.Bucket) []*dto.Bucket {
	if acc == nil {
		acc = make([]*dto.Bucket, len(b))
		for i, x := range b {
			c, ub := x.GetCumulativeCount(), x.GetUpperBound()
			acc[i] = &dto.Bucket{CumulativeCount: &c, UpperBound: &ub}
		}
		return acc
	}
	for i := range min(len(acc), len(b)) {
		c := acc[i].GetCumulativeCount() + b[i].GetCumulativeCount()
		acc[i].CumulativeCount = &c
	}
	return acc
}

// quantile estimates the q-quantile of total samples in cumulative
// buckets (the +Inf one implicit) the way PromQL's histogram_quantile
// does: linear within the bucket; the highest finite bound when it falls
// beyond it.
func quantile(b []*dto.Bucket, total uint64, q float64) float64 {
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	prevCount, prevBound := 0.0, 0.0
	for _, x := range b {
		c, ub := float64(x.GetCumulativeCount()), x.GetUpperBound()
		if math.IsInf(ub, 1) {
			break
		}
		if c >= rank {
			if c == prevCount {
				return ub
			}
			return prevBound + (ub-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevCount, prevBound = c, ub
	}
	return prevBound
}

// Losses is what the gateway dropped since the process started, read back
// from the metrics (the console's overview): records and lines an
// operator would look for later and not find. Each also shows as its
// metric and as a warning in the log; the overview is where someone
// looking at the gateway sees them without either.
type Losses struct {
	// AuditRecords: tool-call records the store never got
	// (mcpgate_audit_records_dropped_total).
	AuditRecords uint64 `json:"audit_records"`
	// AuditUnconfirmed: calls answered before their record was committed,
	// with audit.durable (mcpgate_audit_unconfirmed_total).
	AuditUnconfirmed uint64 `json:"audit_unconfirmed"`
	// ExportRecords: records an exporter dropped, by exporter
	// (mcpgate_audit_export_dropped_total); only exporters that dropped
	// some.
	ExportRecords map[string]uint64 `json:"export_records"`
	// LogLines: access lines dropped while the log's output was blocked
	// (mcpgate_log_lines_dropped_total).
	LogLines uint64 `json:"log_lines"`
}

// losses reads the gateway's drop counters.
func losses(fams []*dto.MetricFamily) Losses {
	out := Losses{ExportRecords: map[string]uint64{}}
	for _, f := range fams {
		var sum uint64
		for _, mt := range f.GetMetric() {
			sum += uint64(mt.GetCounter().GetValue())
		}
		switch f.GetName() {
		case Namespace + "_audit_records_dropped_total":
			out.AuditRecords = sum
		case Namespace + "_audit_unconfirmed_total":
			out.AuditUnconfirmed = sum
		case Namespace + "_log_lines_dropped_total":
			out.LogLines = sum
		case Namespace + "_audit_export_dropped_total":
			for _, mt := range f.GetMetric() {
				if n := uint64(mt.GetCounter().GetValue()); n > 0 {
					out.ExportRecords[label(mt, "exporter")] += n
				}
			}
		}
	}
	return out
}
