package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/state"
)

// Resumable POST streams (SPEC S15, C9.1; MCP transports, "Resumability
// and Redelivery"). In fleet mode (fleet.session_keys and a shared state
// backend) every SSE event of a session's POST stream carries an id
// "<key>-<n>": key is random per stream, n the event's number in the
// stream's buffer in the shared state, where the event is appended before
// it is written. A client that loses the connection sends GET with
// Last-Event-ID to any replica: that replica replays what follows the id
// from the buffer, then tails it until the call's final response, and ends
// the stream.
//
// A disconnect therefore does not cancel the call at once, as the
// transport asks ("Disconnection SHOULD NOT be interpreted as the client
// cancelling its request"): the call keeps running, its events still
// buffered, for fleet.resume_window after the last sign of a reader (the
// disconnect, or a heartbeat of a resuming GET on any replica, carried on
// the bus). With no reader for that long it is cancelled as C9.1 says. A
// POST that had sent nothing yet gave the client no id to resume with: it
// is cancelled at once. Without session keys nothing here runs, and a
// disconnect cancels the call at once, as before.
//
// This file must not decide what a message says: it buffers and replays
// bytes. A buffer is found by the session's hashed id and the stream key,
// so an id of another session's stream names nothing.

// Bounds of the resume machinery.
const (
	// resumePoll is how often a resumed GET reads its buffer: the call
	// runs on another replica, and polling needs no per-stream
	// subscription.
	resumePoll = 50 * time.Millisecond
	// resumeBeat bounds the reader heartbeats of a resumed GET.
	resumeBeat = time.Second
	// producerCheck is how long a resumed GET waits without an event
	// before it asks the replica registry whether the replica running
	// the call is still there.
	producerCheck = 2 * time.Second
)

// Event kinds, the first byte of a buffered event.
const (
	eventMessage byte = 'm'
	eventFinal   byte = 'f' // the call's response: the stream ends after it
	// eventGap marks where events could not be buffered (the backend was
	// unreachable): a resume from before it cannot be told everything.
	eventGap byte = 'g'
)

// resumable is the buffer of one POST SSE stream.
type resumable struct {
	g    *Gateway
	key  string // random, the first part of the event ids
	name string // the buffer's key in the shared state
	// lastReader is when a client last read the stream (Unix ns): the
	// POST itself, or a resumed GET anywhere in the fleet.
	lastReader atomic.Int64
	// gap: an event could not be buffered; the next append marks it
	// first. Under the postSender's lock.
	gap bool
}

// resumables are the resumable streams whose calls run on this replica,
// by stream key: a resumed GET anywhere in the fleet tells the call its
// client still reads (sawReader).
type resumables struct {
	mu sync.Mutex // mu guards the fields below
	m  map[string]*resumable
}

func (rs *resumables) put(res *resumable) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*resumable{}
	}
	rs.m[res.key] = res
}

func (rs *resumables) remove(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.m, key)
}

// get is the stream under key, nil when its call does not run here.
func (rs *resumables) get(key string) *resumable {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[key]
}

// newResumable starts the buffer of a POST stream of s, or returns nil
// when s's POST streams are not resumable: outside fleet mode, and for a
// revision before streamable HTTP.
func (g *Gateway) newResumable(s *session) *resumable {
	if !g.fleetOn() || s == nil || s.Token() == "" {
		return nil
	}
	rev := s.Rev()
	if !mcpwire.IsHandshake(rev) || rev == mcpwire.Rev20241105 {
		return nil
	}
	// The key names the replica running the call (its first 12
	// characters, g.instance), so that a resumed GET elsewhere can tell
	// when that replica is gone; the rest is random.
	var b [10]byte
	_, _ = rand.Read(b[:])
	key := g.instance + hex.EncodeToString(b[:])
	res := &resumable{g: g, key: key, name: resumeStreamName(s, key)}
	res.lastReader.Store(time.Now().UnixNano())
	return res
}

// resumeStreamName is the buffer key of stream key of session s.
func resumeStreamName(s *session, key string) string {
	return "resume:" + hashHex(s.ID()) + ":" + key
}

// append buffers one event and returns its SSE id.
func (res *resumable) append(data []byte, final bool) (string, error) {
	g := res.g
	ctx, cancel := context.WithTimeout(g.bgCtx, busTimeout)
	defer cancel()
	kind := eventMessage
	if final {
		kind = eventFinal
	}
	if res.gap {
		if _, err := g.shared.AppendEvent(ctx, res.name, []byte{eventGap}, g.resumeEvents(), g.resumeTTL()); err != nil {
			return "", err
		}
		res.gap = false
	}
	buf := make([]byte, 0, len(data)+1)
	buf = append(append(buf, kind), data...)
	n, err := g.shared.AppendEvent(ctx, res.name, buf, g.resumeEvents(), g.resumeTTL())
	if err != nil {
		res.gap = true
		return "", err
	}
	return res.key + "-" + strconv.FormatUint(n, 10), nil
}

// hasGap reports whether events hold a gap marker.
func hasGap(events []state.Event) bool {
	for _, ev := range events {
		if len(ev.Data) > 0 && ev.Data[0] == eventGap {
			return true
		}
	}
	return false
}

func (g *Gateway) resumeEvents() int {
	if f := g.conf().Fleet; f != nil && f.ResumeEvents > 0 {
		return min(f.ResumeEvents, state.MaxEventsPerStream)
	}
	return config.DefaultResumeEvents
}

func (g *Gateway) resumeTTL() time.Duration {
	if f := g.conf().Fleet; f != nil && f.ResumeTTL > 0 {
		return f.ResumeTTL
	}
	return config.DefaultResumeTTL
}

func (g *Gateway) resumeWindow() time.Duration {
	if f := g.conf().Fleet; f != nil && f.ResumeWindow > 0 {
		return f.ResumeWindow
	}
	return config.DefaultResumeWindow
}

// outliveClient returns the context a resumable POST's call runs under:
// it survives the client's disconnect for the resume window (see above).
// stop must be called when the call is over.
func (g *Gateway) outliveClient(req context.Context, ps *postSender) (ctx context.Context, stop func()) {
	res := ps.res
	ctx, cancel := context.WithCancel(context.WithoutCancel(req))
	done := make(chan struct{})
	g.resumables.put(res)
	// A task: it outlives the POST by the resume window, and ends with
	// the call (done), with the gateway's teardown (stop) or the window.
	started := g.tasks.start(func() {
		defer g.resumables.remove(res.key)
		select {
		case <-done:
			return
		case <-req.Done():
		}
		ps.mu.Lock()
		started := ps.started
		ps.gone = true
		ps.mu.Unlock()
		if !started {
			// No event id went out: nothing to resume with (C9.1).
			cancel()
			return
		}
		res.lastReader.Store(time.Now().UnixNano())
		window := g.resumeWindow()
		t := time.NewTimer(window)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-g.stop:
				cancel()
				return
			case <-t.C:
				idle := time.Since(time.Unix(0, res.lastReader.Load()))
				if idle >= window {
					g.log.Info("call cancelled: its client dropped the stream and did not resume it", "window", window.String())
					cancel()
					return
				}
				t.Reset(window - idle)
			}
		}
	})
	if !started {
		// The gateway closed: the call would not outlive its client.
		g.resumables.remove(res.key)
		cancel()
	}
	return ctx, func() {
		close(done)
		cancel()
	}
}

// sawReader records a sign of a reader of the stream key, if this replica
// runs its call.
func (g *Gateway) sawReader(key string) {
	if res := g.resumables.get(key); res != nil {
		res.lastReader.Store(time.Now().UnixNano())
	}
}

// parseResumeID splits a Last-Event-ID of a resumable stream into the
// stream key and the event number. The error never quotes id.
func parseResumeID(id string) (key string, n uint64, err error) {
	key, num, ok := strings.Cut(id, "-")
	if !ok || len(key) != 32 || strings.Trim(key, "0123456789abcdef") != "" {
		return "", 0, errBadEventID
	}
	if n, err = state.ParseEventID(num); err != nil {
		return "", 0, errBadEventID
	}
	return key, n, nil
}

var errBadEventID = errors.New("not an event id this gateway issued")

// serveResume serves a GET with Last-Event-ID (fleet mode): the events of
// the stream it names after it, then the live rest until the call's final
// response. sess is the caller's own session (checked by the caller).
func (g *Gateway) serveResume(w http.ResponseWriter, r *http.Request, sess *session, lastID string) {
	key, after, err := parseResumeID(lastID)
	if err != nil {
		writeRPCError(w, http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Bad Request: Last-Event-ID is not an event id this gateway issued"))
		return
	}
	name := resumeStreamName(sess, key)
	ctx := r.Context()
	events, complete, err := g.readEvents(ctx, name, after)
	if err != nil {
		g.log.Warn("cannot read a stream's buffered events", "session", sess.ID()[:8], "error", err)
		writeRPCError(w, http.StatusServiceUnavailable, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"Service Unavailable: the stream's events cannot be read now; try again"))
		return
	}
	if !complete {
		if len(events) == 0 {
			// No buffer: an id of another session's stream, one never
			// issued, or one whose buffer lapsed.
			writeRPCError(w, http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
				"Bad Request: Last-Event-ID names no stream of this session (unknown, of another session, or expired after %s)", g.resumeTTL()))
			return
		}
		writeRPCError(w, http.StatusGone, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Gone: events after Last-Event-ID are no longer buffered (fleet.resume_events is %d); the request's outcome is lost", g.resumeEvents()))
		return
	}
	if hasGap(events) {
		writeRPCError(w, http.StatusGone, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Gone: some events after Last-Event-ID could not be buffered (the shared state was unreachable, or the replica running the call is gone); the request's outcome may be lost"))
		return
	}
	ended := len(events) == 0 && after > 0 && g.finalWas(ctx, name, after)
	_, done := g.openStream(w, jsonrpc.ID{}, false)
	if done == nil {
		return
	}
	defer done()
	g.resumed.Add(1)
	g.log.Debug("stream resumed", "session", sess.ID()[:8], "after", after)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set(mcpwire.HeaderSessionID, sess.ClientID())
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if ended {
		// The client already has the response: nothing follows.
		return
	}
	// A key revoked meanwhile ends the stream, as it ends a GET stream.
	revoked := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(revoked) }) }
	defer end() // and the watcher with it
	g.watchCaller(ctx, revoked, end)
	dw := deadlineWriter{w, rc, g.limits().SSEWriteTimeout}
	if dw.timeout <= 0 {
		dw.timeout = writeTimeout
	}
	g.readerBeat(key)
	lastBeat := time.Now()
	poll := time.NewTicker(resumePoll)
	defer poll.Stop()
	lastEvent := time.Now()
	lastNews := time.Now() // the last event read (keep-alives aside)
	for {
		for _, ev := range events {
			if len(ev.Data) > 0 && ev.Data[0] == eventGap {
				// Ends here: the client's next resume, from the last
				// event it got, is told (410 above).
				_ = rc.Flush()
				return
			}
			after = ev.ID
			if len(ev.Data) == 0 {
				continue
			}
			out := jsonrpc.AppendEvent(nil, &jsonrpc.Event{ID: key + "-" + strconv.FormatUint(ev.ID, 10), Data: ev.Data[1:]})
			if _, err := dw.Write(out); err != nil {
				return
			}
			if ev.Data[0] == eventFinal {
				_ = rc.Flush()
				return
			}
		}
		if len(events) > 0 {
			lastEvent, lastNews = time.Now(), time.Now()
			if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return
			}
		}
		if time.Since(lastNews) >= producerCheck {
			lastNews = time.Now()
			if g.producerGone(ctx, key) {
				// The call died with its replica: no final response will
				// come. The stream ends, and the client's next resume is
				// told so (410) instead of waiting for resume_ttl.
				g.log.Info("resumed stream ended: the replica running its call is gone", "session", sess.ID()[:8])
				g.markProducerGone(ctx, name)
				return
			}
		}
		if time.Since(lastBeat) >= g.beatInterval() {
			g.readerBeat(key)
			lastBeat = time.Now()
		}
		if time.Since(lastEvent) >= keepAliveInterval {
			if _, err := dw.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			_ = rc.Flush()
			lastEvent = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-revoked:
			return
		case <-sess.Ended():
			return
		case <-g.stop:
			return
		case <-poll.C:
		}
		events, complete, err = g.readEvents(ctx, name, after)
		if err != nil {
			// Transient: the next poll tries again, the reader's
			// heartbeats keep the call alive meanwhile.
			events = nil
			continue
		}
		if !complete {
			// Fell behind the buffer's bound, or the buffer lapsed (the
			// call's replica is gone): the client's next resume is told.
			g.log.Info("resumed stream ended: its buffer no longer holds what follows", "session", sess.ID()[:8])
			return
		}
	}
}

// finalWas reports whether event n of stream name is the call's final
// response (still buffered).
func (g *Gateway) finalWas(ctx context.Context, name string, n uint64) bool {
	evs, _, err := g.readEvents(ctx, name, n-1)
	return err == nil && len(evs) > 0 && evs[0].ID == n && len(evs[0].Data) > 0 && evs[0].Data[0] == eventFinal
}

func (g *Gateway) readEvents(ctx context.Context, name string, after uint64) ([]state.Event, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	return g.shared.EventsAfter(ctx, name, after)
}

// beatInterval is how often a resumed GET tells the call's replica that
// a client reads the stream: well within the window.
func (g *Gateway) beatInterval() time.Duration {
	return max(min(g.resumeWindow()/3, resumeBeat), resumePoll)
}

// readerBeat tells the replica running stream key's call (this one or
// another) that a client reads it.
func (g *Gateway) readerBeat(key string) {
	g.sawReader(key)
	g.publishNote(busNote{Kind: noteReader, Stream: key})
}

// resumeCount is how many streams were resumed here.
func (g *Gateway) resumeCount() int64 { return g.resumed.Load() }

// producerGone reports whether the replica that runs the call of stream
// key (named in the key) has left the replica registry. Unknown (outside
// a fleet registry, the registry unreachable, this replica's own stream)
// is not gone.
func (g *Gateway) producerGone(ctx context.Context, key string) bool {
	if g.peers == nil || len(key) < len(g.instance) {
		return false
	}
	id := key[:len(g.instance)]
	if id == g.instance {
		return false
	}
	return !g.peers.alive(ctx, id)
}

// markProducerGone leaves a gap marker in stream name's buffer: the
// outcome of its call is lost, which the next resume says (410).
func (g *Gateway) markProducerGone(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	if _, err := g.shared.AppendEvent(ctx, name, []byte{eventGap}, g.resumeEvents(), g.resumeTTL()); err != nil {
		g.log.Debug("could not mark a stream whose replica is gone", "error", err)
	}
}
