package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// MaxToolName is the longest tool name MCP allows.
const MaxToolName = 128

// BodyArg is the input-schema property that carries an operation's
// request body: the body is never merged with the parameters, so a body
// field can never collide with a parameter's name.
const BodyArg = "body"

// Doc is a parsed document and the tools of its operations. It is never
// changed once built (Select makes another), so any number of goroutines
// and sessions may share one.
type Doc struct {
	t     *openapi3.T
	loc   *url.URL
	tools []*Tool
	byNm  map[string]*Tool
}

// Tool is one operation as an MCP tool. It is immutable once built and
// safe for concurrent use.
type Tool struct {
	Name        string
	Description string
	// InputSchema and OutputSchema are JSON Schema objects; OutputSchema
	// is nil when no 2xx response is JSON. When the response schema is not
	// an object, OutputSchema wraps it as {"result": ...} (MCP output
	// schemas are objects) and Wrapped is set.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Wrapped      bool

	// OperationID is the document's operationId ("" when it has none);
	// Method and Path are as the document writes them.
	OperationID  string
	Method, Path string

	params   []param
	body     *bodySpec
	security []openapi3.SecurityRequirement
}

// param is one parameter and the argument that carries it.
type param struct {
	arg      string // the input-schema property
	name, in string
	required bool
	style    string
	explode  bool
}

// bodySpec is the request body's media type.
type bodySpec struct {
	mediaType string
	required  bool
}

// Methods in the order operations are listed within a path.
var methods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodOptions, http.MethodHead, http.MethodPatch, http.MethodTrace}

func newDoc(t *openapi3.T, loc *url.URL) *Doc {
	d := &Doc{t: t, loc: loc, byNm: make(map[string]*Tool)}
	if t.Paths == nil {
		return d
	}
	paths := t.Paths.Keys()
	slices.Sort(paths) // document order is not kept by the parser: sorted, stable
	for _, p := range paths {
		item := t.Paths.Value(p)
		if item == nil {
			continue
		}
		for _, m := range methods {
			op := item.GetOperation(m)
			if op == nil {
				continue
			}
			tool := newTool(t, p, m, item, op)
			tool.Name = d.uniqueName(tool.Name)
			d.tools = append(d.tools, tool)
			d.byNm[tool.Name] = tool
		}
	}
	return d
}

// uniqueName is name, or name with _2, _3, ... when taken.
func (d *Doc) uniqueName(name string) string {
	if _, taken := d.byNm[name]; !taken {
		return name
	}
	for i := 2; ; i++ {
		suffix := "_" + strconv.Itoa(i)
		n := name
		if len(n)+len(suffix) > MaxToolName {
			n = n[:MaxToolName-len(suffix)]
		}
		if _, taken := d.byNm[n+suffix]; !taken {
			return n + suffix
		}
	}
}

// Tools are the tools of the document's operations, in path then method
// order (after Select, the selected ones).
func (d *Doc) Tools() []*Tool { return d.tools }

// Tool is the tool named name, or nil.
func (d *Doc) Tool(name string) *Tool { return d.byNm[name] }

// Title and Version are the document's info.
func (d *Doc) Title() string {
	if d.t.Info == nil {
		return ""
	}
	return d.t.Info.Title
}

func (d *Doc) Version() string {
	if d.t.Info == nil {
		return ""
	}
	return d.t.Info.Version
}

// Description is the document's info description.
func (d *Doc) Description() string {
	if d.t.Info == nil {
		return ""
	}
	return d.t.Info.Description
}

// BaseURL is the document's first servers entry, its variables set to
// their defaults and resolved against the document's own URL; "" when
// there is none or it is relative to a document read from a file. Where
// requests may go is Base's to say.
func (d *Doc) BaseURL() string {
	if len(d.t.Servers) == 0 || d.t.Servers[0] == nil {
		return ""
	}
	s := d.t.Servers[0]
	raw := s.URL
	for name, v := range s.Variables {
		if v != nil {
			raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if !u.IsAbs() {
		if d.loc == nil {
			return ""
		}
		u = d.loc.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return ""
	}
	return u.String()
}

// ErrNoBase refuses a document that says nowhere requests may go.
var ErrNoBase = errors.New("openapi: no base_url configured and the document has no absolute http(s) servers URL")

// ErrOtherOrigin refuses a fetched document's servers URL on an origin
// other than the document's own.
var ErrOtherOrigin = errors.New("openapi: the document's servers URL is not on the document's own origin")

// Base is where the API's requests go when the server has no base_url:
// the document's first servers entry (BaseURL). A document fetched from a
// URL may name only its own origin (scheme, host and port, a relative URL
// included): it decides where the requests and their credential go, so
// it may send them no further than the place it came from, whatever a
// later fetch of it says, and they pass the address rules its URL passed
// (Dial). A document read from a file is the operator's: any absolute
// http(s) URL.
func (d *Doc) Base() (*url.URL, error) {
	raw := d.BaseURL()
	if raw == "" {
		return nil, ErrNoBase
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, ErrNoBase
	}
	if d.loc != nil && Origin(u) != Origin(d.loc) {
		return nil, fmt.Errorf("%w: %s is not %s; set base_url to send calls there", ErrOtherOrigin, Origin(u), Origin(d.loc))
	}
	return u, nil
}

// Origin is u's scheme, host and port, the port made explicit
// (https://h/ and https://h:443/ are one origin), lower-cased.
func Origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		switch scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// Select is a Doc of the tools whose operation matches include (all,
// when empty) and no pattern of exclude; d is unchanged. A pattern is an
// operationId or "METHOD /path", the path matched with path.Match against
// the document's path template.
func (d *Doc) Select(include, exclude []string) *Doc {
	out := &Doc{t: d.t, loc: d.loc, byNm: make(map[string]*Tool)}
	for _, t := range d.tools {
		if (len(include) == 0 || t.matchesAny(include)) && !t.matchesAny(exclude) {
			out.tools = append(out.tools, t)
			out.byNm[t.Name] = t
		}
	}
	return out
}

func (t *Tool) matchesAny(pats []string) bool {
	for _, p := range pats {
		p = strings.TrimSpace(p)
		method, rest, ok := strings.Cut(p, " ")
		if !ok {
			if t.OperationID != "" && p == t.OperationID {
				return true
			}
			continue
		}
		if !strings.EqualFold(method, t.Method) {
			continue
		}
		if m, err := path.Match(strings.TrimSpace(rest), t.Path); err == nil && m {
			return true
		}
	}
	return false
}

// ToolName is an operation's tool name: its operationId, else method and
// path, with every character outside [A-Za-z0-9_.-] replaced by "_", at
// most MaxToolName characters.
func ToolName(operationID, method, p string) string {
	raw := operationID
	if raw == "" {
		raw = strings.ToLower(method) + "_" + strings.NewReplacer("{", "", "}", "").Replace(strings.Trim(p, "/"))
	}
	var b strings.Builder
	for _, r := range raw {
		if b.Len() >= MaxToolName {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := strings.TrimRight(b.String(), "_")
	if name == "" {
		name = strings.ToLower(method)
	}
	return name
}

// ignoredHeaders are header parameters OpenAPI says to ignore (the
// request's own Accept, Content-Type and Authorization).
var ignoredHeaders = map[string]bool{"Accept": true, "Content-Type": true, "Authorization": true}

func newTool(doc *openapi3.T, p, method string, item *openapi3.PathItem, op *openapi3.Operation) *Tool {
	t := &Tool{
		Name:        ToolName(op.OperationID, method, p),
		OperationID: op.OperationID,
		Method:      method,
		Path:        p,
	}
	t.Description = strings.TrimSpace(op.Summary)
	if d := strings.TrimSpace(op.Description); d != "" && d != t.Description {
		if t.Description != "" {
			t.Description += "\n\n"
		}
		t.Description += d
	}
	if t.Description == "" {
		t.Description = method + " " + p
	}
	t.security = doc.Security
	if op.Security != nil {
		t.security = *op.Security
	}

	conv := newConverter()
	props := map[string]any{}
	var required []string
	// Operation parameters override path-item ones of the same name and
	// location.
	seen := map[string]bool{}
	var all openapi3.Parameters
	for _, list := range []openapi3.Parameters{op.Parameters, item.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			k := pr.Value.In + "\x00" + pr.Value.Name
			if seen[k] {
				continue
			}
			seen[k] = true
			all = append(all, pr)
		}
	}
	// Path parameters first: they keep their own names when a query or
	// header parameter has the same one.
	slices.SortStableFunc(all, func(a, b *openapi3.ParameterRef) int {
		return locRank(a.Value.In) - locRank(b.Value.In)
	})
	for _, pr := range all {
		v := pr.Value
		if v.In == openapi3.ParameterInCookie || (v.In == openapi3.ParameterInHeader && ignoredHeaders[http.CanonicalHeaderKey(v.Name)]) {
			continue
		}
		arg := v.Name
		if _, taken := props[arg]; taken || arg == BodyArg {
			arg = v.In + "_" + v.Name // query "id" beside path "id": query_id
		}
		for n := 2; ; n++ {
			if _, taken := props[arg]; !taken && arg != BodyArg {
				break
			}
			arg = v.In + "_" + v.Name + "_" + strconv.Itoa(n)
		}
		var s map[string]any
		switch {
		case v.Schema != nil:
			s = conv.schema(v.Schema, 0)
		case len(v.Content) > 0:
			// A parameter with content: its first media type's schema,
			// sent as JSON text.
			for _, mt := range sortedKeys(v.Content) {
				if v.Content[mt] != nil && v.Content[mt].Schema != nil {
					s = conv.schema(v.Content[mt].Schema, 0)
					break
				}
			}
		}
		if s == nil {
			s = map[string]any{"type": "string"}
		}
		if v.Description != "" {
			s["description"] = v.Description
		}
		props[arg] = s
		req := v.Required || v.In == openapi3.ParameterInPath
		if req {
			required = append(required, arg)
		}
		style, explode := v.Style, true
		if style == "" {
			style = defaultStyle(v.In)
		}
		if v.Explode != nil {
			explode = *v.Explode
		} else {
			explode = style == openapi3.SerializationForm
		}
		t.params = append(t.params, param{arg: arg, name: v.Name, in: v.In, required: req, style: style, explode: explode})
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		if mt, media := pickMedia(rb.Value.Content, true); media != nil {
			var s map[string]any
			if media.Schema != nil {
				s = conv.schema(media.Schema, 0)
			} else {
				s = map[string]any{}
			}
			if !isJSON(mt) && mt != formMedia {
				s = map[string]any{"type": "string", "description": "The body, sent as " + mt + "."}
			}
			if rb.Value.Description != "" {
				s["description"] = rb.Value.Description
			}
			props[BodyArg] = s
			t.body = &bodySpec{mediaType: mt, required: rb.Value.Required}
			if rb.Value.Required {
				required = append(required, BodyArg)
			}
		}
	}
	in := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		in["required"] = required
	}
	t.InputSchema = mustJSON(in)

	if s := outputSchema(op, conv); s != nil {
		if !isObjectSchema(s) {
			s = map[string]any{"type": "object", "properties": map[string]any{"result": s}}
			t.Wrapped = true
		}
		t.OutputSchema = mustJSON(s)
	}
	return t
}

func locRank(in string) int {
	switch in {
	case openapi3.ParameterInPath:
		return 0
	case openapi3.ParameterInQuery:
		return 1
	}
	return 2
}

func defaultStyle(in string) string {
	switch in {
	case openapi3.ParameterInQuery, openapi3.ParameterInCookie:
		return openapi3.SerializationForm
	}
	return openapi3.SerializationSimple
}

const formMedia = "application/x-www-form-urlencoded"

// pickMedia chooses a content entry: JSON first, then (for a request
// body) a form, then the first in name order.
func pickMedia(c openapi3.Content, body bool) (string, *openapi3.MediaType) {
	keys := sortedKeys(c)
	for _, k := range keys {
		if isJSON(k) && c[k] != nil {
			return k, c[k]
		}
	}
	if body {
		for _, k := range keys {
			if strings.EqualFold(k, formMedia) && c[k] != nil {
				return formMedia, c[k]
			}
		}
	}
	for _, k := range keys {
		if c[k] != nil {
			return k, c[k]
		}
	}
	return "", nil
}

// isJSON reports whether a media type (or range) is JSON.
func isJSON(mt string) bool {
	mt = strings.ToLower(strings.TrimSpace(mt))
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// outputSchema is the schema of the first 2xx JSON response (200 first).
func outputSchema(op *openapi3.Operation, conv *converter) map[string]any {
	if op.Responses == nil {
		return nil
	}
	codes := slices.Sorted(func(yield func(string) bool) {
		for k := range op.Responses.Map() {
			if !yield(k) {
				return
			}
		}
	})
	for _, code := range codes {
		if !strings.HasPrefix(code, "2") {
			continue
		}
		r := op.Responses.Value(code)
		if r == nil || r.Value == nil {
			continue
		}
		for _, k := range sortedKeys(r.Value.Content) {
			if mt := r.Value.Content[k]; isJSON(k) && mt != nil && mt.Schema != nil {
				return conv.schema(mt.Schema, 0)
			}
		}
	}
	return nil
}

func isObjectSchema(s map[string]any) bool {
	switch t := s["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return len(t) == 1 && t[0] == "object"
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Only maps, slices and JSON values from the parser are here.
		return json.RawMessage(`{"type":"object"}`)
	}
	return b
}
