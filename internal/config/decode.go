package config

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The config is decoded by walking the yaml.Node tree against the config
// types (their tags, schema.go) rather than with yaml's struct decoding:
// KnownFields errors name a Go type and a line, not the key's path, and
// cannot report more than the first problem well.
//
// A YAML null (`key:` or `key: ~`) means the key is absent, so the default
// stays. Merge keys (<<) are rejected rather than half supported; anchors
// and aliases for whole values work. ${VAR} is expanded in the decoded
// string values of fields tagged expand, never in the YAML text, so a
// variable's value is data and cannot add keys or change structure.

// decoder collects every problem of one document, and the line of every
// path it met, for the messages of rules judged after decoding.
type decoder struct {
	env   func(string) (string, bool)
	errs  errorList
	lines map[string]int
	// noHostFiles refuses every path and command field (ParseRuntime).
	noHostFiles bool
}

func (d *decoder) saw(path string, line int) {
	if d.lines != nil {
		d.lines[path] = line
	}
}

func decode(data []byte, c *Config, env func(string) (string, bool), noHostFiles bool) (lines map[string]int, err error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty document: all defaults
		}
		return nil, &FieldError{Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &FieldError{Err: err}
		}
		return nil, &FieldError{Line: extra.Line, Err: errors.New("more than one YAML document")}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d := &decoder{env: env, lines: map[string]int{}, noHostFiles: noHostFiles}
	d.section(typeOf(reflect.TypeFor[Config]()), "", root, reflect.ValueOf(c).Elem())
	return d.lines, d.errs.err()
}

// section decodes the mapping n into the struct v of type ti.
func (d *decoder) section(ti *typeInfo, path string, n *yaml.Node, v reflect.Value) {
	d.eachKey(path, n, func(key string, k, val *yaml.Node) {
		p := joinPath(path, key)
		f := ti.byKey[key]
		if f == nil {
			d.unknownField(p, k, key, ti.keys)
			return
		}
		d.value(f, p, val, v.Field(f.index))
	})
}

// value decodes n into dst, the field f. A null leaves dst as it is.
func (d *decoder) value(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	switch f.kind {
	case kString:
		if s, ok := d.str(f, path, n); ok {
			if d.noHostFiles && (f.path || f.command) && strings.TrimSpace(s) != "" {
				d.hostFile(f, path, n.Line)
				return
			}
			dst.SetString(s)
		}
	case kStrings:
		d.strings(f, path, n, dst)
	case kStringMap:
		d.stringMap(f, path, n, dst)
	case kFloatMap:
		d.eachKey(path, n, func(key string, _, v *yaml.Node) {
			if x, ok := d.float(joinPath(path, key), v); ok {
				if dst.IsNil() {
					dst.Set(reflect.MakeMap(dst.Type()))
				}
				dst.SetMapIndex(reflect.ValueOf(key), reflect.ValueOf(x))
			} else if isNull(resolve(v)) {
				d.errs.add(joinPath(path, key), v.Line, "must be a number")
			}
		})
	case kListMap:
		d.listMap(f, path, n, dst)
	case kBool:
		if b, ok := d.bool(path, n); ok {
			dst.SetBool(b)
		}
	case kBoolPtr:
		if b, ok := d.bool(path, n); ok {
			dst.Set(reflect.ValueOf(&b))
		}
	case kInt:
		d.int(path, n, dst)
	case kFloat:
		if v, ok := d.float(path, n); ok {
			dst.SetFloat(v)
		}
	case kFloatPtr:
		if v, ok := d.float(path, n); ok {
			dst.Set(reflect.ValueOf(&v))
		}
	case kSize:
		d.size(path, n, dst)
	case kDuration:
		d.duration(path, n, dst)
	case kTime:
		d.time(path, n, dst)
	case kStruct:
		d.section(f.elem, path, n, dst)
	case kStructPtr:
		if isNull(resolve(n)) {
			return
		}
		p := newStruct(f.elem)
		dst.Set(p)
		d.section(f.elem, path, n, p.Elem())
	case kStructMap:
		d.structMap(f, path, n, dst)
	case kStructList:
		d.structList(f, path, n, dst)
	}
}

// hostFile refuses the path or command field f of a document from the
// network. The message is the same whatever the value: nothing looks at
// the file, so nothing can tell whether it exists.
func (d *decoder) hostFile(f *fieldInfo, path string, line int) {
	msg := "names a file on the gateway's host, which only the config file may do"
	if f.inline != "" {
		parent := path[:len(path)-len(f.key)]
		msg += "; give the content itself in " + parent + f.inline
	}
	d.errs.add(path, line, "%s", msg)
}

// str decodes a scalar as a string (any scalar: "8080" and "true" are
// strings where a string is wanted), expanded when f says so.
func (d *decoder) str(f *fieldInfo, path string, n *yaml.Node) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		d.errs.add(path, n.Line, "must be a string")
		return "", false
	}
	return d.expand(f, path, n.Line, n.Value)
}

func (d *decoder) expand(f *fieldInfo, path string, line int, s string) (string, bool) {
	if !f.expand {
		return s, true
	}
	v, err := expandString(s, d.env)
	if err != nil {
		d.errs = append(d.errs, &FieldError{Path: path, Line: line, Err: err})
		return "", false
	}
	return v, true
}

// strings decodes a list of strings. An empty list decodes to nil, unless
// f is ornone: then [] is a non-nil empty slice ("none"), distinct from an
// absent or null list (nil, "all").
func (d *decoder) strings(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.add(path, n.Line, "must be a list of strings")
		return
	}
	var out []string
	if f.orNone {
		out = []string{}
	}
	for i, e := range n.Content {
		ep := indexPath(path, i)
		d.saw(ep, e.Line)
		if r := resolve(e); r == nil || r.Kind != yaml.ScalarNode || isNull(r) {
			d.errs.add(ep, e.Line, "must be a string")
			continue
		}
		if s, ok := d.expand(f, ep, e.Line, resolve(e).Value); ok {
			out = append(out, s)
		}
	}
	dst.Set(reflect.ValueOf(out))
}

// stringMap decodes a mapping of names to strings; a null value is "".
func (d *decoder) stringMap(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	d.eachKey(path, n, func(key string, _, v *yaml.Node) {
		p := joinPath(path, key)
		val, ok := "", true
		if !isNull(resolve(v)) {
			val, ok = d.str(f, p, v)
		}
		if !ok {
			return
		}
		if dst.IsNil() {
			dst.Set(reflect.MakeMap(dst.Type()))
		}
		dst.SetMapIndex(reflect.ValueOf(key), reflect.ValueOf(val))
	})
}

// listMap decodes a mapping of names to lists of strings. Every key gets
// a non-nil list, so an empty list ("none of them") stays distinct from an
// absent key; a null list is an error rather than a guess between the two.
func (d *decoder) listMap(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	list := *f
	list.orNone = true
	d.eachKey(path, n, func(key string, _, v *yaml.Node) {
		p := joinPath(path, key)
		if isNull(resolve(v)) {
			d.errs.add(p, v.Line, "must be a list of strings")
			return
		}
		l := reflect.New(dst.Type().Elem()).Elem()
		d.strings(&list, p, v, l)
		if l.IsNil() {
			return // not a list: reported
		}
		if dst.IsNil() {
			dst.Set(reflect.MakeMap(dst.Type()))
		}
		dst.SetMapIndex(reflect.ValueOf(key), l)
	})
}

// structMap decodes named entries. Every entry starts from its type's
// defaults; a null entry is one with nothing set (its own rules report
// what it lacks).
func (d *decoder) structMap(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	d.eachKey(path, n, func(name string, _, v *yaml.Node) {
		e := newStruct(f.elem)
		for _, ef := range f.elem.fields {
			if ef.mapKey {
				e.Elem().Field(ef.index).SetString(name)
			}
		}
		d.section(f.elem, joinPath(path, name), v, e.Elem())
		if dst.IsNil() {
			dst.Set(reflect.MakeMap(dst.Type()))
		}
		if f.elemPt {
			dst.SetMapIndex(reflect.ValueOf(name), e)
		} else {
			dst.SetMapIndex(reflect.ValueOf(name), e.Elem())
		}
	})
}

// structList decodes a list of mappings. Every entry gets a value, even a
// broken one, so that indexes in paths match the file.
func (d *decoder) structList(f *fieldInfo, path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.add(path, n.Line, "must be a list of mappings")
		return
	}
	out := reflect.MakeSlice(dst.Type(), 0, len(n.Content))
	for i, e := range n.Content {
		ep := indexPath(path, i)
		d.saw(ep, e.Line)
		v := newStruct(f.elem).Elem()
		for _, ef := range f.elem.fields {
			if ef.line {
				v.Field(ef.index).SetInt(int64(e.Line))
			}
		}
		if isNull(resolve(e)) {
			d.errs.add(ep, e.Line, "must be a mapping")
		}
		d.section(f.elem, ep, e, v)
		out = reflect.Append(out, v)
	}
	dst.Set(out)
}

// resolve follows aliases. An anchor cannot sit on an alias, so one step
// is enough; the loop bound only guards against malformed trees.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; i < 8 && n != nil && n.Kind == yaml.AliasNode; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// eachKey calls fn for every key of the mapping n, in document order,
// reporting non-mappings, non-scalar keys, merge keys and duplicates.
func (d *decoder) eachKey(path string, n *yaml.Node, fn func(key string, k, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errs.add(displayPath(path), n.Line, "must be a mapping")
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.errs.add(displayPath(path), n.Content[i].Line, "keys must be strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.errs.add(joinPath(path, k.Value), k.Line, "merge keys are not supported")
			continue
		}
		if seen[k.Value] {
			d.errs.add(joinPath(path, k.Value), k.Line, "duplicate key")
			continue
		}
		seen[k.Value] = true
		d.saw(joinPath(path, k.Value), k.Line)
		fn(k.Value, k, v)
	}
}

func (d *decoder) bool(path string, n *yaml.Node) (bool, bool) {
	n = resolve(n)
	if isNull(n) {
		return false, false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		d.errs.add(path, n.Line, "must be true or false")
		return false, false
	}
	return b, true
}

// durationWant is the one description of a duration, for messages and
// the reference.
const durationWant = `a duration with a unit, like "30s", "1m" or "500ms"`

// duration accepts Go durations ("30s", "1m", "500ms"). A bare number is
// an error rather than seconds: "timeout: 30" is as likely meant as
// milliseconds, and a unit costs one character.
func (d *decoder) duration(path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errs.add(path, n.Line, "must be "+durationWant)
		return
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errs.add(path, n.Line, "must be %s (got %q)", durationWant, truncate(n.Value, 40))
		return
	}
	dst.SetInt(int64(v))
}

// int accepts a YAML integer only: a quoted number or a float is an error
// rather than a guess.
func (d *decoder) int(path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.errs.add(path, n.Line, "must be an integer")
		return
	}
	dst.SetInt(int64(v))
}

// float accepts a YAML number, integer or float ("1", "0.25"); a quoted
// number, .nan and .inf are errors: no rule here means to accept them.
func (d *decoder) float(path string, n *yaml.Node) (float64, bool) {
	n = resolve(n)
	if isNull(n) {
		return 0, false
	}
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errs.add(path, n.Line, "must be a number")
		return 0, false
	}
	return v, true
}

const timeWant = "an RFC 3339 time like 2027-01-01T00:00:00Z"

// time accepts a YAML timestamp (2027-01-01T00:00:00Z, unquoted) or an
// RFC 3339 string, and keeps it in UTC.
func (d *decoder) time(path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errs.add(path, n.Line, "must be "+timeWant)
		return
	}
	var t time.Time
	err := errors.New("not a time")
	switch n.ShortTag() {
	case "!!timestamp":
		err = n.Decode(&t)
	case "!!str":
		t, err = time.Parse(time.RFC3339, n.Value)
	}
	if err != nil {
		d.errs.add(path, n.Line, "must be %s (got %q)", timeWant, truncate(n.Value, 40))
		return
	}
	dst.Set(reflect.ValueOf(t.UTC()))
}

const sizeWant = `a number of bytes or a size like "4MiB", "512KiB" or "1MB"`

// size accepts an integer number of bytes or a string with a unit: B,
// kB/KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).
func (d *decoder) size(path string, n *yaml.Node, dst reflect.Value) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errs.add(path, n.Line, "must be "+sizeWant)
		return
	}
	if n.ShortTag() == "!!int" {
		var v int64
		if err := n.Decode(&v); err != nil {
			d.errs.add(path, n.Line, "must be %s (got %q)", sizeWant, truncate(n.Value, 40))
			return
		}
		dst.SetInt(v)
		return
	}
	v, ok := parseByteSize(n.Value)
	if !ok {
		d.errs.add(path, n.Line, "must be %s (got %q)", sizeWant, truncate(n.Value, 40))
		return
	}
	dst.SetInt(v)
}

// byteUnits are the units of a size, lower-cased, in the order the
// reference lists them.
var byteUnits = []struct {
	name string
	mult int64
}{
	{"B", 1},
	{"kB", 1000},
	{"MB", 1000 * 1000},
	{"GB", 1000 * 1000 * 1000},
	{"KiB", 1 << 10},
	{"MiB", 1 << 20},
	{"GiB", 1 << 30},
}

func parseByteSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 {
		return 0, false
	}
	num, unit := s, ""
	if i > 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, false
	}
	mult := int64(1)
	if unit != "" {
		mult = 0
		for _, u := range byteUnits {
			if strings.EqualFold(unit, u.name) {
				mult = u.mult
			}
		}
		if mult == 0 {
			return 0, false
		}
	}
	if v > math.MaxInt64/mult {
		return 0, false
	}
	return v * mult, true
}

func (d *decoder) unknownField(path string, k *yaml.Node, key string, known []string) {
	if s := suggest(key, known); s != "" {
		d.errs.add(path, k.Line, "unknown field (did you mean %s?)", s)
		return
	}
	d.errs.add(path, k.Line, "unknown field")
}

// suggest returns the known key closest to key, if it is a likely typo.
func suggest(key string, known []string) string {
	if len(key) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Levenshtein plus
// adjacent transpositions, so "hedaers" is one edit from "headers").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// joinPath appends key to a dotted field path, quoting keys that would make
// the path ambiguous or unreadable (dots, brackets, spaces, control runes).
func joinPath(path, key string) string {
	plain := key != "" && !strings.ContainsFunc(key, func(r rune) bool {
		return strings.ContainsRune(`.[]"':`, r) || unicode.IsSpace(r) || !unicode.IsPrint(r)
	})
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// displayPath names the document root, which has an empty path, in
// messages that are about the root itself.
func displayPath(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
