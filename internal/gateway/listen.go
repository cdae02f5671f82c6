package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// subscriptions/listen (2026-07-28, S17): a stateless client's one
// long-lived stream for change notifications, replacing the GET stream and
// resources/subscribe. The listener sees changes of the servers its view
// allows, filtered by what it asked for; every message carries its
// subscription id (the listen request's id).

// listener is one open subscriptions/listen stream.
type listener struct {
	rt     route
	filter mcpwire.SubscriptionFilter
	id     jsonrpc.ID
	out    sender
	subs   map[string]string // subscribed uri -> server
}

// listeners are the open streams.
type listeners struct {
	mu sync.Mutex // mu guards the fields below
	m  map[*listener]struct{}
}

func (l *listeners) add(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[*listener]struct{}{}
	}
	l.m[ln] = struct{}{}
}

func (l *listeners) remove(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, ln)
}

// each calls fn for every open stream, outside the lock: fn writes to
// the stream, which may wait for its client.
func (l *listeners) each(fn func(*listener)) {
	l.mu.Lock()
	lns := make([]*listener, 0, len(l.m))
	for ln := range l.m {
		lns = append(lns, ln)
	}
	l.mu.Unlock()
	for _, ln := range lns {
		fn(ln)
	}
}

// notify sends method to the listener when it asked for it and may see
// server; params are the notification's own (nil for list_changed).
func (ln *listener) notify(server, method string, params json.RawMessage) {
	if !ln.rt.has(server) || !ln.filter.Wants(method, params) {
		return
	}
	if method == mcpwire.NotifyResourceUpdated {
		uri, _ := jsonrpc.GetString(params, "uri")
		if ln.subs[uri] != server {
			return
		}
	}
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	_ = ln.out.send(jsonrpc.NewNotification(method, mcpwire.WithSubscriptionID(params, ln.id)))
}

// serveListen runs one subscriptions/listen request over HTTP until the
// client goes away or the gateway stops.
func (g *Gateway) serveListen(w http.ResponseWriter, r *http.Request, rt route, m *jsonrpc.Message) {
	filter, ok := mcpwire.ParseSubscriptionFilter(m.Params)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(m.ID, errNoFilter())))
		return
	}
	st, done := g.openStream(w, m.ID, false)
	if st == nil {
		return
	}
	ln, ack := g.openListener(r.Context(), rt, m.ID, filter, st)
	// Whoever ends the stream: this handler, or the held stream after it
	// returned (held.go).
	release := func() {
		g.closeListener(ln)
		done()
	}
	// On the gateway's own teardown the listen request is answered, so
	// the client knows the stream ended on purpose.
	farewell := func() {
		_ = st.send(listenEnded(ln.id))
		st.Finish()
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	sw := holdable(w)
	if sw != nil {
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	_ = st.send(ack)
	g.listen.add(ln)
	g.watchCaller(r.Context(), st.done, func() {
		_ = st.send(jsonrpc.NewErrorResponse(ln.id, errKeyGone()))
		st.Finish()
	})
	if sw != nil && g.hold(w, sw, st, release, farewell) {
		return
	}
	defer release()
	// The request's own: st.run finishes st when it returns, and the
	// request waits for this before it does.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		select {
		case <-g.stop:
			farewell()
		case <-st.done:
		}
	})
	st.run(r.Context(), w, nil)
}

// serveListenStdio runs one subscriptions/listen request of the stdio
// front until the client cancels it (notifications/cancelled, which ends
// ctx) or the gateway stops, which answers it and, as cancellation.md
// asks of a server ending a request on stdio, cancels it too.
func (g *Gateway) serveListenStdio(ctx context.Context, rt route, out sender, m *jsonrpc.Message) {
	filter, ok := mcpwire.ParseSubscriptionFilter(m.Params)
	if !ok {
		_ = out.send(jsonrpc.NewErrorResponse(m.ID, errNoFilter()))
		return
	}
	ln, ack := g.openListener(ctx, rt, m.ID, filter, out)
	defer g.closeListener(ln)
	_ = out.send(ack)
	g.listen.add(ln)
	select {
	case <-ctx.Done():
	case <-g.stop:
		_ = out.send(listenEnded(ln.id))
		params := append(append([]byte(`{"requestId":`), ln.id.Raw()...), `,"reason":"the gateway is shutting down"}`...)
		_ = out.send(jsonrpc.NewNotification(mcpwire.NotifyCancelled, params))
	}
}

// errKeyGone ends a stream whose caller's key was revoked, disabled or
// has expired since the stream opened.
func errKeyGone() *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Unauthorized: the key this stream was opened with is no longer valid")
}

func errNoFilter() *jsonrpc.Error {
	return errInvalidParams("Invalid params: notifications is required")
}

// listenEnded is the listen request's answer when the gateway ends it.
func listenEnded(id jsonrpc.ID) *jsonrpc.Message {
	res := mcpwire.WithResultType(mcpwire.WithSubscriptionID(json.RawMessage("{}"), id), mcpwire.ResultComplete)
	return jsonrpc.NewResult(id, res)
}

// openListener agrees to what the route offers of filter (list changes
// always, as servers come and go; resource updates for URIs the caller may
// read and whose server takes subscriptions, subscribed upstream here) and
// returns the listener with its acknowledgement. It is not fed until it is
// stored in g.listen; closeListener undoes both.
func (g *Gateway) openListener(ctx context.Context, rt route, id jsonrpc.ID, filter mcpwire.SubscriptionFilter, out sender) (*listener, *jsonrpc.Message) {
	ln := &listener{rt: rt, id: id, out: out, subs: map[string]string{}}
	agreed := filter
	agreed.ResourceSubscriptions = nil
	sc := &scope{g: g, rt: &ln.rt, out: ln.out, stateless: true, logLevel: -1}
	for _, uri := range filter.ResourceSubscriptions {
		server, ok := g.routeURI(ctx, &ln.rt, uri)
		if !ok || !ln.rt.allows(catalog.Resources, server, uri) {
			continue
		}
		params := uriParams(uri)
		if e := g.subscribeUpstream(ctx, sc, server, uri, params); e != nil {
			continue
		}
		ln.subs[uri] = server
		agreed.ResourceSubscriptions = append(agreed.ResourceSubscriptions, uri)
	}
	ln.filter = agreed
	ack, _ := json.Marshal(map[string]any{"notifications": agreed})
	return ln, jsonrpc.NewNotification(mcpwire.NotifySubscriptionsAcknowledged, mcpwire.WithSubscriptionID(ack, ln.id))
}

func (g *Gateway) closeListener(ln *listener) {
	g.listen.remove(ln)
	for uri, server := range ln.subs {
		g.unsubscribeUpstream(server, uri)
	}
}

// notifyListeners feeds a server's change to the open listen streams.
func (g *Gateway) notifyListeners(server, method string, params json.RawMessage) {
	g.listen.each(func(ln *listener) { ln.notify(server, method, params) })
}
