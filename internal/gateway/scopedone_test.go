package gateway

import (
	"context"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// What a request's server requests wait on (scope.done) ends with the
// request: set in place in a one-request POST's scope, in a copy for a
// scope that carries more (a batch), which is left as it was.
func TestScopeDoneEndsWithItsRequest(t *testing.T) {
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{}})
	ping := jsonrpc.NewRequest(jsonrpc.Int64ID(1), mcpwire.MethodPing, nil)

	single := &scope{g: g, rt: &route{}, single: true}
	if reply := g.serve(context.Background(), single, ping); reply == nil || reply.Error != nil {
		t.Fatalf("ping = %+v", reply)
	}
	if single.doneChan() == nil {
		t.Fatal("a one-request scope has no done")
	}
	select {
	case <-single.doneChan():
	default:
		t.Error("the request is over but its done is open")
	}
	if single.single {
		t.Error("a second request would share the first one's done")
	}

	shared := &scope{g: g, rt: &route{}}
	if reply := g.serve(context.Background(), shared, ping); reply == nil || reply.Error != nil {
		t.Fatalf("ping = %+v", reply)
	}
	if shared.served() {
		t.Error("serve set done in a scope other requests use")
	}
}
