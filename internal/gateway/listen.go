package gateway

import (
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
	out    *streamSender
	subs   map[string]string // subscribed uri -> server
}

// listeners are the open streams (a sync.Map of *listener -> struct{}).
type listeners struct{ m sync.Map }

func (l *listeners) each(fn func(*listener)) {
	l.m.Range(func(k, _ any) bool { fn(k.(*listener)); return true })
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

// serveListen runs one subscriptions/listen request until the client goes
// away or the gateway stops.
func (g *Gateway) serveListen(w http.ResponseWriter, r *http.Request, rt route, m *jsonrpc.Message) {
	filter, ok := mcpwire.ParseSubscriptionFilter(m.Params)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(jsonrpc.Encode(jsonrpc.NewErrorResponse(m.ID, errInvalidParams("Invalid params: notifications is required"))))
		return
	}
	ln := &listener{rt: rt, id: m.ID, out: newStreamSender(false), subs: map[string]string{}}
	// Agree to what the route offers: list changes always (servers come
	// and go), resource updates for URIs the caller may read and whose
	// server takes subscriptions.
	agreed := filter
	agreed.ResourceSubscriptions = nil
	sc := &scope{g: g, rt: &ln.rt, out: ln.out, modern: true, logLevel: -1}
	for _, uri := range filter.ResourceSubscriptions {
		server, ok := g.routeURI(r.Context(), &ln.rt, uri)
		if !ok || !ln.rt.allows(catalog.Resources, server, uri) {
			continue
		}
		params := append(append([]byte(`{"uri":`), jsonrpc.String(uri)...), '}')
		if e := g.subscribeUpstream(r.Context(), sc, server, uri, params); e != nil {
			continue
		}
		ln.subs[uri] = server
		agreed.ResourceSubscriptions = append(agreed.ResourceSubscriptions, uri)
	}
	defer func() {
		for uri, server := range ln.subs {
			g.unsubscribeUpstream(server, uri)
		}
	}()
	ln.filter = agreed

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ack, _ := json.Marshal(map[string]any{"notifications": agreed})
	_ = ln.out.send(jsonrpc.NewNotification(mcpwire.NotifySubscriptionsAcknowledged, mcpwire.WithSubscriptionID(ack, ln.id)))
	g.listen.m.Store(ln, struct{}{})
	defer g.listen.m.Delete(ln)
	go func() {
		// On the gateway's own teardown the listen request is answered,
		// so the client knows the stream ended on purpose.
		select {
		case <-g.stop:
			res := mcpwire.WithResultType(mcpwire.WithSubscriptionID(json.RawMessage("{}"), ln.id), mcpwire.ResultComplete)
			_ = ln.out.send(jsonrpc.NewResult(ln.id, res))
			ln.out.finish()
		case <-ln.out.done:
		}
	}()
	ln.out.run(r.Context(), w, nil)
}

// notifyListeners feeds a server's change to the open listen streams.
func (g *Gateway) notifyListeners(server, method string, params json.RawMessage) {
	g.listen.each(func(ln *listener) { ln.notify(server, method, params) })
}
