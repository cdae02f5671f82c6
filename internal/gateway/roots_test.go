package gateway

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// rootsCacheEnv makes a stdio test server (TestMain) a rootsCacheServer.
const rootsCacheEnv = "MCPGATE_TEST_ROOTS_CACHE"

// rootsCacheServer keeps its client's roots per session, as
// server-everything does: it asks roots/list shortly after
// notifications/initialized (outside any call) and again on
// notifications/roots/list_changed, and its tool cached_roots answers from
// that cache, asking only when nothing is cached yet. A session that
// serves two clients would show one the other's roots.
func rootsCacheServer(name string) *mcp.Server {
	var mu sync.Mutex
	cache := map[*mcp.ServerSession][]string{}
	fetch := func(ctx context.Context, ss *mcp.ServerSession) ([]string, error) {
		res, err := ss.ListRoots(ctx, nil)
		if err != nil {
			return nil, err
		}
		uris := []string{}
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		slices.Sort(uris)
		mu.Lock()
		cache[ss] = uris
		mu.Unlock()
		return uris, nil
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			ss := req.Session
			if p := ss.InitializeParams(); p == nil || p.Capabilities == nil || p.Capabilities.RootsV2 == nil && !p.Capabilities.Roots.ListChanged {
				return
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, _ = fetch(ctx, ss) // refused or unanswered: asked again in the call
			}()
		},
		RootsListChangedHandler: func(_ context.Context, req *mcp.RootsListChangedRequest) {
			ss := req.Session
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, _ = fetch(ctx, ss)
			}()
		},
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "cached_roots", Description: "the client's roots, as cached for this session"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			uris, ok := cache[req.Session]
			mu.Unlock()
			if !ok {
				var err error
				if uris, err = fetch(ctx, req.Session); err != nil {
					return textResult("no roots: " + err.Error()), nil, nil
				}
			}
			return textResult("roots: " + strings.Join(uris, " ")), nil, nil
		})
	return srv
}

// rootsUpstream is the config of a rootsCacheServer over transport.
func rootsUpstream(t *testing.T, transport string) *config.Server {
	t.Helper()
	if transport == config.TransportStdio {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return &config.Server{Transport: config.TransportStdio, Command: exe, Env: map[string]string{stdioServerEnv: "rc", rootsCacheEnv: "1"}}
	}
	return httpServer(serveSDK(t, rootsCacheServer("rc")).URL)
}

// rootsClient is a go-sdk client whose roots are [root] and which counts
// the roots/list requests it answers (handshake era; a 2026-07-28 client
// answers them inside its call, where the result shows whose roots came).
type rootsClient struct {
	cs    *mcp.ClientSession
	c     *mcp.Client
	asked atomic.Int64
}

func connectRoots(t *testing.T, ctx context.Context, url string, opts *mcp.ClientSessionOptions, roots ...string) *rootsClient {
	t.Helper()
	rc := &rootsClient{}
	var copts *mcp.ClientOptions
	if len(roots) == 0 {
		copts = &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}} // no roots capability at all
	}
	rc.c = mcp.NewClient(&mcp.Implementation{Name: "roots-client", Version: "1"}, copts)
	for _, r := range roots {
		rc.c.AddRoots(&mcp.Root{URI: r})
	}
	rc.c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == mcpwire.MethodRootsList {
				rc.asked.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	cs, err := rc.c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	rc.cs = cs
	return rc
}

func (rc *rootsClient) roots(t *testing.T, ctx context.Context, tool string) string {
	t.Helper()
	return callText(t, ctx, rc.cs, &mcp.CallToolParams{Name: tool})
}

// TestRootsStayWithTheirClient: two clients with different roots use one
// roots-caching upstream through the gateway; each sees only its own
// roots, and its own roots handler is what answered. A client without the
// roots capability never sees anyone's. Both eras, both upstream
// transports; the same routes serve clients of both eras at once.
func TestRootsStayWithTheirClient(t *testing.T) {
	for _, transport := range []string{config.TransportHTTP, config.TransportStdio} {
		t.Run(transport, func(t *testing.T) {
			g, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"rc": rootsUpstream(t, transport)}})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const tool = "rc__cached_roots"

			t.Run("2025-11-25", func(t *testing.T) {
				a := connectRoots(t, ctx, gw.URL+"/mcp", handshakeEra, "file:///clients/a")
				b := connectRoots(t, ctx, gw.URL+"/mcp", handshakeEra, "file:///clients/b")
				none := connectRoots(t, ctx, gw.URL+"/mcp", handshakeEra)
				waitStreams(t, g)
				for _, step := range []struct {
					c    *rootsClient
					want string
				}{{a, "roots: file:///clients/a"}, {b, "roots: file:///clients/b"}, {a, "roots: file:///clients/a"}, {b, "roots: file:///clients/b"}} {
					if got := step.c.roots(t, ctx, tool); got != step.want {
						t.Errorf("%s = %q, want %q", tool, got, step.want)
					}
				}
				if a.asked.Load() == 0 || b.asked.Load() == 0 {
					t.Errorf("roots/list answered: a=%d b=%d, want each client's own handler to have run", a.asked.Load(), b.asked.Load())
				}
				if n := g.up.Health()["rc"].Bound; n != 2 {
					t.Errorf("bound upstream sessions = %d, want a's and b's", n)
				}
				if got := none.roots(t, ctx, tool); !strings.HasPrefix(got, "no roots:") {
					t.Errorf("client without roots: %s = %q, want no roots", tool, got)
				}

				// A's roots change: the notification reaches A's upstream
				// session only, which asks A again; B's view stays.
				time.Sleep(200 * time.Millisecond) // b's upstream session's own start-up ask is over
				bAsked := b.asked.Load()
				a.c.AddRoots(&mcp.Root{URI: "file:///clients/a2"})
				want := "roots: file:///clients/a file:///clients/a2"
				waitFor(t, "a's new roots upstream", func() bool {
					return a.roots(t, ctx, tool) == want
				})
				if got := b.roots(t, ctx, tool); got != "roots: file:///clients/b" {
					t.Errorf("b after a's change = %q", got)
				}
				if n := b.asked.Load() - bAsked; n != 0 {
					t.Errorf("b was asked for roots %d times after a's change", n)
				}
			})

			// The sessions above ended (DELETE) and their upstream sessions
			// (on stdio, processes) with them.
			waitFor(t, "the ended sessions' upstream sessions to close", func() bool { return g.up.Health()["rc"].Bound == 0 })

			t.Run("2026-07-28", func(t *testing.T) {
				a := connectRoots(t, ctx, gw.URL+"/mcp", nil, "file:///stateless/a")
				b := connectRoots(t, ctx, gw.URL+"/mcp", nil, "file:///stateless/b")
				none := connectRoots(t, ctx, gw.URL+"/mcp", nil)
				if v := a.cs.InitializeResult().ProtocolVersion; v != mcpwire.Rev20260728 {
					t.Fatalf("negotiated %q, want 2026-07-28", v)
				}
				for _, step := range []struct {
					c    *rootsClient
					want string
				}{{a, "roots: file:///stateless/a"}, {b, "roots: file:///stateless/b"}, {a, "roots: file:///stateless/a"}, {b, "roots: file:///stateless/b"}} {
					if got := step.c.roots(t, ctx, tool); got != step.want {
						t.Errorf("%s = %q, want %q", tool, got, step.want)
					}
				}
				_, err := none.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
				if err == nil || !strings.Contains(err.Error(), "roots") {
					t.Errorf("client without roots: %v, want the missing roots capability", err)
				}
				// Each call's upstream session is gone with the call.
				waitFor(t, "per-request sessions to close", func() bool { return g.up.Health()["rc"].Bound == 0 })
			})
		})
	}
}

// limits.max_bound_sessions_per_server reaches the upstream Manager: with
// a cap of 1, a second roots client's bound session replaces the first
// one's (which its client gets back, dialled anew, on its next call), and
// both still see only their own roots.
func TestMaxBoundSessionsPerServer(t *testing.T) {
	g, gw := startGateway(t, &config.Config{
		Servers: map[string]*config.Server{"rc": rootsUpstream(t, config.TransportHTTP)},
		Limits:  config.Limits{MaxBoundPerServer: 1},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const tool = "rc__cached_roots"
	a := connectRoots(t, ctx, gw.URL+"/mcp", handshakeEra, "file:///capped/a")
	b := connectRoots(t, ctx, gw.URL+"/mcp", handshakeEra, "file:///capped/b")
	waitStreams(t, g)
	for _, step := range []struct {
		c    *rootsClient
		want string
	}{{a, "roots: file:///capped/a"}, {b, "roots: file:///capped/b"}, {a, "roots: file:///capped/a"}} {
		if got := step.c.roots(t, ctx, tool); got != step.want {
			t.Errorf("%s = %q, want %q", tool, got, step.want)
		}
		if n := g.up.Health()["rc"].Bound; n != 1 {
			t.Errorf("bound upstream sessions = %d, want the cap, 1", n)
		}
	}
}
