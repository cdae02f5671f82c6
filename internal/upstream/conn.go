package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// logKeyServer is the attribute naming the upstream in every log line.
const logKeyServer = "server"

// transport moves messages between a conn and one upstream server. The conn
// owns ids, pending calls and dispatch; a transport only frames and carries
// bytes, and hands every inbound message to conn.receiveData.
type transport interface {
	// send writes m upstream. When cl is non-nil, m is the request of that
	// call and ctx ends when the call is over (on streamable HTTP, which
	// has the call's exchange cl.x for that, ctx is the caller's and does
	// not end with the read timeout): a transport that reads the
	// reply on the response to its own write (streamable HTTP) may finish in
	// the background and report a failure with conn.failCall. A returned
	// error fails the call at once.
	send(ctx context.Context, m *jsonrpc.Message, cl *call) error
	// close stops the transport and waits for its goroutines. It is called
	// once, after the conn has been shut down.
	close() error
}

// afterInit is implemented by transports that need to know the negotiated
// revision or start work once the handshake is over.
type afterInit interface {
	initialized(revision string)
}

// conn is the transport-independent half of a session: request ids, the
// pending-call table, reply matching, cancellation and timeouts, and the
// dispatch of upstream notifications and requests to the Handler. It
// implements Session.
type conn struct {
	server  string
	target  string // URL (without query) or command, for the timeout warning
	log     *slog.Logger
	handler Handler
	// origin is the Handler's origin for messages no call explains
	// (Options.DefaultOrigin; under mu: a reused bound session changes
	// party). asked is set once a server request was handed to a party.
	origin  any
	asked   atomic.Bool
	timeout time.Duration
	maxMsg  int
	t       transport

	nextID atomic.Int64
	// served is set once the upstream took on a request (a reply, or for
	// streamable HTTP a 2xx answer to the POST), handshake excluded, and
	// servedCh is closed then: only whether, never how many, is read, so
	// the calls of a pooled session do not all write one counter. They tell an upstream that expires
	// sessions it has used from one that refuses every session outright
	// (Manager.Call): barrenRun, shared by the sessions of a server,
	// counts those in a row that expired without serving anything (each
	// counted once, by barrenCounted), and is reset by one that serves.
	served        atomic.Bool
	servedCh      chan struct{}
	barrenRun     *atomic.Int32
	barrenCounted atomic.Bool

	mu       sync.Mutex
	calls    map[int64]*call
	dl       deadlines // the read timeouts of calls, under mu
	seq      uint64
	incoming map[string]context.CancelFunc // server-initiated requests being handled, by raw id
	err      error                         // set once, when the session ends
	// fruitful: the upstream ended the session (HTTP 404, C6.4; calls
	// sent before may still get their own answers) when it had served a
	// request, or had others in flight. Set only by expire.
	fruitful bool
	drained  chan struct{} // closed once the session has ended and no call is pending
	// retiring: the session's server was removed or replaced (retire); it
	// takes no new request, and idle is closed once none is pending.
	retiring bool
	idle     chan struct{}
	info     *InitInfo
	// stateless is set for a 2026-07-28 upstream: every request carries
	// the era's _meta.
	stateless *statelessMeta

	done      chan struct{}
	ctx       context.Context // ends with the session; parent of Handler contexts
	cancel    context.CancelFunc
	wg        sync.WaitGroup // Handler goroutines and background sends
	draining  bool           // under mu: Close is waiting on wg, start no more
	closeOnce sync.Once
	closeErr  error
	// cleanup is the parent of every cleanup step (cancellations sent
	// upstream, the DELETE of the session): Close ends it closeBudget
	// after it starts, so all steps share one budget (C9.1).
	bg            sync.WaitGroup // cleanup messages (background)
	closingBG     bool           // under mu: Close started; no new background work
	cleanup       context.Context
	cleanupCancel context.CancelFunc
	closeBudget   time.Duration
}

var _ Session = (*conn)(nil)

// call is one request in flight.
type call struct {
	id     int64
	method string
	origin any
	seq    uint64 // order of issue, for origin attribution
	token  string // raw params._meta.progressToken, "" if none
	// answered is set once a response (result or error) was delivered.
	answered atomic.Bool
	// onListen: the upstream took the request (HTTP 202) and its reply is
	// due on a stream of the session (streamable HTTP's GET stream, legacy
	// SSE's one stream), not on a response of its own.
	onListen atomic.Bool
	budget   time.Duration
	// deadline ends the read timeout (restarted by progress for this
	// call); prev and next link the connection's deadline list
	// (deadlines, under the conn's mu).
	deadline   time.Time
	prev, next *call
	// res is the call's outcome, set once by whoever removes the call
	// from the pending table (deliver), before done is signalled.
	res  callResult
	done chan struct{} // buffered; see deliver
	// parent is the caller's context: the exchange watches it (roundTrip)
	// rather than the call's own, which only adds the read timeout.
	parent context.Context
	// x is the call's HTTP exchange on a streamable transport (send).
	x exchange
	// cancel ends the call's send context, on the transports that have
	// one (see call); nil on streamable HTTP.
	cancel context.CancelCauseFunc
	// watcher is the caller's context when it tells the call itself that
	// it ended (ContextEnded; package cancelctx); nil: the call watches it.
	watcher cancelctx.Watcher
	// timedOut is set once the read timeout fired (timeOut).
	timedOut atomic.Bool
	// req is the request sent, allocated with the call.
	req jsonrpc.Message
}

// deliver hands r to the waiting Call; only the remover of cl from the
// pending table calls it, once. (A channel of struct{} is one allocation;
// one of callResult, which holds pointers, is two.)
func (cl *call) deliver(r callResult) {
	cl.res = r
	cl.done <- struct{}{}
}

type callResult struct {
	msg *jsonrpc.Message
	err error
}

func newConn(opts *Options) *conn {
	srv := opts.Server
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	timeout := srv.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	maxMsg := opts.MaxMessageBytes
	if maxMsg <= 0 {
		maxMsg = DefaultMaxMessageBytes
	}
	target := srv.Command
	if srv.URL != "" {
		target = redactURL(srv.URL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cleanup, cleanupCancel := context.WithCancel(context.Background())
	return &conn{
		cleanup:       cleanup,
		cleanupCancel: cleanupCancel,
		closeBudget:   defaultCloseBudget,
		server:        srv.Name,
		target:        target,
		log:           logger.With(logKeyServer, srv.Name),
		handler:       opts.Handler,
		origin:        opts.DefaultOrigin,
		timeout:       timeout,
		maxMsg:        maxMsg,
		calls:         make(map[int64]*call),
		servedCh:      make(chan struct{}),
		barrenRun:     opts.barrenRun,
		drained:       make(chan struct{}),
		incoming:      make(map[string]context.CancelFunc),
		done:          make(chan struct{}),
		ctx:           ctx,
		cancel:        cancel,
	}
}

// defaultCloseBudget is CloseTimeout; tests shorten it.
var defaultCloseBudget = CloseTimeout

// errReadTimeout is the outcome (and the send context's cancellation
// cause) of a call whose read timeout fired.
var errReadTimeout = errors.New("read timeout")

// timeoutError is the Err of a KindTimeout *Error.
type timeoutError struct {
	method string
	budget time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("%s timed out after %s", e.method, formatBudget(e.budget))
}

func (e *timeoutError) Timeout() bool { return true }

// formatBudget writes a duration in seconds ("0.5s", "60s"), the unit
// operators configure and read.
func formatBudget(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// Call implements Session. Within a traced request it is a client span,
// and the request carries the gateway's trace context (internal/tracing).
func (c *conn) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	ctx, sp := tracing.StartClient(ctx, c.server, method, params, c.netTransport())
	params = tracing.OutgoingParams(ctx, params)
	res, err := c.call(ctx, method, params)
	if sp != nil {
		kind := ""
		if err != nil {
			kind = string(KindOf(err))
		}
		tracing.End(sp, err, kind)
	}
	return res, err
}

// netTransport is network.transport of the connection's spans.
func (c *conn) netTransport() string {
	if _, ok := c.t.(*stdio); ok {
		return "pipe"
	}
	return "tcp"
}

func (c *conn) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("upstream %s: %s: %w", c.server, method, err)
	}
	if method == mcpwire.MethodResourcesSubscribe || method == mcpwire.MethodResourcesUnsubscribe {
		if rs, ok := c.t.(resourceSubscriber); ok && c.statelessInfo() != nil {
			// The stateless era has no such methods: subscriptions ride
			// on the session's subscriptions/listen stream.
			uri, _ := jsonrpc.GetString(params, "uri")
			if err := rs.setResourceSubscription(uri, method == mcpwire.MethodResourcesSubscribe); err != nil {
				return nil, err
			}
			return json.RawMessage("{}"), nil
		}
	}
	cl := &call{
		id:     c.nextID.Add(1),
		method: method,
		origin: OriginFrom(ctx),
		budget: c.timeout,
		done:   make(chan struct{}, 1),
		parent: ctx,
	}
	if len(params) > 0 {
		if tok, ok := jsonrpc.GetPath(params, "_meta", "progressToken"); ok {
			cl.token = string(tok)
		}
	}
	// The call's own context, ended by its read timeout too, is made only
	// for a transport whose send watches a context (stdio's queue, the
	// legacy SSE POST). Streamable HTTP's send watches the call's exchange
	// instead, which the timer cancels (timeOut): a context per call, its
	// cancel func and its Done channel less on the usual path.
	//
	// A caller's context that ends with a cancelctx.Watcher (the
	// gateway's request context) tells the call that it ended
	// (ContextEnded): nothing is registered on it then, and the send
	// context's parent is cut from it (ContextEnded cancels the send
	// context instead).
	cl.watcher = cancelctx.WatcherOf(ctx)
	sendCtx := ctx
	if _, ok := c.t.(*streamable); !ok {
		parent := ctx
		if cl.watcher != nil {
			parent = context.WithoutCancel(ctx)
		}
		var cancel context.CancelCauseFunc
		sendCtx, cancel = context.WithCancelCause(parent)
		defer cancel(nil)
		cl.cancel = cancel
	}
	if err := c.register(cl); err != nil {
		return nil, err
	}
	if cl.watcher != nil {
		if !cl.watcher.Watch(cl) {
			cl.ContextEnded() // ended just now
		}
		defer cl.watcher.Unwatch(cl)
	}

	if sm := c.statelessInfo(); sm != nil {
		params = sm.apply(ctx, params)
	}
	cl.req = jsonrpc.Message{ID: jsonrpc.Int64ID(cl.id), Method: method, Params: params}
	msg := &cl.req
	// The caller's context too: its cancellation aborts the exchange's
	// I/O, which can fail send before sendCtx (its child, or cancelled by
	// ContextEnded) is done.
	if err := c.t.send(sendCtx, msg, cl); err != nil && !cl.timedOut.Load() && ctx.Err() == nil {
		c.forget(cl)
		// A reply or a shutdown may have raced the failed write; either
		// is a better answer than the write error.
		select {
		case <-cl.done:
			return c.outcome(cl)
		default:
		}
		return nil, err
	}

	// The read timeout answers through cl.done as a reply would (timeOut):
	// only the caller's end is watched besides. Streamable HTTP's send
	// returns with the reply in: that is looked for first, as the caller's
	// Done may be a channel made only when asked (package cancelctx).
	select {
	case <-cl.done:
		return c.outcome(cl)
	default:
	}
	select {
	case <-cl.done:
		return c.outcome(cl)
	case <-ctx.Done():
	}
	c.forget(cl)
	select {
	case <-cl.done: // the reply (or the timeout) won the race
		return c.outcome(cl)
	default:
	}
	c.cancelUpstream(cl, "request cancelled by the client")
	return nil, fmt.Errorf("upstream %s: %s: %w", c.server, method, ctx.Err())
}

// ContextEnded implements cancelctx.Watched: the caller's context ended, which
// cancels the call's send context and its unanswered exchange, aborting
// their I/O; Call, waiting on that context too, then ends the call as
// cancelled.
func (cl *call) ContextEnded() {
	if cl.cancel != nil {
		cl.cancel(cl.parent.Err())
	}
	if !cl.answered.Load() {
		cl.x.cancel()
	}
}

// deadlines are the read timeouts of a connection's pending calls: one
// timer for the connection, not one per call (a timer and its closure
// allocated, and the runtime's timer heap touched twice, on every call;
// issue 25). Every call of a connection has the same budget, so the calls
// in the order they were registered are in the order of their deadlines;
// progress moves a call to the end, its new deadline being the latest.
// The list holds exactly the calls of c.calls: whatever removes a call
// from the table unlinks it. The timer is armed for the first deadline
// when the list starts (linkLocked) and by each sweep; a call that ends
// before its deadline leaves it armed early, never late, and the sweep
// then arms it for the new first one.
type deadlines struct {
	head, tail *call
	timer      *time.Timer
}

// linkLocked puts cl at the end of the deadline list, its deadline its
// budget from now, and arms the timer when cl is the only call.
func (c *conn) linkLocked(cl *call, now time.Time) {
	cl.deadline = now.Add(cl.budget)
	cl.prev, cl.next = c.dl.tail, nil
	if c.dl.tail != nil {
		c.dl.tail.next = cl
	} else {
		c.dl.head = cl
	}
	c.dl.tail = cl
	if c.dl.head == cl {
		c.armLocked(now)
	}
}

// onListLocked reports whether cl is on the deadline list: the first
// call, or one with a call before it.
func (c *conn) onListLocked(cl *call) bool { return cl.prev != nil || c.dl.head == cl }

// unlinkLocked takes cl off the deadline list, if it is on it.
func (c *conn) unlinkLocked(cl *call) {
	if !c.onListLocked(cl) {
		return
	}
	if cl.prev != nil {
		cl.prev.next = cl.next
	} else {
		c.dl.head = cl.next
	}
	if cl.next != nil {
		cl.next.prev = cl.prev
	} else {
		c.dl.tail = cl.prev
	}
	cl.prev, cl.next = nil, nil
}

// unlinkAllLocked empties the deadline list (the table was emptied) and
// stops the timer, which would otherwise keep the connection until it
// fired.
func (c *conn) unlinkAllLocked() {
	for cl := c.dl.head; cl != nil; {
		next := cl.next
		cl.prev, cl.next = nil, nil
		cl = next
	}
	c.dl.head, c.dl.tail = nil, nil
	if c.dl.timer != nil {
		c.dl.timer.Stop()
	}
}

// armLocked arms the timer for the first deadline.
func (c *conn) armLocked(now time.Time) {
	d := c.dl.head.deadline.Sub(now)
	if c.dl.timer == nil {
		c.dl.timer = time.AfterFunc(d, c.sweepDeadlines)
	} else {
		c.dl.timer.Reset(d)
	}
}

// sweepDeadlines times out every call whose deadline has passed, and
// arms the timer for the next.
func (c *conn) sweepDeadlines() {
	c.mu.Lock()
	now := time.Now()
	var late []*call
	for cl := c.dl.head; cl != nil && !cl.deadline.After(now); cl = c.dl.head {
		c.unlinkLocked(cl)
		late = append(late, cl)
	}
	if c.dl.head != nil {
		c.armLocked(now)
	}
	c.mu.Unlock()
	for _, cl := range late {
		c.timeOut(cl)
	}
}

// timeOut ends cl when its read timeout fires: its send's context (if it
// has one) and its unanswered exchange are cancelled, which aborts their
// I/O, and the call is taken from the pending table with errReadTimeout
// as its outcome, unless a reply or a shutdown took it first.
func (c *conn) timeOut(cl *call) {
	cl.timedOut.Store(true)
	if cl.cancel != nil {
		cl.cancel(errReadTimeout)
	}
	if !cl.answered.Load() {
		cl.x.cancel() // the exchange, if any, watches only the caller's context
	}
	c.finish(cl.id, callResult{err: errReadTimeout})
}

// outcome is what Call returns for cl once it was delivered: a read
// timeout is logged and cancelled upstream here, on the caller's
// goroutine.
func (c *conn) outcome(cl *call) (json.RawMessage, error) {
	if cl.res.err == errReadTimeout {
		te := &timeoutError{method: cl.method, budget: cl.budget}
		c.log.Warn("upstream request timed out", "target", c.target, "method", cl.method, "budget", formatBudget(cl.budget))
		c.cancelUpstream(cl, te.Error())
		return nil, &Error{Server: c.server, Kind: KindTimeout, Err: te}
	}
	return cl.res.value()
}

func (r callResult) value() (json.RawMessage, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.msg.Error != nil {
		return nil, r.msg.Error
	}
	return r.msg.Result, nil
}

// register adds cl to the pending table, unless the session is over.
func (c *conn) register(cl *call) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return &notSentError{err: c.err}
	}
	if c.retiring {
		return &notSentError{err: &Error{Server: c.server, Kind: KindClosed, Err: ErrRetired}}
	}
	c.seq++
	cl.seq = c.seq
	c.calls[cl.id] = cl
	c.linkLocked(cl, time.Now())
	return nil
}

// notSentError is the failure of a call on a session that had already
// ended: the request never left, so it may go to another session whatever
// it is.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// forget removes cl from the pending table.
func (c *conn) forget(cl *call) {
	c.mu.Lock()
	if c.calls[cl.id] == cl {
		delete(c.calls, cl.id)
		c.unlinkLocked(cl)
		c.drainedLocked()
		c.idleLocked()
	}
	c.mu.Unlock()
}

// drainedLocked closes drained once the session is over and its last
// pending call has ended.
func (c *conn) drainedLocked() {
	if c.err != nil && len(c.calls) == 0 {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
}

// noteServed records that the upstream took on a request of cl's kind.
func (c *conn) noteServed(method string) {
	if method == mcpwire.MethodInitialize || method == mcpwire.MethodServerDiscover {
		return
	}
	if !c.served.Load() && c.served.CompareAndSwap(false, true) {
		close(c.servedCh)
		if c.barrenRun != nil {
			c.barrenRun.Store(0)
		}
	}
}

// finish delivers r to the pending call id, if it is still pending.
func (c *conn) finish(id int64, r callResult) bool {
	c.mu.Lock()
	cl := c.calls[id]
	delete(c.calls, id)
	if cl != nil {
		c.unlinkLocked(cl)
		if r.msg != nil {
			cl.answered.Store(true)
			// Before drained can close: servedBeforeExpiry reads both.
			c.noteServed(cl.method)
		}
		c.drainedLocked()
		c.idleLocked()
	}
	c.mu.Unlock()
	if cl == nil {
		return false
	}
	cl.deliver(r) // only the remover delivers
	return true
}

// failCall fails one pending call (a transport error on its own request).
func (c *conn) failCall(cl *call, err error) {
	if cl != nil {
		c.finish(cl.id, callResult{err: err})
	}
}

// pending reports whether cl is still waiting for its reply.
func (c *conn) pending(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[cl.id] == cl
}

// cancelUpstream tells the upstream to stop working on cl (best effort,
// in the background: the caller is not held by it).
func (c *conn) cancelUpstream(cl *call, reason string) {
	if cl.method == mcpwire.MethodInitialize {
		return // initialize must not be cancelled
	}
	params := []byte(`{"requestId":`)
	params = strconv.AppendInt(params, cl.id, 10)
	params = append(params, `,"reason":`...)
	params = jsonrpc.AppendString(params, reason)
	params = append(params, '}')
	c.background(func(ctx context.Context) {
		if err := c.Notify(ctx, mcpwire.NotifyCancelled, params); err != nil {
			c.log.Debug("could not send cancellation upstream", "error", err)
		}
	})
}

// background runs fn in a tracked goroutine with a context bounded by
// CloseTimeout that does not end with the session: cleanup messages
// (cancellations) must still go out when the caller has gone.
//
// Close lets those already started finish first (within its budget), so
// that the cancellation of a call goes out before the session ends.
func (c *conn) background(fn func(ctx context.Context)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closingBG {
		return
	}
	c.bg.Go(func() {
		ctx, cancel := context.WithTimeout(c.cleanup, c.closeBudget)
		defer cancel()
		fn(ctx)
	})
}

// goTracked runs fn in a goroutine that Close waits for; once Close has
// started waiting, fn is dropped.
func (c *conn) goTracked(fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining {
		return false
	}
	c.wg.Go(fn)
	return true
}

// Notify implements Session.
func (c *conn) Notify(ctx context.Context, method string, params json.RawMessage) error {
	if err := c.Err(); err != nil {
		return err
	}
	return c.t.send(ctx, jsonrpc.NewNotification(method, params), nil)
}

// Info implements Session.
func (c *conn) Info() *InitInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Done implements Session.
func (c *conn) Done() <-chan struct{} { return c.done }

// Err implements Session.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close implements Session.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		budget := time.AfterFunc(c.closeBudget, c.cleanupCancel)
		defer budget.Stop()
		c.mu.Lock()
		c.closingBG = true
		c.mu.Unlock()
		c.bg.Wait() // pending cancellations and responses, bounded by the budget
		c.shutdown(&Error{Server: c.server, Kind: KindClosed, Err: ErrClosed})
		if c.t != nil {
			c.closeErr = c.t.close()
		}
		c.mu.Lock()
		c.draining = true
		c.mu.Unlock()
		c.wg.Wait()
	})
	return c.closeErr
}

// shutdown ends the session with err: every pending call fails with it at
// once, Handler contexts end, Done is closed. Only the first err counts
// as the session's; calls an expiry left pending fail with the later one.
func (c *conn) shutdown(err error) {
	c.mu.Lock()
	first := c.err == nil
	if first {
		c.err = err
	}
	calls := c.calls
	c.calls = make(map[int64]*call)
	c.unlinkAllLocked()
	c.drainedLocked()
	c.mu.Unlock()
	c.cancel()
	if first {
		close(c.done)
	}
	for _, cl := range calls {
		cl.deliver(callResult{err: err})
	}
}

// expire ends the session because the upstream said it no longer exists
// (HTTP 404 on the session id, C6.4): Done is closed and nothing more is
// sent on it, but calls already sent keep waiting for their own answers.
// The 404 was about one request; others the upstream took before it
// forgot the session (a server ending sessions after N calls) still come
// back, and failing them as expired would have the Manager send them,
// tools and all, a second time. The Manager closes the session once they
// are over (closeWhenDrained).
func (c *conn) expire(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.fruitful = c.served.Load() || len(c.calls) > 0
	// A reply due on the GET stream of a session the upstream forgot will
	// not come: those calls fail now, not at their timeout, and not as
	// expired (the upstream took them; sending them again could run a
	// tool twice).
	var lost []*call
	for id, cl := range c.calls {
		if cl.onListen.Load() {
			delete(c.calls, id)
			c.unlinkLocked(cl)
			lost = append(lost, cl)
		}
	}
	c.drainedLocked()
	c.mu.Unlock()
	close(c.done)
	for _, cl := range lost {
		cl.deliver(callResult{err: &Error{Server: c.server, Kind: KindClosed,
			Err: fmt.Errorf("%w: the upstream ended the session before the reply", ErrClosed)}})
	}
}

// expiredFruitfully reports whether the session ended by an expiry after
// it had served requests (or had others in flight): an upstream ending
// sessions it used, not one that refuses every new session.
func (c *conn) expiredFruitfully() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fruitful
}

// servedBeforeExpiry reports whether the upstream took on any request of
// the session: at once when one is known, else once the calls in flight
// at the expiry are over (one of them may have been taken on; their
// answers may trail the 404), bounded by the read timeout and ctx.
func (c *conn) servedBeforeExpiry(ctx context.Context) bool {
	if c.served.Load() {
		return true
	}
	tm := time.NewTimer(c.timeout)
	defer tm.Stop()
	select {
	case <-c.servedCh:
		return true
	case <-c.drained:
		return c.served.Load()
	case <-tm.C:
	case <-ctx.Done():
	}
	return false
}

// judgeExpiry says, for a call that met this session's expiry, whether
// the session had served anything (servedBeforeExpiry), and how many
// sessions of the server in a row have now expired without.
func (c *conn) judgeExpiry(ctx context.Context) (served bool, barren int) {
	if c.servedBeforeExpiry(ctx) || c.barrenRun == nil {
		return true, 0
	}
	if c.barrenCounted.CompareAndSwap(false, true) {
		c.barrenRun.Add(1)
	}
	return false, int(c.barrenRun.Load())
}

// retire closes the session gracefully, for a server removed or replaced
// while serving: from now on it takes no new request (they are refused as
// not sent, with ErrRetired, so the Manager sends them to the server's
// new session or reports the server gone), the calls in flight get their
// own answers, and once none is pending the session is closed; at the
// latest after budget (the read timeout when <= 0) or when stop is closed.
func (c *conn) retire(stop <-chan struct{}, budget time.Duration) error {
	if budget <= 0 {
		budget = c.timeout
	}
	c.mu.Lock()
	if !c.retiring {
		c.retiring = true
		c.idle = make(chan struct{})
		c.idleLocked()
	}
	idle := c.idle
	c.mu.Unlock()
	tm := time.NewTimer(budget)
	defer tm.Stop()
	select {
	case <-idle:
	case <-c.drained:
	case <-tm.C:
		c.log.Warn("retired upstream session closed with calls still in flight", "server", c.server, "budget", budget.String())
	case <-stop:
	}
	return c.Close()
}

// idleLocked closes idle once a retiring session has no call pending.
func (c *conn) idleLocked() {
	if !c.retiring || len(c.calls) > 0 {
		return
	}
	select {
	case <-c.idle:
	default:
		close(c.idle)
	}
}

// closeWhenDrained closes the session once its pending calls are over,
// or at the latest after the read timeout (their own bound) or when stop
// is closed.
func (c *conn) closeWhenDrained(stop <-chan struct{}) error {
	tm := time.NewTimer(c.timeout)
	defer tm.Stop()
	select {
	case <-c.drained:
	case <-tm.C:
	case <-stop:
	}
	return c.Close()
}

// receiveData decodes one inbound frame (a message or a batch) and
// dispatches it. via is the call whose response stream carried it
// (streamable HTTP POST), or nil.
func (c *conn) receiveData(data []byte, via *call) {
	if jsonrpc.IsBatch(data) {
		msgs, errs, err := jsonrpc.DecodeBatch(data)
		if err != nil {
			c.badMessage(err, via)
			return
		}
		for i, m := range msgs {
			if errs[i] != nil {
				c.badMessage(errs[i], via)
				continue
			}
			c.receive(m, via)
		}
		return
	}
	m, err := jsonrpc.Decode(data)
	if err != nil {
		c.badMessage(err, via)
		return
	}
	c.receive(m, via)
}

// invalidResponse is the error for bytes that are not a usable MCP
// message. It never carries the bytes themselves.
// during is err, a failure of c while doing what ("initialize"), as an
// *Error of kind that names the server and what once: a call's error
// already says "upstream <server>: <method>: ..." (and an *Error
// "upstream <server>: ..."), which wrapped again as they are would read
// "upstream s: initialize: upstream s: initialize: ...". The chain is
// kept for errors.Is and errors.As; a wrapped *Error's status and
// challenge carry over.
func (c *conn) during(what string, kind Kind, err error) *Error {
	out := &Error{Server: c.server, Kind: kind}
	var ue *Error
	if errors.As(err, &ue) {
		out.Status, out.Challenge = ue.Status, ue.Challenge
	}
	msg := strings.TrimPrefix(err.Error(), "upstream "+c.server+": ")
	if !strings.HasPrefix(msg, what+": ") {
		msg = what + ": " + msg
	}
	out.Err = &reworded{msg: msg, err: err}
	return out
}

// reworded is err under another message (during).
type reworded struct {
	msg string
	err error
}

func (r *reworded) Error() string { return r.msg }
func (r *reworded) Unwrap() error { return r.err }

func (c *conn) invalidResponse(format string, args ...any) *Error {
	return &Error{Server: c.server, Kind: KindInvalidResponse, Err: fmt.Errorf("invalid MCP response: "+format, args...)}
}

// tooLarge is the failure of a call whose message exceeded the limit
// (S23): an invalid response that names the limit.
func (c *conn) tooLarge() *Error {
	return &Error{Server: c.server, Kind: KindInvalidResponse, Err: &MessageTooLargeError{Limit: c.maxMsg}}
}

// badMessage surfaces an undecodable inbound message at once (C6.5): the
// call it belongs to fails, or, when that cannot be known, every call in
// flight does. The session itself stays usable. err is a
// *jsonrpc.DecodeError or an *Error.
func (c *conn) badMessage(err error, via *call) {
	var (
		e  *Error
		id jsonrpc.ID
	)
	var de *jsonrpc.DecodeError
	switch {
	case errors.As(err, &de):
		e, id = c.invalidResponse("%s", de.Reason), de.ID
	case errors.As(err, &e):
	default:
		e = c.invalidResponse("undecodable message")
	}
	c.log.Warn("invalid message from upstream", "error", e.Err)
	if via != nil {
		c.failCall(via, e)
		return
	}
	if id.IsValid() {
		if n, perr := strconv.ParseInt(id.Raw(), 10, 64); perr == nil && c.finish(n, callResult{err: e}) {
			return
		}
	}
	c.mu.Lock()
	calls := c.calls
	c.calls = make(map[int64]*call)
	c.unlinkAllLocked()
	c.drainedLocked()
	c.mu.Unlock()
	for _, cl := range calls {
		cl.deliver(callResult{err: e})
	}
}

// receive dispatches one decoded inbound message.
func (c *conn) receive(m *jsonrpc.Message, via *call) {
	switch {
	case m.IsResponse():
		c.deliver(m, via)
	case m.IsNotification():
		c.notification(m, via)
	default:
		c.request(m, via)
	}
}

// deliver matches a response to its pending call.
func (c *conn) deliver(m *jsonrpc.Message, via *call) {
	if !m.ID.IsValid() {
		// An error without id answers the request it came back for.
		if via != nil {
			c.finish(via.id, callResult{msg: m})
			return
		}
		c.log.Warn("upstream sent an error response without id", "code", errCode(m))
		return
	}
	id, err := strconv.ParseInt(m.ID.Raw(), 10, 64)
	if err != nil || !c.finish(id, callResult{msg: m}) {
		c.log.Debug("response for no pending request", "id", m.ID.String())
	}
}

func errCode(m *jsonrpc.Message) int64 {
	if m.Error != nil {
		return m.Error.Code
	}
	return 0
}

// originFor attributes an inbound message to a call (see Handler).
func (c *conn) originFor(via *call) any {
	if via != nil {
		return via.origin
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Calls without an origin (the gateway's own list calls) cannot have
	// caused a server's message. Among the others, the message is only
	// attributed when they all belong to one party: guessing between two
	// callers could hand one caller's sampling or elicitation to another.
	var latest *call
	var key any
	for _, cl := range c.calls {
		if cl.origin == nil {
			continue
		}
		k := partyOf(cl.origin)
		if latest != nil && k != key {
			return Ambiguous
		}
		key = k
		if latest == nil || cl.seq > latest.seq {
			latest = cl
		}
	}
	if latest == nil {
		// Nothing in flight: a bound session still knows whose it is.
		return c.origin
	}
	return latest.origin
}

// party is the session's DefaultOrigin now.
func (c *conn) party() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin
}

// rebind makes origin the session's DefaultOrigin (nil: no party) and
// reports whether no server request has reached a party so far.
func (c *conn) rebind(origin any) (clean bool) {
	c.mu.Lock()
	c.origin = origin
	c.mu.Unlock()
	return !c.asked.Load()
}

// Ambiguous is the origin of a message that arrived while calls of
// several parties were in flight: it may belong to any of them, so it must
// be delivered to none.
var Ambiguous any = ambiguous{}

type ambiguous struct{}

// OriginKeyer is implemented by origins that can tell which party they
// belong to (the gateway: the downstream session), so that several calls
// of one party still get their server messages attributed.
type OriginKeyer interface {
	OriginKey() any
}

func partyOf(o any) any {
	if k, ok := o.(OriginKeyer); ok {
		return k.OriginKey()
	}
	return o
}

// progressCall finds the pending call a progress notification is for, and
// restarts its read timeout: progress means the upstream is working.
func (c *conn) progressCall(params json.RawMessage) *call {
	tok, ok := jsonrpc.Get(params, "progressToken")
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.calls {
		if cl.token != "" && cl.token == string(tok) {
			// Its new deadline is the latest of all: to the end.
			c.unlinkLocked(cl)
			c.linkLocked(cl, time.Now())
			return cl
		}
	}
	return nil
}

func (c *conn) notification(m *jsonrpc.Message, via *call) {
	switch m.Method {
	case mcpwire.NotifyCancelled:
		// The upstream withdrew one of its own requests: end the Handler's
		// work on it. Not forwarded: the id means nothing downstream.
		if rid, ok := jsonrpc.Get(m.Params, "requestId"); ok {
			c.mu.Lock()
			cancel := c.incoming[string(bytes.TrimSpace(rid))]
			c.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
		return
	case mcpwire.NotifyProgress:
		if cl := c.progressCall(m.Params); cl != nil && via == nil {
			via = cl // a progress token names its call exactly
		}
	}
	if c.handler == nil {
		return
	}
	c.handler.HandleNotification(c.ctx, c.server, c.originFor(via), m)
}

// request handles a server-initiated request: ping is answered here, the
// rest go to the Handler in their own goroutine.
func (c *conn) request(m *jsonrpc.Message, via *call) {
	if m.Method == mcpwire.MethodPing {
		c.respond(jsonrpc.NewResult(m.ID, json.RawMessage("{}")))
		return
	}
	if c.handler == nil {
		c.respond(jsonrpc.NewErrorResponse(m.ID, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Method not found: %s", m.Method)))
		return
	}
	origin := c.originFor(via)
	if party := c.party(); via == nil && party != nil {
		// A bound session's request that no call's response stream
		// carried belongs to its party, not to whichever of the party's
		// calls happens to run: that call may end before the answer
		// comes (server-everything re-reads roots after
		// roots/list_changed while another call of the client runs).
		origin = party
	}
	if origin != nil {
		// The party may answer it: what the session knows is no longer
		// the same for every party (see Binding.Reusable).
		c.asked.Store(true)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	key := m.ID.Raw()
	c.mu.Lock()
	c.incoming[key] = cancel
	c.mu.Unlock()
	started := c.goTracked(func() {
		defer func() {
			c.mu.Lock()
			delete(c.incoming, key)
			c.mu.Unlock()
			cancel()
		}()
		result, rerr := c.handler.HandleRequest(ctx, c.server, origin, m)
		if ctx.Err() != nil && c.ctx.Err() == nil {
			return // cancelled by the upstream: no response is expected
		}
		if rerr != nil {
			c.respond(jsonrpc.NewErrorResponse(m.ID, rerr))
			return
		}
		c.respond(jsonrpc.NewResult(m.ID, result))
	})
	if !started {
		c.mu.Lock()
		delete(c.incoming, key)
		c.mu.Unlock()
		cancel()
	}
}

// respond sends a response to a server-initiated request upstream.
func (c *conn) respond(m *jsonrpc.Message) {
	c.background(func(ctx context.Context) {
		if c.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		if err := c.t.send(ctx, m, nil); err != nil {
			c.log.Warn("could not answer upstream request", "id", m.ID.String(), "error", err)
		}
	})
}

// statelessMeta is what every request to a 2026-07-28 upstream carries in
// its _meta (C1.4): the revision, the gateway's identity, and the client
// capabilities the gateway can honour for this call.
type statelessMeta struct {
	clientInfo json.RawMessage
}

// WithClientCapabilities attaches the client capabilities a stateless
// upstream may rely on during a call (those of the downstream the gateway
// can relay); without it the call declares none.
func WithClientCapabilities(ctx context.Context, caps json.RawMessage) context.Context {
	v := CallValuesFrom(ctx)
	v.ClientCapabilities = caps
	return WithCallValues(ctx, &v)
}

// resourceSubscriber is a transport that carries resource subscriptions
// itself (a stateless streamable-HTTP session's listen stream).
type resourceSubscriber interface {
	setResourceSubscription(uri string, on bool) error
}

// WithLogLevel attaches the least severe log level the caller asked for
// ("" = none): a stateless upstream sends notifications/message only for
// requests that carry one (io.modelcontextprotocol/logLevel).
func WithLogLevel(ctx context.Context, level string) context.Context {
	if level == "" {
		return ctx
	}
	v := CallValuesFrom(ctx)
	v.LogLevel = level
	return WithCallValues(ctx, &v)
}

type paramHeadersKey struct{}

// WithParamHeaders attaches the x-mcp-header annotations of the tool a
// tools/call is for (from the upstream's own tools/list): a stateless
// HTTP upstream gets the matching Mcp-Param-* headers, computed from the
// arguments the upstream will read.
func WithParamHeaders(ctx context.Context, hs []mcpwire.ParamHeader) context.Context {
	if len(hs) == 0 {
		return ctx
	}
	return context.WithValue(ctx, paramHeadersKey{}, hs)
}

func paramHeadersFrom(ctx context.Context) []mcpwire.ParamHeader {
	hs, _ := ctx.Value(paramHeadersKey{}).([]mcpwire.ParamHeader)
	return hs
}

func (sm *statelessMeta) apply(ctx context.Context, params json.RawMessage) json.RawMessage {
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	v := CallValuesFrom(ctx)
	caps := v.ClientCapabilities
	if len(caps) == 0 {
		caps = json.RawMessage("{}")
	}
	out := []byte(params)
	for _, kv := range []struct {
		key string
		val []byte
	}{
		{mcpwire.MetaKeyProtocolVersion, jsonrpc.String(mcpwire.Rev20260728)},
		{mcpwire.MetaKeyClientInfo, sm.clientInfo},
		{mcpwire.MetaKeyClientCapabilities, caps},
		{mcpwire.MetaKeyLogLevel, logLevelOf(v.LogLevel)},
	} {
		if kv.val == nil {
			continue
		}
		if next, err := jsonrpc.SetPath(out, kv.val, mcpwire.FieldMeta, kv.key); err == nil {
			out = next
		}
	}
	return out
}

func logLevelOf(l string) []byte {
	if l != "" {
		return jsonrpc.String(l)
	}
	return nil
}

func (c *conn) statelessInfo() *statelessMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateless
}
