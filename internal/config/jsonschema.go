package config

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SchemaID is where the generated schema is published: the copy in the
// repository, kept current by go generate (TestGeneratedFilesAreCurrent).
const SchemaID = "https://raw.githubusercontent.com/mcpgate/mcpgate/main/docs/config.schema.json"

// JSONSchema returns a JSON Schema (draft 2020-12) of the config file,
// generated from the same tags the decoder reads. YAML editors use it for
// completion and validation (yaml-language-server's $schema comment).
//
// It states what the decoder and the tag rules check: shapes, keys,
// enums, required fields (also per transport and auth type), minimums and
// the syntax of sizes and durations. Rules that need more than one value
// (an unknown server named by a key, a name containing the separator, a
// missing file) and the case-insensitivity of lower-cased enums are
// Parse's alone, so a file the schema accepts can still fail Parse; a
// file Parse accepts is one the schema accepts, except for enum values in
// another case or from ${VAR}, which the schema cannot expand.
func JSONSchema() []byte {
	g := &schemaGen{defs: map[reflect.Type]string{}}
	root := g.object(typeOf(reflect.TypeFor[Config]()))
	root.Type = []string{"object", "null"} // an empty file is all defaults
	root.Schema = "https://json-schema.org/draft/2020-12/schema"
	root.ID = SchemaID
	root.Title = "mcpgate configuration"
	root.Description = "The mcpgate config file. Reference: docs/config.md."
	root.Defs = g.defList
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		panic(err) // only our own types: cannot fail
	}
	return b.Bytes()
}

// schema is the subset of JSON Schema the generator writes, in a stable
// key order.
type schema struct {
	Schema               string    `json:"$schema,omitempty"`
	ID                   string    `json:"$id,omitempty"`
	Ref                  string    `json:"$ref,omitempty"`
	Title                string    `json:"title,omitempty"`
	Description          string    `json:"description,omitempty"`
	Type                 any       `json:"type,omitempty"`
	Enum                 []any     `json:"enum,omitempty"`
	Const                any       `json:"const,omitempty"`
	Default              any       `json:"default,omitempty"`
	Format               string    `json:"format,omitempty"`
	Pattern              string    `json:"pattern,omitempty"`
	Minimum              any       `json:"minimum,omitempty"`
	Maximum              any       `json:"maximum,omitempty"`
	MinItems             *int      `json:"minItems,omitempty"`
	MaxItems             *int      `json:"maxItems,omitempty"`
	MinProperties        *int      `json:"minProperties,omitempty"`
	MaxProperties        *int      `json:"maxProperties,omitempty"`
	Items                *schema   `json:"items,omitempty"`
	Properties           props     `json:"properties,omitempty"`
	PropertyNames        *schema   `json:"propertyNames,omitempty"`
	AdditionalProperties any       `json:"additionalProperties,omitempty"`
	Required             []string  `json:"required,omitempty"`
	Not                  *schema   `json:"not,omitempty"`
	AnyOf                []*schema `json:"anyOf,omitempty"`
	AllOf                []*schema `json:"allOf,omitempty"`
	If                   *schema   `json:"if,omitempty"`
	Then                 *schema   `json:"then,omitempty"`
	Defs                 props     `json:"$defs,omitempty"`
}

// props is an ordered set of named schemas: properties in declaration
// order read better than sorted ones.
type props []prop

type prop struct {
	name string
	s    *schema
}

func (p props) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.name)
		v, err := json.Marshal(e.s)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type schemaGen struct {
	defs    map[reflect.Type]string
	defList props
}

// ref returns a reference to the definition of ti, adding it on first use.
func (g *schemaGen) ref(ti *typeInfo) *schema {
	name, ok := g.defs[ti.t]
	if !ok {
		name = defName(ti.t)
		g.defs[ti.t] = name
		i := len(g.defList)
		g.defList = append(g.defList, prop{name: name})
		g.defList[i].s = g.object(ti)
	}
	return &schema{Ref: "#/$defs/" + name}
}

func defName(t reflect.Type) string {
	n := t.Name()
	return strings.ToLower(n[:1]) + n[1:]
}

// scalarTypes are what a string field accepts: the decoder takes any
// scalar's text ("8080" and "true" are strings where a string is wanted).
var scalarTypes = []string{"string", "number", "boolean"}

func (g *schemaGen) object(ti *typeInfo) *schema {
	s := &schema{Type: "object", AdditionalProperties: false}
	for _, f := range ti.fields {
		if f.key == "" {
			continue
		}
		req := f.required && f.when == nil || f.nonempty != ""
		p := g.field(f, !req)
		s.Properties = append(s.Properties, prop{f.key, p})
		if req {
			s.Required = append(s.Required, f.key)
		}
	}
	if d := ti.disc; d != nil {
		for _, v := range d.enum {
			then := &schema{}
			for _, f := range ti.fields {
				if f.when == nil {
					continue
				}
				switch applies := slices.Contains(f.when, v); {
				case applies && f.requiredFor(v):
					then.Required = append(then.Required, f.key)
					then.Properties = append(then.Properties, prop{f.key, present(f)})
				case !applies:
					then.Properties = append(then.Properties, prop{f.key, absent(f)})
				}
			}
			if then.Properties == nil {
				continue
			}
			s.AllOf = append(s.AllOf, &schema{
				If:   &schema{Properties: props{{d.key, &schema{Const: v}}}, Required: []string{d.key}},
				Then: then,
			})
		}
	}
	return s
}

// field is the schema of one field; nullable says whether null (absent)
// is accepted.
func (g *schemaGen) field(f *fieldInfo, nullable bool) *schema {
	types := func(t ...string) any {
		if nullable {
			t = append(t, "null")
		}
		if len(t) == 1 {
			return t[0]
		}
		return t
	}
	s := &schema{Description: f.doc}
	if f.def != "" {
		var v any
		_ = yaml.Unmarshal([]byte(f.def), &v)
		s.Default = v
	}
	switch f.kind {
	case kString:
		if f.enum != nil {
			for _, e := range f.enum {
				s.Enum = append(s.Enum, e)
			}
			if nullable {
				s.Enum = append(s.Enum, nil)
			}
			if loose := looseEnum(f); loose != nil {
				// Editors complete from the enum; the file may spell a
				// value in another case, with spaces, or from ${VAR}.
				s.AnyOf = []*schema{{Enum: s.Enum}, loose}
				s.Enum = nil
			}
			break
		}
		s.Type = types(scalarTypes...)
		if f.required && f.when == nil {
			s.Pattern = `\S`
		}
	case kStrings:
		s.Type = types("array")
		s.Items = &schema{Type: scalarTypes}
		if f.enum != nil {
			s.Items = &schema{}
			for _, e := range f.enum {
				s.Items.Enum = append(s.Items.Enum, e)
			}
		}
		if f.nonempty != "" {
			s.MinItems = ptr(1)
		}
	case kStringMap:
		s.Type = types("object")
		s.AdditionalProperties = &schema{Type: append(scalarTypes[:len(scalarTypes):len(scalarTypes)], "null")}
	case kFloatMap:
		s.Type = types("object")
		num := &schema{Type: "number"}
		if f.fmin != nil {
			num.Minimum = *f.fmin
		}
		s.AdditionalProperties = num
	case kListMap:
		s.Type = types("object")
		s.AdditionalProperties = &schema{Type: "array", Items: &schema{Type: scalarTypes}}
		if f.nonempty != "" {
			s.MinProperties = ptr(1)
		}
	case kBool, kBoolPtr:
		s.Type = types("boolean")
	case kInt:
		s.Type = types("integer")
		if f.min != nil {
			s.Minimum = int64(*f.min)
		}
		if f.max != nil {
			s.Maximum = int64(*f.max)
		}
	case kFloat, kFloatPtr:
		s.Type = types("number")
		if f.fmin != nil {
			s.Minimum = *f.fmin
		}
		if f.fmax != nil {
			s.Maximum = *f.fmax
		}
	case kSize:
		s.Type = types("integer", "string")
		s.Pattern = sizePattern(f.positive)
		if f.positive {
			s.Minimum = int64(1)
		}
	case kDuration:
		s.Type = types("string")
		s.Pattern = durationPattern
	case kTime:
		s.Type = types("string")
		s.Format = "date-time"
	case kStruct, kStructPtr:
		r := g.ref(f.elem)
		if !nullable {
			r.Description, r.Default = s.Description, s.Default
			return r
		}
		s.AnyOf = []*schema{r, {Type: "null"}}
	case kStructMap:
		s.Type = types("object")
		s.AdditionalProperties = g.ref(f.elem)
	case kStructList:
		s.Type = types("array")
		s.Items = g.ref(f.elem)
	}
	if f.keys != "" {
		s.PropertyNames = &schema{Pattern: f.keys}
	}
	return s
}

// looseEnum is the other spellings of an enum value Parse accepts: in
// any case when the field is lower-cased, with spaces when trimmed, and
// anything with a "$" when expanded; nil when there are none.
func looseEnum(f *fieldInfo) *schema {
	if !f.lower && !f.trim && !f.expand {
		return nil
	}
	var alts []string
	for _, e := range f.enum {
		if f.lower {
			e = anyCase(e)
		} else {
			e = regexp.QuoteMeta(e)
		}
		alts = append(alts, e)
	}
	pat := "^(?:" + strings.Join(alts, "|") + ")$"
	if f.trim {
		pat = `^\s*(?:` + strings.Join(alts, "|") + `)\s*$`
	}
	if f.expand {
		pat = "(?:" + pat + `)|\$`
	}
	return &schema{Type: "string", Pattern: pat}
}

// anyCase is a pattern matching s in any case.
func anyCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r))
		if lo == up {
			b.WriteString(regexp.QuoteMeta(lo))
			continue
		}
		b.WriteString("[" + lo + up + "]")
	}
	return b.String()
}

// present is what a field required under a disc value must be: not null,
// and for a string not blank.
func present(f *fieldInfo) *schema {
	if f.kind == kString {
		return &schema{Type: scalarTypes, Pattern: `\S`}
	}
	return &schema{Not: &schema{Type: "null"}}
}

// absent is what a field not allowed under a disc value may be: absent,
// null or empty, as the rule judges only values that configure something.
func absent(f *fieldInfo) *schema {
	switch f.kind {
	case kString:
		return &schema{Enum: []any{nil, ""}}
	case kStrings, kStructList:
		return &schema{AnyOf: []*schema{{Type: "null"}, {Type: "array", MaxItems: ptr(0)}}}
	case kStringMap, kListMap, kStructMap, kFloatMap:
		return &schema{AnyOf: []*schema{{Type: "null"}, {Type: "object", MaxProperties: ptr(0)}}}
	case kBool:
		return &schema{Enum: []any{nil, false}}
	}
	return &schema{Type: "null"}
}

// durationPattern is the syntax of time.ParseDuration without a sign (a
// negative duration is never valid here).
const durationPattern = `^\+?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`

// sizePattern is the syntax parseByteSize accepts, units in any case;
// positive excludes zero.
func sizePattern(positive bool) string {
	var units []string
	for _, u := range byteUnits {
		units = append(units, anyCase(u.name))
	}
	num := `[0-9]+`
	if positive {
		num = `0*[1-9][0-9]*`
	}
	return `^\s*` + num + `\s*(?:` + strings.Join(units, "|") + `)?\s*$`
}

func ptr[T any](v T) *T { return &v }
