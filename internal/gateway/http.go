package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/cancelctx"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// readBody reads at most limit bytes; over the limit is errTooLarge.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	if r.ContentLength > 0 {
		// The common case: read exactly what was announced, in one buffer.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, errTooLarge
	}
	return body, nil
}

var errTooLarge = errors.New("request body too large")

// bodyReadTimeout bounds reading one request body; writeTimeout bounds
// writing one JSON response to a client. An SSE event's write is bounded
// by limits.sse_write_timeout instead.
const (
	bodyReadTimeout = 30 * time.Second
	writeTimeout    = 30 * time.Second
)

func (g *Gateway) maxBody() int64 {
	if n := g.conf().MaxBodyBytes; n > 0 {
		return n
	}
	return 4 << 20
}

// decodeBody parses one message or a batch of at most maxBatch messages,
// or returns the JSON-RPC error that refuses the body. One message is
// returned in one, a caller's array (so that it need not be allocated).
func decodeBody(one *[1]*jsonrpc.Message, body []byte, maxBatch int) (msgs []*jsonrpc.Message, batch bool, err error) {
	if jsonrpc.IsBatch(body) {
		ms, errs, err := jsonrpc.DecodeBatch(body)
		if err != nil {
			return nil, true, decodeError(err)
		}
		if e := batchTooLarge(len(ms), maxBatch); e != nil {
			// Refused whole, before any element runs: each one would be
			// an upstream call (S23).
			return nil, true, rpcRefusal(http.StatusBadRequest, e)
		}
		for _, e := range errs {
			if e != nil {
				// One bad element fails the batch: answering part of it
				// would leave the client guessing.
				return nil, true, decodeError(e)
			}
		}
		return ms, true, nil
	}
	m, err := jsonrpc.Decode(body)
	if err != nil {
		return nil, false, decodeError(err)
	}
	one[0] = m
	return one[:], false, nil
}

// batchTooLarge is the one error of a batch over limits.max_batch, or nil.
func batchTooLarge(n, limit int) *jsonrpc.Error {
	if n <= limit {
		return nil
	}
	return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Invalid Request: batch of %d requests exceeds limits.max_batch (%d)", n, limit)
}

// decodeError is the 400 of a body that does not decode, answering the
// id the decoder could read.
func decodeError(err error) *httpError {
	var de *jsonrpc.DecodeError
	if !errors.As(err, &de) {
		de = &jsonrpc.DecodeError{Code: jsonrpc.CodeParseError, Reason: "Parse error"}
	}
	return &httpError{status: http.StatusBadRequest, id: de.ID, rpc: de.RPCError()}
}

func acceptsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func acceptsJSON(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return a == "" || strings.Contains(a, "application/json") || strings.Contains(a, "*/*")
}

// readRequestBody reads a POST body within the configured limit, or
// returns its refusal (413 over the limit). w is only for the body's read
// deadline.
func (g *Gateway) readRequestBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// The server has no overall read timeout (streams are long-lived), so
	// a body that trickles in is bounded here.
	setReadDeadline(w, time.Now().Add(bodyReadTimeout))
	body, err := readBody(r, g.maxBody())
	setReadDeadline(w, time.Time{})
	if err == nil {
		return body, nil
	}
	if errors.Is(err, errTooLarge) {
		return nil, rpcRefusal(http.StatusRequestEntityTooLarge, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Request body exceeds %d bytes", g.maxBody()))
	}
	return nil, unreadable()
}

// unreadable refuses a body that could not be read.
func unreadable() *httpError {
	return rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "Parse error: could not read body"))
}

// setReadDeadline and setWriteDeadline are http.ResponseController's
// methods of the same names (the same unwrapping, errors ignored), without
// the controller a NewResponseController allocates on every call.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	for {
		switch x := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			_ = x.SetReadDeadline(t)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

func setWriteDeadline(w http.ResponseWriter, t time.Time) {
	for {
		switch x := w.(type) {
		case interface{ SetWriteDeadline(time.Time) error }:
			_ = x.SetWriteDeadline(t)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

func (g *Gateway) servePost(w http.ResponseWriter, r *http.Request, rt route) {
	if g.closing.Load() {
		g.writeError(w, r, shuttingDown())
		return
	}
	id := identityOf(r)
	// A 2026-07-28 request ignores Mcp-Session-Id, so it must not wait
	// for that session's slot (nor be refused when it ends): with that
	// header, a session-era request gets its slot once the body is read.
	statelessHeader := mcpwire.IsStatelessRevision(r.Header.Get(mcpwire.HeaderProtocolVersion))
	var sess *session
	var refuse refusal // the session id's refusal, for a session-era request
	if sid := r.Header.Get(mcpwire.HeaderSessionID); sid != "" {
		// Nor does it resume a sealed session here (fleet.go).
		sess, refuse = g.findSession(r.Context(), sid, id, !statelessHeader)
	}
	// The first bytes decide whether the request waits for a slot of the
	// session (S11); the rest of the body is read once it has one, so a
	// waiting request holds no body in memory.
	setReadDeadline(w, time.Now().Add(bodyReadTimeout))
	// A body announced no longer than the peek is read whole at once: it
	// holds no more memory while waiting than the peek would, and costs
	// no reader. Its read error is answered where readRequestBody would
	// answer it, after the slot.
	var (
		body    []byte
		bodyErr error
		peek    []byte
	)
	small := r.ContentLength > 0 && r.ContentLength <= min(peekSize, g.maxBody())
	if small {
		body = make([]byte, r.ContentLength)
		n, err := io.ReadFull(r.Body, body)
		setReadDeadline(w, time.Time{})
		peek = body[:n]
		if err != nil {
			body, bodyErr = nil, unreadable()
		}
	} else {
		br := bufio.NewReaderSize(r.Body, peekSize)
		peek, _ = br.Peek(peekSize)
		r.Body = readCloser{br, r.Body}
	}
	acquired := false
	if sess != nil && !statelessHeader && classifyBody(peek) == bodyRequest {
		if err := acquireSlot(r, sess); err != nil {
			g.writeError(w, r, err)
			return
		}
		acquired = true
		defer sess.Release()
	}
	if !small {
		body, bodyErr = g.readRequestBody(w, r)
	}
	if bodyErr != nil {
		g.writeError(w, r, bodyErr)
		return
	}
	var one [1]*jsonrpc.Message
	msgs, batch, err := decodeBody(&one, body, g.limits().MaxBatch)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	if len(msgs) == 1 && !batch {
		noteMCPParams(r.Context(), msgs[0].Method, msgs[0].Params)
	} else {
		noteMCP(r.Context(), "batch", "")
	}
	if batch {
		for _, m := range msgs {
			if _, stateless := mcpwire.StatelessVersion(m.Params); stateless {
				g.writeError(w, r, rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
					"Invalid Request: JSON-RPC batches are not part of MCP %s; send one request per POST", mcpwire.Rev20260728)))
				return
			}
		}
	}
	if !batch && len(msgs) == 1 && msgs[0].IsRequest() {
		if rev, stateless := mcpwire.StatelessVersion(msgs[0].Params); stateless {
			// The stateless era: no session, whatever the headers say.
			g.serveStateless(w, r, rt, msgs[0], rev)
			return
		}
		if msgs[0].Method != mcpwire.MethodInitialize && sess == nil && refuse == refusedNot &&
			mcpwire.IsStatelessRevision(r.Header.Get(mcpwire.HeaderProtocolVersion)) {
			// The header says 2026-07-28 but the body carries no
			// revision: a stateless request whose _meta is missing
			// (answered -32602, 400), not a session-era request.
			g.serveStateless(w, r, rt, msgs[0], "")
			return
		}
	}
	if refuse != refusedNot && !(refuse != refusedForeign && len(msgs) == 1 && msgs[0].Method == mcpwire.MethodInitialize) {
		// Refused only now: a 2026-07-28 request ignores Mcp-Session-Id,
		// and which era a body speaks is known once it is read. An
		// initialize that still carries its ended session's id is what
		// the 404 asks for: it starts a new session.
		g.writeError(w, r, refuse.err())
		return
	}
	if err := versionHeaderKnown(r); err != nil {
		g.writeError(w, r, err)
		return
	}
	isInit := false
	hasRequest := false
	for _, m := range msgs {
		if m.Method == mcpwire.MethodInitialize {
			isInit = true
		}
		if m.IsRequest() {
			hasRequest = true
		}
	}
	if isInit && (batch || !msgs[0].IsRequest()) {
		g.writeError(w, r, rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Invalid Request: initialize must be sent alone")))
		return
	}
	if sess != nil {
		// The caller's view is computed again on every request: a key
		// changed or revoked since initialize takes effect at once.
		if rt, err = g.narrowFor(r, sess.route); err != nil {
			g.writeError(w, r, err)
			return
		}
		rt = g.withoutTokenless(r, rt)
		if !acquired && needsSlot(msgs) {
			// The scan could not see the method in the first bytes.
			if err := acquireSlot(r, sess); err != nil {
				g.writeError(w, r, err)
				return
			}
			defer sess.Release()
		}
	}
	if !hasRequest {
		// Who may answer here: the session, or the caller on this route
		// (SPEC S24).
		by := partyOf(sess, id.Owner, &rt)
		var lost *peerError // a reply refused, or whose replica is gone (peers.go)
		for _, m := range msgs {
			if m.IsResponse() {
				if e := g.answer(r.Context(), by, m); e != nil {
					lost = e
				}
			} else {
				g.handleNotification(r.Context(), sess, &rt, m)
			}
		}
		if lost != nil {
			lost.write(w)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}

	if isInit {
		if err := g.connectGate(r, rt, msgs[0]); err != nil {
			g.writeError(w, r, err)
			return
		}
	}
	if isInit {
		if !g.admitSession(id.Owner) {
			g.writeError(w, r, refusedBusy.err())
			return
		}
		sess = g.newInitSession(rt, id, msgs[0].Params)
		w.Header().Set(mcpwire.HeaderSessionID, sess.ClientID())
	} else if sess != nil {
		w.Header()[mcpwire.HeaderSessionID] = sess.ClientIDHeader() // canonical already
		g.touchSessionState(sess)
	}
	noteSession(r.Context(), sess)

	// The sender, the scope and the route the scope points at, in one
	// allocation.
	pc := &postCall{rt: rt}
	pc.ps = postSender{w: w, req: r, canSSE: acceptsSSE(r) && !batch, jsonOK: acceptsJSON(r), eventTimeout: g.limits().SSEWriteTimeout, log: g.log}
	ps := &pc.ps
	if sess != nil {
		ps.fallback = sess
	}
	// In fleet mode a session's POST stream is resumable (resume.go): its
	// call outlives a disconnect for the resume window.
	ctx := r.Context()
	if !isInit && !batch && ps.canSSE {
		if ps.res = g.newResumable(sess); ps.res != nil {
			var stop func()
			ctx, stop = g.outliveClient(r.Context(), ps)
			defer stop()
		}
	}
	pc.sc = scope{g: g, sess: sess, rt: &pc.rt, out: ps, owner: id.Owner, single: !batch}
	if !batch {
		pc.sc.own = &pc.own
	}
	sc := &pc.sc
	if sess != nil {
		sc.caps = sess.Caps()
	}

	var replies, refused []*jsonrpc.Message
	for _, m := range msgs {
		switch {
		case m.IsResponse():
			if e := g.answer(r.Context(), sc.party(), m); e != nil {
				// Beside requests, the batch's replies are the answer:
				// the refusal is one of them, under the refused reply's
				// id (peers.go).
				refused = append(refused, jsonrpc.NewErrorResponse(e.id, e.err))
			}
		case m.IsNotification():
			g.handleNotification(r.Context(), sess, &pc.rt, m)
		default:
			reply := g.serve(ctx, sc, m)
			if reply != nil {
				replies = append(replies, reply)
			}
		}
	}
	if isInit {
		if len(replies) != 1 || replies[0].Error != nil {
			// A failed initialize leaves no session behind. A sealed id
			// already went out in the header, and any replica could
			// resume it: it is remembered as ended.
			if sess.Token() != "" {
				g.endSessionLogged(r.Context(), sess)
			} else {
				sess.close()
			}
		} else {
			sess.MarkReady()
			g.markSessionLive(r.Context(), sess)
		}
	}
	if batch {
		ps.finishBatch(append(replies, refused...))
		return
	}
	if len(replies) == 1 {
		ps.finish(replies[0])
		return
	}
	ps.finish(nil)
}

// serve runs one request with in-flight accounting and cancellation.
func (g *Gateway) serve(ctx context.Context, sc *scope, m *jsonrpc.Message) *jsonrpc.Message {
	var (
		res    json.RawMessage
		rpcErr *jsonrpc.Error
	)
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	var own *ownRequest // the single scope's request: kept in its POST's allocation
	if !sc.served() && sc.single {
		own = sc.own
	}
	// The request's own context: what context.WithCancel made before,
	// without its allocations on the usual call (package cancelctx):
	// the upstream calls under it are told when it ends, and it is told
	// when the listener's request context ends.
	var rc *cancelctx.Context
	if own != nil {
		rc = &own.ctx
	} else {
		rc = new(cancelctx.Context)
	}
	rc.Start(ctx)
	defer rc.Cancel()
	ctx = rc
	if sc.sess != nil {
		var inf *sessions.InFlight
		if own != nil {
			inf = &own.inflight
		}
		defer sc.sess.Finish(sc.sess.StartIn(inf, m.ID, rc))
		if m.Method != mcpwire.MethodLoggingSetLevel {
			// A level set through another replica (fleetbus.go).
			if idx, ok := sc.sess.PendingLevel(); ok {
				g.applyLevel(ctx, sc, idx)
			}
		}
	}
	switch {
	case !sc.served() && sc.single:
		sc.end = rc
		sc.single = false // served: a second request gets its own copy
	case !sc.served():
		sc2 := *sc
		sc2.end = rc
		sc = &sc2
	}
	if g.tracer != nil {
		var sp trace.Span
		ctx, sp = g.startMessageSpan(ctx, sc, m)
		defer func() { tracing.EndMessage(ctx, sp, rpcErr) }()
	}
	// Each request takes its share of the caller's rate limit, whatever
	// carried it (limits.go).
	if rpcErr = g.admitRequest(ctx, sc); rpcErr != nil {
		return jsonrpc.NewErrorResponse(m.ID, rpcErr)
	}
	res, rpcErr = g.safeDispatch(ctx, sc, m)
	if errors.Is(ctx.Err(), context.Canceled) && rpcErr != nil {
		rpcErr = jsonrpc.NewError(-32800, "Request cancelled")
	}
	if rpcErr != nil {
		return jsonrpc.NewErrorResponse(m.ID, rpcErr)
	}
	if own != nil {
		own.reply = jsonrpc.Result(m.ID, res)
		return &own.reply
	}
	return jsonrpc.NewResult(m.ID, res)
}

// safeDispatch runs dispatch and turns a panic into an internal error for
// this request alone: the process keeps serving (S14).
func (g *Gateway) safeDispatch(ctx context.Context, sc *scope, m *jsonrpc.Message) (res json.RawMessage, rpcErr *jsonrpc.Error) {
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("panic while handling a request", "method", m.Method, "panic", p, "stack", string(debug.Stack()))
			res, rpcErr = nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "MCP request failed: internal error")
		}
	}()
	return g.dispatch(ctx, sc, m)
}

// postSender answers one POST: JSON when nothing else has to be sent first,
// an SSE stream as soon as a related message must go out before the reply.
// postCall is what servePost allocates for the requests of one POST.
type postCall struct {
	ps  postSender
	sc  scope
	rt  route
	own ownRequest // a single request's (scope.own)
}

type postSender struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	canSSE   bool
	jsonOK   bool
	started  bool // SSE headers written
	done     bool
	fallback *session
	// badRequest: the reply is a refusal of the request itself (HTTP 400).
	badRequest bool
	// eventTimeout bounds writing one SSE event (limits.sse_write_timeout).
	eventTimeout time.Duration
	// req is the POST answered; refused, when the passthrough server of
	// its single-server route refused the caller's token: the error reply
	// is then that HTTP status (S10), not a 200.
	req     *http.Request
	refused *refusalReply
	// limited: a rate limit or budget refused the request (limits.go):
	// the error reply is that HTTP status, with Retry-After.
	limited *limitReply
	// res buffers the stream's events for resumption (fleet mode,
	// resume.go); nil: not resumable. gone: the client went away, events
	// are only buffered.
	res  *fleetrelay.Stream
	gone bool
	log  *slog.Logger
}

func (ps *postSender) startSSE() {
	h := ps.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	ps.w.WriteHeader(http.StatusOK)
	ps.started = true
}

// writeEvent writes one event; final: the reply that ends the stream. A
// resumable stream's event is buffered first, and counts as sent once
// buffered, whether the client is still there or resumes later.
func (ps *postSender) writeEvent(msg *jsonrpc.Message, final bool) error {
	ev := &jsonrpc.Event{Data: jsonrpc.Encode(msg)}
	buffered := false
	if ps.res != nil {
		id, err := ps.res.Append(ev.Data, final)
		if err != nil {
			// Sent without an id: a client that resumes after this
			// point misses it, and is told so (an incomplete buffer).
			ps.log.Warn("could not buffer a stream event for resumption", "error", err)
		} else {
			ev.ID, buffered = id, true
		}
	}
	if ps.gone {
		if buffered {
			return nil
		}
		return errStreamDone
	}
	d := ps.eventTimeout
	if d <= 0 {
		d = writeTimeout
	}
	setWriteDeadline(ps.w, time.Now().Add(d))
	_, err := ps.w.Write(jsonrpc.AppendEvent(nil, ev))
	if f, ok := ps.w.(http.Flusher); ok && err == nil {
		f.Flush()
	}
	if err != nil && ps.res != nil {
		ps.gone = true
		if buffered {
			return nil
		}
	}
	return err
}

func (ps *postSender) send(msg *jsonrpc.Message) error {
	ps.mu.Lock()
	if ps.done || !ps.canSSE {
		ps.mu.Unlock()
		if ps.fallback != nil && ps.fallback.Notify(msg) {
			return nil
		}
		return errStreamDone
	}
	defer ps.mu.Unlock()
	if !ps.started {
		ps.startSSE()
	}
	return ps.writeEvent(msg, false)
}

func (ps *postSender) finish(reply *jsonrpc.Message) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.done = true
	if reply == nil {
		if !ps.started {
			ps.w.WriteHeader(http.StatusAccepted)
		}
		return
	}
	if ps.started {
		_ = ps.writeEvent(reply, true)
		return
	}
	if rr := ps.refused; rr != nil && reply.Error != nil {
		if rr.challenge != "" {
			ps.w.Header().Set("WWW-Authenticate", rr.challenge)
		}
		e := jsonrpc.NewError(callers.CodeForbidden, "Forbidden")
		if rr.status == http.StatusUnauthorized {
			e = jsonrpc.NewError(callers.CodeUnauthorized, "%s", reply.Error.Message)
		}
		writeRPCErrorID(ps.w, rr.status, reply.ID, e)
		return
	}
	status := http.StatusOK
	if lr := ps.limited; lr != nil && reply.Error != nil {
		ps.w.Header().Set("Retry-After", strconv.FormatInt(lr.retryAfter, 10))
		status = lr.status
	} else if reply.Error != nil && (ps.badRequest || mcpwire.IsStatelessErrorCode(reply.Error.Code)) {
		// The stateless era's protocol errors are 400s on HTTP (and only
		// a stateless request can get one), whatever the client accepts.
		status = http.StatusBadRequest
	} else if !ps.jsonOK && ps.canSSE {
		ps.startSSE()
		_ = ps.writeEvent(reply, true)
		return
	}
	buf := replyBuffers.Get().(*[]byte)
	if len(reply.Result) > maxPooledReply {
		if head, ok := reply.AppendResultHead((*buf)[:0]); ok {
			// A large result is written where it lies, between its
			// envelope's head and the closing brace, not copied into
			// a buffer the pool would not keep: a copy the size of
			// the result, and the collections it causes, saved.
			ps.writeJSON(status, len(head)+len(reply.Result)+1, head, reply.Result, closingBrace)
			*buf = head
			replyBuffers.Put(buf)
			return
		}
	}
	body := reply.Append((*buf)[:0])
	ps.writeJSON(status, len(body), body)
	if cap(body) <= maxPooledReply {
		*buf = body
		replyBuffers.Put(buf)
	}
}

// writeJSON writes a JSON reply of n bytes, the parts in order.
func (ps *postSender) writeJSON(status, n int, parts ...[]byte) {
	h := ps.w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = contentLength(n)
	ps.w.WriteHeader(status)
	setWriteDeadline(ps.w, time.Now().Add(writeTimeout))
	for _, p := range parts {
		if _, err := ps.w.Write(p); err != nil { // a Writer retains nothing it was given
			return
		}
	}
}

var closingBrace = []byte{'}'}

// replyBuffers hold the encoding of JSON replies; one larger than
// maxPooledReply is left to the collector, so the pool stays small.
var replyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledReply = 64 << 10

// jsonContentType is the Content-Type of every JSON reply, shared (a
// header value is replaced, never changed in place).
var jsonContentType = []string{"application/json"}

// contentLengths are the Content-Length values of replies shorter than
// their count, made once each and shared as jsonContentType is: a reply
// costs no allocation for its length. What they hold is bounded (a few
// bytes for each length that occurs).
var contentLengths [4 << 10]atomic.Pointer[[]string]

// contentLength is the Content-Length header value of a body of n bytes.
func contentLength(n int) []string {
	if n < 0 || n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}

func (ps *postSender) finishBatch(replies []*jsonrpc.Message) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.done = true
	if len(replies) == 0 {
		ps.w.WriteHeader(http.StatusAccepted)
		return
	}
	ps.w.Header().Set("Content-Type", "application/json")
	ps.w.WriteHeader(http.StatusOK)
	_, _ = ps.w.Write(jsonrpc.EncodeBatch(replies))
}

func (g *Gateway) serveGet(w http.ResponseWriter, r *http.Request) {
	if !acceptsSSE(r) {
		g.writeError(w, r, rpcRefusal(http.StatusNotAcceptable, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Not Acceptable: client must accept text/event-stream")))
		return
	}
	sid := r.Header.Get(mcpwire.HeaderSessionID)
	if sid == "" {
		g.writeError(w, r, rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Bad Request: Mcp-Session-Id header is required")))
		return
	}
	sess, refuse := g.streamSession(r.Context(), sid, identityOf(r), true)
	if refuse != refusedNot {
		g.writeError(w, r, refuse.err())
		return
	}
	noteSession(r.Context(), sess)
	fleet := g.fleetOn() && sess.Token() != ""
	if last := r.Header.Get("Last-Event-ID"); last != "" && fleet {
		// Resuming a POST stream (resume.go); without fleet mode no
		// event has an id, and the header is ignored as before.
		g.serveResume(w, r, sess, last)
		return
	}
	st, done := g.openStream(w, jsonrpc.ID{}, false)
	if st == nil {
		return
	}
	if fleet {
		// Any replica, the newest stream wins (fleetbus.go).
		version, ok := g.openFleetStream(r.Context(), sess, st)
		if !ok {
			done()
			g.writeError(w, r, rpcRefusal(http.StatusConflict, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
				"Conflict: a newer GET stream of this session is open")))
			return
		}
		g.keepFleetStream(sess, st, version)
	} else if !sess.AttachStream(st) {
		done()
		g.writeError(w, r, rpcRefusal(http.StatusConflict, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Conflict: only one GET stream per session")))
		return
	}
	// What the stream's end undoes, whoever ends it: this handler, or
	// the held stream after it returned.
	release := func() {
		sess.DetachStream(st)
		if fleet {
			st.Finish()
		}
		done()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set(mcpwire.HeaderSessionID, sess.ClientID())
	sw := holdable(w)
	if sw != nil {
		// The connection ends with the stream (held.go).
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	g.watchCaller(r.Context(), st.done, st.Finish)
	if sw != nil && g.hold(w, sw, st, release, nil) {
		return
	}
	defer release()
	st.run(r.Context(), w, g.stop)
}

func (g *Gateway) serveDelete(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(mcpwire.HeaderSessionID)
	if sid == "" {
		g.writeError(w, r, rpcRefusal(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Bad Request: Mcp-Session-Id header is required")))
		return
	}
	fs, local, sealed := g.openSessionID(sid)
	if sess, ok := g.sessions.Live(sid, local, sealed); ok {
		// Ownership first (S4.2): a non-owner cannot end the session.
		if sess.CheckOwner(identityOf(r).Owner) != nil {
			g.metrics.SecurityRefusal(metrics.RefusedForeignSession)
			g.writeError(w, r, refusedForeign.err())
			return
		}
		// It waits for nothing: the session's calls in flight are
		// cancelled (upstream too), and its id answers 404 from now on
		// (S8.2, S11). A sealed id the store does not remember as ended
		// is refused, and left as it was.
		switch err := g.endSessionFor(r.Context(), sess); {
		case errors.Is(err, ErrNotRecorded):
			g.refuseUnrecorded(w, err)
			return
		case err != nil:
			g.log.Warn("could not remember an ended session", "error", err)
		}
		if sess.Token() != "" {
			// Its copies on other replicas end before the answer too
			// (fanout.go).
			g.announceEnded(r.Context(), sess.Hash())
		}
	} else if sealed {
		mine, err := g.deleteSealed(r.Context(), fs, local, identityOf(r))
		if !mine {
			// Another replica's session (or one from before a restart):
			// the id says whose it is, so the same rule holds.
			g.metrics.SecurityRefusal(metrics.RefusedForeignSession)
			g.writeError(w, r, refusedForeign.err())
			return
		}
		if err != nil {
			g.refuseUnrecorded(w, err)
			return
		}
	}
	// Idempotent (S8.1): an unknown id is already terminated.
	writeJSON(w, http.StatusOK, bodyTerminated)
}

// serveLegacySSE serves the 2024-11-05 HTTP+SSE transport's GET stream.
func (g *Gateway) serveLegacySSE(w http.ResponseWriter, r *http.Request, rt route) {
	if r.Method != http.MethodGet {
		g.writeError(w, r, methodNotAllowed("GET"))
		return
	}
	if g.closing.Load() {
		g.writeError(w, r, shuttingDown())
		return
	}
	st, done := g.openStream(w, jsonrpc.ID{}, true)
	if st == nil {
		return
	}
	id := identityOf(r)
	if !g.admitSession(id.Owner) {
		done()
		g.writeError(w, r, refusedBusy.err())
		return
	}
	sess := g.newSession(rt, id, false)
	sess.AttachStream(st)
	// The session lives as long as its stream, whoever ends it: this
	// handler, or the held stream after it returned (held.go).
	release := func() {
		sess.close()
		done()
	}
	// In a fleet, every replica's administrators see it (fleetbus.go).
	g.touchSessionState(sess)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	sw := holdable(w)
	if sw != nil {
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	endpoint := rt.path + "/sse/messages?session_id=" + sess.ID()
	_, _ = w.Write(jsonrpc.AppendEvent(nil, &jsonrpc.Event{Name: "endpoint", Data: []byte(endpoint)}))
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	g.watchCaller(r.Context(), st.done, st.Finish)
	if sw != nil && g.hold(w, sw, st, release, nil) {
		return
	}
	defer release()
	st.run(r.Context(), w, g.stop)
}

// serveLegacyMessage accepts a POST for a legacy SSE session; replies go
// out on that session's stream.
func (g *Gateway) serveLegacyMessage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.writeError(w, r, methodNotAllowed("POST"))
		return
	}
	sid := r.URL.Query().Get("session_id")
	if sid == "" {
		sid = r.URL.Query().Get("sessionId")
	}
	// The same ownership rule as streamable HTTP (S4): the session id in
	// a URL is no capability. Replies travel on the session's stream, so
	// an unknown id cannot be served as a sessionless request: 404.
	sess, refuse := g.streamSession(r.Context(), sid, identityOf(r), false)
	if refuse != refusedNot {
		g.writeError(w, r, refuse.err())
		return
	}
	g.touchSessionState(sess)
	body, err := g.readRequestBody(w, r)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	var one [1]*jsonrpc.Message
	msgs, _, err := decodeBody(&one, body, g.limits().MaxBatch)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	st, _ := sess.Stream().(*streamSender)
	if st == nil {
		g.writeError(w, r, refusedUnknown.err())
		return
	}
	rt, err := g.narrowFor(r, sess.route)
	if err != nil {
		g.writeError(w, r, err)
		return
	}
	// Answers to server-initiated requests first: a call in flight may be
	// waiting for one, and with it for a slot this POST's requests want.
	// Only a request sent to this session takes one (SPEC S24); a refusal
	// goes where this transport's replies go, on the session's stream
	// (the POST is only acknowledged: a client that posted a late answer
	// keeps its connection).
	for _, m := range msgs {
		if m.IsResponse() {
			if e := g.answer(r.Context(), sessionParty(sess), m); e != nil {
				_ = st.send(jsonrpc.NewErrorResponse(e.id, e.err))
			}
		}
	}
	// The session's in-flight bound holds here too (S11), and the POST
	// waits for its requests' slots before it is acknowledged: a client
	// flooding the session is slowed by its own POSTs, as on streamable
	// HTTP, instead of piling up goroutines and bodies behind a 202. Each
	// request starts as soon as it has its slot, so a batch larger than
	// the bound still goes through.
	for _, m := range msgs {
		switch {
		case m.IsResponse():
		case m.IsNotification():
			g.handleNotification(context.WithoutCancel(r.Context()), sess, &rt, m)
		default:
			if err := acquireSlot(r, sess); err != nil {
				g.writeError(w, r, err)
				return
			}
			sc := &scope{g: g, sess: sess, rt: &rt, out: st, caps: sess.Caps()}
			// The reply travels on the stream, so the call must outlive
			// this POST; it ends with the session instead. It keeps every
			// value of the POST's context (the caller, its identity, its
			// credentials, the trace), only not its cancellation: the call
			// is this caller's as on any other transport.
			callCtx := context.WithoutCancel(r.Context())
			// A task Close waits for; its inner goroutine ends with it.
			started := g.tasks.start(func() {
				defer sess.Release()
				ctx, cancel := context.WithCancel(callCtx)
				defer cancel()
				go func() {
					select {
					case <-st.done:
						cancel()
					case <-ctx.Done():
					}
				}()
				if reply := g.serve(ctx, sc, m); reply != nil {
					_ = st.send(reply)
				}
			})
			if !started {
				sess.Release() // the gateway closed: the call is not run
			}
		}
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte("Accepted"))
}

// refusal is why a request's session id is refused, if it is.
type refusal int

const (
	refusedNot     refusal = iota // served: a session, or (unknown_id: serve) none
	refusedForeign                // another owner's session (S4.2, 403)
	refusedUnknown                // no session this gateway serves (S8.3, 404)
	refusedEnded                  // remembered as deleted, expired or terminated (S8.2, 404)
	refusedBusy                   // a sealed id to resume, its owner at the cap (S4.3, 429)
	// refusedUnverified: whether it was ended cannot be checked now (the
	// store does not answer) and the replica may not assume it was not
	// (unheard.go; 503).
	refusedUnverified
)

// err is the answer to a refused session id.
func (rf refusal) err() *httpError {
	switch rf {
	case refusedForeign:
		return jsonRefusal(http.StatusForbidden, bodyForeignSession)
	case refusedBusy:
		return jsonRefusal(http.StatusTooManyRequests, bodyTooManySession)
	case refusedUnverified:
		return rpcRefusal(http.StatusServiceUnavailable, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s", msgUnverified)).
			withHeader("Retry-After", "1")
	case refusedEnded:
		return rpcRefusal(http.StatusNotFound, jsonrpc.NewError(codeSessionNotFound,
			"Session not found: it was terminated or has expired; send initialize to start a new session"))
	}
	return rpcRefusal(http.StatusNotFound, jsonrpc.NewError(codeSessionNotFound,
		"Session not found: this gateway did not issue it or can no longer open it; send initialize to start a new session"))
}

// write answers rf on w (where no request is at hand for writeError).
func (rf refusal) write(w http.ResponseWriter) { rf.err().write(w) }

// msgUnverified is the 503 of refusedUnverified, to try again.
const msgUnverified = "Service Unavailable: this gateway cannot check now whether the session was ended (its store does not answer); try again shortly"

// codeSessionNotFound is the JSON-RPC code of the 404 for a session id
// that is gone. The MCP transport defines only the status; the gateway
// keeps the code of its other transport-level refusals (the TypeScript
// SDK's -32001 is the gateway's timeout and unauthorized code).
const codeSessionNotFound = jsonrpc.CodeInvalidRequest

// findSession resolves the session a request names (S4, S8): a live
// session of another owner is refused before anything else, so a
// non-owner learns nothing and cleans up nothing; an id remembered as
// ended is refused; any other unknown id is refused too, unless
// sessions.unknown_id is serve, which returns neither a session nor a
// refusal (the request is served as a new sessionless one).
//
// With fleet.session_keys, a sealed id this replica does not hold is
// resumed (fleet.go): its owner is checked first, from the id, then
// whether it was ended. resume false (a legacy SSE message, whose session
// lives with its stream; a 2026-07-28 request, which ignores the id)
// treats it as unknown instead.
func (g *Gateway) findSession(ctx context.Context, sid string, id *Identity, resume bool) (*session, refusal) {
	fs, local, sealed := g.openSessionID(sid)
	if sess, ok := g.sessions.Live(sid, local, sealed); ok {
		if sess.CheckOwner(id.Owner) != nil {
			g.metrics.SecurityRefusal(metrics.RefusedForeignSession)
			return nil, refusedForeign
		}
		// Ended on another replica while this one could not hear it
		// (unheard.go)?
		if rf := g.checkHeld(ctx, sess); rf != refusedNot {
			return nil, rf
		}
		return sess, refusedNot
	}
	if sealed && fleet.OwnerHash(id.Owner) != fs.Owner {
		g.metrics.SecurityRefusal(metrics.RefusedForeignSession)
		return nil, refusedForeign
	}
	if !sealed {
		local = sid
	}
	ended, err := g.terms.Ended(ctx, local)
	switch {
	case err != nil && sealed:
		// Any replica may have ended it: resuming it unchecked could
		// reopen what its client or an administrator closed.
		g.log.Warn("cannot check whether a sealed session was ended (the store does not answer): refused", "error", err)
		return nil, refusedUnverified
	case err != nil:
		// A local id: only this process could have ended it.
		g.log.Warn("terminated-session lookup failed", "error", err)
	case ended:
		return nil, refusedEnded
	}
	if sealed && resume {
		if g.idleEverywhere(ctx, fs, local) {
			// Idle on every replica for longer than the idle timeout
			// (its shared state lapsed): expired, as on one process.
			return nil, refusedUnknown
		}
		return g.resumeSession(sid, fs, local, id)
	}
	if g.conf().Sessions.UnknownID == config.UnknownIDServe {
		return nil, refusedNot
	}
	return nil, refusedUnknown
}

// streamSession is findSession for a request that needs a live
// session (a stream, or a message whose reply travels on one): a stream
// has no sessionless form, so an unknown id is refused whatever
// sessions.unknown_id says.
func (g *Gateway) streamSession(ctx context.Context, sid string, id *Identity, resume bool) (*session, refusal) {
	sess, refuse := g.findSession(ctx, sid, id, resume)
	if sess == nil && refuse == refusedNot {
		refuse = refusedUnknown
	}
	return sess, refuse
}

// acquireSlot waits for one of the session's slots (S11). When the
// session ends first the request is refused 404 (S8.2); when the client
// goes away, errClientGone: nothing is written.
func acquireSlot(r *http.Request, sess *session) error {
	ok, ended := sess.AcquireFor(r.Context())
	switch {
	case ended:
		return refusedEnded.err()
	case !ok:
		return errClientGone
	}
	return nil
}

// needsSlot reports whether decoded messages include one that must wait
// for a slot of the session (anything but responses and cancellations).
func needsSlot(msgs []*jsonrpc.Message) bool {
	for _, m := range msgs {
		if !m.IsResponse() && m.Method != mcpwire.NotifyCancelled {
			return true
		}
	}
	return false
}

// readCloser reads through a buffered reader and closes the original body.
type readCloser struct {
	io.Reader
	io.Closer
}
