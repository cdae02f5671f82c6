package upstream

import (
	"context"
	"net/http"
	"sort"
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
		t.mu.Lock()
		reopen := t.listenReopen
		t.listenReopen = false
		t.mu.Unlock()
		if reopen {
			continue // new subscriptions, not a failure
		}
		if !sleepCtx(t.ctx, backoff) {
			return
		}
		backoff = min(backoff*2, maxStreamBackoff)
	}
}

// listenParams is the listen request's filter: every list change, and the
// resources subscribed on this session.
func (t *streamable) listenParams() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return listenFilter(t.subs)
}

// withSubscription adds uri to subs (on) or removes it, and says whether
// that changed anything (a listen request to replace).
func withSubscription(subs map[string]bool, uri string, on bool) (map[string]bool, bool) {
	if subs[uri] == on {
		return subs, false
	}
	if !on {
		delete(subs, uri)
		return subs, true
	}
	if subs == nil {
		subs = map[string]bool{}
	}
	subs[uri] = true
	return subs, true
}

// listenFilter is a listen request's params for subs (the gateway's
// _meta is added by the caller).
func listenFilter(subs map[string]bool) []byte {
	uris := make([]string, 0, len(subs))
	for uri := range subs {
		uris = append(uris, uri)
	}
	sort.Strings(uris)
	params := []byte(`{"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true`)
	if len(uris) > 0 {
		params = append(params, `,"resourceSubscriptions":[`...)
		for i, uri := range uris {
			if i > 0 {
				params = append(params, ',')
			}
			params = jsonrpc.AppendString(params, uri)
		}
		params = append(params, ']')
	}
	return append(params, "}}"...)
}

// setResourceSubscription serves resources/subscribe and unsubscribe for a
// stateless upstream, which has neither: the URI joins or leaves the
// listen request's resourceSubscriptions, and the stream is reopened with
// the new filter (a filter is fixed for the life of a stream).
func (t *streamable) setResourceSubscription(uri string, on bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.listenGone {
		return jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Resource subscriptions are not available: this server refused subscriptions/listen")
	}
	var changed bool
	if t.subs, changed = withSubscription(t.subs, uri, on); !changed {
		return nil
	}
	t.listenReopen = true
	if t.listenAbort != nil {
		t.listenAbort()
	}
	return nil
}

func (t *streamable) listenStatelessOnce(n int) (again, delivered bool) {
	// The answer's headers are due within the read timeout; the stream
	// then stays open as long as the upstream likes, or until the
	// subscriptions change.
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	t.mu.Lock()
	t.listenAbort = cancel
	t.mu.Unlock()
	params := t.listenParams()
	if sm := t.c.statelessInfo(); sm != nil {
		params = sm.apply(context.Background(), params)
	}
	m := jsonrpc.NewRequest(jsonrpc.StringID("mcpgate-listen-"+strconv.Itoa(n)), mcpwire.MethodSubscriptionsListen, params)
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
		t.mu.Lock()
		t.listenGone = true
		t.mu.Unlock()
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

// On stdio a listen request's notifications come on stdout like any other
// message; the request stays open until the session ends or the gateway
// cancels it with notifications/cancelled (cancellation.md), which it does
// to change the subscribed resources: a new request replaces it.

// startListen opens the listen request of a stateless stdio session.
func (t *stdio) startListen() {
	t.listenMu.Lock()
	defer t.listenMu.Unlock()
	t.relistenLocked()
}

// relistenLocked cancels the open listen request, if any, and sends one
// for the current subscriptions.
func (t *stdio) relistenLocked() {
	ctx, cancel := context.WithTimeout(context.Background(), t.c.timeout)
	defer cancel()
	if t.listenID != "" {
		params := append(append([]byte(`{"requestId":`), jsonrpc.String(t.listenID)...), `,"reason":"subscriptions changed"}`...)
		_ = t.send(ctx, jsonrpc.NewNotification(mcpwire.NotifyCancelled, params), nil)
		t.listenID = ""
	}
	params := listenFilter(t.subs)
	if sm := t.c.statelessInfo(); sm != nil {
		params = sm.apply(context.Background(), params)
	}
	t.listenN++
	id := "mcpgate-listen-" + strconv.Itoa(t.listenN)
	if err := t.send(ctx, jsonrpc.NewRequest(jsonrpc.StringID(id), mcpwire.MethodSubscriptionsListen, params), nil); err != nil {
		t.c.log.Debug("upstream subscriptions/listen failed", "error", err)
		return
	}
	t.listenID = id
}

// setResourceSubscription serves resources/subscribe and unsubscribe for
// a stateless stdio upstream (see the streamable one).
func (t *stdio) setResourceSubscription(uri string, on bool) error {
	t.listenMu.Lock()
	defer t.listenMu.Unlock()
	var changed bool
	if t.subs, changed = withSubscription(t.subs, uri, on); !changed {
		return nil
	}
	t.relistenLocked()
	return nil
}
