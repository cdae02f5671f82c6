package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// lineWriter writes newline-delimited messages, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
	// ended: ServeStdioAs has returned, and w is its caller's again. A
	// notification still on its way (an upstream's list_changed
	// broadcast to every session) is dropped, never written.
	ended bool
}

// errStdioEnded is what a send to a stdio session that has ended gets.
var errStdioEnded = errors.New("the stdio session has ended")

// end makes every later send fail; a send in progress finishes first.
func (lw *lineWriter) end() {
	lw.mu.Lock()
	lw.ended = true
	lw.mu.Unlock()
}

// Finish and Done: stdout is the session's stream for the life of the
// process. Send is send, for the session that holds it.
func (lw *lineWriter) Finish()                         {}
func (lw *lineWriter) Done() bool                      { return false }
func (lw *lineWriter) Send(msg *jsonrpc.Message) error { return lw.send(msg) }

func (lw *lineWriter) send(msg *jsonrpc.Message) error {
	b := jsonrpc.Encode(msg)
	if bytes.ContainsAny(b, "\r\n") {
		// Payloads are forwarded verbatim; pretty-printed upstream JSON must
		// be compacted to fit one line.
		var c bytes.Buffer
		if err := compactJSON(&c, b); err == nil {
			b = c.Bytes()
		}
	}
	b = append(b, '\n')
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.ended {
		return errStdioEnded
	}
	_, err := lw.w.Write(b)
	return err
}

// ServeStdioAs serves one downstream session over newline-delimited
// JSON-RPC on r and w (the `mcpgate stdio` front), until r ends or ctx is
// done, as the caller that key identifies: the gateway key of auth.keys,
// of the admin API, or the master key; "" for an anonymous caller where
// the gateway serves them (no auth configured, or auth.anonymous). A
// refused caller ends it before anything is served, with an error that
// says why.
//
// The front is a caller like any HTTP client (issue 22 hole 13): the same
// authentication (the key is judged again for each line, so a revoked
// key stops at once), the same access decision on the whole-gateway route
// /mcp (servers.tools allow and deny lists hide tools even from the
// master key), the same call pipeline (guardrails, rate limit, budget,
// the person's own credentials from the vault) and an audit record per
// call. It counts as a loopback client for allowed_cidrs. Passthrough
// servers need the caller's own token, which a stdio client has no way to
// send: they are left out, as on a merged route without one.
func (g *Gateway) ServeStdioAs(ctx context.Context, key string, r io.Reader, w io.Writer) error {
	front := &stdioFront{g: g, key: key}
	base, c, e := front.caller(ctx)
	if e != nil {
		return fmt.Errorf("the stdio front's caller was refused: %s", e.Message)
	}
	rt, e := front.route(c)
	if e != nil {
		return fmt.Errorf("the stdio front's caller was refused: %s", e.Message)
	}
	sess := g.newSession(rt, IdentityFrom(base), false)
	defer sess.close()
	out := &lineWriter{w: w}
	// Nothing is written to w once this returns: after the requests'
	// goroutines (wg, below), and before the session is closed.
	defer out.end()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	br := bufio.NewReaderSize(r, 64<<10)
	// The requests' goroutines are this session's own: it waits for them
	// before it ends (and ctx, which they run under, ends first).
	var wg sync.WaitGroup
	defer wg.Wait()
	limit := int(g.maxBody())
	for {
		line, err := readLine(br, limit)
		if len(bytes.TrimSpace(line)) > 0 {
			g.serveLine(ctx, front, sess, out, line, &wg)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, errTooLarge) {
				_ = out.send(jsonrpc.NewErrorResponse(jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Message exceeds %d bytes", limit)))
				continue
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// stdioAddr is the client address the stdio front's caller is judged
// from: a process on this machine.
const stdioAddr = "127.0.0.1:0"

// stdioFront is the caller a stdio front acts as.
type stdioFront struct {
	g   *Gateway
	key string
}

// caller authenticates the front's key now, as an HTTP request with that
// key would be (the rate limit aside: each request takes its own share in
// serve), and returns ctx carrying the caller, its identity and its own
// upstream credentials. A refusal is the error its requests get.
func (f *stdioFront) caller(ctx context.Context) (context.Context, *callers.Caller, *jsonrpc.Error) {
	g := f.g
	var c *callers.Caller
	if g.auth == nil {
		c = &callers.Caller{Anonymous: true, Owner: callers.OwnerAnonymous}
	} else {
		r, err := http.NewRequestWithContext(callers.WithRateCounted(ctx), http.MethodPost, "http://stdio/mcp", nil)
		if err != nil {
			return nil, nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%v", err)
		}
		r.RemoteAddr = stdioAddr
		if f.key != "" {
			r.Header.Set(callers.HeaderAPIKey, f.key)
		}
		var fail *callers.Failure
		if c, fail = g.auth.Authenticate(r); fail != nil {
			return nil, nil, stdioRefusal(fail, f.key != "")
		}
	}
	id := &Identity{Owner: c.Owner, Alias: c.Alias, User: c.User, Team: c.Team, ClientIP: "127.0.0.1", Admin: c.Admin || c.Master,
		Issuer: c.Issuer, Subject: c.Subject}
	return g.withCaller(WithIdentity(ctx, id), c), c, nil
}

// withCaller makes ctx that of a call c makes without an HTTP request of
// its own (the stdio front, an operator's call as a key): c itself, and
// the person's own upstream credentials from the vault. No header carries
// a token for a passthrough server.
func (g *Gateway) withCaller(ctx context.Context, c *callers.Caller) context.Context {
	ctx = callers.NewContext(ctx, c)
	if st := g.current(); st.userKeys {
		ts := &callerTokenSet{g: g, ctx: context.WithoutCancel(ctx), headers: noHeaders, person: callers.PersonID(c)}
		ctx = context.WithValue(upstream.WithCallerTokens(ctx, ts.get), callerTokenSetKey{}, ts)
	}
	return ctx
}

// route is /mcp as c may use it, without the passthrough servers.
func (f *stdioFront) route(c *callers.Caller) (route, *jsonrpc.Error) {
	g := f.g
	rt, _, _ := g.resolveRoute("/mcp", "")
	rt, denied := g.narrow(rt, policyCaller(c))
	if denied != nil {
		return rt, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%s", denied.Message)
	}
	if g.current().passthrough {
		keep := []string{}
		for _, s := range rt.servers {
			if !g.isPassthrough(s) {
				keep = append(keep, s)
			}
		}
		rt.servers = keep
	}
	return rt, nil
}

// stdioRefusal is the JSON-RPC error of a refused stdio caller: the
// reason of its HTTP status, said for a front started with a key.
func stdioRefusal(f *callers.Failure, keyed bool) *jsonrpc.Error {
	switch {
	case f.Status == http.StatusUnauthorized && !keyed:
		return jsonrpc.NewError(callers.CodeUnauthorized, "Unauthorized: this gateway requires an API key (auth is configured); start the stdio front with --key or MCPGATE_KEY")
	case f.Status == http.StatusUnauthorized:
		return jsonrpc.NewError(callers.CodeUnauthorized, "Unauthorized: the stdio front's API key is not valid (unknown, disabled or expired)")
	case f.Status == http.StatusForbidden:
		return jsonrpc.NewError(callers.CodeForbidden, "Forbidden: the stdio front's API key may not be used from this machine (allowed_cidrs)")
	case f.Status == http.StatusTooManyRequests:
		return jsonrpc.NewError(callers.CodeRateLimited, "%s", callers.MessageRateLimited)
	}
	return jsonrpc.NewError(callers.CodeUnavailable, "Service Unavailable: the stdio front's API key could not be checked; try again")
}

func (g *Gateway) serveLine(ctx context.Context, front *stdioFront, sess *session, out *lineWriter, line []byte, wg *sync.WaitGroup) {
	var msgs []*jsonrpc.Message
	if jsonrpc.IsBatch(line) {
		ms, errs, err := jsonrpc.DecodeBatch(line)
		if err != nil {
			_ = out.send(decodeErrorResponse(err))
			return
		}
		if e := batchTooLarge(len(ms), g.limits().MaxBatch); e != nil {
			_ = out.send(jsonrpc.NewErrorResponse(jsonrpc.ID{}, e))
			return
		}
		for i, e := range errs {
			if e != nil {
				_ = out.send(decodeErrorResponse(e))
				continue
			}
			msgs = append(msgs, ms[i])
		}
	} else {
		m, err := jsonrpc.Decode(line)
		if err != nil {
			_ = out.send(decodeErrorResponse(err))
			return
		}
		msgs = []*jsonrpc.Message{m}
	}
	// The caller and its view are judged again for every line, as every
	// HTTP request is: a key revoked or changed since takes effect at once.
	ctx, c, refused := front.caller(ctx)
	var view route
	if refused == nil {
		view, refused = front.route(c)
	}
	rt := &view
	if len(msgs) == 1 && msgs[0].IsRequest() && refused == nil {
		if rev, stateless := mcpwire.StatelessVersion(msgs[0].Params); stateless {
			g.serveStatelessLine(ctx, sess, *rt, out, msgs[0], rev, wg)
			return
		}
	}
	for _, m := range msgs {
		switch {
		case m.IsResponse():
			// Through the one owner-checked path, though stdio has one
			// client: a refusal (a late answer) is told on stdout.
			if e := g.answer(ctx, sessionParty(sess), m); e != nil {
				_ = out.send(jsonrpc.NewErrorResponse(e.id, e.err))
			}
		case refused != nil:
			if m.IsRequest() {
				_ = out.send(jsonrpc.NewErrorResponse(m.ID, refused))
			}
		case m.IsNotification():
			g.handleNotification(ctx, sess, rt, m)
		case m.Method == "initialize":
			// Initialize completes before anything else is read, so the
			// session's capabilities are known to later requests.
			sc := &scope{g: g, sess: sess, rt: rt, out: out}
			reply := g.serve(ctx, sc, m)
			// The session's standalone stream is stdout itself, once the
			// client has a session: a 2026-07-28 client, which never
			// initializes, hears of changes only on its listen requests.
			if reply.Error == nil {
				sess.AttachStream(out)
			}
			_ = out.send(reply)
		default:
			sc := &scope{g: g, sess: sess, rt: rt, out: out, caps: sess.Caps()}
			wg.Go(func() {
				// The session's in-flight bound (S11): the request waits
				// for a slot here, never in the read loop, which must go
				// on reading the responses calls in flight wait for.
				if ok, _ := sess.Acquire(ctx.Done()); !ok {
					return
				}
				defer sess.Release()
				if reply := g.serve(ctx, sc, m); reply != nil {
					_ = out.send(reply)
				}
			})
		}
	}
}

// serveStatelessLine answers a 2026-07-28 request of the stdio front: the
// same stateless service as over HTTP, minus the HTTP headers. The stdio
// session only carries notifications/cancelled to the request (the way a
// client of that era cancels on stdio, a listen stream included).
func (g *Gateway) serveStatelessLine(ctx context.Context, sess *session, rt route, out *lineWriter, m *jsonrpc.Message, rev string, wg *sync.WaitGroup) {
	fail := func(e *jsonrpc.Error) { _ = out.send(jsonrpc.NewErrorResponse(m.ID, e)) }
	// The same order as over HTTP: an unreadable _meta, then the version.
	info, e := requestInfo(m)
	if e != nil {
		fail(e)
		return
	}
	if e := mcpwire.CheckStatelessVersion(rev); e != nil {
		fail(e)
		return
	}
	if !mcpwire.IsStatelessClientMethod(m.Method) {
		fail(methodNotFound(m))
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	end := sess.Begin(m.ID, cancel)
	wg.Go(func() {
		defer cancel()
		defer end()
		if m.Method == mcpwire.MethodSubscriptionsListen {
			g.serveListenStdio(ctx, rt, out, m)
			return
		}
		if reply, _ := g.statelessReply(ctx, &rt, m, info, out, sess.Owner()); reply != nil {
			_ = out.send(reply)
		}
	})
}

func decodeErrorResponse(err error) *jsonrpc.Message {
	var de *jsonrpc.DecodeError
	if !errors.As(err, &de) {
		de = &jsonrpc.DecodeError{Code: jsonrpc.CodeParseError, Reason: "Parse error"}
	}
	return jsonrpc.NewErrorResponse(de.ID, de.RPCError())
}

// readLine reads one line of any length up to limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > limit+1 {
			// Skip the rest of the oversized line.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errTooLarge
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

func compactJSON(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
