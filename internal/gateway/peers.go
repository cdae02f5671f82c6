package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state"
)

// Replies and retries that reach another replica (SPEC S15, issue 14
// §3): the registry, the ask ids that name a replica, the signed hops and
// the credentials a forwarded retry carries are fleetrelay.Peers'. What stays
// here is what a hop means for the gateway: which pending request takes a
// delivered reply, which retry is another replica's, and what the client
// hears. Without fleet keys g.peers is nil, none of this runs and
// /fleet/ is not served.

// newPeers is the fleet membership of g, or nil outside a fleet.
func newPeers(g *Gateway, reg state.Replicas) *fleetrelay.Peers {
	return fleetrelay.NewPeers(fleetrelay.PeersOptions{Registry: reg, Ring: g.ring, ID: g.instance,
		Advertise: g.advertise, Now: g.now, Logger: g.log})
}

// peerParty is p as a fleet hop carries it.
func peerParty(p party) fleet.PeerParty {
	return fleet.PeerParty{Owner: p.owner, Session: p.session, Route: p.route}
}

// FleetSize is how many replicas the registry last listed as live, this
// one included; 0 outside a fleet or before the registry first answered.
// While the registry is unreachable it stays at the last count, which is
// what the rate limits' fallback divides by (SPEC S15).
func (g *Gateway) FleetSize() int { return g.peers.Count() }

// askID is the id of a server-initiated request sent to a client
// (fleetrelay.Peers.AskID): in a fleet it names this replica.
func (g *Gateway) askID() jsonrpc.ID { return g.peers.AskID(randomID()) }

// peerError is what the client hears when its reply is not taken: no
// request waits for it from this client, or the replica it belongs to
// cannot take it. A JSON-RPC error with an HTTP status, under the reply's
// id: a client's transport reads the error of a POSTed reply only from a
// response with an id (go-sdk v1.8.0 takes one without for a broken
// connection), and a client that gets it on a stream ignores a response
// to no request of its own.
type peerError struct {
	status int
	id     jsonrpc.ID
	err    *jsonrpc.Error
}

func (e *peerError) write(w http.ResponseWriter) { writeRPCErrorID(w, e.status, e.id, e.err) }

// answer hands a client's reply, from party by, to the request waiting
// for it: here, or on the replica the id names, where it is taken only if
// that request was sent to by (SPEC S24). A reply that no request pending
// for by takes (unknown, spent, or another caller's) is refused 400, the
// same in every case and on every replica; a reply whose replica is gone
// or unreachable is an error for the client, at once.
func (g *Gateway) answer(ctx context.Context, by party, m *jsonrpc.Message) *peerError {
	notPending := func() *peerError {
		return &peerError{status: http.StatusBadRequest, id: m.ID, err: errNotPending(m.ID, by)}
	}
	replica, ok := fleetrelay.AskReplica(m.ID)
	if g.peers == nil || !ok || replica == g.instance {
		if !g.deliverLocal(by, m) {
			return notPending()
		}
		return nil
	}
	switch g.peers.Deliver(ctx, replica, m, peerParty(by)) {
	case fleetrelay.DeliveredTaken:
		return nil
	case fleetrelay.DeliveredGone:
		return &peerError{status: http.StatusGone, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"the gateway replica that sent request %s is gone; the call that asked has ended with it: make the call again", m.ID.String())}
	case fleetrelay.DeliveredUnreachable:
		return &peerError{status: http.StatusBadGateway, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInternalError,
			"the gateway replica that sent request %s cannot be reached; the call that asked may have ended with it: make the call again", m.ID.String())}
	case fleetrelay.DeliveredNotPending:
		// Nothing waits there for this reply from by: refused, as on one
		// replica.
		return notPending()
	}
	return &peerError{status: http.StatusBadGateway, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInternalError,
		"the gateway replica that sent request %s did not take the reply", m.ID.String())}
}

// isPeerRequest reports whether Middleware hands r to servePeer: an
// internal endpoint, or a request marked as another replica's.
func (g *Gateway) isPeerRequest(r *http.Request) bool { return g.peers.IsPeerRequest(r) }

// servePeer verifies a request from another replica and serves it: a
// delivery, or a forwarded client request (served as if it had come here,
// with the hop marked). Anything whose peer header does not verify is
// 401, before its body is looked at.
func (g *Gateway) servePeer(w http.ResponseWriter, r *http.Request) {
	deliver := r.URL.Path == fleetrelay.DeliverPath
	if strings.HasPrefix(r.URL.Path, fleetrelay.PeerPrefix) && !deliver {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed"})
		return
	}
	if r.Header.Get(fleetrelay.HeaderPeer) == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "peer authentication required"})
		return
	}
	body, err := g.readRequestBody(w, r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	hop, err := g.peers.Verify(r, body)
	if err != nil {
		g.log.Warn("refused a peer request", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err)
		g.metrics.SecurityRefusal(metrics.RefusedPeerAuth)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "peer authentication failed"})
		return
	}
	if deliver && g.tracer != nil {
		// A signed peer's traceparent is the gateway's own: a parent.
		sw := &statusWriter{ResponseWriter: w}
		var end func()
		w = sw
		r, end = g.startHTTPSpan(sw, r)
		defer end()
	}
	if !deliver {
		g.ServeHTTP(w, fleetrelay.Arrived(r, hop, body))
		return
	}
	m, err := jsonrpc.Decode(body)
	if err != nil || !m.IsResponse() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not a JSON-RPC response"})
		return
	}
	if replica, _ := fleetrelay.AskReplica(m.ID); replica != g.instance {
		// Meant for another replica at this URL (two replicas advertising
		// one address): saying so beats dropping it as late.
		writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": "the request id names another replica"})
		return
	}
	from := party{owner: hop.From.Owner, session: hop.From.Session, route: hop.From.Route}
	if !g.deliverLocal(from, m) {
		// The same answer whether nothing waits for that id or it waits
		// for someone else: the forwarding replica refuses its client.
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no request with that id is pending for that party"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keepCredentials, in a fleet, keeps the caller's credential headers in
// ctx before authenticate strips them, for a retry forwarded to the
// replica running its call (fleetrelay.Peers.KeepCredentials).
func (g *Gateway) keepCredentials(ctx context.Context, h http.Header) context.Context {
	return g.peers.KeepCredentials(ctx, h)
}

// forwardRetry sends a 2026-07-28 retry to the replica running its call,
// when that is another live replica, and relays its reply; true: the
// request was answered (relayed, or refused because that replica is gone).
// A retry whose call is here, or that another replica forwarded, is left
// to the caller.
func (g *Gateway) forwardRetry(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
	if g.peers == nil || fleetrelay.IsHop(r) || !mcpwire.AllowsInputRequired(m.Method) {
		return false
	}
	raw, _ := jsonrpc.GetString(m.Params, mcpwire.FieldRequestState)
	st, _, ok := fleetrelay.OpenState(g.ring, raw, identityOf(r).Owner)
	if !ok {
		// Not sealed, or refused where it is served, as any bad state.
		return false
	}
	if g.exchanges.has(st.Exchange) || st.Origin == "" || strings.TrimRight(st.Origin, "/") == g.peers.Self().URL {
		return false
	}
	// The body as decoded (params byte for byte): the original bytes were
	// consumed reading it.
	if !g.peers.Forward(w, r, st.Origin, jsonrpc.Encode(m)) {
		writeRPCErrorID(w, http.StatusBadRequest, m.ID, errInvalidParams(
			"Invalid params: the gateway replica that ran this call is gone; send the request again without requestState"))
	}
	return true
}
