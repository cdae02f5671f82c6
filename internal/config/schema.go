package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// The config types carry their schema in struct tags; the decoder
// (decode.go), the rule checks (checkFields), the JSON Schema
// (jsonschema.go) and the reference (reference.go) all read it from here,
// so a key cannot be decoded but undocumented, or documented but rejected.
//
//	Field T `config:"key,option,option=value" doc:"What it is for."`
//
// The key is the YAML key; "-" (or no config tag) means not in the file.
// Options:
//
//	required        must be set (non-blank); with when=, only for those values
//	required=a|b    with when=: must be set only for a and b (a subset of
//	                the when= values), allowed but optional for the others
//	default=V       the value when the key is absent, in the file's syntax
//	                (non-pointer fields; a pointer's default is what nil means
//	                and is documentation only)
//	enum=a|b        the accepted values
//	disc=label      this enum field chooses which when= fields apply; label
//	                names it in messages ("transport", "auth type")
//	when=a|b        allowed only when the struct's disc field is a or b
//	expand          ${VAR} is expanded (expand.go)
//	secret          may carry a secret: never echoed in a message
//	trim, lower     trimmed / lower-cased before validation
//	path[=key]      a file or directory on the gateway's host, resolved
//	                against the config file's directory; refused in a
//	                document from the network (ParseRuntime); key names the
//	                sibling field that takes the content instead
//	command         resolved like path when it contains a separator, else
//	                left for PATH lookup
//	size            an int64 byte size: 1024 or "4MiB"
//	min=N           an integer >= N; on a float, a number >= N
//	max=N           an integer <= N; on a float, a number <= N
//	positive        a size or duration > 0
//	nonempty=noun   a list or map that must have an entry ("must list at
//	                least one value")
//	ornone          a list where [] means "none", distinct from absent (nil)
//	mapkey          not in the file: set to the entry's key in its map
//	line            not in the file: set to the entry's line
//
// A `keys:"regexp"` tag on a map field gives the pattern of its keys for
// the schema (validate.go checks names with their own messages), and an
// `entry:"tool"` tag what its keys are, for the reference (default name). The Go
// type decides the shape: string, []string, map[string]string,
// map[string][]string, map[string]float64, bool, *bool, int, float64, *float64 (nil is the
// default, 0 a value), int64 (size), time.Duration,
// time.Time, a struct (a section; null keeps its defaults), a pointer to
// one (null means absent), map[string]*S or map[string]S (named entries)
// and []S (a list of mappings).
//
// Adding a section: a struct type with tagged fields and a tagged field
// of it in Config (or another section). Decoding, defaults, expansion,
// normalising, the tag rules (an inline section's are checked with its
// parent's), the schema and the reference follow; a section reached
// through a pointer, map or list calls checkFields from the validate of
// its parent, beside the rules no tag expresses. Then go generate
// ./internal/config.

// kind is the shape of a field's value.
type kind int

const (
	kString kind = iota
	kStrings
	kStringMap
	kListMap
	kBool
	kBoolPtr
	kInt
	kFloat
	kFloatPtr // nil means the documented default, 0 is a value
	kSize
	kDuration
	kTime
	kStruct    // an inline section
	kStructPtr // an optional section
	kStructMap // named entries: map[string]*S or map[string]S
	kStructList
	kFloatMap // map[string]float64: numbers by name (min= bounds each)
)

// fieldInfo is one field's schema, parsed from its tags.
type fieldInfo struct {
	name   string // Go field name
	key    string // YAML key; "" for mapkey / line fields
	index  int
	kind   kind
	elem   *typeInfo // for struct kinds
	elemPt bool      // map entries are pointers

	required bool
	reqWhen  []string      // with when=: the disc values it is required for
	def      string        // default in the file's syntax, "" for none
	defVal   reflect.Value // def decoded, valid when def != ""
	enum     []string
	disc     string // label, when this is the discriminator
	when     []string
	expand   bool
	secret   bool
	trim     bool
	lower    bool
	path     bool
	inline   string // path=key: the sibling field that takes the content
	command  bool
	min      *int     // min= on an int
	max      *int     // max= on an int
	fmin     *float64 // min= on a float
	fmax     *float64 // max= on a float
	positive bool
	nonempty string
	orNone   bool
	mapKey   bool
	line     bool
	keys     string // pattern of map keys
	entry    string // what a map entry's key is, for the reference
	doc      string
}

// typeInfo is a struct type's schema.
type typeInfo struct {
	t      reflect.Type
	fields []*fieldInfo // in declaration order, file keys and special fields
	keys   []string     // file keys, in order (for "did you mean")
	byKey  map[string]*fieldInfo
	disc   *fieldInfo // nil when no field is a discriminator
}

var (
	typeMu    sync.Mutex
	typeCache = map[reflect.Type]*typeInfo{}
)

// typeOf returns the schema of struct type t, built once. A malformed tag
// is a programming error and panics (the package's tests load every type).
func typeOf(t reflect.Type) *typeInfo {
	typeMu.Lock()
	defer typeMu.Unlock()
	return buildType(t)
}

func buildType(t reflect.Type) *typeInfo {
	if ti, ok := typeCache[t]; ok {
		return ti
	}
	ti := &typeInfo{t: t, byKey: map[string]*fieldInfo{}}
	typeCache[t] = ti // before the fields: types may refer to themselves
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("config")
		if !ok || tag == "-" {
			continue
		}
		f := parseField(t, sf, i, tag)
		ti.fields = append(ti.fields, f)
		if f.key == "" {
			continue
		}
		if ti.byKey[f.key] != nil {
			panic(fmt.Sprintf("config: %s: key %q used twice", t, f.key))
		}
		ti.byKey[f.key] = f
		ti.keys = append(ti.keys, f.key)
		if f.disc != "" {
			if ti.disc != nil {
				panic(fmt.Sprintf("config: %s: two disc fields", t))
			}
			ti.disc = f
		}
	}
	for _, f := range ti.fields {
		if f.when == nil {
			continue
		}
		if ti.disc == nil {
			panic(fmt.Sprintf("config: %s.%s: when= without a disc field", t, f.name))
		}
		for _, w := range f.when {
			if !slices.Contains(ti.disc.enum, w) {
				panic(fmt.Sprintf("config: %s.%s: when=%s is not a value of %s", t, f.name, w, ti.disc.key))
			}
		}
	}
	return ti
}

// requiredFor reports whether a when= field must be set under disc value v.
func (f *fieldInfo) requiredFor(v string) bool {
	return f.required && slices.Contains(f.reqWhen, v)
}

func parseField(t reflect.Type, sf reflect.StructField, i int, tag string) *fieldInfo {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("config: %s.%s: %s", t, sf.Name, fmt.Sprintf(format, args...)))
	}
	parts := strings.Split(tag, ",")
	var bounds [][2]string
	f := &fieldInfo{name: sf.Name, key: parts[0], index: i, doc: sf.Tag.Get("doc"), keys: sf.Tag.Get("keys"), entry: sf.Tag.Get("entry")}
	for _, p := range parts[1:] {
		opt, val, _ := strings.Cut(p, "=")
		switch opt {
		case "required":
			f.required = true
			if val != "" {
				f.reqWhen = strings.Split(val, "|")
			}
		case "default":
			f.def = val
		case "enum":
			f.enum = strings.Split(val, "|")
		case "disc":
			f.disc = val
		case "when":
			f.when = strings.Split(val, "|")
		case "expand":
			f.expand = true
		case "secret":
			f.secret = true
		case "trim":
			f.trim = true
		case "lower":
			f.lower = true
		case "path":
			f.path, f.inline = true, val
		case "command":
			f.command = true
		case "size":
		case "min", "max":
			// Parsed once the kind is known: an int's bound is an integer.
			bounds = append(bounds, [2]string{opt, val})
		case "positive":
			f.positive = true
		case "nonempty":
			f.nonempty = val
		case "ornone":
			f.orNone = true
		case "mapkey":
			f.mapKey = true
		case "line":
			f.line = true
		default:
			bad("unknown option %q", opt)
		}
	}
	if f.required && f.when != nil && f.reqWhen == nil {
		f.reqWhen = f.when
	}
	for _, v := range f.reqWhen {
		if f.when == nil || !slices.Contains(f.when, v) {
			bad("required=%s: %q is not one of its when= values", strings.Join(f.reqWhen, "|"), v)
		}
	}
	if (f.key == "") != (f.mapKey || f.line) {
		bad("a field needs a key, or mapkey or line instead")
	}
	f.kind = kindOf(sf.Type, strings.Contains(","+tag+",", ",size,"), bad)
	for _, b := range bounds {
		f.setBound(b[0], b[1], bad)
	}
	switch f.kind {
	case kStruct, kStructPtr:
		f.elem = buildType(derefType(sf.Type))
	case kStructMap:
		e := sf.Type.Elem()
		f.elemPt = e.Kind() == reflect.Pointer
		f.elem = buildType(derefType(e))
	case kStructList:
		f.elem = buildType(sf.Type.Elem())
	}
	if f.mapKey && f.kind != kString || f.line && f.kind != kInt {
		bad("mapkey must be a string and line an int")
	}
	if f.disc != "" && f.enum == nil {
		bad("disc without enum")
	}
	if f.def != "" {
		if f.kind > kTime {
			bad("default on a %s field", kindName(f.kind))
		}
		v := reflect.New(sf.Type).Elem()
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(f.def), &n); err != nil || len(n.Content) != 1 {
			bad("default %q is not YAML", f.def)
		}
		d := &decoder{env: noEnv} // no lines: nothing judges a default's place
		d.value(f, f.key, n.Content[0], v)
		if len(d.errs) > 0 {
			bad("default %q: %v", f.def, d.errs.err())
		}
		f.defVal = v
	}
	return f
}

// setBound parses a min= or max= option for f's kind.
func (f *fieldInfo) setBound(opt, val string, bad func(string, ...any)) {
	switch f.kind {
	case kInt, kSize, kDuration: // integers underneath: the bound is one
		n, err := strconv.Atoi(val)
		if err != nil {
			bad("%s=%q", opt, val)
		}
		if opt == "min" {
			f.min = &n
		} else {
			f.max = &n
		}
	case kFloat, kFloatPtr, kFloatMap:
		x, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			bad("%s=%q", opt, val)
		}
		if opt == "min" {
			f.fmin = &x
		} else {
			f.fmax = &x
		}
	default:
		bad("%s= on a %s field", opt, kindName(f.kind))
	}
	if f.min != nil && f.max != nil && *f.min > *f.max || f.fmin != nil && f.fmax != nil && *f.fmin > *f.fmax {
		bad("min= above max=")
	}
}

func derefType(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

func kindOf(t reflect.Type, size bool, bad func(string, ...any)) kind {
	switch {
	case t == durationType:
		return kDuration
	case t == timeType:
		return kTime
	}
	switch t.Kind() {
	case reflect.String:
		return kString
	case reflect.Bool:
		return kBool
	case reflect.Int:
		return kInt
	case reflect.Float64:
		return kFloat
	case reflect.Int64:
		if !size {
			bad("an int64 field must be a size")
		}
		return kSize
	case reflect.Struct:
		return kStruct
	case reflect.Pointer:
		switch t.Elem().Kind() {
		case reflect.Bool:
			return kBoolPtr
		case reflect.Float64:
			return kFloatPtr
		case reflect.Struct:
			return kStructPtr
		}
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return kStrings
		case reflect.Struct:
			return kStructList
		}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			break
		}
		switch e := t.Elem(); {
		case e.Kind() == reflect.String:
			return kStringMap
		case e.Kind() == reflect.Float64:
			return kFloatMap
		case e.Kind() == reflect.Slice && e.Elem().Kind() == reflect.String:
			return kListMap
		case derefType(e).Kind() == reflect.Struct:
			return kStructMap
		}
	}
	bad("unsupported type %s", t)
	return 0
}

func kindName(k kind) string {
	return [...]string{"string", "list of strings", "map of strings", "map of string lists", "boolean", "boolean",
		"integer", "number", "number", "size", "duration", "time", "section", "section", "map of sections", "list of sections", "map of numbers"}[k]
}

// setDefaults gives every defaulted field of the struct v its default,
// recursing into inline sections.
func setDefaults(ti *typeInfo, v reflect.Value) {
	for _, f := range ti.fields {
		switch {
		case f.def != "" && f.kind != kBoolPtr && f.kind != kFloatPtr: // nil is what the default means
			v.Field(f.index).Set(f.defVal)
		case f.kind == kStruct:
			setDefaults(f.elem, v.Field(f.index))
		}
	}
}

// fillZero gives every defaulted field of the struct v that is zero its
// default, recursing into inline sections: the defaults of a value built
// in code, where zero means "the default".
func fillZero(ti *typeInfo, v reflect.Value) {
	for _, f := range ti.fields {
		fv := v.Field(f.index)
		switch {
		case f.def != "" && f.kind != kBoolPtr && f.kind != kFloatPtr && fv.IsZero():
			fv.Set(f.defVal)
		case f.kind == kStruct:
			fillZero(f.elem, fv)
		}
	}
}

// newStruct returns a new *S of ti's type with its defaults set.
func newStruct(ti *typeInfo) reflect.Value {
	p := reflect.New(ti.t)
	setDefaults(ti, p.Elem())
	return p
}

// field returns the info of the Go field name of t; it panics when t has
// none, for lookups by code that knows its types.
func field(t reflect.Type, name string) *fieldInfo {
	for _, f := range typeOf(t).fields {
		if f.name == name {
			return f
		}
	}
	panic("config: no field " + t.String() + "." + name)
}

// enumOf returns the accepted values of an enum field.
func enumOf[T any](name string) []string {
	return field(reflect.TypeFor[T](), name).enum
}

func noEnv(string) (string, bool) { return "", false }
