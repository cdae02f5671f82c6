// Package catalog owns the gateway's cached view of what each upstream
// offers: its tools, prompts, resources and resource templates, fetched with
// pagination, cached per upstream, and invalidated by list_changed
// notifications or a new upstream session. It also answers the lookups the
// gateway routes by: a tool or prompt by upstream name, a resource URI to
// the server that serves it.
//
// Items stay raw JSON: the catalog reads only the name (or uri /
// uriTemplate) of each item and never rewrites anything; namespacing is the
// gateway's job. It does not know callers or policy.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Kind is one of the four listable collections.
type Kind int

const (
	Tools Kind = iota
	Prompts
	Resources
	Templates
	numKinds
)

var kindInfo = [numKinds]struct {
	method, field, key string
}{
	Tools:     {mcpwire.MethodToolsList, "tools", "name"},
	Prompts:   {mcpwire.MethodPromptsList, "prompts", "name"},
	Resources: {mcpwire.MethodResourcesList, "resources", "uri"},
	Templates: {mcpwire.MethodResourceTemplates, "resourceTemplates", "uriTemplate"},
}

func (k Kind) String() string { return kindInfo[k].field }

// Field is the result field that holds the list ("tools", ...).
func (k Kind) Field() string { return kindInfo[k].field }

// Item is one entry of an upstream list.
type Item struct {
	Server string
	Key    string          // name for tools/prompts, uri or uriTemplate for resources
	Raw    json.RawMessage // the item exactly as the upstream sent it
	// ParamHeaders are a tool's x-mcp-header annotations (2026-07-28):
	// which arguments travel as Mcp-Param-* headers too. nil for other
	// kinds, for tools without any, and for an handshake-era upstream's tool
	// whose annotations are invalid (kept, as that era knows no such rule).
	ParamHeaders []mcpwire.ParamHeader
}

// Sessions gives the catalog sessions of an upstream for the caller of a
// context (upstream.Manager implements it).
type Sessions interface {
	// Acquire returns a session for one walk and a function to call when
	// the walk is over.
	Acquire(ctx context.Context, server string) (upstream.Session, func(), error)
	// CredentialKey identifies the caller's own credentials for server,
	// "" when every caller reaches server with the same ones: lists are
	// cached per credential (C8.4), so callers whose upstream credentials
	// differ never share a list.
	CredentialKey(ctx context.Context, server string) string
}

// Reviewer decides which items of a list just fetched are served: tool
// integrity (internal/integrity) pins definitions and holds the changed
// ones. It is called once per fetch (first connect, list_changed, a new
// upstream session, a restart, a reload, a TTL expiry), with the list
// sorted by key, and returns the items to serve (a subset, same order).
type Reviewer interface {
	Review(ctx context.Context, server string, k Kind, items []Item) []Item
}

// DefaultPageCap bounds one pagination walk (C8.3).
const DefaultPageCap = 100

// DefaultTTL is how long a list is trusted without a list_changed
// notification: upstreams that never send one still get their changes
// picked up.
const DefaultTTL = 5 * time.Minute

// DefaultWalkTimeout bounds one pagination walk (C8.3): on expiry the
// request in flight is cancelled and the walk is incomplete.
const DefaultWalkTimeout = 30 * time.Second

// ErrIncomplete reports a pagination walk that did not finish cleanly.
var ErrIncomplete = errors.New("incomplete list walk")

// Catalog caches upstream lists. Safe for concurrent use.
type Catalog struct {
	sessions Sessions
	log      *slog.Logger
	pageCap  int
	walk     time.Duration
	ttl      time.Duration
	now      func() time.Time
	review   Reviewer // nil: every item is served

	// mu guards entries and every list's fields. Every call of every
	// caller reads its server's list (get): a fresh one is found under
	// the read lock, so those reads never queue behind one another.
	mu      sync.RWMutex
	entries map[string]*[numKinds]*list
}

type list struct {
	// ttl is how long the upstream said the list may be reused (ttlMs of
	// a 2026-07-28 upstream); 0: the catalog's own TTL.
	ttl     time.Duration
	gen     uint64
	loaded  bool
	fetched time.Time
	items   []Item
	byKey   map[string]int
	tmpl    []*regexp.Regexp // Templates only, parallel to items
	loading chan struct{}
	err     error
}

// New returns a catalog reading through sessions.
func New(sessions Sessions, log *slog.Logger) *Catalog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Catalog{sessions: sessions, log: log, pageCap: DefaultPageCap, walk: DefaultWalkTimeout, ttl: DefaultTTL, now: time.Now, entries: map[string]*[numKinds]*list{}}
}

// SetTTL changes how long lists are trusted (<= 0: DefaultTTL). Call it
// before use.
func (c *Catalog) SetTTL(d time.Duration) {
	if d <= 0 {
		d = DefaultTTL
	}
	c.ttl = d
}

// SetReviewer makes r decide which items of each list fetched from now on
// are served. Call it before use.
func (c *Catalog) SetReviewer(r Reviewer) { c.review = r }

// key names the lists of server as seen with ctx's credentials.
func (c *Catalog) key(ctx context.Context, server string) string {
	if ck := c.sessions.CredentialKey(ctx, server); ck != "" {
		return server + "\x00" + ck
	}
	return server
}

func (c *Catalog) slot(key string, k Kind) *list {
	e := c.entries[key]
	if e == nil {
		e = &[numKinds]*list{}
		c.entries[key] = e
	}
	if e[k] == nil {
		e[k] = &list{}
	}
	return e[k]
}

// Invalidate drops the cached lists of one kind for server, for every
// credential; the next read fetches them again.
func (c *Catalog) Invalidate(server string, k Kind) {
	prefix := server + "\x00"
	c.mu.Lock()
	for key, e := range c.entries {
		if (key == server || strings.HasPrefix(key, prefix)) && e[k] != nil {
			e[k].gen++
			e[k].loaded = false
		}
	}
	c.mu.Unlock()
}

// InvalidateServer drops every cached list of server.
func (c *Catalog) InvalidateServer(server string) {
	for k := Kind(0); k < numKinds; k++ {
		c.Invalidate(server, k)
	}
}

// List returns server's items of kind k sorted by key, fetching them when
// not cached. Concurrent callers share one fetch.
func (c *Catalog) List(ctx context.Context, server string, k Kind) ([]Item, error) {
	l, err := c.get(ctx, server, k)
	if err != nil {
		return nil, err
	}
	return l.items, nil
}

// Lookup finds the item of kind k with the given key (name or uri).
func (c *Catalog) Lookup(ctx context.Context, server string, k Kind, key string) (Item, bool, error) {
	l, err := c.get(ctx, server, k)
	if err != nil {
		return Item{}, false, err
	}
	i, ok := l.byKey[key]
	if !ok {
		return Item{}, false, nil
	}
	return l.items[i], true, nil
}

// missRefetchAge: a name missing from a list at least this old makes the
// list be fetched again once (a tool added a moment ago, before its
// list_changed arrived); younger lists are trusted, which bounds the
// refetches unknown names can cause.
const missRefetchAge = 2 * time.Second

// LookupOrRefresh is Lookup, except that a key missing from a list older
// than two seconds makes the list be fetched again before the answer.
func (c *Catalog) LookupOrRefresh(ctx context.Context, server string, k Kind, key string) (Item, bool, error) {
	it, found, err := c.Lookup(ctx, server, k, key)
	if err != nil || found {
		return it, found, err
	}
	c.mu.Lock()
	l := c.slot(c.key(ctx, server), k)
	stale := l.loaded && c.now().Sub(l.fetched) >= missRefetchAge
	if stale {
		l.gen++
		l.loaded = false
	}
	c.mu.Unlock()
	if !stale {
		return it, false, nil
	}
	return c.Lookup(ctx, server, k, key)
}

// MatchTemplate reports whether uri matches one of server's resource
// templates.
func (c *Catalog) MatchTemplate(ctx context.Context, server, uri string) (bool, error) {
	l, err := c.get(ctx, server, Templates)
	if err != nil {
		return false, err
	}
	for _, re := range l.tmpl {
		if re != nil && re.MatchString(uri) {
			return true, nil
		}
	}
	return false, nil
}

func (c *Catalog) get(ctx context.Context, server string, k Kind) (*list, error) {
	key := c.key(ctx, server)
	now := c.now()
	c.mu.RLock()
	if e := c.entries[key]; e != nil {
		if l := e[k]; l != nil && l.fresh(now, c.ttl) {
			c.mu.RUnlock()
			return l, nil
		}
	}
	c.mu.RUnlock()
	for {
		c.mu.Lock()
		l := c.slot(key, k)
		if l.fresh(c.now(), c.ttl) {
			c.mu.Unlock()
			return l, nil
		}
		if ch := l.loading; ch != nil {
			c.mu.Unlock()
			select {
			case <-ch:
				c.mu.Lock()
				err := l.err
				c.mu.Unlock()
				if err != nil {
					return nil, err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		l.loading = ch
		gen := l.gen
		c.mu.Unlock()

		// The fetch is shared, so it must not die with the first caller;
		// it has its own deadline instead.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.walk)
		items, upTTL, err := c.fetch(wctx, server, k)
		if err == nil && c.review != nil {
			items = c.review.Review(wctx, server, k, items)
		}
		cancel()
		c.mu.Lock()
		l.loading = nil
		l.err = err
		if err == nil {
			fresh := &list{gen: l.gen, items: items, byKey: make(map[string]int, len(items)), loaded: l.gen == gen, fetched: c.now(), ttl: upTTL}
			for i, it := range items {
				fresh.byKey[it.Key] = i
			}
			if k == Templates {
				fresh.tmpl = make([]*regexp.Regexp, len(items))
				for i, it := range items {
					fresh.tmpl[i] = templateRegexp(it.Key)
				}
			}
			c.entries[key][k] = fresh
			l = fresh
		}
		close(ch)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

func hasCap(caps mcpwire.ServerCaps, k Kind) bool {
	switch k {
	case Tools:
		return caps.Tools
	case Prompts:
		return caps.Prompts
	default:
		return caps.Resources
	}
}

// minListTTL is the shortest reuse the catalog grants an upstream's
// ttlMs: 0 ("do not reuse") would make every call of every client refetch
// the list, which the upstream's list_changed notifications make
// unnecessary.
const minListTTL = time.Second

// fetch walks the upstream's pages (C8.1, C8.3); ttl is the smallest
// ttlMs of the pages (0: none given).
func (c *Catalog) fetch(ctx context.Context, server string, k Kind) ([]Item, time.Duration, error) {
	var ttl time.Duration
	// One session per walk (C8.3): a per_call server's is ended after it.
	sess, release, err := c.sessions.Acquire(ctx, server)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	if !hasCap(sess.Info().Caps, k) {
		return nil, 0, nil
	}
	info := kindInfo[k]
	// A 2026-07-28 upstream's tool with an invalid x-mcp-header is left
	// out, as its HTTP clients must (streamable-http.md "Schema
	// Extension"); one tool's bad schema does not cost the others.
	stateless := mcpwire.IsStatelessRevision(sess.Info().ProtocolVersion)
	var items []Item
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page >= c.pageCap {
			return nil, 0, fmt.Errorf("list %s of %s: %w: more than %d pages", info.field, server, ErrIncomplete, c.pageCap)
		}
		var params json.RawMessage
		if cursor != "" {
			params = append(append([]byte(`{"cursor":`), jsonrpc.String(cursor)...), '}')
		}
		res, err := sess.Call(ctx, info.method, params)
		if err != nil {
			var rpcErr *jsonrpc.Error
			if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
				c.log.Debug("upstream does not implement list", "server", server, "method", info.method, "message", rpcErr.Message)
				return nil, 0, nil
			}
			return nil, 0, fmt.Errorf("list %s of %s: %w", info.field, server, err)
		}
		arr, ok := jsonrpc.Get(res, info.field)
		if !ok || len(arr) == 0 || arr[0] != '[' {
			if string(arr) == "null" {
				arr = []byte("[]")
			} else {
				return nil, 0, &upstream.Error{Server: server, Kind: upstream.KindInvalidResponse,
					Err: fmt.Errorf("invalid MCP response: %s result has no %q array", info.method, info.field)}
			}
		}
		var bad error
		err = jsonrpc.Elements(arr, func(el []byte) bool {
			key, ok := jsonrpc.GetString(el, info.key)
			if !ok || key == "" {
				bad = fmt.Errorf("invalid MCP response: %s item without %q", info.method, info.key)
				return false
			}
			it := Item{Server: server, Key: key, Raw: json.RawMessage(el)}
			if k == Tools {
				hs, err := mcpwire.ToolParamHeaders(el)
				if err != nil && stateless {
					c.log.Warn("upstream tool left out: invalid x-mcp-header", "server", server, "tool", key, "reason", err)
					return true
				}
				it.ParamHeaders = hs
			}
			items = append(items, it)
			return true
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			return nil, 0, &upstream.Error{Server: server, Kind: upstream.KindInvalidResponse, Err: err}
		}
		if v, ok := jsonrpc.Get(res, "ttlMs"); ok {
			if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil && ms >= 0 {
				d := max(time.Duration(ms)*time.Millisecond, minListTTL)
				if ttl == 0 || d < ttl {
					ttl = d
				}
			}
		}
		next, _ := jsonrpc.GetString(res, "nextCursor")
		if next == "" {
			break
		}
		if seen[next] {
			return nil, 0, fmt.Errorf("list %s of %s: %w: repeated cursor", info.field, server, ErrIncomplete)
		}
		seen[next] = true
		cursor = next
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].Key < items[j].Key })
	// Duplicate keys from one upstream: keep the first, say so.
	out := items[:0]
	for i, it := range items {
		if i > 0 && it.Key == items[i-1].Key {
			c.log.Warn("upstream lists a duplicate item; keeping the first", "server", server, "kind", info.field, "key", it.Key)
			continue
		}
		out = append(out, it)
	}
	return out, ttl, nil
}

// templateRegexp turns an RFC 6570 URI template into a regexp that matches
// the URIs it can expand to. Simple expressions match one path segment;
// reserved and multi-segment operators ({+x}, {/x}, {?x}, ...) match more.
func templateRegexp(tmpl string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for len(tmpl) > 0 {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(tmpl))
			break
		}
		b.WriteString(regexp.QuoteMeta(tmpl[:i]))
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(regexp.QuoteMeta(tmpl[i:]))
			break
		}
		expr := tmpl[i+1 : i+j]
		switch {
		case strings.HasPrefix(expr, "+"), strings.HasPrefix(expr, "#"):
			b.WriteString(`.*`)
		case strings.HasPrefix(expr, "/"), strings.HasPrefix(expr, "?"), strings.HasPrefix(expr, "&"),
			strings.HasPrefix(expr, ";"), strings.HasPrefix(expr, "."):
			b.WriteString(`.*`)
		default:
			b.WriteString(`[^/?#]*`)
		}
		tmpl = tmpl[i+j+1:]
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil
	}
	return re
}

// Size is the number of cached items of kind k for server (with the
// server's own credentials), without fetching; ok is false when no list
// is cached.
func (c *Catalog) Size(server string, k Kind) (n int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[server]
	if e == nil || e[k] == nil || !e[k].loaded {
		return 0, false
	}
	return len(e[k].items), true
}

// Remaining is how much longer the cached list of kind k for server (with
// the server's own credentials) will be trusted; 0 when none is cached.
func (c *Catalog) Remaining(server string, k Kind) time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.entries[server]
	if e == nil || e[k] == nil || !e[k].loaded {
		return 0
	}
	return max(0, c.ttl-c.now().Sub(e[k].fetched))
}

// fresh reports whether the list is loaded and may still be reused at now.
func (l *list) fresh(now time.Time, def time.Duration) bool {
	return l.loaded && now.Sub(l.fetched) < l.trust(def)
}

// trust is how long the list may be reused: the catalog's TTL, or the
// upstream's shorter one.
func (l *list) trust(def time.Duration) time.Duration {
	if l.ttl > 0 && l.ttl < def {
		return l.ttl
	}
	return def
}
