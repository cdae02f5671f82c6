package h1server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpgate/mcpgate/internal/cancelctx"
)

// response is one request's http.ResponseWriter (with Flush, Hijack and
// http.ResponseController's deadlines). It is new for each request and
// writes nothing once its handler returned; like net/http's, it is not
// for use by two goroutines at once.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header
	// ctx is req's context: it ends when the handler returns or the
	// client of a streamed response goes away. Kept here, it costs no
	// allocation of its own, and the gateway's request context watches
	// it rather than registering on it (package cancelctx).
	ctx  reqContext
	body requestBody

	status      int
	wroteHeader bool
	streaming   bool  // the head is sent; the body follows as it is flushed
	chunked     bool  // streaming with chunked framing
	declared    int64 // streaming with this Content-Length (the handler's); -1: none
	sent        int64 // body bytes sent while streaming
	closeAfter  bool
	hijacked    bool
	done        atomic.Bool
}

// reqContext is a request's context: a cancelctx.Context, which can also
// hold a few values the handlers give it in place (SetValue), so that
// they need not copy the request (http.Request.WithContext) to carry
// them. The gateway puts the access line's entry, the caller and its
// identity here (issue 25).
type reqContext struct {
	cancelctx.Context
	vals [maxInPlace]struct{ key, val any } // in the order set; a nil key ends them
}

var (
	_ cancelctx.InPlace   = (*reqContext)(nil)
	_ cancelctx.ValueOnly = (*reqContext)(nil)
)

// maxInPlace is how many values a request's context takes in place: what
// the gateway sets on an authenticated request (the access line's entry,
// the route's resource for a bearer token, the caller, its identity).
const maxInPlace = 4

// SetValue gives c the value val for key, as context.WithValue(c, key,
// val) would: Value then returns val for key, in c and every context
// derived from it. It reports false, changing nothing, when c holds a
// value for key already (a value set is never replaced: the handler wraps
// the context instead, as WithValue does), when c has no room left, or
// when key is nil or not comparable (WithValue's rule). Only the goroutine
// serving the request may call it, before it hands the context to any
// other: no reader may see a value appear.
func (c *reqContext) SetValue(key, val any) bool {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		return false
	}
	for i := range c.vals {
		switch {
		case c.vals[i].key == nil:
			c.vals[i].key, c.vals[i].val = key, val
			return true
		case c.vals[i].key == key:
			return false
		}
	}
	return false
}

// ValueParent implements cancelctx.ValueOnly: c ends exactly when its
// cancelctx.Context does.
func (c *reqContext) ValueParent() context.Context { return &c.Context }

// Value implements context.Context: a value SetValue gave, then the
// cancelctx.Context's answer.
func (c *reqContext) Value(key any) any {
	for i := range c.vals {
		switch c.vals[i].key {
		case nil:
			return c.Context.Value(key)
		case key:
			return c.vals[i].val
		}
	}
	return c.Context.Value(key)
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.done.Load() || w.hijacked || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code)) // as net/http
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// An informational response goes out at once, with the
		// header as it is now (net/http does the same).
		c := w.c
		c.out = appendStatusLine(c.out[:0], code)
		c.out = appendHeader(c.out, w.header)
		c.out = append(c.out, "\r\n"...)
		_ = c.write()
		return
	}
	w.status = code
	w.wroteHeader = true
}

func (w *response) Write(p []byte) (int, error) { return write(w, p) }

func (w *response) WriteString(s string) (int, error) { return write(w, s) }

// write is Write and WriteString: the body is buffered, and sent as a
// stream once it reaches maxBuffered.
func write[T []byte | string](w *response, p T) (int, error) {
	if err := w.writable(); err != nil {
		return 0, err
	}
	w.c.wbuf = append(w.c.wbuf, p...)
	if len(w.c.wbuf) >= maxBuffered {
		if err := w.flush(false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *response) writable() error {
	switch {
	case w.hijacked:
		return http.ErrHijacked
	case w.done.Load():
		return errResponseDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return http.ErrBodyNotAllowed
	}
	return w.c.werr
}

// Flush sends what is written so far, the head first; the response is a
// stream from then on.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController, which reports a failed
// flush (a client that went away).
func (w *response) FlushError() error {
	switch {
	case w.hijacked:
		return http.ErrHijacked
	case w.done.Load():
		return errResponseDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.flush(false)
}

// Hijack hands the connection to the handler, after sending the head
// (and what was written) if WriteHeader was called, as net/http does.
// Unread bytes the client sent stay in the returned reader.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	switch {
	case w.hijacked:
		return nil, nil, http.ErrHijacked
	case w.done.Load():
		return nil, nil, errResponseDone
	}
	c := w.c
	c.stopWatch()
	if w.wroteHeader {
		if err := w.flush(false); err != nil {
			return nil, nil, err
		}
	}
	// The deadlines the handler asked for are the connection's now, as
	// net/http's would be.
	c.syncWriteDeadline()
	w.body.applyDeadline()
	w.hijacked = true
	return c.nc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.nc)), nil
}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
// Each takes effect at the response's next read of the request body from
// the connection, or its next write to it: the handler's reads and
// writes are the only ones the connection sees while it runs (a stream's
// watch for its client going away keeps no deadline), and a body already
// in the buffer or a response not yet sent needs none. So a deadline set
// and cleared around a buffered body costs nothing (issue 25).
func (w *response) SetReadDeadline(t time.Time) error {
	if w.done.Load() || w.hijacked {
		return errResponseDone
	}
	w.body.setDeadline(t)
	return nil
}

func (w *response) SetWriteDeadline(t time.Time) error {
	if w.done.Load() || w.hijacked {
		return errResponseDone
	}
	w.c.wantWDL = t
	return nil
}

// EnableFullDuplex: a handler here may read its body while it writes
// (the body is read from the connection's buffer, nothing else reads it
// until the body is done).
func (w *response) EnableFullDuplex() error { return nil }

// flush sends the head if not yet sent (the response becomes a stream)
// and what is buffered; final: the stream's end too.
func (w *response) flush(final bool) error {
	c := w.c
	c.out = c.out[:0]
	if !w.streaming {
		w.streaming = true
		w.startStream()
	}
	if n := len(c.wbuf); n > 0 {
		body := c.wbuf
		if w.declared >= 0 && w.sent+int64(n) > w.declared {
			body = body[:max(w.declared-w.sent, 0)]
		}
		if w.chunked {
			c.out = strconv.AppendInt(c.out, int64(len(body)), 16)
			c.out = append(c.out, "\r\n"...)
			c.out = append(c.out, body...)
			c.out = append(c.out, "\r\n"...)
		} else {
			c.out = append(c.out, body...)
		}
		w.sent += int64(len(body))
		c.wbuf = c.wbuf[:0]
	}
	if final && w.chunked {
		c.out = append(c.out, "0\r\n\r\n"...)
	}
	if len(c.out) == 0 {
		return c.werr
	}
	err := c.write()
	if err != nil {
		w.ctx.Cancel() // the client is gone: so is the stream
		return err
	}
	if !final {
		c.watchPeer(w)
	}
	return nil
}

// startStream puts the head of a streamed response in c.out: chunked,
// unless the handler declared the length or asked for identity framing
// (the connection then closes after it).
func (w *response) startStream() {
	c := w.c
	framing := ""
	if bodyAllowed(w.status) {
		if cl := w.header.Get("Content-Length"); cl != "" {
			if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
				w.declared = n
				framing = "Content-Length: " + cl + "\r\n"
			}
		}
		if w.declared < 0 {
			if strings.EqualFold(w.header.Get("Transfer-Encoding"), "identity") {
				w.closeAfter = true
			} else {
				w.chunked = true
				framing = "Transfer-Encoding: chunked\r\n"
			}
		}
		w.sniff()
	}
	c.out = w.appendHead(c.out, framing)
}

// finish ends the response once the handler returned: the whole of a
// buffered one with its length, or the end of a stream.
func (w *response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	c := w.c
	if w.streaming {
		if err := w.flush(true); err != nil {
			return err
		}
		if w.declared >= 0 && w.sent != w.declared {
			w.closeAfter = true // the client cannot find the next response
		}
		return nil
	}
	framing := ""
	if bodyAllowed(w.status) {
		w.sniff()
		framing = "Content-Length: " + strconv.Itoa(len(c.wbuf)) + "\r\n"
	} else {
		c.wbuf = c.wbuf[:0]
	}
	c.out = w.appendHead(c.out[:0], framing)
	if len(c.wbuf) >= writevFrom {
		err := c.writeWith(c.wbuf)
		c.wbuf = c.wbuf[:0]
		return err
	}
	c.out = append(c.out, c.wbuf...)
	c.wbuf = c.wbuf[:0]
	return c.write()
}

// sniff sets the Content-Type from the body when the handler set none,
// as net/http does.
func (w *response) sniff() {
	if _, ok := w.header["Content-Type"]; ok || len(w.c.wbuf) == 0 {
		return
	}
	w.header.Set("Content-Type", http.DetectContentType(w.c.wbuf[:min(len(w.c.wbuf), 512)]))
}

// appendHead appends the status line and header, framing (the
// Content-Length or Transfer-Encoding line, or nothing) and the empty
// line.
func (w *response) appendHead(b []byte, framing string) []byte {
	b = appendStatusLine(b, w.status)
	if w.body.unread() > maxDrain {
		// The rest of the body will not be read: the connection
		// closes after this response (net/http says so too).
		w.closeAfter = true
	}
	if v := w.header["Connection"]; len(v) > 0 && httpguts.HeaderValuesContainsToken(v, "close") {
		w.closeAfter = true
	} else if w.closeAfter || w.c.s.shutdown.Load() {
		w.closeAfter = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = appendHeader(b, w.header)
	if _, ok := w.header["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, httpDate()...)
		b = append(b, "\r\n"...)
	}
	b = append(b, framing...)
	return append(b, "\r\n"...)
}

// appendStatusLine appends "HTTP/1.1 code text\r\n" as net/http writes it.
func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// appendHeader appends h's fields as net/http writes them: invalid names
// left out, line breaks in values made spaces, values trimmed; the
// framing fields are the server's, never the handler's.
func appendHeader(b []byte, h http.Header) []byte {
	for k, vv := range h {
		if k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func appendValue(b []byte, v string) []byte {
	v = strings.Trim(v, " \t")
	if !strings.ContainsAny(v, "\r\n") {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		if ch := v[i]; ch == '\r' || ch == '\n' {
			b = append(b, ' ')
		} else {
			b = append(b, ch)
		}
	}
	return b
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// dateCache is the Date header's value for the current second.
type dateCache struct {
	sec int64
	val string
}

var lastDate atomic.Pointer[dateCache]

func httpDate() string {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return d.val
	}
	d := &dateCache{sec: now.Unix(), val: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.val
}
