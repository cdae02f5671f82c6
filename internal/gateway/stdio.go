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
	sess := g.newSession(rt, &Identity{Owner: "stdio"})
	defer sess.close()
	out := &lineWriter{w: w}
	// The session's standalone stream is stdout itself.
	sess.attachStream(out)

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
	for _, m := range msgs {
		switch {
		case m.IsResponse():
			g.deliverResponse(m)
		case m.IsNotification():
			g.handleNotification(ctx, sess, rt, m)
		case m.Method == "initialize":
			// Initialize completes before anything else is read, so the
			// session's capabilities are known to later requests.
			sc := &scope{g: g, sess: sess, rt: rt, out: out}
			_ = out.send(g.serve(ctx, sc, m))
		default:
			sc := &scope{g: g, sess: sess, rt: rt, out: out, caps: sess.scopeCaps()}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if reply := g.serve(ctx, sc, m); reply != nil {
					_ = out.send(reply)
				}
			}()
		}
	}
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
