package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// fakeSession is an upstream.Session whose calls are answered by a function.
type fakeSession struct {
	rev   string // the revision it speaks ("" = an handshake-era one)
	caps  mcpwire.ServerCaps
	calls atomic.Int64
	call  func(method string, params json.RawMessage) (json.RawMessage, error)
}

func (f *fakeSession) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	f.calls.Add(1)
	return f.call(method, params)
}
func (f *fakeSession) Notify(context.Context, string, json.RawMessage) error { return nil }
func (f *fakeSession) Info() *upstream.InitInfo {
	return &upstream.InitInfo{Caps: f.caps, ProtocolVersion: f.rev}
}
func (f *fakeSession) Done() <-chan struct{} { return nil }
func (f *fakeSession) Err() error            { return nil }
func (f *fakeSession) Close() error          { return nil }

type sessions map[string]upstream.Session

func (s sessions) Acquire(_ context.Context, name string) (upstream.Session, func(), error) {
	if x, ok := s[name]; ok {
		return x, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown upstream %q", name)
}

type credKey struct{}

// CredentialKey is the credential the test put in ctx, "" by default.
func (s sessions) CredentialKey(ctx context.Context, _ string) string {
	fp, _ := ctx.Value(credKey{}).(string)
	return fp
}

// pages serves a list in pages keyed by cursor ("" is the first page).
func pages(field string, byCursor map[string]string) func(string, json.RawMessage) (json.RawMessage, error) {
	return func(method string, params json.RawMessage) (json.RawMessage, error) {
		cursor, _ := jsonrpc.GetString(params, "cursor")
		page, ok := byCursor[cursor]
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad cursor"}
		}
		return json.RawMessage(page), nil
	}
}

func keys(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Key)
	}
	return out
}

func TestListWalksPagesAndSorts(t *testing.T) {
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: pages("tools", map[string]string{
		"":   `{"tools":[{"name":"zeta","x-extra":1},{"name":"alpha"}],"nextCursor":"c1"}`,
		"c1": `{"tools":[{"name":"mid"}],"nextCursor":""}`,
	})}
	c := New(sessions{"s": f}, nil)
	items, err := c.List(context.Background(), "s", Tools)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(keys(items), []string{"alpha", "mid", "zeta"}); diff != "" {
		t.Errorf("keys (-got +want):\n%s", diff)
	}
	if got := string(items[2].Raw); got != `{"name":"zeta","x-extra":1}` {
		t.Errorf("item not kept raw: %s", got)
	}
	// Cached: a second read sends nothing.
	before := f.calls.Load()
	if _, err := c.List(context.Background(), "s", Tools); err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != before {
		t.Errorf("cached list was fetched again")
	}
	// Invalidation refetches.
	c.Invalidate("s", Tools)
	if _, err := c.List(context.Background(), "s", Tools); err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != before+2 {
		t.Errorf("calls after invalidation = %d, want %d", f.calls.Load(), before+2)
	}
}

func TestIncompleteWalks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages map[string]string
		want  string
	}{
		{"repeated cursor", map[string]string{
			"":                `{"tools":[{"name":"a"}],"nextCursor":"cursor-secret-x"}`,
			"cursor-secret-x": `{"tools":[{"name":"b"}],"nextCursor":"cursor-secret-x"}`,
		}, "repeated cursor"},
		{"cycle", map[string]string{
			"":  `{"tools":[{"name":"a"}],"nextCursor":"x"}`,
			"x": `{"tools":[{"name":"b"}],"nextCursor":"y"}`,
			"y": `{"tools":[{"name":"c"}],"nextCursor":"x"}`,
		}, "repeated cursor"},
		{"not a list", map[string]string{"": `{"tools":{"name":"a"}}`}, "invalid MCP response"},
		{"item without name", map[string]string{"": `{"tools":[{"title":"a"}]}`}, "invalid MCP response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := New(sessions{"s": &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: pages("tools", tc.pages)}}, logger)
			_, err := c.List(context.Background(), "s", Tools)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			for cur := range tc.pages {
				if cur != "" && (strings.Contains(err.Error(), `"`+cur+`"`) || (len(cur) > 3 && strings.Contains(logs.String(), cur))) {
					t.Errorf("error or log reveals a cursor: %v\n%s", err, logs.String())
				}
			}
		})
	}
	t.Run("page cap", func(t *testing.T) {
		n := 0
		f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
			n++
			return json.RawMessage(fmt.Sprintf(`{"tools":[{"name":"t%d"}],"nextCursor":"c%d"}`, n, n)), nil
		}}
		c := New(sessions{"s": f}, nil)
		_, err := c.List(context.Background(), "s", Tools)
		if !errors.Is(err, ErrIncomplete) || n != DefaultPageCap {
			t.Errorf("err = %v after %d pages, want ErrIncomplete after %d", err, n, DefaultPageCap)
		}
	})
}

// C8.1, C8.2: no capability, nothing sent; METHOD_NOT_FOUND is empty.
func TestCapabilityAndMethodNotFound(t *testing.T) {
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(method string, _ json.RawMessage) (json.RawMessage, error) {
		if method == mcpwire.MethodToolsList {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no"}
		}
		return json.RawMessage(`{"prompts":[{"name":"p"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	for _, k := range []Kind{Prompts, Resources, Templates} {
		items, err := c.List(context.Background(), "s", k)
		if err != nil || len(items) != 0 {
			t.Errorf("%s without the capability: %v, %v", k, items, err)
		}
	}
	if f.calls.Load() != 0 {
		t.Errorf("%d calls sent for lists the upstream did not advertise", f.calls.Load())
	}
	items, err := c.List(context.Background(), "s", Tools)
	if err != nil || len(items) != 0 {
		t.Errorf("METHOD_NOT_FOUND: %v, %v; want empty", items, err)
	}
}

// Concurrent readers share one fetch.
func TestConcurrentReadersShareOneFetch(t *testing.T) {
	synctest.Test(t, testConcurrentReadersShareOneFetch)
}

func testConcurrentReadersShareOneFetch(t *testing.T) {
	release := make(chan struct{})
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
		<-release
		return json.RawMessage(`{"tools":[{"name":"a"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			if _, found, err := c.Lookup(context.Background(), "s", Tools, "a"); err != nil || !found {
				t.Errorf("lookup: %v %v", found, err)
			}
		})
	}
	synctest.Wait() // every reader waits on the fetch
	close(release)
	wg.Wait()
	if n := f.calls.Load(); n != 1 {
		t.Errorf("%d fetches for 20 concurrent readers, want 1", n)
	}
}

// An invalidation during a fetch is not lost: the next read refetches.
func TestInvalidateDuringFetch(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var n atomic.Int64
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
		if n.Add(1) == 1 {
			close(started)
			<-release
			return json.RawMessage(`{"tools":[{"name":"old"}]}`), nil
		}
		return json.RawMessage(`{"tools":[{"name":"new"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	done := make(chan struct{})
	go func() { c.List(context.Background(), "s", Tools); close(done) }()
	<-started
	c.Invalidate("s", Tools)
	close(release)
	<-done
	items, err := c.List(context.Background(), "s", Tools)
	if err != nil || len(items) != 1 || items[0].Key != "new" {
		t.Errorf("after invalidation during fetch: %v %v, want [new]", keys(items), err)
	}
}

func TestTemplateMatching(t *testing.T) {
	f := &fakeSession{caps: mcpwire.ServerCaps{Resources: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"resourceTemplates":[{"uriTemplate":"test://template/{id}/data"},{"uriTemplate":"file:///{+path}"},{"uriTemplate":"mem://x{?q,r}"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	for uri, want := range map[string]bool{
		"test://template/123/data":  true,
		"test://template/1/2/data":  false, // a simple expression is one segment
		"test://template/123/other": false,
		"file:///a/b/c.txt":         true,
		"mem://x?q=1&r=2":           true,
		"other://thing":             false,
	} {
		got, err := c.MatchTemplate(context.Background(), "s", uri)
		if err != nil || got != want {
			t.Errorf("MatchTemplate(%q) = %v, %v; want %v", uri, got, err, want)
		}
	}
}

func FuzzTemplateRegexp(f *testing.F) {
	for _, s := range []string{"test://template/{id}/data", "file:///{+path}", "x{?a,b}", "{", "}{", "a{#b}c{/d}"} {
		f.Add(s, "test://template/1/data")
	}
	f.Fuzz(func(t *testing.T, tmpl, uri string) {
		re := templateRegexp(tmpl)
		if re != nil {
			re.MatchString(uri)
			if !strings.ContainsAny(tmpl, "{}") && !re.MatchString(tmpl) {
				t.Errorf("a template without expressions must match itself: %q", tmpl)
			}
		}
	})
}

// A name missing from a list older than two seconds refetches the list
// once; a younger list is trusted.
func TestLookupOrRefresh(t *testing.T) {
	var n atomic.Int64
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
		if n.Add(1) == 1 {
			return json.RawMessage(`{"tools":[{"name":"old"}]}`), nil
		}
		return json.RawMessage(`{"tools":[{"name":"old"},{"name":"added"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	if _, found, _ := c.LookupOrRefresh(ctx, "s", Tools, "added"); found || n.Load() != 1 {
		t.Fatalf("young list: found=%v fetches=%d, want not found after 1 fetch", found, n.Load())
	}
	now = now.Add(3 * time.Second)
	if _, found, err := c.LookupOrRefresh(ctx, "s", Tools, "added"); !found || err != nil || n.Load() != 2 {
		t.Errorf("older list: found=%v err=%v fetches=%d, want found after 2 fetches", found, err, n.Load())
	}
	if _, found, _ := c.LookupOrRefresh(ctx, "s", Tools, "nosuch"); found || n.Load() != 2 {
		t.Errorf("unknown name right after a refetch: found=%v fetches=%d, want no new fetch", found, n.Load())
	}
}

// Lists are cached per credential fingerprint (C8.4): two callers whose
// upstream credentials differ never see each other's list.
func TestListsPerCredential(t *testing.T) {
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"tools":[{"name":"a"}]}`), nil
	}}
	c := New(sessions{"s": f}, nil)
	alice := context.WithValue(context.Background(), credKey{}, "alice")
	bob := context.WithValue(context.Background(), credKey{}, "bob")
	for range 3 {
		for _, ctx := range []context.Context{alice, bob} {
			if _, err := c.List(ctx, "s", Tools); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d fetches for two credentials, want 2", n)
	}
	c.Invalidate("s", Tools) // list_changed reaches every credential's copy
	c.List(alice, "s", Tools)
	c.List(bob, "s", Tools)
	if n := f.calls.Load(); n != 4 {
		t.Errorf("%d fetches after invalidation, want 4", n)
	}
}

// ctxSession blocks every call until its context ends.
type ctxSession struct{ fakeSession }

func (s *ctxSession) Call(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A walk has its own deadline (C8.3), even when its first reader has
// none: the request in flight is cancelled and the walk fails.
func TestWalkDeadline(t *testing.T) {
	c := New(sessions{"s": &ctxSession{fakeSession{caps: mcpwire.ServerCaps{Tools: true}}}}, nil)
	c.walk = 100 * time.Millisecond
	start := time.Now()
	_, err := c.List(context.Background(), "s", Tools)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the walk deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("walk took %v", d)
	}
}

// A 2026-07-28 upstream's ttlMs shortens how long its list is reused
// (C8.4), never below a second; without it the catalog's TTL holds.
func TestUpstreamTTL(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name   string
		result string
		after  time.Duration
		want   int64 // fetches after two reads separated by after
	}{
		{"no hint", `{"tools":[{"name":"a"}]}`, 10 * time.Second, 1},
		{"ttlMs 5000, read after 6s", `{"tools":[{"name":"a"}],"ttlMs":5000}`, 6 * time.Second, 2},
		{"ttlMs 5000, read after 4s", `{"tools":[{"name":"a"}],"ttlMs":5000}`, 4 * time.Second, 1},
		{"ttlMs 0 floors at 1s", `{"tools":[{"name":"a"}],"ttlMs":0}`, 500 * time.Millisecond, 1},
		{"ttlMs above the catalog TTL", `{"tools":[{"name":"a"}],"ttlMs":600000}`, 6 * time.Minute, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(tc.result), nil
			}}
			c := New(sessions{"s": f}, nil)
			clock := now
			c.now = func() time.Time { return clock }
			c.List(context.Background(), "s", Tools)
			clock = clock.Add(tc.after)
			c.List(context.Background(), "s", Tools)
			if n := f.calls.Load(); n != tc.want {
				t.Errorf("%d fetches, want %d", n, tc.want)
			}
		})
	}
}

// A stateless upstream's tool with an invalid x-mcp-header is left out and
// warned about; an handshake-era upstream's is kept without headers (that era
// has no such rule); valid annotations are parsed once, at fetch.
func TestParamHeaderAnnotations(t *testing.T) {
	const list = `{"tools":[
		{"name":"bad","inputSchema":{"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}},
		{"name":"good","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}},
		{"name":"plain","inputSchema":{"type":"object"}}]}`
	for _, tc := range []struct {
		rev  string
		want []string
	}{
		{mcpwire.Rev20260728, []string{"good", "plain"}},
		{"2025-11-25", []string{"bad", "good", "plain"}},
	} {
		t.Run(tc.rev, func(t *testing.T) {
			var logs bytes.Buffer
			f := &fakeSession{rev: tc.rev, caps: mcpwire.ServerCaps{Tools: true}, call: func(string, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(list), nil
			}}
			c := New(sessions{"s": f}, slog.New(slog.NewTextHandler(&logs, nil)))
			items, err := c.List(context.Background(), "s", Tools)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, keys(items)); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			warned := strings.Contains(logs.String(), `tool=bad reason="property \"n\": x-mcp-header needs type string, integer or boolean, not \"number\""`)
			if warned != (tc.rev == mcpwire.Rev20260728) {
				t.Errorf("warning logged = %v; logs:\n%s", warned, logs.String())
			}
			for _, it := range items {
				want := 0
				if it.Key == "good" {
					want = 1
				}
				if len(it.ParamHeaders) != want {
					t.Errorf("%s: headers %+v", it.Key, it.ParamHeaders)
				}
			}
		})
	}
}

// hideReviewer serves every item but those named in hide, and counts its
// reviews.
type hideReviewer struct {
	hide    map[string]bool
	reviews atomic.Int64
}

func (r *hideReviewer) Review(_ context.Context, _ string, _ Kind, items []Item) []Item {
	r.reviews.Add(1)
	var out []Item
	for _, it := range items {
		if !r.hide[it.Key] {
			out = append(out, it)
		}
	}
	return out
}

// TestReviewerDecidesWhatIsServed: the reviewer sees each fetched list
// once (not each read of the cached one), and what it holds is neither
// listed nor found by a lookup.
func TestReviewerDecidesWhatIsServed(t *testing.T) {
	f := &fakeSession{caps: mcpwire.ServerCaps{Tools: true}, call: pages("tools", map[string]string{
		"": `{"tools":[{"name":"add"},{"name":"echo"}]}`,
	})}
	c := New(sessions{"s": f}, nil)
	r := &hideReviewer{hide: map[string]bool{"add": true}}
	c.SetReviewer(r)
	for range 3 {
		items, err := c.List(context.Background(), "s", Tools)
		if err != nil || !slices.Equal(keys(items), []string{"echo"}) {
			t.Fatalf("List = %v, %v; want only echo", keys(items), err)
		}
	}
	if _, found, _ := c.Lookup(context.Background(), "s", Tools, "add"); found {
		t.Fatal("a held item was found")
	}
	if n := r.reviews.Load(); n != 1 {
		t.Fatalf("%d reviews of one fetch", n)
	}
	c.Invalidate("s", Tools)
	delete(r.hide, "add")
	if items, _ := c.List(context.Background(), "s", Tools); !slices.Equal(keys(items), []string{"add", "echo"}) || r.reviews.Load() != 2 {
		t.Fatalf("after a refetch: %v, %d reviews", keys(items), r.reviews.Load())
	}
}
