package gateway

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// RecheckStreams ends a revoked key's open stream at once, without
// waiting for the periodic re-check (15 s); a valid key's stream stays.
func TestRecheckStreams(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	keys := &memKeys{}
	doomed := keys.add(t, store.Key{Alias: "doomed"})
	kept := keys.add(t, store.Key{Alias: "kept"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}}})
	if g.recheck < 10*time.Second {
		t.Fatalf("recheck %s: the test needs the periodic check far off", g.recheck)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(secret string) <-chan struct{} {
		code, hdr, body := rpc(t, gw.URL+"/mcp", withKey(secret), initBody)
		if code != 200 {
			t.Fatalf("initialize: %d %s", code, body)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/mcp", nil)
		req.Header.Set(mcpwire.HeaderSessionID, hdr.Get(mcpwire.HeaderSessionID))
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(callers.HeaderAPIKey, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("open stream: %v %+v", err, resp)
		}
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
			}
		}()
		return ended
	}
	gone, stays := open(doomed), open(kept)
	keys.disable("doomed")
	start := time.Now()
	g.RecheckStreams()
	select {
	case <-gone:
		t.Logf("revoked key's stream ended %s after RecheckStreams", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatal("the revoked key's stream is still open 1s after RecheckStreams")
	}
	g.RecheckStreams() // a second signal is as good as the first
	select {
	case <-stays:
		t.Error("the valid key's stream ended")
	case <-time.After(100 * time.Millisecond):
	}
}

// Every open stream's key is re-checked by one loop of the gateway, not by
// a goroutine and a timer of its own (issue 25: an idle stream must cost
// little): with many streams open there is one re-checker, each stream is
// on its list, a revoked key still ends its streams alone, and streams
// that ended leave the list.
func TestStreamsShareOneRechecker(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	keys := &memKeys{}
	doomed := keys.add(t, store.Key{Alias: "doomed"})
	kept := keys.add(t, store.Key{Alias: "kept"})
	g, gw := startGatewayWith(t, Options{Authenticator: newAuth(t, keys, nil),
		Config: &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type stream struct {
		ended  chan struct{}
		cancel context.CancelFunc
	}
	open := func(secret string) stream {
		code, hdr, body := rpc(t, gw.URL+"/mcp", withKey(secret), initBody)
		if code != 200 {
			t.Fatalf("initialize: %d %s", code, body)
		}
		sctx, scancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, gw.URL+"/mcp", nil)
		req.Header.Set(mcpwire.HeaderSessionID, hdr.Get(mcpwire.HeaderSessionID))
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set(callers.HeaderAPIKey, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("open stream: %v %+v", err, resp)
		}
		s := stream{ended: make(chan struct{}), cancel: scancel}
		go func() {
			defer close(s.ended)
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
		return s
	}
	const n = 10
	var gone, stays []stream
	for range n {
		gone = append(gone, open(doomed))
		stays = append(stays, open(kept))
	}
	watched := func() int {
		g.watchers.mu.Lock()
		defer g.watchers.mu.Unlock()
		return len(g.watchers.all)
	}
	// Each handler watches its stream once its headers are out.
	waitFor(t, "every stream watched", func() bool { return watched() == 2*n })
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if loops := strings.Count(stacks, "gateway.(*Gateway).recheckLoop("); loops != 1 {
		t.Errorf("%d re-check loops for %d streams, want 1", loops, 2*n)
	}
	if own := strings.Count(stacks, "gateway.(*Gateway).watchCaller"); own != 0 {
		t.Errorf("%d goroutines of watchCaller, want none", own)
	}

	keys.disable("doomed")
	g.RecheckStreams()
	for i, s := range gone {
		select {
		case <-s.ended:
		case <-time.After(2 * time.Second):
			t.Fatalf("revoked key's stream %d still open 2s after RecheckStreams", i)
		}
	}
	for i, s := range stays {
		select {
		case <-s.ended:
			t.Errorf("valid key's stream %d ended", i)
		default:
		}
	}
	waitFor(t, "revoked streams off the list", func() bool { return watched() == n })
	for _, s := range stays {
		s.cancel()
		<-s.ended
	}
	// The handlers notice their clients went away; the next pass drops them.
	waitFor(t, "ended streams off the list", func() bool {
		g.RecheckStreams()
		return watched() == 0
	})
}
