//go:build interop

package eras

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rootsPeer is a go-sdk client with roots of its own (none: it declares no
// roots capability), counting the roots/list requests its handler answers.
type rootsPeer struct {
	name  string
	root  string
	c     *mcp.Client
	cs    *mcp.ClientSession
	wire  *wireLog
	asked atomic.Int64 // roots/list requests answered (handshake era)
}

func connectRootsPeer(t *testing.T, endpoint, version, name, root string) *rootsPeer {
	t.Helper()
	p := &rootsPeer{name: name, root: root, wire: &wireLog{}}
	var opts *mcp.ClientOptions
	if root == "" {
		opts = &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
	}
	p.c = mcp.NewClient(&mcp.Implementation{Name: "mcpgate-roots-" + name, Version: "1"}, opts)
	if root != "" {
		p.c.AddRoots(&mcp.Root{URI: root, Name: name})
	}
	p.c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "roots/list" {
				p.asked.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := p.c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: p.wire}, MaxRetries: -1}, sopts)
	if err != nil {
		t.Fatalf("connect %s (version %q): %v", name, version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	p.cs = cs
	return p
}

// getRoots calls get-roots-list and returns its text (or the error).
func (p *rootsPeer) getRoots(t *testing.T, tool string) (string, error) {
	t.Helper()
	r, err := p.cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: tool})
	if err != nil {
		return "", err
	}
	return textOf(t, r), nil
}

// checkOwnRoots: p's get-roots-list shows exactly p's one root.
func (p *rootsPeer) checkOwnRoots(t *testing.T, tool string, others ...*rootsPeer) {
	t.Helper()
	start := time.Now()
	text, err := p.getRoots(t, tool)
	t.Logf("%s: %s took %v", p.name, tool, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Errorf("%s: %s: %v", p.name, tool, err)
		return
	}
	if !strings.HasPrefix(text, "Current MCP Roots (1 total):") || !strings.Contains(text, "URI: "+p.root+"\n") {
		t.Errorf("%s: %s = %q, want its own root %s only", p.name, tool, text, p.root)
	}
	for _, o := range others {
		if o.root != "" && strings.Contains(text, o.root) {
			t.Errorf("%s: %s shows %s's root %s", p.name, tool, o.name, o.root)
		}
	}
}

// medianEcho is the median time of 5 echo calls of p on server.
func medianEcho(t *testing.T, p *rootsPeer, server string) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range 5 {
		start := time.Now()
		callTool(t, p.cs, &mcp.CallToolParams{Name: prefixed(server)("echo"), Arguments: map[string]any{"message": "m"}})
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[2].Round(100 * time.Microsecond)
}

// roundTrips counts p's retries of tool with inputResponses: the
// input_required rounds its roots handler answered (2026-07-28).
func (p *rootsPeer) roundTrips(tool string) int {
	n := 0
	for _, post := range p.wire.snapshot() {
		if post.retry && post.name == tool && strings.Contains(string(post.body), `"roots"`) {
			n++
		}
	}
	return n
}

// TestGatewayRootsPerClient (defect 1): two clients with different roots
// use server-everything through mcpgate at the same time, over stdio and
// streamable HTTP, in both eras. server-everything caches roots per upstream
// session (over stdio: per process) and its get-roots-list answers from
// that cache; through a shared upstream session the second client saw the
// first one's root. Each must see only its own, answered by its own roots
// handler; a client without roots never sees anyone's.
func TestGatewayRootsPerClient(t *testing.T) {
	requireSetup(t)
	gw := startGateway(t, startEverythingHTTP(t))
	endpoint := gw.base + "/mcp"

	for _, server := range []string{"evstdio", "evhttp"} {
		tool := prefixed(server)("get-roots-list")
		t.Run(legacyVersion+"/"+server, func(t *testing.T) {
			a := connectRootsPeer(t, endpoint, legacyVersion, "a", "file:///tmp/mcpgate-roots-a-"+server)
			b := connectRootsPeer(t, endpoint, legacyVersion, "b", "file:///tmp/mcpgate-roots-b-"+server)
			none := connectRootsPeer(t, endpoint, legacyVersion, "none", "")
			waitTools(t, a.cs, prefixed(server))
			a.checkOwnRoots(t, tool, b)
			b.checkOwnRoots(t, tool, a)
			a.checkOwnRoots(t, tool, b)
			t.Logf("2025-11-25 echo on %s, the session's upstream session warm: median of 5 calls %v with roots, %v without",
				server, medianEcho(t, a, server), medianEcho(t, none, server))
			if a.asked.Load() == 0 || b.asked.Load() == 0 {
				t.Errorf("roots/list answered by a=%d b=%d, want each client's own handler to have run", a.asked.Load(), b.asked.Load())
			}
			text, err := none.getRoots(t, tool)
			if strings.Contains(text, "file://") || (err != nil && strings.Contains(err.Error(), "file://")) {
				t.Errorf("client without roots: %s = %q, %v: shows a root", tool, text, err)
			}

			// a's roots change: server-everything hears it on a's upstream
			// session only, asks a, and shows a's two roots; b keeps one.
			time.Sleep(500 * time.Millisecond) // b's upstream session's start-up roots/list (350 ms) is over
			bAsked := b.asked.Load()
			a2 := a.root + "-2"
			a.c.AddRoots(&mcp.Root{URI: a2, Name: "a2"})
			deadline := time.Now().Add(10 * time.Second)
			for {
				text, err := a.getRoots(t, tool)
				if err == nil && strings.HasPrefix(text, "Current MCP Roots (2 total):") && strings.Contains(text, a2) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a's roots change never reached server-everything: %q, %v", text, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			b.checkOwnRoots(t, tool, a)
			if n := b.asked.Load() - bAsked; n != 0 {
				t.Errorf("b was asked for roots %d times after a's change", n)
			}
		})

		t.Run(statelessVersion+"/"+server, func(t *testing.T) {
			a := connectRootsPeer(t, endpoint, "", "a", "file:///tmp/mcpgate-roots-stateless-a-"+server)
			b := connectRootsPeer(t, endpoint, "", "b", "file:///tmp/mcpgate-roots-stateless-b-"+server)
			none := connectRootsPeer(t, endpoint, "", "none", "")
			if got := a.cs.InitializeResult().ProtocolVersion; got != statelessVersion {
				t.Fatalf("negotiated %q, want %q", got, statelessVersion)
			}
			a.checkOwnRoots(t, tool, b)
			b.checkOwnRoots(t, tool, a)
			a.checkOwnRoots(t, tool, b)
			if na, nb := a.roundTrips(tool), b.roundTrips(tool); na < 2 || nb < 1 {
				t.Errorf("roots answered in input_required rounds: a=%d b=%d, want one per call", na, nb)
			}
			text, err := none.getRoots(t, tool)
			if strings.Contains(text, "file://") || (err != nil && strings.Contains(err.Error(), "file://")) {
				t.Errorf("client without roots: %s = %q, %v: shows a root", tool, text, err)
			}
			checkStatelessWire(t, a.wire.snapshot())
			// What the binding costs: every call of a client that declared
			// roots runs on an upstream session of its own (on stdio, a
			// process); one without roots uses the pooled session.
			t.Logf("2026-07-28 echo on %s: median of 5 calls %v with roots, %v without",
				server, medianEcho(t, a, server), medianEcho(t, none, server))
		})
	}
}
