package gateway

import (
	"context"
	"net/http"
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
