package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
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
// is cancelled at once.
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
	// ProducerCheck is how long a resumed GET waits without an event
	// before it asks the replica registry whether the replica running
	// the call is still there.
	ProducerCheck = 2 * time.Second
	// KeyLen is the length of a stream key: the replica's 12-character
	// instance id and 20 random hex digits.
	KeyLen = 32
)

// Event kinds, the first byte of a buffered event.
const (
	eventMessage byte = 'm'
	eventFinal   byte = 'f' // the call's response: the stream ends after it
	// eventGap marks where events could not be buffered (the backend was
	// unreachable): a resume from before it cannot be told everything.
	eventGap byte = 'g'
)

// ResumablesOptions configure Resumables.
type ResumablesOptions struct {
	// Events is the shared state the buffers live in.
	Events state.Events
	// Instance is this replica's id (12 lower-case hex characters): the
	// first part of the keys of the streams whose calls run here.
	Instance string
	// Fleet is the fleet configuration now (read on each use: a reload
	// changes the bounds); nil or a nil result: the defaults.
	Fleet func() *config.Fleet
	// Alive reports whether a replica is still in the registry; nil: no
	// registry, never gone.
	Alive func(ctx context.Context, replica string) bool
	// Tell carries a reader's heartbeat of stream key to the other
	// replicas (the bus); nil: this replica alone.
	Tell func(key string)
	// KeepAlive is how long a resumed stream goes without a write
	// before it writes a keep-alive comment.
	KeepAlive time.Duration
	Logger    *slog.Logger
}

// Resumables are the resumable streams of this replica: the buffers of
// the POST streams whose calls run here, by stream key (a resumed GET
// anywhere in the fleet tells the call its client still reads), and the
// replays of resumed GETs served here. Safe for concurrent use.
type Resumables struct {
	o ResumablesOptions
	// ctx ends with Stop: appends and reads are bounded by it.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    chan struct{}
	stopped sync.Once
	resumed atomic.Int64 // streams resumed with Last-Event-ID here

	mu sync.Mutex // mu guards the fields below
	m  map[string]*Stream
}

// NewResumables returns the resumable streams of a replica.
func NewResumables(o ResumablesOptions) *Resumables {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 25 * time.Second
	}
	rs := &Resumables{o: o, stop: make(chan struct{})}
	rs.ctx, rs.cancel = context.WithCancel(context.Background())
	return rs
}

// Stop ends the replays being served and the calls waiting for a reader:
// the gateway is shutting down. Their goroutines are their owners' (a
// request, a task), which Stop makes return.
func (rs *Resumables) Stop() {
	rs.stopped.Do(func() {
		close(rs.stop)
		rs.cancel()
	})
}

// Stream is the buffer of one POST SSE stream whose call runs here.
type Stream struct {
	rs   *Resumables
	key  string // random, the first part of the event ids
	name string // the buffer's key in the shared state
	// lastReader is when a client last read the stream (Unix ns): the
	// POST itself, or a resumed GET anywhere in the fleet.
	lastReader atomic.Int64
	// gap: an event could not be buffered; the next append marks it
	// first. Appends are serialised by the stream's writer.
	gap bool
}

// Open starts the buffer of a POST stream of the session whose id hashes
// to sessionHash. The caller decides whether the stream is resumable.
func (rs *Resumables) Open(sessionHash string) *Stream {
	// The key names the replica running the call (its first 12
	// characters), so that a resumed GET elsewhere can tell when that
	// replica is gone; the rest is random.
	var b [10]byte
	_, _ = rand.Read(b[:])
	key := rs.o.Instance + hex.EncodeToString(b[:])
	st := &Stream{rs: rs, key: key, name: streamName(sessionHash, key)}
	st.lastReader.Store(time.Now().UnixNano())
	return st
}

// Key is the stream's key, the first part of its event ids.
func (st *Stream) Key() string { return st.key }

// streamName is the buffer key of stream key of the session whose id
// hashes to sessionHash.
func streamName(sessionHash, key string) string {
	return "resume:" + sessionHash + ":" + key
}

// Append buffers one event (final: the call's response) and returns its
// SSE id. Not safe for concurrent use on one stream: its writer
// serialises them. After a failure the next append first marks the gap,
// so that a resume from before it is told.
func (st *Stream) Append(data []byte, final bool) (string, error) {
	rs := st.rs
	ctx, cancel := context.WithTimeout(rs.ctx, Timeout)
	defer cancel()
	kind := eventMessage
	if final {
		kind = eventFinal
	}
	if st.gap {
		if _, err := rs.o.Events.AppendEvent(ctx, st.name, []byte{eventGap}, rs.MaxEvents(), rs.TTL()); err != nil {
			return "", err
		}
		st.gap = false
	}
	buf := make([]byte, 0, len(data)+1)
	buf = append(append(buf, kind), data...)
	n, err := rs.o.Events.AppendEvent(ctx, st.name, buf, rs.MaxEvents(), rs.TTL())
	if err != nil {
		st.gap = true
		return "", err
	}
	return st.key + "-" + strconv.FormatUint(n, 10), nil
}

func (rs *Resumables) fleet() *config.Fleet {
	if rs.o.Fleet == nil {
		return nil
	}
	return rs.o.Fleet()
}

// MaxEvents is how many events a stream's buffer keeps
// (fleet.resume_events).
func (rs *Resumables) MaxEvents() int {
	if f := rs.fleet(); f != nil && f.ResumeEvents > 0 {
		return min(f.ResumeEvents, state.MaxEventsPerStream)
	}
	return config.DefaultResumeEvents
}

// TTL is how long a stream's buffer outlives its last event
// (fleet.resume_ttl).
func (rs *Resumables) TTL() time.Duration {
	if f := rs.fleet(); f != nil && f.ResumeTTL > 0 {
		return f.ResumeTTL
	}
	return config.DefaultResumeTTL
}

// Window is how long a call outlives the last sign of a reader
// (fleet.resume_window).
func (rs *Resumables) Window() time.Duration {
	if f := rs.fleet(); f != nil && f.ResumeWindow > 0 {
		return f.ResumeWindow
	}
	return config.DefaultResumeWindow
}

// beatInterval is how often a resumed GET tells the call's replica that
// a client reads the stream: well within the window.
func (rs *Resumables) beatInterval() time.Duration {
	return max(min(rs.Window()/3, resumeBeat), resumePoll)
}

// Outlive keeps st's call alive while a client may resume it, and returns
// when the call no longer needs watching. It runs in a goroutine its
// caller owns (and waits for), from the POST's start: done closes when
// the call is over, reqDone when the POST's client went away. Then gone
// is called, and says whether an event went out before: if none did, the
// client has no id to resume with and cancel is called at once (C9.1);
// else cancel is called once no reader was seen for the resume window,
// or when the replica stops.
func (rs *Resumables) Outlive(st *Stream, done, reqDone <-chan struct{}, gone func() (started bool), cancel func()) {
	rs.put(st)
	defer rs.remove(st.key)
	select {
	case <-done:
		return
	case <-reqDone:
	}
	if !gone() {
		// No event id went out: nothing to resume with (C9.1).
		cancel()
		return
	}
	st.lastReader.Store(time.Now().UnixNano())
	window := rs.Window()
	t := time.NewTimer(window)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-rs.stop:
			cancel()
			return
		case <-t.C:
			idle := time.Since(time.Unix(0, st.lastReader.Load()))
			if idle >= window {
				rs.o.Logger.Info("call cancelled: its client dropped the stream and did not resume it", "window", window.String())
				cancel()
				return
			}
			t.Reset(window - idle)
		}
	}
}

func (rs *Resumables) put(st *Stream) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*Stream{}
	}
	rs.m[st.key] = st
}

func (rs *Resumables) remove(key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.m, key)
}

// SawReader records a sign of a reader of the stream key, if this replica
// runs its call (else it does nothing).
func (rs *Resumables) SawReader(key string) {
	rs.mu.Lock()
	st := rs.m[key]
	rs.mu.Unlock()
	if st != nil {
		st.lastReader.Store(time.Now().UnixNano())
	}
}

// Resumed is how many streams were resumed here.
func (rs *Resumables) Resumed() int64 { return rs.resumed.Load() }

// ParseResumeID splits a Last-Event-ID of a resumable stream into the
// stream key and the event number. The error never quotes id.
func ParseResumeID(id string) (key string, n uint64, err error) {
	key, num, ok := strings.Cut(id, "-")
	if !ok || len(key) != KeyLen || strings.Trim(key, "0123456789abcdef") != "" {
		return "", 0, ErrBadEventID
	}
	if n, err = state.ParseEventID(num); err != nil {
		return "", 0, ErrBadEventID
	}
	return key, n, nil
}

// Why a resume cannot be served. The gateway tells its client each in
// its own words.
var (
	// ErrBadEventID: Last-Event-ID is not an id this gateway issued.
	ErrBadEventID = errors.New("not an event id this gateway issued")
	// ErrNoStream: no buffer of this session has that key (another
	// session's, never issued, or lapsed after TTL).
	ErrNoStream = errors.New("no stream of this session has that id")
	// ErrTruncated: the events after the id are no longer buffered
	// (more than MaxEvents followed it).
	ErrTruncated = errors.New("events after the id are no longer buffered")
	// ErrGap: some events after the id could not be buffered, or the
	// replica running the call is gone.
	ErrGap = errors.New("some events after the id could not be buffered")
)

// Resume is a resumed GET's read of a buffer, from Begin to Replay.
type Resume struct {
	rs      *Resumables
	key     string
	name    string
	after   uint64
	events  []state.Event
	session string // the session's short id, for logs
	ended   bool
}

// Begin reads what follows lastID in the buffer of the session whose id
// hashes to sessionHash (short: its short id, for logs). An error is one
// of the Err values above, or a failure to read the shared state.
func (rs *Resumables) Begin(ctx context.Context, sessionHash, short, lastID string) (*Resume, error) {
	key, after, err := ParseResumeID(lastID)
	if err != nil {
		return nil, err
	}
	name := streamName(sessionHash, key)
	events, complete, err := rs.read(ctx, name, after)
	if err != nil {
		return nil, fmt.Errorf("read a stream's buffered events: %w", err)
	}
	if !complete {
		if len(events) == 0 {
			return nil, ErrNoStream
		}
		return nil, ErrTruncated
	}
	if hasGap(events) {
		return nil, ErrGap
	}
	res := &Resume{rs: rs, key: key, name: name, after: after, events: events, session: short}
	res.ended = len(events) == 0 && after > 0 && rs.finalWas(ctx, name, after)
	return res, nil
}

// Ended reports whether the client already has the call's response:
// nothing follows the id.
func (res *Resume) Ended() bool { return res.ended }

// Out is where a replay goes: an SSE stream's writes and flushes, and
// what ends it besides the request's context and the replica's Stop.
type Out struct {
	Write func([]byte) error
	Flush func() error
	// Revoked closes when the caller's key no longer holds; Ended when
	// the session ends.
	Revoked, Ended <-chan struct{}
}

// Replay writes the buffered events after the id, then tails the buffer
// until the call's final response, heartbeating to the call's replica
// meanwhile. It returns when the stream is over: the final response or a
// gap written, the client gone, the buffer lapsed or outrun, the call's
// replica gone, or an end in out or ctx.
func (res *Resume) Replay(ctx context.Context, out Out) {
	rs := res.rs
	rs.resumed.Add(1)
	rs.o.Logger.Debug("stream resumed", "session", res.session, "after", res.after)
	if res.ended {
		return
	}
	key, name, after, events := res.key, res.name, res.after, res.events
	rs.readerBeat(key)
	lastBeat := time.Now()
	poll := time.NewTicker(resumePoll)
	defer poll.Stop()
	lastEvent := time.Now()
	lastNews := time.Now() // the last event read (keep-alives aside)
	for {
		for _, ev := range events {
			if len(ev.Data) > 0 && ev.Data[0] == eventGap {
				// Ends here: the client's next resume, from the last
				// event it got, is told (ErrGap).
				_ = out.Flush()
				return
			}
			after = ev.ID
			if len(ev.Data) == 0 {
				continue
			}
			b := jsonrpc.AppendEvent(nil, &jsonrpc.Event{ID: key + "-" + strconv.FormatUint(ev.ID, 10), Data: ev.Data[1:]})
			if err := out.Write(b); err != nil {
				return
			}
			if ev.Data[0] == eventFinal {
				_ = out.Flush()
				return
			}
		}
		if len(events) > 0 {
			lastEvent, lastNews = time.Now(), time.Now()
			if err := out.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return
			}
		}
		if time.Since(lastNews) >= ProducerCheck {
			lastNews = time.Now()
			if rs.producerGone(ctx, key) {
				// The call died with its replica: no final response will
				// come. The stream ends, and the client's next resume is
				// told so (ErrGap) instead of waiting for resume_ttl.
				rs.o.Logger.Info("resumed stream ended: the replica running its call is gone", "session", res.session)
				rs.markProducerGone(ctx, name)
				return
			}
		}
		if time.Since(lastBeat) >= rs.beatInterval() {
			rs.readerBeat(key)
			lastBeat = time.Now()
		}
		if time.Since(lastEvent) >= rs.o.KeepAlive {
			if err := out.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			_ = out.Flush()
			lastEvent = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-out.Revoked:
			return
		case <-out.Ended:
			return
		case <-rs.stop:
			return
		case <-poll.C:
		}
		var complete bool
		var err error
		events, complete, err = rs.read(ctx, name, after)
		if err != nil {
			// Transient: the next poll tries again, the reader's
			// heartbeats keep the call alive meanwhile.
			events = nil
			continue
		}
		if !complete {
			// Fell behind the buffer's bound, or the buffer lapsed (the
			// call's replica is gone): the client's next resume is told.
			rs.o.Logger.Info("resumed stream ended: its buffer no longer holds what follows", "session", res.session)
			return
		}
	}
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

// finalWas reports whether event n of stream name is the call's final
// response (still buffered).
func (rs *Resumables) finalWas(ctx context.Context, name string, n uint64) bool {
	evs, _, err := rs.read(ctx, name, n-1)
	return err == nil && len(evs) > 0 && evs[0].ID == n && len(evs[0].Data) > 0 && evs[0].Data[0] == eventFinal
}

func (rs *Resumables) read(ctx context.Context, name string, after uint64) ([]state.Event, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return rs.o.Events.EventsAfter(ctx, name, after)
}

// readerBeat tells the replica running stream key's call (this one or
// another) that a client reads it.
func (rs *Resumables) readerBeat(key string) {
	rs.SawReader(key)
	if rs.o.Tell != nil {
		rs.o.Tell(key)
	}
}

// producerGone reports whether the replica that runs the call of stream
// key (named in the key) has left the replica registry. Unknown (outside
// a fleet registry, the registry unreachable, this replica's own stream)
// is not gone.
func (rs *Resumables) producerGone(ctx context.Context, key string) bool {
	n := len(rs.o.Instance)
	if rs.o.Alive == nil || len(key) < n {
		return false
	}
	id := key[:n]
	if id == rs.o.Instance {
		return false
	}
	return !rs.o.Alive(ctx, id)
}

// markProducerGone leaves a gap marker in stream name's buffer: the
// outcome of its call is lost, which the next resume says (ErrGap).
func (rs *Resumables) markProducerGone(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	if _, err := rs.o.Events.AppendEvent(ctx, name, []byte{eventGap}, rs.MaxEvents(), rs.TTL()); err != nil {
		rs.o.Logger.Debug("could not mark a stream whose replica is gone", "error", err)
	}
}
