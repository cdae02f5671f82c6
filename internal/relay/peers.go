package relay

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
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// The replica registry and replica-to-replica hops (SPEC S15, issue 14
// §3). Behind a load balancer without sticky sessions, the message that
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
// shared registry) heartbeats its id (the instance id of reports) and
// fleet.advertise into the registry, and leaves it on shutdown. It
// forwards only to URLs the registry lists, never to one taken from a
// message (even a sealed one), and a replica that is gone is a clear
// error for the client at once: the call it ran ended with it. The HMAC
// proves only that a hop is the fleet's; the receiving replica
// authenticates the client from the forwarded headers as for any request.

// Registry timings: a replica renews every HeartbeatInterval and lapses
// HeartbeatTTL after its last renewal (a crashed one, within seconds).
const (
	HeartbeatInterval = time.Second
	HeartbeatTTL      = 5 * time.Second
	// peerTimeout bounds reaching another replica: the registry, a dial,
	// a delivery. A forwarded retry's reply may take as long as its call.
	peerTimeout = 2 * time.Second
)

// HeaderPeer carries the fleet.SignPeer value of a replica's request;
// HeaderPeerClient, on a forwarded client request, the client's address
// as the forwarding replica saw it (covered by the MAC): the receiver
// takes it as the remote address, which anonymous owners and key CIDR
// rules are judged by.
const (
	HeaderPeer       = "X-Mcpgate-Peer"
	HeaderPeerClient = "X-Mcpgate-Peer-Client"
)

// On a delivery, who sent the reply (fleet.PeerParty, covered by the
// MAC): the answering caller's owner fingerprint, session hash and route,
// as the forwarding replica authenticated them. The replica the request
// belongs to delivers the reply only to a request sent to that party.
const (
	HeaderPeerOwner   = "X-Mcpgate-Peer-Owner"
	HeaderPeerSession = "X-Mcpgate-Peer-Session"
	HeaderPeerRoute   = "X-Mcpgate-Peer-Route"
)

var partyHeaders = []string{HeaderPeerOwner, HeaderPeerSession, HeaderPeerRoute}

// Internal endpoints; served only with fleet keys, only to a request
// whose peer header verifies.
const (
	PeerPrefix  = "/fleet/"
	DeliverPath = "/fleet/v1/deliver"
)

// PeersOptions configure Peers.
type PeersOptions struct {
	Registry state.Replicas
	Ring     *fleet.Ring
	// ID is this replica's id (its instance id); Advertise is
	// fleet.advertise, where the others reach it.
	ID, Advertise string
	Now           func() time.Time
	Logger        *slog.Logger
}

// Peers is this replica's place in the fleet: its registry entry, the
// live replicas last read, and the signed hops to them. Safe for
// concurrent use; a nil *Peers is a replica outside any fleet.
type Peers struct {
	reg  state.Replicas
	ring *fleet.Ring
	self state.Replica
	now  func() time.Time
	log  *slog.Logger
	// tr carries every request to another replica: short dial, no proxy
	// from the environment (replicas reach each other directly).
	tr      *http.Transport
	deliver *http.Client
	loop    sync.WaitGroup // the heartbeat loop Start starts, Close waits for

	mu      sync.Mutex      // mu guards the fields below
	live    []state.Replica // as last read from the registry
	known   bool            // live has been read at least once
	failing bool            // the registry's last answer was an error (logged once)
	clash   bool            // another replica advertises our URL (logged once)
}

// NewPeers is the fleet membership o describes, or nil outside a fleet
// (no ring or no registry) and without fleet.advertise (the others could
// not reach this replica: it stays out of the registry, and what reaches
// another replica for it fails there).
func NewPeers(o PeersOptions) *Peers {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Ring == nil || o.Registry == nil {
		return nil
	}
	if o.Advertise == "" {
		o.Logger.Warn("fleet.advertise is not set: this replica does not join the replica registry, so replies and 2026-07-28 retries that reach another replica cannot be forwarded here")
		return nil
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Peers{reg: o.Registry, ring: o.Ring, now: o.Now, log: o.Logger,
		self: state.Replica{ID: o.ID, URL: strings.TrimRight(o.Advertise, "/")}}
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

// Self is this replica as the registry lists it.
func (p *Peers) Self() state.Replica { return p.self }

// Start registers this replica at once (so that it is known before it
// serves) and renews it until ctx ends, then leaves the registry. Close
// waits for that.
func (p *Peers) Start(ctx context.Context) {
	bctx, cancel := context.WithTimeout(ctx, peerTimeout)
	p.beat(bctx)
	cancel()
	p.loop.Go(func() {
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				p.leave(ctx)
				return
			case <-t.C:
				bctx, cancel := context.WithTimeout(ctx, peerTimeout)
				p.beat(bctx)
				cancel()
			}
		}
	})
}

// Close waits for the heartbeat loop, which ends (leaving the registry)
// with Start's context.
func (p *Peers) Close() {
	if p != nil {
		p.loop.Wait()
	}
}

// beat renews this replica and reads who else is live.
func (p *Peers) beat(ctx context.Context) {
	err := p.reg.Heartbeat(ctx, p.self, HeartbeatTTL)
	var live []state.Replica
	if err == nil {
		live, err = p.reg.LiveReplicas(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if !p.failing && ctx.Err() == nil {
			p.log.Warn("replica registry unavailable; forwarding uses the replicas last seen", "error", err)
		}
		p.failing = true
		return
	}
	if p.failing {
		p.log.Info("replica registry available again", "replicas", len(live))
	}
	p.failing = false
	p.live, p.known = live, true
	for _, r := range live {
		if r.URL == p.self.URL && r.ID != p.self.ID && !p.clash {
			// Forwarding by URL would reach the wrong process.
			p.log.Error("another live replica advertises this replica's fleet.advertise URL; each replica needs its own", "url", r.URL, "replica", r.ID)
			p.clash = true
		}
	}
}

// leave removes this replica from the registry (a clean shutdown), so the
// others tell its clients it is gone instead of trying to reach it.
func (p *Peers) leave(ctx context.Context) {
	// Detached: it runs because the owner is shutting down.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peerTimeout)
	defer cancel()
	if err := p.reg.Deregister(ctx, p.self.ID); err != nil {
		p.log.Warn("could not leave the replica registry; the entry lapses by itself", "error", err, "ttl", HeartbeatTTL)
	}
	p.tr.CloseIdleConnections()
}

// Count is the number of live replicas last read, this one included; 0
// before the first successful read, or outside a fleet (p nil).
func (p *Peers) Count() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.known {
		return 0
	}
	return len(p.live)
}

// LiveIDs is the set of replica ids last read from the registry; nil
// before the first read, or outside a fleet (p nil).
func (p *Peers) LiveIDs() map[string]bool {
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

// Find returns the live replica match selects: from the last read, else
// (a replica that joined since) from the registry now.
func (p *Peers) Find(ctx context.Context, match func(state.Replica) bool) (state.Replica, bool) {
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

// Alive reports whether replica id is in the registry now. An
// unreachable registry says nothing, so the answer is then true.
func (p *Peers) Alive(ctx context.Context, id string) bool {
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

// AskID is the id of a server-initiated request sent to a client:
// "mcpg-<random>", 128 random bits that no one else can guess (SPEC S24);
// in a fleet "mcpg-<replica>-<random>", naming this replica, so that any
// replica can route the reply. random is a new 32-digit lower-case hex
// string.
func (p *Peers) AskID(random string) jsonrpc.ID {
	if p == nil {
		return jsonrpc.StringID("mcpg-" + random)
	}
	return jsonrpc.StringID("mcpg-" + p.self.ID + "-" + random)
}

// AskReplica is the replica id an AskID names; ok is false for an id that
// is not of the fleet's form.
func AskReplica(id jsonrpc.ID) (replica string, ok bool) {
	raw := id.Raw()
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	rest, ok := strings.CutPrefix(raw[1:len(raw)-1], "mcpg-")
	if !ok {
		return "", false
	}
	replica, n, ok := strings.Cut(rest, "-")
	// A replica id is an instance id, the rest 32 random digits: all
	// lower-case hex. Anything else (an escape, found by FuzzAskReplica)
	// names no replica.
	if !ok || replica == "" || len(replica) > 64 || !isLowerHex(replica) || len(n) != 32 || !isLowerHex(n) {
		return "", false
	}
	return replica, true
}

func isLowerHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

// Delivered is the outcome of a reply's delivery to another replica.
type Delivered int

const (
	// DeliveredTaken: the request waiting there took the reply.
	DeliveredTaken Delivered = iota
	// DeliveredGone: the replica is not in the registry (or lists no
	// usable URL): the call that asked ended with it.
	DeliveredGone
	// DeliveredUnreachable: the replica could not be reached.
	DeliveredUnreachable
	// DeliveredNotPending: nothing waits there for this reply from this
	// party (answered, timed out, cancelled, or sent to someone else).
	DeliveredNotPending
	// DeliveredRefused: the replica refused the delivery otherwise
	// (logged: authentication, a misdirected URL, another status).
	DeliveredRefused
)

// Deliver hands a client's reply m, from party from, to the replica its
// id names (AskReplica), signed for that hop.
func (p *Peers) Deliver(ctx context.Context, replica string, m *jsonrpc.Message, from fleet.PeerParty) Delivered {
	r, ok := p.Find(ctx, func(r state.Replica) bool { return r.ID == replica })
	if !ok || r.URL == "" {
		return DeliveredGone
	}
	body := jsonrpc.Encode(m)
	target, err := peerURL(r.URL, DeliverPath)
	if err != nil {
		return DeliveredGone
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return DeliveredGone
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderPeerOwner, from.Owner)
	req.Header.Set(HeaderPeerSession, from.Session)
	req.Header.Set(HeaderPeerRoute, from.Route)
	req.Header.Set(HeaderPeer, p.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: target.RequestURI(), From: from, Body: body}, p.now()))
	tracing.InjectHeader(ctx, req.Header) // the asking replica's span continues this one
	resp, err := p.deliver.Do(req)
	if err != nil {
		p.log.Warn("could not reach the replica a reply belongs to", "replica", replica, "error", err)
		return DeliveredUnreachable
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return DeliveredTaken
	case http.StatusNotFound:
		p.log.Debug("answer refused by the replica that sent the request", "id", m.ID.String(), "replica", replica)
		return DeliveredNotPending
	case http.StatusUnauthorized:
		p.log.Error("another replica refused this one's peer authentication: do the replicas have the same fleet.session_keys?", "replica", replica)
	case http.StatusMisdirectedRequest:
		p.log.Error("a reply reached another process at the replica's advertised URL: does each replica have its own fleet.advertise?", "replica", replica, "url", r.URL)
	default:
		p.log.Warn("another replica refused a reply delivery", "replica", replica, "status", resp.StatusCode)
	}
	return DeliveredRefused
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

// IsPeerRequest reports whether r is for the peer side: an internal
// endpoint, or a request marked as another replica's. Always false
// outside a fleet (p nil).
func (p *Peers) IsPeerRequest(r *http.Request) bool {
	return p != nil && (strings.HasPrefix(r.URL.Path, PeerPrefix) || r.Header.Get(HeaderPeer) != "")
}

// ErrNoPeerAuth: a peer request carries no peer header.
var ErrNoPeerAuth = errors.New("peer authentication required")

// Hop is a verified request from another replica.
type Hop struct {
	// Deliver: a reply delivered to DeliverPath, sent by From. Else a
	// forwarded client request, from Client's address.
	Deliver bool
	From    fleet.PeerParty
	Client  string
}

// Verify checks that r, whose body is body, was signed by a replica of
// the fleet. A failure is ErrNoPeerAuth or the MAC's error.
func (p *Peers) Verify(r *http.Request, body []byte) (Hop, error) {
	auth := r.Header.Get(HeaderPeer)
	if auth == "" {
		return Hop{}, ErrNoPeerAuth
	}
	hop := Hop{Deliver: r.URL.Path == DeliverPath, Client: r.Header.Get(HeaderPeerClient)}
	if hop.Deliver {
		h := r.Header
		hop.From = fleet.PeerParty{Owner: h.Get(HeaderPeerOwner), Session: h.Get(HeaderPeerSession), Route: h.Get(HeaderPeerRoute)}
	}
	if err := p.ring.VerifyPeer(auth, fleet.PeerRequest{Method: r.Method, Target: r.URL.RequestURI(), Client: hop.Client, From: hop.From, Body: body}, p.now()); err != nil {
		return Hop{}, err
	}
	return hop, nil
}

// hopKey marks a request another replica forwarded here: it is served
// here, never forwarded again.
type hopKey struct{}

// Arrived is a forwarded client request as it is served here: r with
// body, the hop marked, its rate limits counted (they were taken where
// the client sent it), the peer headers gone and the client's address
// the remote one.
func Arrived(r *http.Request, hop Hop, body []byte) *http.Request {
	r = r.Clone(context.WithValue(callers.WithRateCounted(r.Context()), hopKey{}, true))
	r.Header.Del(HeaderPeer)
	r.Header.Del(HeaderPeerClient)
	for _, h := range partyHeaders {
		r.Header.Del(h)
	}
	if hop.Client != "" {
		r.RemoteAddr = hop.Client
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return r
}

// IsHop reports whether r was forwarded here by another replica.
func IsHop(r *http.Request) bool { return r.Context().Value(hopKey{}) != nil }

// credentialHeaders are the headers a caller authenticates with, which
// the gateway strips before anything travels upstream (S5.4).
var credentialHeaders = []string{"Authorization", callers.HeaderAPIKey}

type credsKey struct{}

// KeepCredentials, in a fleet, keeps the caller's credential headers in
// ctx before the gateway strips them: a retry forwarded to the replica
// running its call carries them, and that replica authenticates the
// caller again (the peer MAC proves only the hop).
func (p *Peers) KeepCredentials(ctx context.Context, h http.Header) context.Context {
	if p == nil {
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
	return context.WithValue(ctx, credsKey{}, kept)
}

// Forward sends client request r, whose body is body, to the live
// replica at origin (another one), and relays its reply to w. false: no
// live replica is there, or it could not be reached, and nothing was
// written (the caller tells its client the call's replica is gone).
func (p *Peers) Forward(w http.ResponseWriter, r *http.Request, origin string, body []byte) bool {
	origin = strings.TrimRight(origin, "/")
	peer, ok := p.Find(r.Context(), func(x state.Replica) bool { return x.URL == origin && x.ID != p.self.ID })
	if !ok {
		return false
	}
	target, err := peerURL(peer.URL, r.URL.Path)
	if err != nil {
		return false
	}
	target.RawQuery = r.URL.RawQuery
	failed := false
	proxy := &httputil.ReverseProxy{Transport: p.tr, ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)}
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
		if kept, ok := r.Context().Value(credsKey{}).(http.Header); ok {
			maps.Copy(pr.Out.Header, kept)
		}
		for _, h := range partyHeaders {
			// A client's own copies: a forwarded request names no
			// party, and its MAC says so.
			pr.Out.Header.Del(h)
		}
		pr.Out.Header.Set(HeaderPeerClient, r.RemoteAddr)
		pr.Out.Header.Set(HeaderPeer, p.ring.SignPeer(fleet.PeerRequest{Method: http.MethodPost, Target: target.RequestURI(), Client: r.RemoteAddr, Body: body}, p.now()))
		// The replica that runs the call continues this replica's span (the
		// client's header otherwise); the client's baggage goes nowhere.
		tracing.InjectHeader(r.Context(), pr.Out.Header)
		pr.Out.Header.Del("Baggage")
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client left
		}
		p.log.Warn("could not reach the replica running a call", "replica", peer.ID, "error", err)
		failed = true
	}
	proxy.ServeHTTP(w, r)
	return !failed
}
