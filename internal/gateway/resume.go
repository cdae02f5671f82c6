package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
)

// Resumable POST streams (SPEC S15, C9.1): the buffers, their replay and
// how long a call outlives its client are fleetrelay.Resumables'. What stays
// here is the HTTP side: which POST stream is resumable, the task a call
// outlives its client in, and the resumed GET's status and headers.
// Without session keys nothing here runs, and a disconnect cancels the
// call at once.

// newResumable starts the buffer of a POST stream of s, or returns nil
// when s's POST streams are not resumable: outside fleet mode, and for a
// revision before streamable HTTP.
func (g *Gateway) newResumable(s *session) *fleetrelay.Stream {
	if !g.fleetOn() || s == nil || s.Token() == "" {
		return nil
	}
	rev := s.Rev()
	if !mcpwire.IsHandshake(rev) || rev == mcpwire.Rev20241105 {
		return nil
	}
	return g.resumables.Open(s.Hash())
}

// outliveClient returns the context a resumable POST's call runs under:
// it survives the client's disconnect for the resume window
// (fleetrelay.Resumables.Outlive). stop must be called when the call is over.
func (g *Gateway) outliveClient(req context.Context, ps *postSender) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(req))
	done := make(chan struct{})
	gone := func() bool {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.gone = true
		return ps.started
	}
	// A task: it outlives the POST by the resume window, and ends with
	// the call (done), with the gateway's teardown or the window.
	started := g.tasks.start(func() { g.resumables.Outlive(ps.res, done, req.Done(), gone, cancel) })
	if !started {
		// The gateway closed: the call would not outlive its client.
		cancel()
	}
	return ctx, func() {
		close(done)
		cancel()
	}
}

// serveResume serves a GET with Last-Event-ID (fleet mode): the events of
// the stream it names after it, then the live rest until the call's final
// response. sess is the caller's own session (checked by the caller).
func (g *Gateway) serveResume(w http.ResponseWriter, r *http.Request, sess *session, lastID string) {
	ctx := r.Context()
	res, err := g.resumables.Begin(ctx, sess.Hash(), sess.ID()[:8], lastID)
	switch {
	case errors.Is(err, fleetrelay.ErrBadEventID):
		writeRPCError(w, http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Bad Request: Last-Event-ID is not an event id this gateway issued"))
		return
	case errors.Is(err, fleetrelay.ErrNoStream):
		// No buffer: an id of another session's stream, one never
		// issued, or one whose buffer lapsed.
		writeRPCError(w, http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Bad Request: Last-Event-ID names no stream of this session (unknown, of another session, or expired after %s)", g.resumables.TTL()))
		return
	case errors.Is(err, fleetrelay.ErrTruncated):
		writeRPCError(w, http.StatusGone, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Gone: events after Last-Event-ID are no longer buffered (fleet.resume_events is %d); the request's outcome is lost", g.resumables.MaxEvents()))
		return
	case errors.Is(err, fleetrelay.ErrGap):
		writeRPCError(w, http.StatusGone, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Gone: some events after Last-Event-ID could not be buffered (the shared state was unreachable, or the replica running the call is gone); the request's outcome may be lost"))
		return
	case err != nil:
		g.log.Warn("cannot read a stream's buffered events", "session", sess.ID()[:8], "error", err)
		writeRPCError(w, http.StatusServiceUnavailable, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"Service Unavailable: the stream's events cannot be read now; try again"))
		return
	}
	_, done := g.openStream(w, jsonrpc.ID{}, false)
	if done == nil {
		return
	}
	defer done()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set(mcpwire.HeaderSessionID, sess.ClientID())
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	// A key revoked meanwhile ends the stream, as it ends a GET stream.
	revoked := make(chan struct{})
	if !res.Ended() {
		var once sync.Once
		end := func() { once.Do(func() { close(revoked) }) }
		defer end() // and the watcher with it
		g.watchCaller(ctx, revoked, end)
	}
	dw := deadlineWriter{w, rc, g.limits().SSEWriteTimeout}
	if dw.timeout <= 0 {
		dw.timeout = writeTimeout
	}
	res.Replay(ctx, fleetrelay.Out{
		Write:   func(b []byte) error { _, err := dw.Write(b); return err },
		Flush:   rc.Flush,
		Revoked: revoked,
		Ended:   sess.Ended(),
	})
}

// resumeCount is how many streams were resumed here.
func (g *Gateway) resumeCount() int64 { return g.resumables.Resumed() }

// newResumables builds g's resumable streams; they are used in fleet mode
// only (newResumable).
func (g *Gateway) newResumables() *fleetrelay.Resumables {
	o := fleetrelay.ResumablesOptions{
		Events:    g.shared,
		Instance:  g.instance,
		Fleet:     func() *config.Fleet { return g.conf().Fleet },
		Tell:      func(key string) { g.fleetBus.Publish(fleetrelay.Note{Kind: fleetrelay.NoteReader, Stream: key}) },
		KeepAlive: keepAliveInterval,
		Logger:    g.log,
	}
	if g.peers != nil {
		o.Alive = g.peers.Alive
	}
	return fleetrelay.NewResumables(o)
}
