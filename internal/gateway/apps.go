package gateway

// MCP Apps (SEP-1865, extension io.modelcontextprotocol/ui) on the
// gateway's routes. A tool names its view, a ui:// resource of its own
// server, in _meta.ui.resourceUri (older servers: the flat
// _meta["ui/resourceUri"]); _meta.ui.visibility says whether the model,
// the view ("app"), or both may call it.
//
// On a route of several servers, where names are prefixed (names.go), the
// views are namespaced the same way: server a's ui://x is listed, named by
// its tools and read as ui://a<sep>x, and a read of that URI goes to a as
// ui://x. A tool's view URI is always put under the tool's own server, so
// an upstream cannot point a tool at another server's view: whatever it
// writes after ui:// stays in its own namespace, and a view URI of another
// scheme is taken out (there is nothing of that server's to name). View
// templates (ui://x/{id}) are namespaced the same way, and a template that
// could expand into another server's namespace is not listed; a URI in a
// view namespace is claimed by no server's list or template (claimURI),
// and is read, not subscribed to.
//
// A view was written against its own server and calls tools by that
// server's names. On a merged route such an unprefixed name is resolved
// (appToolName) when exactly one server of the route has a tool of that
// name a view may call; more than one is refused with the prefixed
// candidates, never guessed. The name is resolved before the call's
// policy stage looks at it, so policy, budgets, guardrails and audit see
// the real tool.
//
// On a single-server route nothing is renamed: the route is that server.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// flatUIKey is the deprecated flat form of _meta.ui.resourceUri.
const flatUIKey = "ui/resourceUri"

// noMeta reports, cheaply, that raw certainly has no _meta member: the
// bytes _meta are not there in any case, nor any escape that could spell
// them. Most tools have none, and every list of every client asks.
func noMeta(raw []byte) bool {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return false
	}
	// In any case: some decoders match keys without regard to it (no
	// other letters fold to those of "meta").
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], '_')
		if j < 0 {
			return true
		}
		i += j + 1
		if len(raw)-i >= 4 && bytes.EqualFold(raw[i:i+4], []byte("meta")) {
			return false
		}
	}
}

// uiNamespaced is server's view URI uri as a merged route shows it.
func (g *Gateway) uiNamespaced(server, uri string) string {
	return mcpwire.SchemeUI + server + g.sep + strings.TrimPrefix(uri, mcpwire.SchemeUI)
}

// uiOriginal finds the server of rt whose namespace a ui:// URI is in and
// the URI that server knows it by. ok is false when uri is not in any
// server's namespace; ambiguous when it is in more than one (server names
// that are prefixes of each other with the separator between: a and
// a<sep>b), which is refused rather than guessed.
func (g *Gateway) uiOriginal(rt *route, uri string) (server, orig string, ok, ambiguous bool) {
	rest, isUI := strings.CutPrefix(uri, mcpwire.SchemeUI)
	if !rt.prefixed || !isUI {
		return "", "", false, false
	}
	n := 0
	for _, s := range rt.servers {
		if r, found := strings.CutPrefix(rest, s+g.sep); found {
			server, orig = s, mcpwire.SchemeUI+r
			n++
		}
	}
	if n > 1 {
		return "", "", false, true
	}
	return server, orig, n == 1, false
}

// rewriteToolUI puts the view URIs a tool of server names (both forms)
// under server's namespace, for a merged route: a ui:// URI is
// namespaced, anything else is taken out, and a repeated member is left
// once (the value rewritten is the one decoders read: the last). Members
// that spell one of these keys in another case (_META, reſourceUri) are
// taken out: decoders that match keys without regard to case
// (encoding/json's struct fields) would read them. raw is returned as it
// is when it names no view.
func (g *Gateway) rewriteToolUI(server string, raw []byte) []byte {
	if noMeta(raw) {
		return raw
	}
	out, changed := dropFoldVariants(raw, "_meta")
	meta, ok := jsonrpc.Get(out, "_meta")
	if !ok || len(meta) == 0 || meta[0] != '{' {
		if changed {
			return out
		}
		return raw
	}
	fix := func(obj []byte, key string) ([]byte, bool) {
		v, ok := jsonrpc.Get(obj, key)
		if !ok {
			return obj, false
		}
		var uri string
		var fixed []byte
		var err error
		if json.Unmarshal(v, &uri) == nil && strings.HasPrefix(uri, mcpwire.SchemeUI) {
			fixed, err = jsonrpc.Set(obj, key, jsonrpc.String(g.uiNamespaced(server, uri)))
		} else {
			// Not a view of this server's: no namespace to put it in.
			fixed, err = jsonrpc.Delete(obj, key)
		}
		if err != nil {
			return obj, false
		}
		return fixed, true
	}
	meta, metaChanged := dropFoldVariants(meta, "ui")
	var c bool
	if meta, c = dropFoldVariants(meta, flatUIKey); c {
		metaChanged = true
	}
	if ui, ok := jsonrpc.Get(meta, "ui"); ok && len(ui) > 0 && ui[0] == '{' {
		ui, c1 := dropFoldVariants(ui, "resourceUri")
		ui, c2 := dropFoldVariants(ui, "visibility")
		ui, c3 := fix(ui, "resourceUri")
		if c1 || c2 || c3 {
			if m, err := jsonrpc.Set(meta, "ui", ui); err == nil {
				meta, metaChanged = m, true
			}
		}
	}
	if meta, c = fix(meta, flatUIKey); c {
		metaChanged = true
	}
	if metaChanged {
		if o, err := jsonrpc.Set(out, "_meta", meta); err == nil {
			out, changed = o, true
		}
	}
	if !changed {
		return raw
	}
	return out
}

// dropFoldVariants takes out of obj the members whose key is key in
// another case (Unicode case folding, as encoding/json matches struct
// fields); changed says whether there were any.
func dropFoldVariants(obj []byte, key string) (out []byte, changed bool) {
	var variants []string
	_ = jsonrpc.Fields(obj, func(k string, _ []byte) bool {
		if k != key && strings.EqualFold(k, key) {
			variants = append(variants, k)
		}
		return true
	})
	for _, v := range variants {
		if o, err := jsonrpc.Delete(obj, v); err == nil {
			obj, changed = o, true
		}
	}
	return obj, changed
}

// toolUI is what the gateway reads of a tool for MCP Apps: who may call
// it, whether it names a view, and how a merged route lists it.
type toolUI struct {
	model, app, view bool
	listed           []byte // rewriteToolUI's answer; read-only
}

// appsCache keeps the toolUI of each tool seen (by server, separator and
// the tool's bytes), so that lists do not parse the same _meta on every
// request. Bounded: when full it starts over. The zero value is ready.
type appsCache struct {
	mu   sync.Mutex // guards the fields below
	seed maphash.Seed
	m    map[uint64]appsEntry
}

type appsEntry struct {
	server, sep string
	raw         []byte
	ui          toolUI
}

const appsCacheMax = 8192

// toolUI is what apps read of tool raw of server (cached; a tool without
// _meta costs no more than noMeta).
func (g *Gateway) toolUI(server string, raw []byte) toolUI {
	if noMeta(raw) {
		return toolUI{model: true, app: true, listed: raw}
	}
	c := &g.apps
	c.mu.Lock()
	if c.m == nil {
		c.seed = maphash.MakeSeed()
		c.m = map[uint64]appsEntry{}
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(server)
	h.WriteByte(0)
	h.WriteString(g.sep)
	h.WriteByte(0)
	h.Write(raw)
	key := h.Sum64()
	if e, ok := c.m[key]; ok && e.server == server && e.sep == g.sep && bytes.Equal(e.raw, raw) {
		c.mu.Unlock()
		return e.ui
	}
	c.mu.Unlock()
	var ui toolUI
	ui.model, ui.app = visibility(raw)
	ui.view = hasView(raw)
	ui.listed = g.rewriteToolUI(server, raw)
	c.mu.Lock()
	if len(c.m) >= appsCacheMax {
		c.m = map[uint64]appsEntry{}
	}
	c.m[key] = appsEntry{server: server, sep: g.sep, raw: raw, ui: ui}
	c.mu.Unlock()
	return ui
}

// visibility reads a tool's _meta.ui.visibility: whether the model and a
// view may call it. Absent, it is both (the extension's default); a value
// that is not an array of strings gives the view nothing (a view's call
// is the one the gateway resolves by guess-free rules) and leaves the
// model's list as it was.
func visibility(raw []byte) (model, app bool) {
	if noMeta(raw) {
		return true, true
	}
	v, ok := jsonrpc.GetPath(raw, "_meta", "ui", "visibility")
	if !ok || string(v) == "null" {
		return true, true
	}
	var who []string
	if json.Unmarshal(v, &who) != nil {
		return true, false
	}
	return slices.Contains(who, "model"), slices.Contains(who, "app")
}

// hasView reports whether a tool names a ui:// view (either form).
func hasView(raw []byte) bool {
	if noMeta(raw) {
		return false
	}
	isView := func(v []byte, ok bool) bool {
		var uri string
		return ok && json.Unmarshal(v, &uri) == nil && strings.HasPrefix(uri, mcpwire.SchemeUI)
	}
	return isView(jsonrpc.GetPath(raw, "_meta", "ui", "resourceUri")) || isView(jsonrpc.GetPath(raw, "_meta", flatUIKey))
}

// modelTools leaves out of a tools list the tools only a view may call,
// for a client that runs no views (it did not declare the extension): such
// a client is the model's side. A client that runs views gets them all,
// as the extension asks of its hosts: it keeps them from its model and
// checks the visibility of its views' calls itself.
func (g *Gateway) modelTools(sc *scope, items []catalog.Item) []catalog.Item {
	if sc.caps.UI {
		return items
	}
	var out []catalog.Item
	for i, it := range items {
		if it.Server == "" || g.toolUI(it.Server, it.Raw).model {
			if out != nil {
				out = append(out, it)
			}
			continue
		}
		if out == nil {
			out = append(make([]catalog.Item, 0, len(items)), items[:i]...)
		}
	}
	if out == nil {
		return items
	}
	return out
}

// appToolName is the name a merged route exposes the tool a view calls as
// name (its own server's name for it), for a client that runs views: the
// tool of that upstream name that a view may call, when exactly one
// server of the route that serves views has one. Tools the caller may
// not use count here too, so the answer never depends on the caller's
// policy: the caller's policy then refuses the resolved name as it
// refuses any name it may not see. ok is false when no server has such a
// tool; e is the refusal when more than one does, listing the prefixed
// names the caller may use (never those it may not: no existence leak),
// or when a server's list cannot be read (it might have one too: the
// name is not resolved on the others' word).
func (g *Gateway) appToolName(ctx context.Context, sc *scope, name string) (exposed string, ok bool, e *jsonrpc.Error) {
	rt := sc.rt
	if !rt.prefixed || !sc.caps.UI || name == "" {
		return "", false, nil
	}
	var found []string
	for _, server := range rt.servers {
		it, has, err := g.cat.Lookup(ctx, server, catalog.Tools, name)
		if err != nil {
			return "", false, errInvalidParams("Cannot resolve the tool name %s: the tools of server %s could not be listed; call it by its prefixed name", name, server)
		}
		if !has || !g.toolUI(server, it.Raw).app {
			continue
		}
		items, err := g.cat.List(ctx, server, catalog.Tools)
		if err != nil {
			return "", false, errInvalidParams("Cannot resolve the tool name %s: the tools of server %s could not be listed; call it by its prefixed name", name, server)
		}
		if !slices.ContainsFunc(items, func(it catalog.Item) bool { return g.toolUI(server, it.Raw).view }) {
			continue // no view of this server's to make the call
		}
		found = append(found, server)
	}
	switch len(found) {
	case 0:
		return "", false, nil
	case 1:
		return g.exposed(rt, catalog.Tools, found[0], name), true, nil
	}
	var names []string
	for _, server := range found {
		if rt.allows(catalog.Tools, server, name) {
			names = append(names, g.exposed(rt, catalog.Tools, server, name))
		}
	}
	data, _ := json.Marshal(map[string]any{"name": name, "candidates": names})
	return "", false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: data,
		Message: fmt.Sprintf("Ambiguous tool: %s is a tool of more than one server on this route; call it by its prefixed name (%s)", name, strings.Join(names, ", "))}
}

// readResource reads a resource: on a merged route a namespaced ui:// URI
// goes to its server as the URI that server knows, and the view URIs of
// the answer are namespaced again (their _meta, the view's CSP,
// permissions and domain, as the server sent it); any other URI is
// routed as before (claimURI).
func (g *Gateway) readResource(ctx context.Context, sc *scope, m *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	uri, _ := jsonrpc.GetString(m.Params, "uri")
	server, orig, ok, ambiguous := g.uiOriginal(sc.rt, uri)
	if ambiguous {
		return nil, errAmbiguousURI(uri)
	}
	if !ok {
		return g.resourceCall(ctx, sc, m)
	}
	if !sc.rt.allows(catalog.Resources, server, orig) {
		return nil, resourceNotFound(uri)
	}
	params, err := jsonrpc.Set(m.Params, "uri", jsonrpc.String(orig))
	if err != nil {
		return nil, errInvalidParams("Invalid params")
	}
	res, e := g.forward(ctx, sc, server, m.Method, params)
	if e != nil {
		return nil, e
	}
	return g.namespaceContents(server, res), nil
}

// namespaceContents puts the ui:// URIs of a resources/read result of
// server under its namespace; other members are kept byte for byte.
func (g *Gateway) namespaceContents(server string, res json.RawMessage) json.RawMessage {
	contents, ok := jsonrpc.Get(res, "contents")
	if !ok || len(contents) == 0 || contents[0] != '[' {
		return res
	}
	out := []byte{'['}
	changed := false
	err := jsonrpc.Elements(contents, func(el []byte) bool {
		if len(out) > 1 {
			out = append(out, ',')
		}
		if u, ok := jsonrpc.GetString(el, "uri"); ok && strings.HasPrefix(u, mcpwire.SchemeUI) {
			if r, err := jsonrpc.Set(el, "uri", jsonrpc.String(g.uiNamespaced(server, u))); err == nil {
				el, changed = r, true
			}
		}
		out = append(out, el...)
		return true
	})
	if err != nil || !changed {
		return res
	}
	out = append(out, ']')
	if r, err := jsonrpc.Set(res, "contents", out); err == nil {
		return r
	}
	return res
}

// View templates. A ui:// resource template (resources/templates/list,
// uriTemplate "ui://{x}") names views too: a host expands it and reads
// the URI. On a merged route such a template is put in its server's
// namespace like a view (ui://a<sep>{x}): only the literal ui:// that
// begins it is touched, so every URI it expands to begins ui://a<sep> and
// a read of one goes to a with the URI a's own template gives
// (uiOriginal), never to another server. A template whose literal
// beginning could still begin a ui:// URI but is not that literal
// ("{+u}", "u{x}", "ui:{/x,y}", "UI://{x}") could expand into another
// server's namespace whatever the gateway writes: it is left out of a
// merged route's list. Its server still serves the URIs it matches
// (claimURI); only the list, which would offer another's views under
// this server's name, leaves it out.

// templateKind says how a merged route lists a template of uriTemplate
// tmpl: namespaced (it begins with the literal ui://), left out (its
// literal beginning, the text before its first expression, is empty or
// could begin a ui:// URI in some case), or as it is.
func templateKind(tmpl string) (namespaced, leftOut bool) {
	if strings.HasPrefix(tmpl, mcpwire.SchemeUI) {
		return true, false
	}
	head, _, _ := strings.Cut(tmpl, "{")
	if len(head) < len(mcpwire.SchemeUI) {
		// A proper prefix of ui:// ("" included): an expression can
		// write the rest.
		return false, strings.EqualFold(head, mcpwire.SchemeUI[:len(head)]) && strings.Contains(tmpl, "{")
	}
	// ui:// in another case; or ui: followed by an expression or a
	// slash an expression completes (ui:{/x,y}, ui:/{+p}).
	return false, strings.EqualFold(head[:3], "ui:")
}

// viewTemplates leaves out of a merged route's templates list (before
// paging, so that pages stay whole) the templates templateKind leaves out.
func (g *Gateway) viewTemplates(rt *route, items []catalog.Item) []catalog.Item {
	if !rt.prefixed {
		return items
	}
	var out []catalog.Item
	for i, it := range items {
		if _, leftOut := templateKind(it.Key); !leftOut {
			if out != nil {
				out = append(out, it)
			}
			continue
		}
		if out == nil {
			out = append(make([]catalog.Item, 0, len(items)), items[:i]...)
		}
	}
	if out == nil {
		return items
	}
	return out
}

// listedTemplate is template raw of server (its uriTemplate tmpl, as the
// catalog read it: the last member) as a merged route lists it: a view
// template in server's namespace, its other members (name, mimeType,
// _meta) byte for byte. Members that spell uriTemplate in another case
// are taken out, so that a decoder matching keys without regard to case
// reads the namespaced one; every copy but the one written is taken out
// too.
func (g *Gateway) listedTemplate(server, tmpl string, raw []byte) []byte {
	namespaced, _ := templateKind(tmpl)
	if !namespaced {
		if out, changed := dropFoldVariants(raw, "uriTemplate"); changed {
			return out
		}
		return raw
	}
	out, _ := dropFoldVariants(raw, "uriTemplate")
	if r, err := jsonrpc.Set(out, "uriTemplate", jsonrpc.String(g.uiNamespaced(server, tmpl))); err == nil {
		return r
	}
	return raw
}

// inViewNamespace reports whether uri is, on rt, in a server's view
// namespace (or in more than one: ambiguous). Such a URI is the
// gateway's name for a view, not any upstream's: it is read through
// uiOriginal, and no server claims it by its list or templates (a
// template ui://{x} of one server matches every other server's namespaced
// views).
func (g *Gateway) inViewNamespace(rt *route, uri string) bool {
	_, _, ok, ambiguous := g.uiOriginal(rt, uri)
	return ok || ambiguous
}

// errViewSubscription refuses a subscription to a view URI of a merged
// route.
func errViewSubscription(uri string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: data,
		Message: "Invalid params: an MCP Apps view of a route of several servers is read, not subscribed to (use the server's own route to watch it)"}
}
