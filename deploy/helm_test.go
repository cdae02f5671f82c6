package deploy_test

// A small stand-in for `helm template`: helm is not installable here, so
// the chart is rendered with text/template and the few Sprig functions it
// uses (chartFuncs). A template calling any other function fails to parse,
// which keeps the chart inside this set.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"
)

const chartDir = "helm/mcpgate"

// manifest is one rendered YAML document.
type manifest struct {
	source string // template file
	obj    map[string]any
}

func (m manifest) kind() string { return str(m.obj, "kind") }
func (m manifest) name() string { return str(m.obj, "metadata", "name") }

// rendered is a chart rendered against some values.
type rendered struct {
	release  string
	values   map[string]any
	docs     []manifest
	notes    string
	fullname string
}

// byKind returns the documents of kind.
func (r *rendered) byKind(kind string) []manifest {
	var out []manifest
	for _, d := range r.docs {
		if d.kind() == kind {
			out = append(out, d)
		}
	}
	return out
}

// one returns the single document of kind, failing unless there is one.
func (r *rendered) one(t *testing.T, kind string) map[string]any {
	t.Helper()
	ds := r.byKind(kind)
	if len(ds) != 1 {
		t.Fatalf("want 1 %s, rendered %d", kind, len(ds))
	}
	return ds[0].obj
}

// renderChart renders every template of the chart for release against
// values.yaml merged with the override files, like
// `helm template release chart -f override...`.
func renderChart(t *testing.T, release string, overrides ...string) *rendered {
	t.Helper()
	r, err := renderChartSet(t, release, nil, overrides...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// renderChartSet renders as renderChart with set merged last, like
// `helm template release chart -f override... --set ...`, and returns the
// error a template's fail (or any execution error) gives.
func renderChartSet(t *testing.T, release string, set map[string]any, overrides ...string) (*rendered, error) {
	t.Helper()
	var chart map[string]any
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	values := map[string]any{}
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	for _, f := range overrides {
		var o map[string]any
		readYAML(t, f, &o)
		mergeValues(values, o)
	}
	if set != nil {
		mergeValues(values, jsonTypes(t, set).(map[string]any))
	}
	// Helm's values have JSON types (numbers are float64): so do these,
	// so that a comparison that would fail under helm fails here.
	values = jsonTypes(t, values).(map[string]any)

	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(chartFuncs(root))
	// Every file under templates/, subdirectories (tests/) included, named
	// by its path there as helm names it.
	var files []string
	tdir := filepath.Join(chartDir, "templates")
	err := filepath.WalkDir(tdir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(tdir, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", chartDir, err)
	}
	chartName := chart["name"].(string)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(tdir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.New(chartName + "/templates/" + f).Parse(string(b)); err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
	}
	data := map[string]any{
		"Values": values,
		"Chart": map[string]any{
			"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"],
		},
		"Release": map[string]any{
			"Name": release, "Namespace": "mcp", "Service": "Helm", "IsInstall": true,
		},
		"Template": map[string]any{"BasePath": chartName + "/templates"},
	}
	r := &rendered{release: release, values: values}
	for _, f := range files {
		base := f
		if strings.HasPrefix(filepath.Base(f), "_") {
			continue
		}
		name := chartName + "/templates/" + base
		data["Template"].(map[string]any)["Name"] = name
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return nil, fmt.Errorf("render %s: %w", base, err)
		}
		out := buf.String()
		// helm would print "" here; a value path that does not exist is a
		// typo in the chart.
		if strings.Contains(out, "<no value>") {
			t.Errorf("%s: renders <no value> (a missing value):\n%s", base, out)
		}
		if base == "NOTES.txt" {
			r.notes = out
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(out))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: rendered YAML does not parse: %v\n%s", base, err, out)
			}
			if doc != nil {
				r.docs = append(r.docs, manifest{source: base, obj: doc})
			}
		}
	}
	var fn bytes.Buffer
	if err := root.ExecuteTemplate(&fn, "mcpgate.fullname", data); err != nil {
		t.Fatal(err)
	}
	r.fullname = fn.String()
	return r, nil
}

// chartFuncs are the Sprig functions the chart uses, with Sprig's
// semantics for the arguments the chart passes.
func chartFuncs(root *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b bytes.Buffer
			err := root.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"toYaml": func(v any) string {
			var b bytes.Buffer
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			if err := enc.Encode(integral(v)); err != nil {
				return "" // as helm
			}
			return strings.TrimSuffix(b.String(), "\n")
		},
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"quote": func(v any) string {
			if v == nil {
				return ""
			}
			return strconv.Quote(strval(v))
		},
		"default": func(d any, given ...any) any {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil {
				return nil, errors.New(msg)
			}
			if s, ok := v.(string); ok && s == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			if n < 0 && len(s) > -n {
				return s[len(s)+n:]
			}
			return s
		},
		"fail":       func(msg string) (string, error) { return "", errors.New(msg) },
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"sha256sum": func(s string) string {
			h := sha256.Sum256([]byte(s))
			return hex.EncodeToString(h[:])
		},
		"int": func(v any) (int, error) {
			switch x := v.(type) {
			case float64:
				return int(x), nil
			case int:
				return x, nil
			case string:
				return strconv.Atoi(x)
			case nil:
				return 0, nil
			}
			return 0, fmt.Errorf("int: cannot convert %T", v)
		},
	}
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func strval(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// empty is Sprig's notion of an empty value (what default replaces).
func empty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int64, reflect.Int32:
		return rv.Int() == 0
	case reflect.Float64, reflect.Float32:
		return rv.Float() == 0
	}
	return false
}

// integral turns whole float64s back into integers, as helm's JSON-based
// toYaml prints them (4194304, not 4.194304e+06).
func integral(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = integral(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = integral(e)
		}
		return out
	}
	return v
}

// mergeValues merges o into dst as helm merges -f files: maps merge key by
// key, anything else replaces, null deletes.
func mergeValues(dst, o map[string]any) {
	for k, v := range o {
		if v == nil {
			delete(dst, k)
			continue
		}
		if om, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, om)
				continue
			}
		}
		dst[k] = v
	}
}

func jsonTypes(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// get walks obj by map keys and list indexes (ints); nil when absent.
func get(obj any, path ...any) any {
	cur := obj
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

func str(obj any, path ...any) string {
	s, _ := get(obj, path...).(string)
	return s
}

func mapAt(obj any, path ...any) map[string]any {
	m, _ := get(obj, path...).(map[string]any)
	return m
}

func listAt(obj any, path ...any) []any {
	l, _ := get(obj, path...).([]any)
	return l
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
