package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// defaultHTTPClient is shared by every HTTP upstream that was not given a
// client and has no tls block, so connections are pooled across sessions
// (C11.2). It has no overall timeout: response streams are long-lived;
// requests are bounded by their contexts.
var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	return &http.Client{
		Transport:     newH1Transport(newStdTransport(nil), usesEnvProxy),
		CheckRedirect: sameOriginRedirect,
	}
})

// newStdTransport is the net/http transport behind the package's own
// clients (https and proxied requests). tlsConf nil means the system
// defaults, which honour SSL_CERT_FILE / SSL_CERT_DIR.
func newStdTransport(tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig: tlsConf,
		// Needed for HTTP/2 once TLSClientConfig is set.
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// usesEnvProxy reports whether HTTP_PROXY and friends route req through a
// proxy; such requests take net/http's transport, which speaks to proxies.
func usesEnvProxy(req *http.Request) bool {
	u, err := http.ProxyFromEnvironment(req)
	return err != nil || u != nil
}

// httpClientFor returns the client to use: the configured one (with the
// same-origin redirect rule added when it has none) or the package's own
// for the server's tls block. An explicit Options.HTTPClient wins over the
// tls block: its owner chose its TLS settings.
func httpClientFor(opts *Options) (*http.Client, error) {
	if opts.HTTPClient == nil {
		return httpClientForServer(opts.Server)
	}
	hc := *opts.HTTPClient
	if hc.CheckRedirect == nil {
		hc.CheckRedirect = sameOriginRedirect
	} else {
		// The owner's policy may follow redirects to other origins: the
		// credentials still go no further than Authorization would (C4.3).
		hc.CheckRedirect = stripCredentialsOnRedirect(newEgressAuth(opts.Server, nil, "").slots(), hc.CheckRedirect)
	}
	return &hc, nil
}

// newHTTPBase is the shared part of the two HTTP transports of c.
func newHTTPBase(c *conn, opts *Options) (httpBase, error) {
	client, err := httpClientFor(opts)
	if err == nil {
		client, err = guardedClient(opts.Server, client)
	}
	if err != nil {
		return httpBase{}, &Error{Server: c.server, Kind: KindInternal, Err: err}
	}
	b := httpBase{c: c, client: client, auth: newEgressAuth(opts.Server, opts.bearer(), opts.CallerToken)}
	if opts.sigv4 != nil && b.auth.typ == config.AuthAWSSigV4 {
		b.auth.sig = opts.sigv4
		// Redirects are signed again (or stripped): a client of this
		// session's own, sharing the transport and so its connections.
		hc := *client
		hc.CheckRedirect = opts.sigv4.onRedirect(client.CheckRedirect)
		if ownClient(client) {
			b.redirects = &hc // send keeps the fast path to the transport
		} else {
			b.client = &hc
		}
	}
	return b, nil
}

// redirectError refuses a redirect to another origin (C4.2).
type redirectError struct{ to string }

func (e *redirectError) Error() string {
	return "refused cross-origin redirect to " + e.to
}

// sameOriginRedirect follows a redirect only within the origin of the
// original request; the destination of any other is never contacted.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if !sameOrigin(req.URL, via[0].URL) {
		return &redirectError{to: originOf(req.URL)}
	}
	return nil
}

// sameOrigin compares scheme, host and port, with default ports made
// explicit (https://h/ == https://h:443/).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + u.Host
}

// redactURL is raw without user info, query and fragment: fit for logs and
// error messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}

// staticHeaders are the configured headers, names and values trimmed
// (C3.4): a value with surrounding whitespace is an illegal header.
func staticHeaders(m map[string]string) http.Header {
	h := make(http.Header, len(m))
	for k, v := range m {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		h.Set(k, strings.TrimSpace(v))
	}
	return h
}

// httpBase is what the two HTTP transports share.
type httpBase struct {
	c      *conn
	client *http.Client
	auth   *egressAuth
	// redirects follows the redirects of the package's own client when
	// they need more than its policy (aws_sigv4 signs them again); nil
	// means client.
	redirects *http.Client
}

// newRequestTo is newRequest to a URL parsed once (parseTarget): what
// http.NewRequestWithContext does, less the URL parse and with one body
// object instead of two. u is shared by the requests, as nothing on the
// way modifies a request's URL (a RoundTripper must not; Clone copies).
func (b *httpBase) newRequestTo(ctx context.Context, method string, u *url.URL, body []byte) *http.Request {
	req := http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     make(http.Header),
		Host:       u.Host,
	}
	if body != nil {
		rb := &replayBody{data: body}
		rb.Reset(body)
		req.Body = rb
		req.ContentLength = int64(len(body))
		if len(body) == 0 {
			req.Body = http.NoBody
		}
		req.GetBody = rb.again
	}
	r := req.WithContext(ctx) // req stays on the stack: one Request
	tracing.InjectHeader(ctx, r.Header)
	return r
}

// parseTarget parses a request target as NewRequestWithContext would, for
// newRequestTo; nil when it does not parse (newRequest reports that).
func parseTarget(target string) *url.URL {
	u, err := url.Parse(target)
	if err != nil {
		return nil
	}
	if strings.LastIndex(u.Host, ":") > strings.LastIndex(u.Host, "]") {
		u.Host = strings.TrimSuffix(u.Host, ":") // net/http's removeEmptyPort
	}
	return u
}

// replayBody is an in-memory request body that can be had again
// (GetBody: a retry, a redirect).
type replayBody struct {
	bytes.Reader
	data []byte
}

func (*replayBody) Close() error { return nil }

func (b *replayBody) again() (io.ReadCloser, error) {
	rb := &replayBody{data: b.data}
	rb.Reset(b.data)
	return rb, nil
}

// newRequest builds a request; do adds the static headers and credentials.
func (b *httpBase) newRequest(ctx context.Context, method, target string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		return nil, &Error{Server: b.c.server, Kind: KindInternal, Err: fmt.Errorf("build %s request: %w", method, scrubURLError(err))}
	}
	tracing.InjectHeader(ctx, req.Header)
	return req, nil
}

// do sends req and turns a transport failure into an *Error that keeps its
// real cause (C6.1): connection refused, DNS, TLS, a refused redirect.
func (b *httpBase) do(req *http.Request) (*http.Response, error) {
	used, err := b.authorize(req)
	if err != nil {
		return nil, err
	}
	resp, err := b.send(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && b.auth.refreshable() && b.auth.tokens.Invalidate(used) {
		// A minted token the upstream no longer accepts: mint a fresh one
		// and send the same request once more (C3.6).
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		again, cerr := retryable(req)
		if cerr != nil {
			return nil, &Error{Server: b.c.server, Kind: KindInternal, Err: cerr}
		}
		if _, err := b.authorize(again); err != nil {
			return nil, err
		}
		b.c.log.Info("upstream answered 401; retrying once with a fresh token")
		resp, err = b.send(again)
	}
	if err == nil {
		return resp, nil
	}
	if ctxErr := req.Context().Err(); ctxErr != nil {
		return nil, ctxErr
	}
	return nil, &Error{Server: b.c.server, Kind: KindUnreachable,
		Err: fmt.Errorf("%s %s: %w", req.Method, redactURL(req.URL.String()), scrubURLError(err))}
}

// authorize puts the credentials on req: the static headers and the
// credential slot, then (aws_sigv4) the signature, which comes last so
// that it covers every header set before it. It returns the minted token
// used, if any (see egressAuth.apply).
func (b *httpBase) authorize(req *http.Request) (string, error) {
	used, err := b.auth.apply(req.Context(), req.Header)
	if err != nil {
		return "", err
	}
	if b.auth.sig != nil {
		if err := b.auth.sig.sign(req); err != nil {
			return "", err
		}
	}
	return used, nil
}

// send is Client.Do, minus Client.Do's per-request work (header copies for
// redirects) when the client is the package's own: the transport is called
// directly, and only a redirect response goes through Client.Do, which
// applies the same-origin rule (C4).
func (b *httpBase) send(req *http.Request) (*http.Response, error) {
	if !ownClient(b.client) {
		return b.client.Do(req)
	}
	resp, err := b.client.Transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return resp, nil
	}
	if resp.Header.Get("Location") == "" {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	again, err := retryable(req)
	if err != nil {
		return nil, err
	}
	if b.redirects != nil {
		return b.redirects.Do(again)
	}
	return b.client.Do(again)
}

// retryable is a copy of req, with a fresh body, to send again.
func retryable(req *http.Request) (*http.Request, error) {
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		again.Body = body
	}
	return again, nil
}

// scrubURLError drops the *url.Error wrapper, whose message repeats the
// whole URL (query included).
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// mediaType is the response's content type without parameters, lower case.
func mediaType(resp *http.Response) string {
	ct := resp.Header.Get("Content-Type")
	switch ct {
	case "":
		return ""
	case contentTypeJSON, acceptStream:
		return ct // what ParseMediaType would say, without its map
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "invalid"
	}
	return strings.ToLower(mt)
}

// unsupportedContentType fails fast on a response that is not MCP
// (C6.3). The body is never echoed.
func (b *httpBase) unsupportedContentType(resp *http.Response) *Error {
	mt := mediaType(resp)
	if len(mt) > 64 {
		mt = mt[:64]
	}
	return &Error{Server: b.c.server, Kind: KindInvalidResponse, Status: resp.StatusCode,
		Err: fmt.Errorf("unsupported content type %q", mt)}
}

// maxErrorBody bounds how much of an error response is read to look for a
// JSON-RPC error object.
const maxErrorBody = 64 << 10

// statusError maps a non-success HTTP status to an *Error (C6.4). The body
// is read only for a JSON-RPC error object to relay; its text is never
// put in a message. withSession says whether the request carried a
// session id: a 404 then means the session expired.
func (b *httpBase) statusError(resp *http.Response, withSession bool) *Error {
	status := resp.StatusCode
	var rpc *jsonrpc.Error
	var text string // a plain-text body of a 400 on a session, bounded
	switch mt := mediaType(resp); {
	case mt == "application/json":
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if m, err := jsonrpc.Decode(data); err == nil && m.Error != nil {
			rpc = m.Error
		}
	case status == http.StatusBadRequest && withSession && (mt == "" || mt == "text/plain" || mt == "text/html"):
		// Older Python SDK servers say it in plain text.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxStaleText))
		text = string(data)
	}
	if status == http.StatusBadRequest && withSession && (rpc != nil && staleSession(rpc.Message) || rpc == nil && staleSession(text)) {
		// Many servers answer a session id they do not know (after a
		// restart) 400 instead of the transport's 404: the TypeScript
		// SDK's examples and server-everything ("Bad Request: No valid
		// session ID provided"), Python SDK servers before late 2025,
		// supergateway before 4.0. Taken for a 400 on anything else,
		// every later call on the session fails the same way for good;
		// it is an expiry (re-initialize once, send again once), named
		// with its server since the upstream's words name none.
		said := "Bad Request"
		if rpc != nil {
			said = rpc.Message
		} else if t := strings.TrimSpace(text); t != "" {
			said = t
		}
		said = printable(said, 200)
		code := int64(jsonrpc.CodeInvalidRequest)
		if rpc != nil {
			code = rpc.Code
		}
		return &Error{Server: b.c.server, Status: status, Kind: KindUpstreamError,
			Err: fmt.Errorf("%w (HTTP 400): %w", ErrSessionExpired,
				&jsonrpc.Error{Code: code, Message: fmt.Sprintf("upstream %s no longer knows the gateway's session (HTTP 400: %s)", b.c.server, said)})}
	}
	e := &Error{Server: b.c.server, Status: status}
	httpErr := fmt.Errorf("HTTP %d %s", status, http.StatusText(status))
	if rpc != nil {
		httpErr = fmt.Errorf("HTTP %d %s: %w", status, http.StatusText(status), rpc)
	}
	switch {
	case status == http.StatusNotFound && withSession:
		if rpc == nil {
			rpc = jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Session terminated")
		}
		e.Kind = KindUpstreamError
		e.Err = fmt.Errorf("%w (HTTP 404): %w", ErrSessionExpired, rpc)
	case status == http.StatusNotFound:
		if rpc == nil {
			rpc = jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "Not Found")
		}
		e.Kind = KindUpstreamError
		e.Err = fmt.Errorf("HTTP 404: %w", rpc)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind, e.Err = KindAuth, httpErr
		e.Challenge = challengeOf(resp.Header)
	case status == http.StatusTooManyRequests:
		e.Kind, e.Err = KindRateLimited, httpErr
	case status >= 400:
		e.Kind, e.Err = KindUpstreamError, httpErr
	default:
		e.Kind, e.Err = KindInvalidResponse, fmt.Errorf("invalid MCP response: unexpected HTTP status %d", status)
	}
	return e
}

// maxStaleText bounds the plain-text body of a 400 read to tell a stale
// session from another bad request.
const maxStaleText = 1 << 10

// staleSession reports whether the message of a 400 answer to a request
// that carried a session id says the upstream does not know that session:
// it names the session and says it is unknown, invalid, missing or over
// ("Bad Request: No valid session ID provided", "Invalid or expired
// session ID", "Session not found"). Other 400s stay errors of the call.
func staleSession(msg string) bool {
	m := strings.ToLower(msg)
	if !strings.Contains(m, "session") {
		return false
	}
	for _, w := range []string{"no valid", "invalid", "unknown", "not found", "expired", "terminated", "does not exist", "no such"} {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// printable is s without control characters, cut at max bytes: an
// upstream's words put in an error message.
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max]
	}
	return strings.ToValidUTF8(s, "")
}

// maxChallenge bounds the WWW-Authenticate kept on an *Error.
const maxChallenge = 2048

// challengeOf is resp's WWW-Authenticate values joined, bounded, without
// control characters.
func challengeOf(h http.Header) string {
	v := strings.Join(h.Values("WWW-Authenticate"), ", ")
	if len(v) > maxChallenge {
		v = v[:maxChallenge]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, v)
}

// readBody reads a whole JSON body, bounded by max (S23): a body that says
// it is longer is refused before any of it is read, one that turns out
// longer once max+1 bytes are in; either way the caller closes it unread,
// which costs the connection, not the memory of the rest. A failure while
// reading keeps its cause (an interrupted body is not "invalid JSON").
func (b *httpBase) readBody(resp *http.Response, max int) ([]byte, error) {
	if resp.ContentLength > int64(max) {
		return nil, b.c.tooLarge()
	}
	// A known length is one allocation; otherwise the buffer doubles, but
	// never past max+1 (io.ReadAll's growth would take it to twice max).
	size := 64 << 10
	if resp.ContentLength >= 0 {
		size = int(resp.ContentLength) + 1 // +1: room to see the end
	}
	buf := make([]byte, 0, min(size, max+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > max {
				return nil, b.c.tooLarge()
			}
			grown := make([]byte, len(buf), min(2*cap(buf), max+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, &Error{Server: b.c.server, Kind: KindUnreachable, Err: fmt.Errorf("read response: %w", err)}
		}
	}
	if len(buf) > max {
		return nil, b.c.tooLarge()
	}
	return buf, nil
}

// sessionExpired reports whether err is a 404 on a session (C6.4).
func sessionExpired(err error) bool { return errors.Is(err, ErrSessionExpired) }

// Header names used on requests.
const (
	headerAccept      = "Accept"
	headerContentType = "Content-Type"
	acceptPost        = "application/json, text/event-stream"
	acceptStream      = "text/event-stream"
	contentTypeJSON   = "application/json"
)

// The constant values of a POST's headers, shared by every request (a
// header value is replaced, never changed in place).
var (
	acceptPostValue      = []string{acceptPost}
	contentTypeJSONValue = []string{contentTypeJSON}
)

// needsVersionHeader reports whether rev requires the MCP-Protocol-Version
// header on requests after initialize (added in 2025-06-18).
func needsVersionHeader(rev string) bool {
	return rev != "" && rev != mcpwire.Rev20241105 && rev != mcpwire.Rev20250326
}
