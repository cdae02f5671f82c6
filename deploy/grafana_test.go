package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/mcpgate/mcpgate/internal/metrics"
)

const dashboardFile = "grafana/mcpgate.json"

// targetLabels are the labels Prometheus adds to every series it scrapes;
// the gateway never exports them itself.
var targetLabels = []string{"instance", "job"}

// panelUnits are the units the dashboard's panels may use.
var panelUnits = []string{"reqps", "ops", "s", "percentunit", "short"}

// dashboardMetrics must each be queried by some panel: the calls, errors,
// latency, HTTP, upstream health, sessions, catalog, audit and fleet
// panels of issue 15 §4. TestDashboard also requires every other mcpgate_
// metric the registry exports.
var dashboardMetrics = []string{
	"mcpgate_tool_calls_total",
	"mcpgate_tool_call_duration_seconds_bucket",
	"mcpgate_http_requests_total",
	"mcpgate_upstream_up",
	"mcpgate_downstream_sessions",
	"mcpgate_catalog_items",
	"mcpgate_audit_queue_depth",
	"mcpgate_audit_records_dropped_total",
	"mcpgate_audit_unconfirmed_total",
	"mcpgate_ratelimit_degraded",
	"mcpgate_state_up",
	"mcpgate_config_reloads_total",
	"mcpgate_config_last_reload_success_timestamp_seconds",
}

// TestDashboard: deploy/grafana/mcpgate.json has the structure Grafana 11
// needs, and every PromQL query in it names series the gateway's registry
// exports, with labels those series have.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "\t") {
		t.Errorf("%s has tabs: keep it indented with 2 spaces", dashboardFile)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if str(d, "uid") != "mcpgate" || str(d, "title") != "mcpgate" {
		t.Errorf("uid %q, title %q: want mcpgate and mcpgate", str(d, "uid"), str(d, "title"))
	}
	if v, ok := get(d, "schemaVersion").(float64); !ok || v < 39 {
		t.Errorf("schemaVersion = %v, want 39 or later (Grafana 11)", get(d, "schemaVersion"))
	}
	if get(d, "id") != nil {
		t.Errorf("id = %v: a shared dashboard has none (Grafana assigns it)", get(d, "id"))
	}

	exported := exportedSeries(t)
	vars := checkVariables(t, d, exported)
	used := map[string]bool{}
	panels := dashboardPanels(t, d)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	checkLayout(t, panels)
	for _, p := range panels {
		name := fmt.Sprintf("panel %v %q", get(p, "id"), str(p, "title"))
		if str(p, "type") == "row" {
			if get(p, "targets") != nil {
				t.Errorf("%s: a row has no queries", name)
			}
			continue
		}
		checkPanel(t, name, p, exported, vars, used)
	}
	t.Logf("%d panels checked against %d exported series", len(panels), len(exported))
	want := slices.Clone(dashboardMetrics)
	for s := range exported {
		if strings.HasPrefix(s, metrics.Namespace+"_") && !strings.HasSuffix(s, "_sum") && !strings.HasSuffix(s, "_count") {
			want = append(want, s)
		}
	}
	for _, m := range want {
		if !used[m] {
			t.Errorf("no panel queries %s: add one", m)
		}
	}
}

// exportedSeries is every series name the gateway's registry exports,
// with its label names: it calls every recording method of a new
// metrics.Metrics once (by reflection, so a metric added with a new method
// is exported here too), then gathers. A histogram or summary exports
// name_bucket (with le) or name (with quantile), name_sum and name_count,
// never its bare name.
func exportedSeries(t *testing.T) map[string][]string {
	t.Helper()
	m := metrics.New()
	mv := reflect.ValueOf(m)
	for i := range mv.NumMethod() {
		meth, mt := mv.Method(i), mv.Type().Method(i)
		if mt.Name == "ForgetServer" || meth.Type().NumOut() != 0 {
			continue // deletes series; Registry and Handler record nothing
		}
		var args []reflect.Value
		for j := range meth.Type().NumIn() {
			switch in := meth.Type().In(j); {
			case in == reflect.TypeFor[time.Duration]():
				args = append(args, reflect.ValueOf(time.Millisecond))
			case in == reflect.TypeFor[time.Time]():
				args = append(args, reflect.ValueOf(time.Unix(1, 0)))
			case in.Kind() == reflect.String:
				args = append(args, reflect.ValueOf("x").Convert(in))
			case in.Kind() == reflect.Int:
				args = append(args, reflect.ValueOf(1).Convert(in))
			case in.Kind() == reflect.Bool:
				args = append(args, reflect.ValueOf(true).Convert(in))
			case in == reflect.TypeFor[func() int64]():
				args = append(args, reflect.ValueOf(func() int64 { return 1 }))
			default:
				t.Fatalf("metrics.%s takes a %v: teach exportedSeries to call it", mt.Name, in)
			}
		}
		meth.Call(args)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		var labels []string
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		default:
			out[name] = labels
		}
	}
	for _, must := range dashboardMetrics {
		if _, ok := out[must]; !ok {
			t.Errorf("the registry does not export %s: renamed? (then fix the dashboard and dashboardMetrics)", must)
		}
	}
	return out
}

// checkVariables: a Prometheus datasource variable named datasource, and
// query variables on it whose label_values(...) name exported series and
// labels. It returns the names of the variables.
func checkVariables(t *testing.T, d map[string]any, exported map[string][]string) []string {
	t.Helper()
	var names []string
	haveDS := false
	for _, v := range listAt(d, "templating", "list") {
		name := str(v, "name")
		names = append(names, name)
		switch str(v, "type") {
		case "datasource":
			if name == "datasource" && str(v, "query") == "prometheus" {
				haveDS = true
			}
		case "query":
			if !datasourceIsVar(get(v, "datasource")) {
				t.Errorf("variable %s: datasource %v, want the ${datasource} variable", name, get(v, "datasource"))
			}
			q := str(v, "query", "query")
			if q == "" {
				q = str(v, "query")
			}
			if q != str(v, "definition") {
				t.Errorf("variable %s: definition %q differs from its query %q", name, str(v, "definition"), q)
			}
			m := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(q)
			if m == nil {
				t.Errorf("variable %s: query %q, want label_values(selector, label)", name, q)
				continue
			}
			what := "variable " + name
			pq, err := parsePromQL(m[1])
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			checkQuery(t, what, pq, exported, nil)
			for _, s := range pq.selectors {
				if !hasLabel(exported, s.metric, m[2]) {
					t.Errorf("%s: %s has no label %s", what, s.metric, m[2])
				}
			}
		default:
			t.Errorf("variable %s: type %q, want datasource or query", name, str(v, "type"))
		}
	}
	if !haveDS {
		t.Error("no datasource variable named datasource of type prometheus")
	}
	return names
}

// dashboardPanels lists the panels, those inside (collapsed) rows too.
func dashboardPanels(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	ids := map[float64]bool{}
	var walk func([]any)
	walk = func(l []any) {
		for _, p := range l {
			pm, ok := p.(map[string]any)
			if !ok {
				t.Errorf("panel %v is not an object", p)
				continue
			}
			id, ok := pm["id"].(float64)
			if !ok || id <= 0 || id != float64(int(id)) {
				t.Errorf("panel %q: id %v, want a positive integer", str(pm, "title"), pm["id"])
			} else if ids[id] {
				t.Errorf("panel id %v is not unique", id)
			}
			ids[id] = true
			out = append(out, pm)
			walk(listAt(pm, "panels"))
		}
	}
	walk(listAt(d, "panels"))
	return out
}

// checkLayout: every panel has a gridPos inside Grafana's 24 columns, and
// no two panels overlap.
func checkLayout(t *testing.T, panels []map[string]any) {
	t.Helper()
	type rect struct{ x, y, w, h int }
	var placed []rect
	var names []string
	for _, p := range panels {
		name := fmt.Sprintf("panel %v %q", get(p, "id"), str(p, "title"))
		var r rect
		ok := true
		for k, dst := range map[string]*int{"x": &r.x, "y": &r.y, "w": &r.w, "h": &r.h} {
			v, isNum := get(p, "gridPos", k).(float64)
			if !isNum {
				ok = false
				t.Errorf("%s: gridPos.%s = %v, want a number", name, k, get(p, "gridPos", k))
			}
			*dst = int(v)
		}
		if !ok {
			continue
		}
		if r.w < 1 || r.h < 1 || r.x < 0 || r.y < 0 || r.x+r.w > 24 {
			t.Errorf("%s: gridPos %+v is outside the 24-column grid", name, r)
		}
		for i, o := range placed {
			if r.x < o.x+o.w && o.x < r.x+r.w && r.y < o.y+o.h && o.y < r.y+r.h {
				t.Errorf("%s overlaps %s", name, names[i])
			}
		}
		placed, names = append(placed, r), append(names, name)
	}
}

func checkPanel(t *testing.T, name string, p map[string]any, exported map[string][]string, vars []string, used map[string]bool) {
	t.Helper()
	if typ := str(p, "type"); typ != "timeseries" && typ != "stat" {
		t.Errorf("%s: type %q, want timeseries or stat", name, typ)
	}
	if str(p, "title") == "" {
		t.Errorf("%s: no title", name)
	}
	if !datasourceIsVar(get(p, "datasource")) {
		t.Errorf("%s: datasource %v, want {type: prometheus, uid: ${datasource}}", name, get(p, "datasource"))
	}
	if u := str(p, "fieldConfig", "defaults", "unit"); !slices.Contains(panelUnits, u) {
		t.Errorf("%s: unit %q, want one of %v", name, u, panelUnits)
	}
	targets := listAt(p, "targets")
	if len(targets) == 0 {
		t.Errorf("%s: no targets", name)
	}
	refIDs := map[string]bool{}
	for _, tg := range targets {
		ref := str(tg, "refId")
		what := fmt.Sprintf("%s target %s", name, ref)
		if ref == "" || refIDs[ref] {
			t.Errorf("%s: refId %q, want one unique in the panel", what, ref)
		}
		refIDs[ref] = true
		if ds := get(tg, "datasource"); ds != nil && !datasourceIsVar(ds) {
			t.Errorf("%s: datasource %v, want the ${datasource} variable", what, ds)
		}
		expr := str(tg, "expr")
		if expr == "" {
			t.Errorf("%s: no expr", what)
			continue
		}
		for _, v := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(expr, -1) {
			if !slices.Contains(vars, v[1]) && !slices.Contains([]string{"__rate_interval", "__interval", "__range"}, v[1]) {
				t.Errorf("%s: $%s is not a dashboard variable", what, v[1])
			}
		}
		q, err := parsePromQL(expr)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		var legend []string
		for _, l := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(str(tg, "legendFormat"), -1) {
			legend = append(legend, l[1])
		}
		checkQuery(t, what, q, exported, legend)
		for _, s := range q.selectors {
			used[s.metric] = true
		}
	}
}

// checkQuery: each selector names an exported series and matches only its
// labels; a grouping label is on every series of the query (the
// dashboard's queries never join series with different labels); a legend
// label is one the result keeps (grouped by, or on every series).
func checkQuery(t *testing.T, what string, q promQuery, exported map[string][]string, legend []string) {
	t.Helper()
	if len(q.selectors) == 0 {
		t.Errorf("%s: the query selects no metric", what)
	}
	for _, s := range q.selectors {
		if _, ok := exported[s.metric]; !ok {
			hint := ""
			if _, ok := exported[s.metric+"_bucket"]; ok {
				hint = " (a histogram: query its _bucket, _sum or _count)"
			}
			t.Errorf("%s: the gateway exports no %s%s", what, s.metric, hint)
			continue
		}
		for _, l := range s.labels {
			if !hasLabel(exported, s.metric, l) {
				t.Errorf("%s: %s has no label %s (it has %v)", what, s.metric, l, exported[s.metric])
			}
		}
	}
	onAll := func(l string) bool {
		for _, s := range q.selectors {
			if _, known := exported[s.metric]; known && !hasLabel(exported, s.metric, l) {
				return false
			}
		}
		return true
	}
	var by []string
	for _, g := range q.groupings {
		for _, l := range g.labels {
			if !onAll(l) {
				t.Errorf("%s: %s (%s): not a label of every metric in the query", what, g.keyword, l)
			}
		}
		if g.keyword == "by" {
			by = append(by, g.labels...)
		}
	}
	for _, l := range legend {
		if len(by) > 0 && !slices.Contains(by, l) || len(by) == 0 && !onAll(l) {
			t.Errorf("%s: legend {{%s}}: the query's result has no such label", what, l)
		}
	}
}

func hasLabel(exported map[string][]string, metric, label string) bool {
	return slices.Contains(exported[metric], label) || slices.Contains(targetLabels, label)
}

func datasourceIsVar(ds any) bool {
	return str(ds, "type") == "prometheus" && str(ds, "uid") == "${datasource}"
}

// promQuery is what the test needs of a PromQL expression: the metric
// selectors with the labels they match on, and the label lists of by,
// without, on, ignoring, group_left and group_right.
type promQuery struct {
	selectors []struct {
		metric string
		labels []string
	}
	groupings []struct {
		keyword string
		labels  []string
	}
}

var (
	// promGroupings take a label list, group_left and group_right an
	// optional one; the other keywords none.
	promGroupings = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	promKeywords  = []string{"bool", "and", "or", "unless", "offset"}
	promFunctions = []string{"sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile",
		"stddev", "rate", "irate", "increase", "delta", "histogram_quantile", "clamp_min",
		"clamp_max", "abs", "absent", "vector", "scalar", "time", "avg_over_time",
		"max_over_time", "min_over_time", "sum_over_time", "changes", "resets"}
	promToken = regexp.MustCompile(`^(?:\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" +
		`|\[[^\]]*\]|[a-zA-Z_:][a-zA-Z0-9_:]*|[0-9.][0-9a-zA-Z_.]*|=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>])`)
)

// parsePromQL tokenizes expr (strings and [range] brackets are single
// tokens) and reads its selectors and groupings. It is no full parser; an
// expression it cannot read is an error, not a pass.
func parsePromQL(expr string) (promQuery, error) {
	var toks []string
	for rest := expr; rest != ""; {
		m := promToken.FindString(rest)
		if m == "" {
			return promQuery{}, fmt.Errorf("cannot tokenize %q at %q", expr, rest)
		}
		rest = rest[len(m):]
		if strings.TrimSpace(m) != "" {
			toks = append(toks, m)
		}
	}
	ident := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	at := func(i int) string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	// labelList reads "( a, b, ... )" at i, returning the labels and the
	// index after ")".
	labelList := func(i int) ([]string, int, error) {
		var ls []string
		for i++; at(i) != ")"; i++ {
			if at(i) == "," {
				continue
			}
			if !ident.MatchString(at(i)) {
				return nil, 0, fmt.Errorf("%q: %q in a label list", expr, at(i))
			}
			ls = append(ls, at(i))
		}
		return ls, i + 1, nil
	}
	var q promQuery
	for i := 0; i < len(toks); {
		tok := toks[i]
		switch {
		case tok == "{":
			return q, fmt.Errorf("%q: a selector without a metric name", expr)
		case !ident.MatchString(tok):
			i++
		case slices.Contains(promKeywords, tok):
			i++
		case slices.Contains(promGroupings, tok):
			if at(i+1) != "(" {
				if !strings.HasPrefix(tok, "group_") {
					return q, fmt.Errorf("%q: %s without a label list", expr, tok)
				}
				i++
				continue
			}
			ls, next, err := labelList(i + 1)
			if err != nil {
				return q, err
			}
			q.groupings = append(q.groupings, struct {
				keyword string
				labels  []string
			}{tok, ls})
			i = next
		case slices.Contains(promFunctions, tok): // sum (...), sum by (...) (...)
			i++
		case at(i+1) == "(":
			return q, fmt.Errorf("%q: unknown function %s", expr, tok)
		default:
			sel := struct {
				metric string
				labels []string
			}{metric: tok}
			i++
			if at(i) == "{" {
				for i++; at(i) != "}"; i++ {
					if at(i) == "," {
						continue
					}
					op, val := at(i+1), at(i+2)
					if !ident.MatchString(at(i)) || !slices.Contains([]string{"=", "!=", "=~", "!~"}, op) || !strings.ContainsAny(val[:min(1, len(val))], "\"'`") {
						return q, fmt.Errorf("%q: cannot read the matcher at %q", expr, at(i))
					}
					sel.labels = append(sel.labels, at(i))
					i += 2
				}
				i++
			}
			q.selectors = append(q.selectors, sel)
		}
	}
	return q, nil
}
