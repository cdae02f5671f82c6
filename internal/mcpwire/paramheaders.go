package mcpwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// Mcp-Param-{Name} headers (2026-07-28, basic/transports/streamable-http.md
// "Custom Headers from Tool Parameters"): a tool's inputSchema may mark
// primitive properties with "x-mcp-header": "{Name}"; a client calling it
// over HTTP mirrors each such argument into a header, and a server checks
// the headers against the body, so that a load balancer routing on the
// header and the server executing the body agree.

// ParamHeader is one x-mcp-header annotation of a tool's inputSchema.
type ParamHeader struct {
	// Name is the {Name} of Mcp-Param-{Name}, as the schema spells it.
	Name string
	// Path is the chain of property names leading from the arguments
	// object to the annotated value.
	Path []string
}

// Header is the HTTP header name the annotation stands for.
func (p ParamHeader) Header() string { return HeaderParamPrefix + p.Name }

const annotationKey = "x-mcp-header"

// maxSafeInteger bounds the integers a header may carry: the ones a
// JavaScript number holds exactly.
const maxSafeInteger = 1<<53 - 1

// schemaDataKeywords hold instances, not schemas: an object inside them is
// a value, whatever keys it has.
var schemaDataKeywords = map[string]bool{"default": true, "const": true, "enum": true, "examples": true}

// ToolParamHeaders reads the x-mcp-header annotations of a tool as listed
// (the object with name and inputSchema). It returns nil, nil for a tool
// without annotations, and an error naming the property and the broken
// constraint for an invalid one (streamable-http.md "Schema Extension"): a
// client on HTTP must then leave the tool out of its list.
func ToolParamHeaders(tool []byte) ([]ParamHeader, error) {
	if !mayAnnotate(tool) {
		return nil, nil
	}
	schema, ok := jsonrpc.Get(tool, "inputSchema")
	if !ok {
		return nil, nil
	}
	return ParamHeadersOf(schema)
}

// mayAnnotate is the fast path: most tools carry no annotation, and their
// schemas need not be decoded. A \u escape could spell the key, so its
// presence means "look".
func mayAnnotate(b []byte) bool {
	return bytes.Contains(b, []byte(annotationKey)) || bytes.Contains(b, []byte(`\u`))
}

// ParamHeadersOf reads the x-mcp-header annotations of an inputSchema,
// sorted by header name.
func ParamHeadersOf(schema []byte) ([]ParamHeader, error) {
	if !mayAnnotate(schema) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("inputSchema is not valid JSON: %w", err)
	}
	w := &annotationWalk{seen: map[string]string{}}
	if err := w.walk(root, nil, true); err != nil {
		return nil, err
	}
	sort.Slice(w.out, func(i, j int) bool { return w.out[i].Name < w.out[j].Name })
	return w.out, nil
}

type annotationWalk struct {
	out  []ParamHeader
	seen map[string]string // lower-cased name -> property path
}

// walk visits a schema node. reachable: the node is the root or reached
// from it through "properties" keys only, where an annotation is allowed.
func (w *annotationWalk) walk(node any, path []string, reachable bool) error {
	switch n := node.(type) {
	case []any:
		for _, el := range n {
			if err := w.walk(el, path, false); err != nil {
				return err
			}
		}
	case map[string]any:
		if v, ok := n[annotationKey]; ok {
			if err := w.annotation(n, v, path, reachable); err != nil {
				return err
			}
		}
		// Map order is random; walk keys sorted so that the first error
		// reported for a schema is always the same one.
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := n[k]
			switch {
			case k == "properties":
				props, ok := v.(map[string]any)
				if !ok {
					continue
				}
				names := make([]string, 0, len(props))
				for name := range props {
					names = append(names, name)
				}
				sort.Strings(names)
				for _, name := range names {
					if err := w.walk(props[name], append(path[:len(path):len(path)], name), reachable); err != nil {
						return err
					}
				}
			case k == annotationKey || schemaDataKeywords[k]:
			default:
				if err := w.walk(v, path, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (w *annotationWalk) annotation(prop map[string]any, v any, path []string, reachable bool) error {
	where := "the schema root"
	if len(path) > 0 {
		where = "property " + strconv.Quote(strings.Join(path, "."))
	}
	if !reachable || len(path) == 0 {
		return fmt.Errorf("%s: x-mcp-header is only allowed on a property reached through \"properties\" alone", where)
	}
	name, ok := v.(string)
	if !ok || name == "" {
		return fmt.Errorf("%s: x-mcp-header must be a non-empty string", where)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%s: x-mcp-header %q is not an HTTP token (invalid character %q)", where, name, name[i])
		}
	}
	switch t, _ := prop["type"].(string); t {
	case "string", "integer", "boolean":
	default:
		return fmt.Errorf("%s: x-mcp-header needs type string, integer or boolean, not %s", where, describeType(prop["type"]))
	}
	lower := strings.ToLower(name)
	if other, dup := w.seen[lower]; dup {
		return fmt.Errorf("%s: x-mcp-header %q repeats the one of property %q (names are case-insensitive)", where, name, other)
	}
	w.seen[lower] = strings.Join(path, ".")
	w.out = append(w.out, ParamHeader{Name: name, Path: append([]string(nil), path...)})
	return nil
}

func describeType(t any) string {
	if t == nil {
		return "none"
	}
	b, _ := json.Marshal(t)
	return string(b)
}

// IsToken reports whether s is an RFC 9110 token (a valid header name).
func IsToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// argumentAt returns the JSON value at path inside arguments; ok is false
// when there is none or it is null (the header is then omitted).
func argumentAt(arguments []byte, path []string) (json.RawMessage, bool) {
	if len(arguments) == 0 {
		return nil, false
	}
	v, ok := jsonrpc.GetPath(arguments, path...)
	if !ok || len(v) == 0 || string(v) == "null" {
		return nil, false
	}
	return v, true
}

// primitiveText is the header text of a primitive JSON value: a string as
// it is, an integer in decimal, a boolean as true or false. ok is false
// for anything else (objects, arrays, fractions, integers beyond 2^53-1).
func primitiveText(v json.RawMessage) (string, bool) {
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		switch string(v) {
		case "true", "false":
			return string(v), true
		}
		return "", false
	case '{', '[':
		return "", false
	}
	n, ok := safeInteger(string(v))
	if !ok {
		return "", false
	}
	return strconv.FormatInt(n, 10), true
}

// safeInteger reads a JSON number (or header text) that is an integer
// within the safe range, in any spelling: 42, 42.0, 4.2e1.
func safeInteger(s string) (int64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// SetParamHeaders sets on h the Mcp-Param-* header of every annotation
// whose argument is present and primitive, encoded for a header.
func SetParamHeaders(h http.Header, headers []ParamHeader, arguments []byte) {
	for _, p := range headers {
		v, ok := argumentAt(arguments, p.Path)
		if !ok {
			continue
		}
		if text, ok := primitiveText(v); ok {
			h.Set(p.Header(), EncodeHeaderValue(text))
		}
	}
}

// CheckParamHeaders checks the Mcp-Param-* headers of a tools/call against
// its arguments (streamable-http.md "Server Behavior for Custom Headers"):
// a present primitive argument needs its header, decoded equal to it
// (integers compared as numbers); an absent or null one must have none. The
// error is a HeaderMismatch (-32020, HTTP 400) that names the header and
// the argument, never their values: arguments stay out of errors a proxy
// may log.
func CheckParamHeaders(h http.Header, headers []ParamHeader, arguments []byte) *jsonrpc.Error {
	for _, p := range headers {
		name := p.Header()
		arg := strconv.Quote(strings.Join(p.Path, "."))
		vals := h.Values(name)
		v, present := argumentAt(arguments, p.Path)
		if len(vals) > 1 {
			return HeaderMismatch(name + " header is repeated")
		}
		if !present {
			if len(vals) == 1 {
				return HeaderMismatch(name + " header is present but argument " + arg + " is absent or null")
			}
			continue
		}
		want, primitive := primitiveText(v)
		if !primitive {
			if len(vals) == 1 {
				return HeaderMismatch(name + " header is present but argument " + arg + " is not a string, integer or boolean")
			}
			continue
		}
		if len(vals) == 0 {
			return HeaderMismatch("missing " + name + " header for argument " + arg)
		}
		got, err := DecodeHeaderValue(vals[0])
		if err != nil {
			return HeaderMismatch(name + " header value " + err.Error())
		}
		if v[0] != '"' && v[0] != 't' && v[0] != 'f' {
			n, ok := safeInteger(got)
			want, _ := safeInteger(want)
			if !ok || n != want {
				return HeaderMismatch(name + " header value does not match argument " + arg)
			}
			continue
		}
		if got != want {
			return HeaderMismatch(name + " header value does not match argument " + arg)
		}
	}
	return nil
}
