package upstream

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// A 2026-07-28 upstream has no GET stream: its list changes come on a
// subscriptions/listen stream the gateway keeps open (C1.4). They reach
// the Handler like any notification, so the catalog and the downstreams
// of both eras hear of them as before.

// listenStateless keeps one subscriptions/listen stream open until the
// session closes, reconnecting with backoff. An upstream that refuses it
// (an error answer, or no stream) is not asked again.
func (t *streamable) listenStateless() {
	backoff := minStreamBackoff
	for n := 1; t.ctx.Err() == nil; n++ {
		again, delivered := t.listenStatelessOnce(n)
		if !again {
			return
		}
		if delivered {
			backoff = minStreamBackoff
		}
		if !sleepCtx(t.ctx, backoff) {
			return
		}
		backoff = min(backoff*2, maxStreamBackoff)
	}
}

func (t *streamable) listenStatelessOnce(n int) (again, delivered bool) {
	params := []byte(`{"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true}}`)
	if sm := t.c.statelessInfo(); sm != nil {
		params = sm.apply(context.Background(), params)
	}
	m := jsonrpc.NewRequest(jsonrpc.StringID("mcpgate-listen-"+strconv.Itoa(n)), mcpwire.MethodSubscriptionsListen, params)
	// The answer's headers are due within the read timeout; the stream
	// then stays open as long as the upstream likes.
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	headers := time.AfterFunc(t.c.timeout, cancel)
	resp, _, err := t.post(ctx, m)
	headers.Stop()
	if err != nil {
		t.c.log.Debug("upstream subscriptions/listen failed", "error", err)
		return t.ctx.Err() == nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || mediaType(resp) != acceptStream {
		t.c.log.Debug("upstream offers no subscriptions/listen stream", "status", resp.StatusCode)
		return false, false
	}
	var st streamState
	_ = t.readEvents(jsonrpc.NewSSEReader(resp.Body, t.maxMsg), nil, &st, func() bool { delivered = true; return false })
	return t.ctx.Err() == nil, delivered
}

// startListen opens the listen stream of a stateless session.
func (t *streamable) startListen() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.wg.Go(t.listenStateless)
	}
}
