package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// The replica registry and replica-to-replica forwarding (SPEC S15, issue
// 14 §3). Behind a load balancer without sticky sessions, the message that
// answers something a replica started may reach any replica:
//
//	client reply to "mcpg-<A>-<random>" (elicitation, sampling, roots) on B
//	  -> B: names replica A -> registry: A's URL
//	  -> POST A/fleet/v1/deliver (HMAC over the reply and who sent it:
//	     owner, session, route) -> A's pending request gets it if it was
//	     sent to that party, else B's client is refused as on one replica
//	2026-07-28 retry whose sealed requestState names origin A, on B
//	  -> B: exchange not here -> registry: A is live
//	  -> the whole request to A (HMAC marks the hop) -> A's reply relayed
//
// Each replica of a fleet (fleet.session_keys, fleet.advertise and a
// shared registry: Options.Replicas) heartbeats its id (the instance id of reports) and fleet.advertise into
// the registry, and leaves it on shutdown. It forwards only to URLs the
// registry lists, never to one taken from a message (even a sealed one),
// and a replica that is gone is a clear error for the client at once:
// the call it ran ended with it. The HMAC proves only that a hop is the
// fleet's; the receiving replica authenticates the client from the
// forwarded headers as for any request. Without fleet keys none of this
// runs and /fleet/ is not served.

// Registry timings: a replica renews every HeartbeatInterval and lapses
// HeartbeatTTL after its last renewal (a crashed one, within seconds).
const (
	HeartbeatInterval = time.Second
	HeartbeatTTL      = 5 * time.Second
	// peerTimeout bounds reaching another replica: the registry, a dial,
	// a delivery. A forwarded retry's reply may take as long as its call.
	peerTimeout = 2 * time.Second
)

// peerHeader carries the fleet.SignPeer value of a replica's request;
// peerClientHeader, on a forwarded client request, the client's address
// as the forwarding replica saw it (covered by the MAC): the receiver
// takes it as the remote address, which anonymous owners and key CIDR
// rules are judged by.
const (
	peerHeader       = "X-Mcpgate-Peer"
	peerClientHeader = "X-Mcpgate-Peer-Client"
)

// On a delivery, who sent the reply (fleet.PeerParty, covered by the
// MAC): the answering caller's owner fingerprint, session hash and route,
// as the forwarding replica authenticated them. The replica the request
// belongs to delivers the reply only to a request sent to that party.
const (
	peerOwnerHeader   = "X-Mcpgate-Peer-Owner"
	peerSessionHeader = "X-Mcpgate-Peer-Session"
	peerRouteHeader   = "X-Mcpgate-Peer-Route"
)

var peerPartyHeaders = []string{peerOwnerHeader, peerSessionHeader, peerRouteHeader}

// peerParty is p as a fleet hop carries it.
func peerParty(p party) fleet.PeerParty {
	return fleet.PeerParty{Owner: p.owner, Session: p.session, Route: p.route}
}

// partyFromHop is the party a delivery's headers name.
func partyFromHop(h http.Header) party {
	return party{owner: h.Get(peerOwnerHeader), session: h.Get(peerSessionHeader), route: h.Get(peerRouteHeader)}
}

// Internal endpoints; served only with fleet keys, only to a request
// whose peer header verifies.
const (
	peerPrefix  = "/fleet/"
	deliverPath = "/fleet/v1/deliver"
)

// peers is this replica's place in the fleet. Safe for concurrent use.
type peers struct {
	g    *Gateway
	reg  state.Replicas
	self state.Replica
	// tr carries every request to another replica: short dial, no proxy
	// from the environment (replicas reach each other directly).
	tr      *http.Transport
	deliver *http.Client

	mu      sync.Mutex
	live    []state.Replica // as last read from the registry
	known   bool            // live has been read at least once
	failing bool            // the registry's last answer was an error (logged once)
	clash   bool            // another replica advertises our URL (logged once)
}

// newPeers is the fleet membership of g, or nil outside a fleet.
func newPeers(g *Gateway, reg state.Replicas) *peers {
	if g.ring == nil || reg == nil {
		return nil
	}
	if g.advertise == "" {
		// Nowhere the others could reach it: it stays out of the
		// registry, and what reaches another replica for it fails there.
		g.log.Warn("fleet.advertise is not set: this replica does not join the replica registry, so replies and 2026-07-28 retries that reach another replica cannot be forwarded here")
		return nil
	}
	p := &peers{g: g, reg: reg, self: state.Replica{ID: g.instance, URL: strings.TrimRight(g.advertise, "/")}}
	p.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: peerTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: peerTimeout,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	p.deliver = &http.Client{Transport: p.tr, Timeout: peerTimeout}
	return p
}

// join registers this replica at once (so that it is known before it
// serves) and renews it until g shuts down, then leaves the registry.
func (p *peers) join() {
	ctx, cancel := context.WithTimeout(p.g.bgCtx, peerTimeout)
	p.beat(ctx)
	cancel()
	p.g.bg.Go(func() {
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-p.g.bgCtx.Done():
				p.leave()
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(p.g.bgCtx, peerTimeout)
				p.beat(ctx)
				cancel()
			}
		}
	})
}

// beat renews this replica and reads who else is live.
func (p *peers) beat(ctx context.Context) {
	err := p.reg.Heartbeat(ctx, p.self, HeartbeatTTL)
	var live []state.Replica
	if err == nil {
		live, err = p.reg.LiveReplicas(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if !p.failing && ctx.Err() == nil {
			p.g.log.Warn("replica registry unavailable; forwarding uses the replicas last seen", "error", err)
		}
		p.failing = true
		return
	}
	if p.failing {
		p.g.log.Info("replica registry available again", "replicas", len(live))
	}
	p.failing = false
	p.live, p.known = live, true
	for _, r := range live {
		if r.URL == p.self.URL && r.ID != p.self.ID && !p.clash {
			// Forwarding by URL would reach the wrong process.
			p.g.log.Error("another live replica advertises this replica's fleet.advertise URL; each replica needs its own", "url", r.URL, "replica", r.ID)
			p.clash = true
		}
	}
}

// leave removes this replica from the registry (a clean shutdown), so the
// others tell its clients it is gone instead of trying to reach it.
func (p *peers) leave() {
	// Detached: it runs because the gateway is shutting down.
	ctx, cancel := p.g.detached(peerTimeout)
	defer cancel()
	if err := p.reg.Deregister(ctx, p.self.ID); err != nil {
		p.g.log.Warn("could not leave the replica registry; the entry lapses by itself", "error", err, "ttl", HeartbeatTTL)
	}
	p.tr.CloseIdleConnections()
}

// count is the number of live replicas last read, 0 before the first
// successful read.
func (p *peers) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.known {
		return 0
	}
	return len(p.live)
}

// liveIDs is the set of replica ids last read from the registry; nil
// before the first read, or outside a fleet (p nil).
func (p *peers) liveIDs() map[string]bool {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.known {
		return nil
	}
	ids := make(map[string]bool, len(p.live))
	for _, r := range p.live {
		ids[r.ID] = true
	}
	return ids
}

// find returns the live replica match selects: from the last read, else
// (a replica that joined since) from the registry now.
func (p *peers) find(ctx context.Context, match func(state.Replica) bool) (state.Replica, bool) {
	p.mu.Lock()
	for _, r := range p.live {
		if match(r) {
			p.mu.Unlock()
			return r, true
		}
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	live, err := p.reg.LiveReplicas(ctx)
	if err != nil {
		return state.Replica{}, false
	}
	p.mu.Lock()
	p.live, p.known = live, true
	p.mu.Unlock()
	for _, r := range live {
		if match(r) {
			return r, true
		}
	}
	return state.Replica{}, false
}

// alive reports whether replica id is in the registry: the last list
// read, else the registry now. An unreachable registry says nothing, so
// the answer is then true.
func (p *peers) alive(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	live, err := p.reg.LiveReplicas(ctx)
	if err != nil {
		return true
	}
	p.mu.Lock()
	p.live, p.known = live, true
	p.mu.Unlock()
	for _, r := range live {
		if r.ID == id {
			return true
		}
	}
	return false
}

// FleetSize is how many replicas the registry last listed as live, this
// one included; 0 outside a fleet or before the registry first answered.
// While the registry is unreachable it stays at the last count, which is
// what the rate limits' fallback divides by (SPEC S15).
func (g *Gateway) FleetSize() int {
	if g.peers == nil {
		return 0
	}
	return g.peers.count()
}

// askID is the id of a server-initiated request sent to a client:
// "mcpg-<random>", 128 random bits that no one else can guess (SPEC S24);
// in a fleet "mcpg-<replica>-<random>", naming this replica, so that any
// replica can route the reply.
func (g *Gateway) askID() jsonrpc.ID {
	if g.peers == nil {
		return jsonrpc.StringID("mcpg-" + randomID())
	}
	return jsonrpc.StringID("mcpg-" + g.instance + "-" + randomID())
}

// askReplica is the replica id an askID names; ok is false for an id that
// is not of the fleet's form.
func askReplica(id jsonrpc.ID) (replica string, ok bool) {
	raw := id.Raw()
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	rest, ok := strings.CutPrefix(raw[1:len(raw)-1], "mcpg-")
	if !ok {
		return "", false
	}
	replica, n, ok := strings.Cut(rest, "-")
	// A replica id is an instance id, the rest randomID's 32 digits: all
	// lower-case hex. Anything else (an escape, found by FuzzAskReplica)
	// names no replica.
	if !ok || replica == "" || len(replica) > 64 || !isLowerHex(replica) || len(n) != 32 || !isLowerHex(n) {
		return "", false
	}
	return replica, true
}

func isLowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

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
	replica, ok := askReplica(m.ID)
	if g.peers == nil || !ok || replica == g.instance {
		if !g.deliverLocal(by, m) {
			return notPending()
		}
		return nil
	}
	gone := &peerError{status: http.StatusGone, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
		"the gateway replica that sent request %s is gone; the call that asked has ended with it: make the call again", m.ID.String())}
	r, ok := g.peers.find(ctx, func(r state.Replica) bool { return r.ID == replica })
	if !ok || r.URL == "" {
		return gone
	}
	body := jsonrpc.Encode(m)
	target, err := peerURL(r.URL, deliverPath)
	if err != nil {
		return gone
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return gone
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(peerOwnerHeader, by.owner)
	req.Header.Set(peerSessionHeader, by.session)
	req.Header.Set(peerRouteHeader, by.route)
	req.Header.Set(peerHeader, g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: target.RequestURI(), From: peerParty(by), Body: body}, g.now()))
	tracing.InjectHeader(ctx, req.Header) // the asking replica's span continues this one
	resp, err := g.peers.deliver.Do(req)
	if err != nil {
		g.log.Warn("could not reach the replica a reply belongs to", "replica", replica, "error", err)
		return &peerError{status: http.StatusBadGateway, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInternalError,
			"the gateway replica that sent request %s cannot be reached; the call that asked may have ended with it: make the call again", m.ID.String())}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusNotFound:
		// Nothing waits there for this reply from by (answered, timed
		// out, cancelled, or sent to someone else): refused, as on one
		// replica.
		g.log.Debug("answer refused by the replica that sent the request", "id", m.ID.String(), "replica", replica)
		return notPending()
	case http.StatusUnauthorized:
		g.log.Error("another replica refused this one's peer authentication: do the replicas have the same fleet.session_keys?", "replica", replica)
	case http.StatusMisdirectedRequest:
		g.log.Error("a reply reached another process at the replica's advertised URL: does each replica have its own fleet.advertise?", "replica", replica, "url", r.URL)
	default:
		g.log.Warn("another replica refused a reply delivery", "replica", replica, "status", resp.StatusCode)
	}
	return &peerError{status: http.StatusBadGateway, id: m.ID, err: jsonrpc.NewError(jsonrpc.CodeInternalError,
		"the gateway replica that sent request %s did not take the reply", m.ID.String())}
}

// peerURL is path on a replica's advertised base URL.
func peerURL(base, path string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("not an http(s) URL")
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u, nil
}

// peerHopKey marks a request another replica forwarded here: it is served
// here, never forwarded again.
type peerHopKey struct{}

func isPeerHop(r *http.Request) bool { return r.Context().Value(peerHopKey{}) != nil }

// isPeerRequest reports whether Middleware hands r to servePeer: an
// internal endpoint, or a request marked as another replica's.
func (g *Gateway) isPeerRequest(r *http.Request) bool {
	return g.peers != nil && (strings.HasPrefix(r.URL.Path, peerPrefix) || r.Header.Get(peerHeader) != "")
}

// servePeer verifies a request from another replica and serves it: a
// delivery, or a forwarded client request (served as if it had come here,
// with the hop marked). Anything whose peer header does not verify is
// 401, before its body is looked at.
func (g *Gateway) servePeer(w http.ResponseWriter, r *http.Request) {
	deliver := r.URL.Path == deliverPath
	if strings.HasPrefix(r.URL.Path, peerPrefix) && !deliver {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed"})
		return
	}
	auth := r.Header.Get(peerHeader)
	if auth == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "peer authentication required"})
		return
	}
	body, err := g.readRequestBody(w, r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	client := r.Header.Get(peerClientHeader)
	var from party // who sent a delivered reply; a forwarded request has none
	if deliver {
		from = partyFromHop(r.Header)
	}
	if err := g.ring.VerifyPeer(auth, fleet.PeerRequest{Method: r.Method, Target: r.URL.RequestURI(), Client: client, From: peerParty(from), Body: body}, g.now()); err != nil {
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
		// Its rate limits were taken where the client sent it.
		r = r.Clone(context.WithValue(callers.WithRateCounted(r.Context()), peerHopKey{}, true))
		r.Header.Del(peerHeader)
		r.Header.Del(peerClientHeader)
		for _, h := range peerPartyHeaders {
			r.Header.Del(h)
		}
		if client != "" {
			r.RemoteAddr = client
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		g.ServeHTTP(w, r)
		return
	}
	m, err := jsonrpc.Decode(body)
	if err != nil || !m.IsResponse() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not a JSON-RPC response"})
		return
	}
	if replica, _ := askReplica(m.ID); replica != g.instance {
		// Meant for another replica at this URL (two replicas advertising
		// one address): saying so beats dropping it as late.
		writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": "the request id names another replica"})
		return
	}
	if !g.deliverLocal(from, m) {
		// The same answer whether nothing waits for that id or it waits
		// for someone else: the forwarding replica refuses its client.
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no request with that id is pending for that party"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// credentialHeaders are the headers a caller authenticates with, which
// authenticate strips before anything travels upstream (S5.4).
var credentialHeaders = []string{"Authorization", callers.HeaderAPIKey}

type peerCredsKey struct{}

// keepCredentials, in a fleet, keeps the caller's credential headers in
// ctx before authenticate strips them: a retry forwarded to the replica
// running its call carries them, and that replica authenticates the
// caller again (the peer MAC proves only the hop).
func (g *Gateway) keepCredentials(ctx context.Context, h http.Header) context.Context {
	if g.peers == nil {
		return ctx
	}
	kept := http.Header{}
	for _, k := range credentialHeaders {
		if v := h.Values(k); len(v) > 0 {
			kept[k] = slices.Clone(v)
		}
	}
	if len(kept) == 0 {
		return ctx
	}
	return context.WithValue(ctx, peerCredsKey{}, kept)
}

// forwardRetry sends a 2026-07-28 retry to the replica running its call,
// when that is another live replica, and relays its reply; true: the
// request was answered (relayed, or refused because that replica is gone).
// A retry whose call is here, or that another replica forwarded, is left
// to the caller.
func (g *Gateway) forwardRetry(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) bool {
	if g.peers == nil || isPeerHop(r) || !mcpwire.AllowsInputRequired(m.Method) {
		return false
	}
	raw, _ := jsonrpc.GetString(m.Params, mcpwire.FieldRequestState)
	tok, sealed := strings.CutPrefix(raw, sealedStatePrefix)
	if !sealed {
		return false
	}
	st, err := g.ring.OpenState(tok, identityOf(r).Owner)
	if err != nil {
		return false // refused where it is served, as any bad state
	}
	if g.exchanges.has(st.Exchange) || st.Origin == "" || strings.TrimRight(st.Origin, "/") == g.peers.self.URL {
		return false
	}
	gone := func() bool {
		writeRPCErrorID(w, http.StatusBadRequest, m.ID, errInvalidParams(
			"Invalid params: the gateway replica that ran this call is gone; send the request again without requestState"))
		return true
	}
	origin := strings.TrimRight(st.Origin, "/")
	peer, ok := g.peers.find(r.Context(), func(p state.Replica) bool { return p.URL == origin && p.ID != g.instance })
	if !ok {
		return gone()
	}
	target, err := peerURL(peer.URL, r.URL.Path)
	if err != nil {
		return gone()
	}
	target.RawQuery = r.URL.RawQuery
	// The body as decoded (params byte for byte): the original bytes were
	// consumed reading it.
	body := jsonrpc.Encode(m)
	failed := false
	proxy := &httputil.ReverseProxy{Transport: g.peers.tr, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}
	proxy.Rewrite = func(pr *httputil.ProxyRequest) {
		pr.Out.URL = target
		// The client's Host and forwarding headers, as the origin would
		// have seen them (challenges and metadata name the public URL).
		for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v := pr.In.Header.Values(h); len(v) > 0 {
				pr.Out.Header[h] = v
			}
		}
		pr.Out.Body, pr.Out.ContentLength, pr.Out.GetBody = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		if kept, ok := r.Context().Value(peerCredsKey{}).(http.Header); ok {
			maps.Copy(pr.Out.Header, kept)
		}
		for _, h := range peerPartyHeaders {
			// A client's own copies: a forwarded request names no
			// party, and its MAC says so.
			pr.Out.Header.Del(h)
		}
		pr.Out.Header.Set(peerClientHeader, r.RemoteAddr)
		pr.Out.Header.Set(peerHeader, g.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: target.RequestURI(), Client: r.RemoteAddr, Body: body}, g.now()))
		// The replica that runs the call continues this replica's span (the
		// client's header otherwise); the client's baggage goes nowhere.
		tracing.InjectHeader(r.Context(), pr.Out.Header)
		pr.Out.Header.Del("Baggage")
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client left
		}
		g.log.Warn("could not reach the replica running a call", "replica", peer.ID, "error", err)
		failed = true
	}
	proxy.ServeHTTP(w, r)
	if failed {
		return gone()
	}
	return true
}
