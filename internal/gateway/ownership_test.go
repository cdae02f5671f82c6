package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Issue 22's class review: per-caller state that held before the fix,
// pinned so that it keeps holding. (Relayed requests, progress routes and
// exchanges, which did not, are in answer_test.go.)

// Subscriptions are the session's: a session that unsubscribes from a
// URI it never subscribed to (another session's, on the same shared
// upstream session) ends nothing, and the subscriber keeps its updates;
// the other session hears none of them.
func TestUnsubscribeStaysInItsSession(t *testing.T) {
	alpha := startSDKUpstream(t, "alpha")
	_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{"alpha": httpServer(alpha.http.URL)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const uri = "mem://alpha/readme"
	connect := func(updated chan<- string) *mcp.ClientSession {
		// No roots: both sessions share the pooled upstream session, and
		// with it the upstream subscription.
		return connectTo(t, ctx, gw.URL+"/mcp", &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{},
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
				updated <- req.Params.URI
			},
		}, handshakeEra)
	}
	aliceHears, bobHears := make(chan string, 8), make(chan string, 8)
	alice, bob := connect(aliceHears), connect(bobHears)
	if err := alice.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if err := bob.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatalf("bob's unsubscribe of a URI he never subscribed to: %v", err)
	}
	callText(t, ctx, bob, &mcp.CallToolParams{Name: "alpha__touch", Arguments: map[string]any{"uri": uri}})
	select {
	case got := <-aliceHears:
		if got != uri {
			t.Errorf("alice heard %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice's subscription ended with bob's unsubscribe")
	}
	select {
	case got := <-bobHears:
		t.Errorf("bob, who is not subscribed, heard %q", got)
	case <-time.After(200 * time.Millisecond):
	}
}
