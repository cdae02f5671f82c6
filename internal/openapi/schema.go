package openapi

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Bounds of the conversion of one tool's schemas: a $ref cycle is cut
// where it closes (the recursive place accepts any value), deeper nesting
// than maxDepth is cut likewise, and at most maxNodes schemas are written
// per tool, so a document of many shared references cannot make a tool
// definition explode.
const (
	maxDepth = 12
	maxNodes = 2000
)

// converter writes OpenAPI schemas as JSON Schema (2020-12 vocabulary,
// which MCP tool schemas use): OpenAPI 3.0's nullable becomes a "null"
// type, its boolean exclusive bounds numeric ones; $refs are inlined.
type converter struct {
	stack map[*openapi3.Schema]bool // schemas being written: a cycle
	nodes int
}

func newConverter() *converter {
	return &converter{stack: make(map[*openapi3.Schema]bool)}
}

// schema converts r; depth is its nesting level.
func (c *converter) schema(r *openapi3.SchemaRef, depth int) map[string]any {
	if r == nil || r.Value == nil {
		return map[string]any{}
	}
	s := r.Value
	if c.stack[s] || depth > maxDepth || c.nodes >= maxNodes {
		out := map[string]any{}
		if name := refName(r.Ref); name != "" {
			out["description"] = "A " + name + " (recursive; not expanded further)."
		}
		return out
	}
	c.nodes++
	c.stack[s] = true
	defer delete(c.stack, s)

	out := map[string]any{}
	if s.Type != nil && len(*s.Type) > 0 {
		types := make([]any, 0, len(*s.Type)+1)
		for _, t := range *s.Type {
			types = append(types, t)
		}
		if s.Nullable && !s.Type.Includes("null") {
			types = append(types, "null")
		}
		if len(types) == 1 {
			out["type"] = types[0]
		} else {
			out["type"] = types
		}
	}
	set := func(k string, v any, ok bool) {
		if ok {
			out[k] = v
		}
	}
	set("title", s.Title, s.Title != "")
	set("description", s.Description, s.Description != "")
	set("format", s.Format, s.Format != "")
	set("enum", s.Enum, len(s.Enum) > 0)
	set("default", s.Default, s.Default != nil)
	set("const", s.Const, s.Const != nil)
	set("pattern", s.Pattern, s.Pattern != "")
	set("minLength", s.MinLength, s.MinLength > 0)
	if s.MaxLength != nil {
		out["maxLength"] = *s.MaxLength
	}
	set("minItems", s.MinItems, s.MinItems > 0)
	if s.MaxItems != nil {
		out["maxItems"] = *s.MaxItems
	}
	set("uniqueItems", true, s.UniqueItems)
	set("minProperties", s.MinProps, s.MinProps > 0)
	if s.MaxProps != nil {
		out["maxProperties"] = *s.MaxProps
	}
	set("readOnly", true, s.ReadOnly)
	set("writeOnly", true, s.WriteOnly)
	set("deprecated", true, s.Deprecated)
	if s.MultipleOf != nil {
		out["multipleOf"] = *s.MultipleOf
	}
	bound := func(key, exKey string, v *float64, ex openapi3.ExclusiveBound) {
		switch {
		case ex.Value != nil:
			out[exKey] = *ex.Value
			if v != nil {
				out[key] = *v
			}
		case ex.Bool != nil && *ex.Bool && v != nil:
			out[exKey] = *v // 3.0: the bound itself is excluded
		case v != nil:
			out[key] = *v
		}
	}
	bound("minimum", "exclusiveMinimum", s.Min, s.ExclusiveMin)
	bound("maximum", "exclusiveMaximum", s.Max, s.ExclusiveMax)

	if len(s.Properties) > 0 {
		props := make(map[string]any, len(s.Properties))
		for _, k := range sortedKeys(s.Properties) {
			props[k] = c.schema(s.Properties[k], depth+1)
		}
		out["properties"] = props
	}
	set("required", s.Required, len(s.Required) > 0)
	switch ap := s.AdditionalProperties; {
	case ap.Has != nil:
		out["additionalProperties"] = *ap.Has
	case ap.Schema != nil:
		out["additionalProperties"] = c.schema(ap.Schema, depth+1)
	}
	if s.Items != nil {
		out["items"] = c.schema(s.Items, depth+1)
	}
	list := func(key string, refs openapi3.SchemaRefs) {
		if len(refs) == 0 {
			return
		}
		l := make([]any, 0, len(refs))
		for _, r := range refs {
			l = append(l, c.schema(r, depth+1))
		}
		out[key] = l
	}
	list("allOf", s.AllOf)
	list("oneOf", s.OneOf)
	list("anyOf", s.AnyOf)
	list("prefixItems", s.PrefixItems)
	if s.Not != nil {
		out["not"] = c.schema(s.Not, depth+1)
	}
	return out
}

// refName is the last segment of a $ref ("#/components/schemas/Pet": Pet).
func refName(ref string) string {
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		return ref[i+1:]
	}
	return ref
}
