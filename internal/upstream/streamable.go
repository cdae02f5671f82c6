package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// streamable is the streamable-HTTP client transport (C1.3): every
// outgoing message is one POST; a request's reply comes back as a JSON body
// or on an SSE stream that may carry related notifications and requests
// first. An optional GET stream carries server-initiated messages.
//
// Resumption: a POST stream that breaks before the reply, after the
// upstream gave its events ids, is resumed with GET and Last-Event-ID
// (2025-11-25 polling); so is the GET stream.
type streamable struct {
	httpBase
	url    string
	target *url.URL // url parsed, for newRequestTo; nil: newRequest reports the error
	maxMsg int

	mu        sync.Mutex
	sessionID string
	revision  string
	// The values of the session's headers, made once: every POST shares
	// them (nothing changes a header value in place; Set replaces it).
	sessionHeader  []string
	revisionHeader []string

	listening atomic.Bool // the GET stream is connected
	// stateless: a 2026-07-28 upstream: no session id, no GET stream, the
	// revision and Mcp-Method/Mcp-Name headers on every POST.
	stateless atomic.Bool
	// getAnswered is closed once the first GET stream request has its
	// answer (a stream, a refusal or a failure).
	getAnswered chan struct{}
	getOnce     sync.Once
	// A stateless session's resource subscriptions travel in its listen
	// request (resourceSubscriptions); changing them reopens the stream.
	// Under mu.
	subs         map[string]bool
	listenAbort  context.CancelFunc // ends the current listen stream
	listenGone   bool               // the upstream refused the stream
	listenReopen bool               // the next stream starts at once
	closed       bool               // under mu: close has begun; start no goroutine
	// exchanges are the calls' exchanges in flight (under mu): close
	// cancels them, which aborts their I/O.
	exchanges map[*exchange]struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// Backoff of the GET stream and of POST-stream resumption.
const (
	minStreamBackoff = 250 * time.Millisecond
	maxStreamBackoff = 30 * time.Second
	maxResumes       = 5
)

func newStreamable(c *conn, opts *Options) error {
	srv := opts.Server
	if srv.URL == "" {
		return &Error{Server: c.server, Kind: KindInternal, Err: errors.New("http server has no url")}
	}
	base, err := newHTTPBase(c, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &streamable{
		httpBase:  base,
		url:       srv.URL,
		target:    parseTarget(srv.URL),
		maxMsg:    c.maxMsg,
		exchanges: make(map[*exchange]struct{}),
		ctx:       ctx,
		cancel:    cancel,
	}
	c.t = t
	return nil
}

var _ transport = (*streamable)(nil)

func (t *streamable) initialized(revision string) {
	t.mu.Lock()
	t.revision = revision
	t.revisionHeader = []string{revision}
	t.mu.Unlock()
}

// getWait bounds how long the session setup waits for the GET stream.
const getWait = 2 * time.Second

// start opens the standalone GET stream once the handshake is over, and
// waits (briefly) for the upstream's answer to it: a server that sends its
// requests on that stream (JSON-response mode) would otherwise find no
// stream for a request made by the very first call.
func (t *streamable) start() {
	if t.stateless.Load() {
		return // the era has no GET stream (subscriptions/listen replaces it)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.getAnswered = make(chan struct{})
	t.wg.Go(t.listen)
	t.mu.Unlock()
	tm := time.NewTimer(min(getWait, t.c.timeout))
	defer tm.Stop()
	select {
	case <-t.getAnswered:
	case <-tm.C:
	case <-t.ctx.Done():
	}
}

func (t *streamable) markGetAnswered() {
	t.getOnce.Do(func() { close(t.getAnswered) })
}

// request builds a request with the session headers.
func (t *streamable) request(ctx context.Context, method string, body []byte) (*http.Request, bool, error) {
	var req *http.Request
	if t.target != nil {
		req = t.newRequestTo(ctx, method, t.target, body)
	} else {
		var err error
		if req, err = t.newRequest(ctx, method, t.url, body); err != nil {
			return nil, false, err
		}
	}
	t.mu.Lock()
	sid, rev := t.sessionID, t.revision
	sidv, revv := t.sessionHeader, t.revisionHeader
	t.mu.Unlock()
	// The header names are canonical already (what Set would make them).
	if sid != "" {
		req.Header[mcpwire.HeaderSessionID] = sidv
	}
	if needsVersionHeader(rev) {
		req.Header[mcpwire.HeaderProtocolVersion] = revv
	}
	return req, sid != "", nil
}

func (t *streamable) setStateless(on bool) { t.stateless.Store(on) }

func (t *streamable) post(ctx context.Context, m *jsonrpc.Message) (*http.Response, bool, error) {
	req, withSession, err := t.request(ctx, http.MethodPost, jsonrpc.Encode(m))
	if err != nil {
		return nil, false, err
	}
	if t.stateless.Load() {
		req.Header.Set(mcpwire.HeaderProtocolVersion, mcpwire.Rev20260728)
		if m.Method != "" {
			req.Header.Set("Mcp-Method", m.Method)
		}
		field, ok := mcpwire.NameParam(m.Method)
		if !ok {
			// tasks/get, tasks/update, tasks/cancel: Mcp-Name is the
			// taskId (SEP-2663's routing header).
			field, ok = mcpwire.TaskNameParam(m.Method)
		}
		if ok {
			if v, ok := jsonrpc.GetString(m.Params, field); ok {
				req.Header.Set("Mcp-Name", mcpwire.EncodeHeaderValue(v))
			}
		}
		if m.Method == mcpwire.MethodToolsCall {
			if hs := paramHeadersFrom(ctx); hs != nil {
				args, _ := jsonrpc.Get(m.Params, "arguments")
				mcpwire.SetParamHeaders(req.Header, hs, args)
			}
		}
	}
	req.Header[headerAccept] = acceptPostValue
	req.Header[headerContentType] = contentTypeJSONValue
	resp, err := t.do(req)
	return resp, withSession, err
}

func (t *streamable) send(ctx context.Context, m *jsonrpc.Message, cl *call) error {
	if cl != nil {
		x := &cl.x
		x.vals = ctx
		t.mu.Lock()
		closed := t.closed
		if !closed {
			t.exchanges[x] = struct{}{}
		}
		t.mu.Unlock()
		if closed {
			return &Error{Server: t.c.server, Kind: KindClosed, Err: ErrClosed}
		}
		// The exchange runs on the caller's goroutine: handing it to another
		// goroutine costs a park and a wake-up per call. Call's deadline and
		// cancellation still apply: they cancel the exchange's context, which
		// aborts its I/O. Only reading on after the reply (the drain) moves
		// to the background.
		t.roundTrip(x, m, cl)
		return nil
	}
	resp, withSession, err := t.post(ctx, m)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		err := t.statusError(resp, withSession)
		if sessionExpired(err) {
			t.c.expire(err)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return nil
}

// fail fails cl with err, unless the call is already over: ctx (its
// exchange) was cancelled, or its caller's context ended.
func (t *streamable) fail(ctx context.Context, cl *call, err error) {
	if ctx.Err() != nil || cl.parent.Err() != nil {
		// The call ended first; its own outcome stands. The caller's
		// context is asked too: its end cancels the exchange from
		// another goroutine (roundTrip's AfterFunc, or the context's
		// own call.ContextEnded), so the I/O that
		// cancellation aborts can fail here before the exchange is
		// marked done, and the call must still end as cancelled (and
		// tell the upstream so).
		return
	}
	t.c.failCall(cl, err)
	if sessionExpired(err) {
		t.c.expire(err)
	}
}

// streamDrain bounds how long a POST stream is read after the reply
// (for messages sent after it and so that the connection can be reused).
const streamDrain = time.Second

// roundTrip POSTs a request and reads its reply, on Call's goroutine.
// The HTTP exchange x (tracked by send) is the call's context here: it
// ends when the call ends unanswered (its caller's context ends, its read
// timeout fires, the transport closes), and outlives the call only when
// the call was answered, to finish reading the stream (bounded by
// streamDrain): cutting a response short costs its connection.
func (t *streamable) roundTrip(x *exchange, m *jsonrpc.Message, cl *call) {
	handedOff := false // the drain owns the exchange and its body
	defer func() {
		if !handedOff {
			t.endExchange(x)
		}
	}()
	// The call ends unanswered when the caller's context ends (watched
	// here, unless that context tells the call itself: call.ContextEnded)
	// or its read timeout fires (conn.timeOut cancels x then).
	if cl.watcher == nil {
		stop := context.AfterFunc(cl.parent, func() {
			if !cl.answered.Load() {
				x.cancel()
			}
		})
		defer stop()
	}

	resp, withSession, err := t.post(x, m)
	if err != nil {
		t.fail(x, cl, err)
		return
	}
	defer func() {
		if !handedOff {
			resp.Body.Close()
		}
	}()
	if resp.StatusCode/100 != 2 {
		t.fail(x, cl, t.statusError(resp, withSession))
		return
	}
	t.c.noteServed(m.Method) // taken on: it may run, whatever else expires
	if m.Method == mcpwire.MethodInitialize {
		if err := t.takeSessionID(resp); err != nil {
			t.fail(x, cl, err)
			return
		}
	}
	if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent {
		if !t.listening.Load() {
			t.fail(x, cl, t.c.invalidResponse("HTTP %d without a reply to the request", resp.StatusCode))
			return
		}
		cl.onListen.Store(true)
		return // the reply may come on the GET stream
	}
	switch mediaType(resp) {
	case contentTypeJSON:
		data, err := t.readBody(resp, t.maxMsg)
		if err != nil {
			t.fail(x, cl, err)
			return
		}
		t.c.receiveData(data, cl)
		if t.c.pending(cl) {
			t.fail(x, cl, t.c.invalidResponse("the response carried no reply to the request"))
		}
	case acceptStream:
		handedOff = t.readReplyStream(x, resp.Body, cl)
	default:
		t.fail(x, cl, t.unsupportedContentType(resp))
	}
}

func (t *streamable) takeSessionID(resp *http.Response) error {
	sid := resp.Header.Get(mcpwire.HeaderSessionID)
	if sid == "" {
		return nil
	}
	for i := 0; i < len(sid); i++ {
		if c := sid[i]; c < 0x21 || c > 0x7e {
			return t.c.invalidResponse("session id has characters outside visible ASCII")
		}
	}
	t.mu.Lock()
	t.sessionID = sid
	t.sessionHeader = []string{sid}
	t.mu.Unlock()
	return nil
}

// streamState is the resumption cursor of one SSE stream.
type streamState struct {
	lastID string
	retry  time.Duration
}

// readEvents dispatches the events of one SSE stream until it ends or
// until stop reports true after an event. It returns the read error (io.EOF
// at a clean end).
func (t *streamable) readEvents(r *jsonrpc.SSEReader, via *call, st *streamState, stop func() bool) error {
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, jsonrpc.ErrEventTooLarge) {
				// The event is cut off mid-way: this stream cannot go on
				// (the caller closes it; the session, whose other streams
				// are separate HTTP responses, is not affected). Resuming
				// after the last event would only replay this one.
				st.lastID = ""
				if via != nil {
					t.c.failCall(via, t.c.tooLarge())
				} else {
					t.c.log.Warn("upstream stream event dropped", "error", t.c.tooLarge().Err)
				}
			}
			return err
		}
		if ev.ID != "" {
			st.lastID = ev.ID
		}
		if ev.Retry > 0 {
			st.retry = time.Duration(ev.Retry) * time.Millisecond
		}
		if ev.Name != "" && ev.Name != "message" {
			continue
		}
		if len(ev.Data) == 0 {
			continue // a priming event: only an id for resumption
		}
		t.c.receiveData(ev.Data, via)
		if stop() {
			return nil
		}
	}
}

// readReplyStream reads a POST's SSE stream until the reply to cl arrives,
// resuming the stream with GET when it breaks after event ids were given.
//
// x is the HTTP exchange, the call's context (see roundTrip).
//
// It reports true when it handed the answered stream to a background drain,
// which then owns body and ends x.
func (t *streamable) readReplyStream(x *exchange, body io.ReadCloser, cl *call) bool {
	var st streamState
	done := func() bool { return !t.c.pending(cl) }
	for resumes := 0; ; resumes++ {
		r := jsonrpc.NewSSEReader(body, t.maxMsg)
		err := t.readEvents(r, cl, &st, done)
		if done() || x.Err() != nil {
			if err == nil && cl.answered.Load() && t.drainLater(r, cl, &st, x, body) {
				return true
			}
			body.Close()
			return false
		}
		body.Close()
		if st.lastID == "" || resumes >= maxResumes || errors.Is(err, jsonrpc.ErrEventTooLarge) {
			t.fail(x, cl, t.streamEnded(err))
			return false
		}
		if !sleepCtx(x, retryDelay(st.retry, resumes)) {
			return false
		}
		resp, ok := t.resume(x, cl, st.lastID)
		if !ok {
			return false
		}
		body = resp.Body
	}
}

// drainLater reads the rest of an answered reply stream in the background
// (bounded by streamDrain), for messages sent after the reply and so the
// connection can be reused. It reports false when the transport is
// closing and nothing was started.
func (t *streamable) drainLater(r *jsonrpc.SSEReader, cl *call, st *streamState, x *exchange, body io.ReadCloser) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(func() {
		defer t.endExchange(x)
		drain := time.AfterFunc(streamDrain, x.cancel)
		_ = t.readEvents(r, cl, st, func() bool { return false })
		drain.Stop()
		body.Close()
	})
	return true
}

// endExchange ends x and stops tracking it.
func (t *streamable) endExchange(x *exchange) {
	x.cancel()
	t.mu.Lock()
	delete(t.exchanges, x)
	t.mu.Unlock()
}

// streamEnded is the error for a reply stream that ended without the reply
// (C6.5): CONNECTION_CLOSED "SSE stream ended", keeping a read error.
func (t *streamable) streamEnded(readErr error) *Error {
	rpc := jsonrpc.NewError(mcpwire.CodeConnectionClosed, "SSE stream ended before the reply")
	if readErr == nil || errors.Is(readErr, io.EOF) {
		return &Error{Server: t.c.server, Kind: KindClosed, Err: rpc}
	}
	return &Error{Server: t.c.server, Kind: KindUnreachable, Err: fmt.Errorf("%w: %w", rpc, readErr)}
}

// resume reopens a broken POST stream with GET and Last-Event-ID.
func (t *streamable) resume(ctx context.Context, cl *call, lastID string) (*http.Response, bool) {
	resp, withSession, err := t.get(ctx, lastID)
	if err != nil {
		t.fail(ctx, cl, err)
		return nil, false
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusMethodNotAllowed {
			t.fail(ctx, cl, t.streamEnded(nil))
		} else {
			t.fail(ctx, cl, t.statusError(resp, withSession))
		}
		return nil, false
	}
	if mediaType(resp) != acceptStream {
		resp.Body.Close()
		t.fail(ctx, cl, t.unsupportedContentType(resp))
		return nil, false
	}
	return resp, true
}

func (t *streamable) get(ctx context.Context, lastID string) (*http.Response, bool, error) {
	req, withSession, err := t.request(ctx, http.MethodGet, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set(headerAccept, acceptStream)
	if lastID != "" {
		req.Header.Set(mcpwire.HeaderLastEventID, lastID)
	}
	resp, err := t.do(req)
	return resp, withSession, err
}

// listen keeps the standalone GET stream open until close, reconnecting
// with backoff and Last-Event-ID. 405 means the upstream has none.
func (t *streamable) listen() {
	defer t.markGetAnswered()
	var st streamState
	backoff := minStreamBackoff
	for t.ctx.Err() == nil {
		again, delivered := t.listenOnce(&st)
		if !again {
			return
		}
		if delivered {
			backoff = minStreamBackoff
		}
		delay := backoff
		if st.retry > 0 {
			delay = st.retry
		}
		if !sleepCtx(t.ctx, delay) {
			return
		}
		backoff = min(backoff*2, maxStreamBackoff)
	}
}

// listenOnce opens the GET stream and reads it until it ends. again says
// whether to reconnect; delivered whether any event arrived.
func (t *streamable) listenOnce(st *streamState) (again, delivered bool) {
	// The response headers are due within the read timeout; the stream
	// itself may then stay open for as long as it likes.
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	headers := time.AfterFunc(t.c.timeout, cancel)
	resp, withSession, err := t.get(ctx, st.lastID)
	headers.Stop()
	if err != nil {
		t.markGetAnswered()
		t.c.log.Debug("upstream GET stream failed", "error", err)
		return t.ctx.Err() == nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || mediaType(resp) != acceptStream {
		t.markGetAnswered()
	}
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed:
		t.c.log.Debug("upstream offers no GET stream")
		return false, false
	case resp.StatusCode != http.StatusOK:
		err := t.statusError(resp, withSession)
		if sessionExpired(err) {
			t.c.expire(err)
			return false, false
		}
		t.c.log.Debug("upstream GET stream refused", "status", resp.StatusCode)
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, false
	case mediaType(resp) != acceptStream:
		t.c.log.Warn("upstream GET stream has an unsupported content type", "content_type", mediaType(resp))
		return false, false
	}
	t.listening.Store(true)
	t.markGetAnswered()
	defer t.listening.Store(false)
	err = t.readEvents(jsonrpc.NewSSEReader(resp.Body, t.maxMsg), nil, st, func() bool { delivered = true; return false })
	if t.ctx.Err() == nil {
		t.c.log.Debug("upstream GET stream ended", "error", err)
	}
	return t.ctx.Err() == nil, delivered
}

func retryDelay(retry time.Duration, attempt int) time.Duration {
	if retry > 0 {
		return retry
	}
	return min(minStreamBackoff<<attempt, maxStreamBackoff)
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// close stops the GET stream and ends the upstream session with DELETE,
// bounded by CloseTimeout (C9.1). A failed DELETE is logged, not returned.
func (t *streamable) close() error {
	t.cancel()
	t.mu.Lock()
	t.closed = true
	sid := t.sessionID
	exchanges := make([]*exchange, 0, len(t.exchanges))
	for x := range t.exchanges {
		exchanges = append(exchanges, x)
	}
	t.mu.Unlock()
	for _, x := range exchanges {
		x.cancel() // aborts its I/O; its owner stops tracking it
	}
	if sid != "" && !sessionExpired(t.c.Err()) {
		ctx, cancel := context.WithTimeout(t.c.cleanup, t.c.closeBudget)
		defer cancel()
		if req, _, err := t.request(ctx, http.MethodDelete, nil); err == nil {
			if resp, err := t.do(req); err != nil {
				t.c.log.Debug("upstream session DELETE failed", "error", err)
			} else {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
				resp.Body.Close()
			}
		}
	}
	t.wg.Wait()
	return nil
}
