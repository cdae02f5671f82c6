package admin

import (
	"cmp"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Time series for the console's charts, read from the audit store: the
// last hour of tool calls per server (GET /stats/series) and cost and
// calls per key, user or team over a day, a week or a month (GET
// /usage/series). Both are bounded: fixed buckets, a fixed window, and a
// cap on the rows read, so a chart costs the store the same whatever the
// traffic.

const (
	// seriesBuckets and seriesStep make GET /stats/series: the last hour
	// in minutes.
	seriesBuckets = 60
	seriesStep    = time.Minute
	// maxSeriesRows caps the tool call records one GET /stats/series
	// reads; past it the answer says truncated and covers the newest
	// calls only.
	maxSeriesRows = 20 * store.MaxPageSize
	// maxUsageGroups is how many keys, users or teams GET /usage/series
	// names; the rest are summed as otherGroup.
	maxUsageGroups = 8
	otherGroup     = "(other)"
)

// SeriesPoint is one bucket of one server in GET /stats/series: the calls
// that started in [time, time+step), those whose outcome was not "ok", and
// their latency quantiles (0 without calls).
type SeriesPoint struct {
	Time   string  `json:"time"`
	Calls  int     `json:"calls"`
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// ServerSeries is one server's buckets, oldest first.
type ServerSeries struct {
	Server string        `json:"server"`
	Points []SeriesPoint `json:"points"`
}

// StatsSeries is GET /admin/v1/stats/series.
type StatsSeries struct {
	Since       string `json:"since"`
	Until       string `json:"until"`
	StepSeconds int    `json:"step_seconds"`
	// Truncated: more calls than maxSeriesRows were made in the window;
	// the oldest buckets count only the newest calls.
	Truncated bool           `json:"truncated,omitempty"`
	Servers   []ServerSeries `json:"servers"`
}

// window is n buckets of step ending with the bucket now falls in.
func window(now time.Time, n int, step time.Duration) (since, until time.Time) {
	until = now.UTC().Truncate(step).Add(step)
	return until.Add(-time.Duration(n) * step), until
}

func (a *API) statsSeries(w http.ResponseWriter, r *http.Request) error {
	since, until := window(a.o.Now(), seriesBuckets, seriesStep)
	type bucket struct {
		calls, errors int
		ms            []int64
	}
	per := map[string]*[seriesBuckets]bucket{}
	out := StatsSeries{Since: since.Format(time.RFC3339), Until: until.Format(time.RFC3339), StepSeconds: int(seriesStep / time.Second), Servers: []ServerSeries{}}
	f := store.ToolCallFilter{Since: since, Until: until, Limit: store.MaxPageSize}
	for read := 0; ; {
		calls, next, err := a.o.Store.ListToolCalls(r.Context(), f)
		if err != nil {
			return storeUnavailable("stats series: list tool calls", err)
		}
		for _, c := range calls {
			i := int(c.Time.Sub(since) / seriesStep)
			if i < 0 || i >= seriesBuckets {
				continue
			}
			bs := per[c.Server]
			if bs == nil {
				bs = new([seriesBuckets]bucket)
				per[c.Server] = bs
			}
			b := &bs[i]
			b.calls++
			if c.Outcome != "ok" {
				b.errors++
			}
			b.ms = append(b.ms, c.DurationMs)
		}
		read += len(calls)
		if next == nil || len(calls) == 0 {
			break
		}
		if read >= maxSeriesRows {
			out.Truncated = true
			break
		}
		f.Before = next
	}
	for name, bs := range per {
		s := ServerSeries{Server: name, Points: make([]SeriesPoint, seriesBuckets)}
		for i := range bs {
			b := &bs[i]
			slices.Sort(b.ms)
			s.Points[i] = SeriesPoint{Time: since.Add(time.Duration(i) * seriesStep).Format(time.RFC3339), Calls: b.calls, Errors: b.errors,
				P50Ms: quantile(b.ms, 0.50), P99Ms: quantile(b.ms, 0.99)}
		}
		out.Servers = append(out.Servers, s)
	}
	slices.SortFunc(out.Servers, func(x, y ServerSeries) int { return cmp.Compare(x.Server, y.Server) })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// quantile is the nearest-rank q-quantile of sorted; 0 for none.
func quantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)])
}

// usageRanges are the windows GET /usage/series offers: the bucket size
// and count of each.
var usageRanges = map[string]struct {
	step time.Duration
	n    int
}{
	"24h": {time.Hour, 24},
	"7d":  {6 * time.Hour, 28},
	"30d": {24 * time.Hour, 30},
}

// UsageGroupSeries is one key, user or team in GET /usage/series: its
// calls and cost per bucket, oldest first, and their sums.
type UsageGroupSeries struct {
	Group string    `json:"group"`
	Calls []int64   `json:"calls"`
	Cost  []float64 `json:"cost"`
	// TotalCalls and TotalCost are the sums over the window.
	TotalCalls int64   `json:"total_calls"`
	TotalCost  float64 `json:"total_cost"`
}

// UsageSeries is GET /admin/v1/usage/series.
type UsageSeries struct {
	By          string   `json:"by"`
	Range       string   `json:"range"`
	StepSeconds int      `json:"step_seconds"`
	Buckets     []string `json:"buckets"` // each bucket's start
	// Groups are the costliest maxUsageGroups groups (then the busiest),
	// and "(other)" for the rest.
	Groups []UsageGroupSeries `json:"groups"`
}

func (a *API) usageSeries(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = store.UsageByKey
	}
	if _, ok := store.UsageColumn(by); !ok {
		return badRequest("by: must be key, user or team")
	}
	rng := q.Get("range")
	if rng == "" {
		rng = "24h"
	}
	spec, ok := usageRanges[rng]
	if !ok {
		return badRequest("range: must be 24h, 7d or 30d")
	}
	ul, ok := a.o.Store.(store.UsageLog)
	if !ok {
		return refusal(http.StatusNotImplemented, "this store cannot sum usage")
	}
	since, _ := window(a.o.Now(), spec.n, spec.step)
	out := UsageSeries{By: by, Range: rng, StepSeconds: int(spec.step / time.Second), Buckets: make([]string, spec.n), Groups: []UsageGroupSeries{}}
	groups := map[string]*UsageGroupSeries{}
	for i := range spec.n {
		from := since.Add(time.Duration(i) * spec.step)
		out.Buckets[i] = from.Format(time.RFC3339)
		rows, err := ul.SumUsage(r.Context(), store.UsageFilter{By: by, Since: from, Until: from.Add(spec.step)})
		if err != nil {
			return storeUnavailable("usage series: sum usage", err)
		}
		for _, u := range rows {
			g := groups[u.Group]
			if g == nil {
				g = &UsageGroupSeries{Group: u.Group, Calls: make([]int64, spec.n), Cost: make([]float64, spec.n)}
				groups[u.Group] = g
			}
			g.Calls[i] += u.Calls
			g.Cost[i] += u.Cost
			g.TotalCalls += u.Calls
			g.TotalCost += u.Cost
		}
	}
	all := make([]*UsageGroupSeries, 0, len(groups))
	for _, g := range groups {
		all = append(all, g)
	}
	slices.SortFunc(all, func(x, y *UsageGroupSeries) int {
		return cmp.Or(cmp.Compare(y.TotalCost, x.TotalCost), cmp.Compare(y.TotalCalls, x.TotalCalls), cmp.Compare(x.Group, y.Group))
	})
	for i, g := range all {
		if i < maxUsageGroups {
			out.Groups = append(out.Groups, *g)
			continue
		}
		if i == maxUsageGroups {
			out.Groups = append(out.Groups, UsageGroupSeries{Group: otherGroup, Calls: make([]int64, spec.n), Cost: make([]float64, spec.n)})
		}
		o := &out.Groups[maxUsageGroups]
		for j := range spec.n {
			o.Calls[j] += g.Calls[j]
			o.Cost[j] += g.Cost[j]
		}
		o.TotalCalls += g.TotalCalls
		o.TotalCost += g.TotalCost
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
