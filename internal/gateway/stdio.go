package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// lineWriter writes newline-delimited messages, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) finish()      {}
func (lw *lineWriter) isDone() bool { return false }

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
	_, err := lw.w.Write(b)
	return err
}

// ServeStdio serves one downstream session over newline-delimited JSON-RPC
// on r and w (the `mcpgate stdio` front), until r ends or ctx is done.
func (g *Gateway) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	rt, _, _ := g.resolveRoute("/mcp", "")
	sess := g.newSession(rt, &Identity{Owner: "stdio"}, false)
	defer sess.close()
	out := &lineWriter{w: w}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	br := bufio.NewReaderSize(r, 64<<10)
	var wg sync.WaitGroup
	defer wg.Wait()
	limit := int(g.maxBody())
	for {
		line, err := readLine(br, limit)
		if len(bytes.TrimSpace(line)) > 0 {
			g.serveLine(ctx, sess, &rt, out, line, &wg)
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

func (g *Gateway) serveLine(ctx context.Context, sess *session, rt *route, out *lineWriter, line []byte, wg *sync.WaitGroup) {
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
	if len(msgs) == 1 && msgs[0].IsRequest() {
		if rev, modern := mcpwire.StatelessVersion(msgs[0].Params); modern {
			g.serveModernLine(ctx, sess, *rt, out, msgs[0], rev, wg)
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
				sess.attachStream(out)
			}
			_ = out.send(reply)
		default:
			sc := &scope{g: g, sess: sess, rt: rt, out: out, caps: sess.scopeCaps()}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The session's in-flight bound (S11): the request waits
				// for a slot here, never in the read loop, which must go
				// on reading the responses calls in flight wait for.
				if ok, _ := sess.acquire(ctx.Done()); !ok {
					return
				}
				defer sess.release()
				if reply := g.serve(ctx, sc, m); reply != nil {
					_ = out.send(reply)
				}
			}()
		}
	}
}

// serveModernLine answers a 2026-07-28 request of the stdio front: the
// same stateless service as over HTTP, minus the HTTP headers. The stdio
// session only carries notifications/cancelled to the request (the way a
// client of that era cancels on stdio, a listen stream included).
func (g *Gateway) serveModernLine(ctx context.Context, sess *session, rt route, out *lineWriter, m *jsonrpc.Message, rev string, wg *sync.WaitGroup) {
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
	end := sess.begin(m.ID, cancel)
	wg.Go(func() {
		defer cancel()
		defer end()
		if m.Method == mcpwire.MethodSubscriptionsListen {
			g.serveListenStdio(ctx, rt, out, m)
			return
		}
		if reply, _ := g.modernReply(ctx, &rt, m, info, out, sess.owner); reply != nil {
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
