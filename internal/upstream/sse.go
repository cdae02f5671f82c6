package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// sseClient is the legacy HTTP+SSE client transport (2024-11-05, C1.2):
// one long GET stream brings an `endpoint` event and then every message
// from the upstream; each outgoing message is a POST to that endpoint. The
// session lives exactly as long as the stream.
type sseClient struct {
	httpBase
	sseURL *url.URL
	maxMsg int

	mu       sync.Mutex
	endpoint string

	ctx    context.Context // the stream's lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ transport = (*sseClient)(nil)

// dialSSE opens the stream and waits (bounded by the read timeout) for the
// endpoint event, which must name the same origin as the stream.
func dialSSE(ctx context.Context, c *conn, opts *Options) error {
	srv := opts.Server
	if srv.URL == "" {
		return &Error{Server: c.server, Kind: KindInternal, Err: errors.New("sse server has no url")}
	}
	u, err := url.Parse(srv.URL)
	if err != nil {
		return &Error{Server: c.server, Kind: KindInternal, Err: fmt.Errorf("invalid url: %w", scrubURLError(err))}
	}
	base, err := newHTTPBase(c, opts)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	t := &sseClient{
		httpBase: base,
		sseURL:   u,
		maxMsg:   c.maxMsg,
		ctx:      sctx,
		cancel:   cancel,
	}
	c.t = t
	// Setup (headers, then the endpoint event) is bounded by ctx and the
	// read timeout; the stream itself is not.
	setup, cancelSetup := context.WithTimeout(ctx, c.timeout)
	defer cancelSetup()
	stop := context.AfterFunc(setup, cancel)
	defer stop()

	req, err := t.newRequest(sctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set(headerAccept, acceptStream)
	resp, err := t.do(req)
	if err != nil {
		return t.setupFailed(ctx, setup, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return t.statusError(resp, false)
	}
	if mediaType(resp) != acceptStream {
		resp.Body.Close()
		return t.unsupportedContentType(resp)
	}
	endpoint := make(chan error, 1)
	t.wg.Go(func() { t.read(resp.Body, endpoint) })
	select {
	case err := <-endpoint:
		return err
	case <-setup.Done():
		return t.setupFailed(ctx, setup, setup.Err())
	}
}

// setupFailed says why the stream could not be set up: the caller gave
// up, the read timeout passed, or the request failed.
func (t *sseClient) setupFailed(ctx, setup context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("upstream %s: connect: %w", t.c.server, ctx.Err())
	case setup.Err() != nil:
		return &Error{Server: t.c.server, Kind: KindTimeout,
			Err: fmt.Errorf("no endpoint event: timed out after %s", formatBudget(t.c.timeout))}
	}
	return err
}

// read consumes the stream: the endpoint event first, then messages. The
// end of the stream ends the session, failing every pending call at once.
func (t *sseClient) read(body io.ReadCloser, endpoint chan<- error) {
	defer body.Close()
	r := jsonrpc.NewSSEReader(body, t.maxMsg)
	haveEndpoint := false
	for {
		ev, err := r.Next()
		if err != nil {
			end := t.streamEnded(err)
			if !haveEndpoint {
				endpoint <- end
			}
			t.c.shutdown(end)
			return
		}
		switch ev.Name {
		case "endpoint":
			if haveEndpoint {
				continue
			}
			haveEndpoint = true
			if err := t.setEndpoint(string(ev.Data)); err != nil {
				endpoint <- err
				t.c.shutdown(err)
				return
			}
			endpoint <- nil
		case "", "message":
			if len(strings.TrimSpace(string(ev.Data))) == 0 {
				continue
			}
			t.c.receiveData(ev.Data, nil)
		}
	}
}

func (t *sseClient) setEndpoint(data string) error {
	ep, err := t.sseURL.Parse(strings.TrimSpace(data))
	if err != nil {
		return t.c.invalidResponse("endpoint event is not a URL")
	}
	if !sameOrigin(ep, t.sseURL) {
		return &Error{Server: t.c.server, Kind: KindInvalidResponse,
			Err: fmt.Errorf("endpoint event names another origin (%s)", originOf(ep))}
	}
	t.mu.Lock()
	t.endpoint = ep.String()
	t.mu.Unlock()
	return nil
}

// streamEnded is the session's end error: "connection was closed", keeping
// a read error (C6.5).
func (t *sseClient) streamEnded(err error) *Error {
	switch {
	case t.ctx.Err() != nil:
		return &Error{Server: t.c.server, Kind: KindClosed, Err: ErrClosed}
	case errors.Is(err, io.EOF):
		return &Error{Server: t.c.server, Kind: KindClosed, Err: fmt.Errorf("%w: SSE stream ended", ErrClosed)}
	case errors.Is(err, jsonrpc.ErrEventTooLarge):
		// Cut off mid-event, the stream cannot go on, and it is the
		// session: the session ends, and the Manager opens a new one.
		return &Error{Server: t.c.server, Kind: KindInvalidResponse, Err: fmt.Errorf("%w; %w", &MessageTooLargeError{Limit: t.maxMsg}, ErrClosed)}
	default:
		return &Error{Server: t.c.server, Kind: KindClosed, Err: fmt.Errorf("%w: read SSE stream: %w", ErrClosed, err)}
	}
}

func (t *sseClient) send(ctx context.Context, m *jsonrpc.Message, cl *call) error {
	t.mu.Lock()
	ep := t.endpoint
	t.mu.Unlock()
	if ep == "" {
		return &Error{Server: t.c.server, Kind: KindInternal, Err: errors.New("no endpoint yet")}
	}
	req, err := t.newRequest(ctx, http.MethodPost, ep, jsonrpc.Encode(m))
	if err != nil {
		return err
	}
	req.Header.Set(headerContentType, contentTypeJSON)
	resp, err := t.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// The endpoint names the session: 404 means it is gone.
		err := t.statusError(resp, true)
		if sessionExpired(err) {
			// This request never reached the server: it goes again on a
			// new session. The calls sent before it are marked as waiting
			// on the stream (below), so expire fails them as closed, not
			// expired: they may have run, and their replies were due on a
			// stream that ends with the session.
			t.c.expire(err)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	if cl != nil {
		cl.onListen.Store(true) // the reply comes on the session's stream
	}
	return nil
}

func (t *sseClient) close() error {
	t.cancel()
	t.wg.Wait()
	return nil
}
