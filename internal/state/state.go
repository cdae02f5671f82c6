// Package state owns what the gateway's replicas must share quickly and
// may lose without harm to durable data (SPEC S15, DESIGN decisions 4 and
// 5): sessions an administrator ended, each session's small mutable state
// (log level, resource subscriptions), rate-limit buckets, the registry of
// live replicas, which replica holds a session's standalone GET stream,
// resumable SSE event buffers, short leases (one replica at a time runs a
// vault refresh), what each key spent of its budget in the current period
// (reserved before a call, corrected after it), and a pub/sub bus for
// invalidations.
// Everything it holds has a TTL or a bound; durable records (keys, audit)
// belong to internal/store.
//
// It defines the [Backend] contract, one small interface per concern that
// a consumer can depend on alone, the errors callers branch on, the
// in-memory backend ([NewMemory]), the single-process default, and
// [Follow], the subscribe/resync loop every consumer of the bus runs,
// with [Heard], which tells a replica when it may have missed messages. The
// Redis backend lives in state/redis and is wired by main; nothing else
// imports it. Every backend must pass the conformance suite in state/statetest.
//
// The package does not decide anything: it does not know what a session
// id looks like, which limit applies to whom, or what an event or a
// message says; callers pass opaque keys and bytes. A key may be a
// credential (a session id): a backend never puts one in an error message.
//
// When a shared backend cannot be reached, every method returns an error
// matching [ErrUnavailable] (errors.Is), so that a caller can fall back to
// replica-local behaviour: the rate limiter's documented fallback is a
// memory backend enforcing [Limit.PerReplica].
package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Backend is the shared state of a fleet of replicas, or of one process.
// Every method is safe for concurrent use, takes the context first, and
// returns an error wrapping [ErrUnavailable] when the backend cannot be
// reached, [ErrInvalid] when an argument breaks its documented bounds.
// Close releases the backend; subscriptions still open end (their channel
// is closed), and later calls fail.
type Backend interface {
	Terminations
	Sessions
	RateLimiter
	Replicas
	StreamOwners
	Events
	PubSub
	Leases
	Tickets
	Spending
	// Name is the driver's name ("memory", "redis"), for logs and
	// readiness reports.
	Name() string
	// Ping checks the backend is reachable.
	Ping(ctx context.Context) error
	Close() error
}

// Terminations remembers the sessions an administrator ended (SPEC S13),
// so that every replica refuses them at once.
type Terminations interface {
	// Terminate records session id as ended for ttl (> 0); terminating it
	// again renews the ttl.
	Terminate(ctx context.Context, id string, ttl time.Duration) error
	// Terminated reports whether id was terminated and its ttl has not
	// run out.
	Terminated(ctx context.Context, id string) (bool, error)
}

// MaxSessionFields bounds the fields of one session's state: a client
// cannot grow it without limit (one field per resource subscription).
const MaxSessionFields = 1024

// Sessions holds each downstream session's small mutable state (its log
// level, its resource subscriptions) as a map of fields that lapses ttl
// after its last write or touch.
type Sessions interface {
	// SetSessionFields sets fields of session id and renews its ttl (> 0).
	// It fails with ErrInvalid, changing nothing, when the session would
	// have more than MaxSessionFields fields.
	SetSessionFields(ctx context.Context, id string, fields map[string]string, ttl time.Duration) error
	// DeleteSessionFields removes fields of session id (absent ones are
	// ignored) and renews its ttl when fields remain.
	DeleteSessionFields(ctx context.Context, id string, ttl time.Duration, fields ...string) error
	// SessionFields returns every field of session id; an unknown or
	// lapsed session has none (an empty, non-nil map).
	SessionFields(ctx context.Context, id string) (map[string]string, error)
	// TouchSession renews the ttl of session id, reporting false when it
	// has no state (unknown or lapsed).
	TouchSession(ctx context.Context, id string, ttl time.Duration) (bool, error)
	// DeleteSession forgets session id's state.
	DeleteSession(ctx context.Context, id string) error
	// ListSessions returns the sessions that have state (not lapsed), in
	// no particular order, at most limit of them (1 to MaxListSessions);
	// complete is false when there are more. Each carries only its
	// fields whose names begin with one of prefixes (every field when
	// none is given), and is listed even when none does. It is for
	// operators' views of the whole fleet, not for a request's path: a
	// shared backend walks every session to answer.
	ListSessions(ctx context.Context, limit int, prefixes ...string) (sessions []SessionState, complete bool, err error)
}

// MaxListSessions bounds the limit of Sessions.ListSessions.
const MaxListSessions = 100_000

// SessionState is one session of Sessions.ListSessions.
type SessionState struct {
	ID     string
	Fields map[string]string
}

// CheckListLimit reports ErrInvalid unless limit is 1 to MaxListSessions.
func CheckListLimit(limit int) error {
	if limit < 1 || limit > MaxListSessions {
		return fmt.Errorf("%w: a session listing's limit must be 1 to %d (got %d)", ErrInvalid, MaxListSessions, limit)
	}
	return nil
}

// HasFieldPrefix reports whether field name begins with one of prefixes,
// or prefixes is empty (ListSessions' filter).
func HasFieldPrefix(name string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// RateLimiter enforces rate limits shared by the fleet: a generic cell rate
// algorithm (GCRA) bucket per key, checked and updated in one step (one
// round trip for a shared backend). A backend's clock decides (Redis's own
// for the Redis backend), so replicas need not agree on the time.
type RateLimiter interface {
	// Allow takes one event from key's bucket under limit l. When the
	// bucket is empty the event is refused, nothing is taken, and
	// RetryAfter says when one will be allowed. A key's bucket lapses once
	// it is full again. An error wrapping ErrUnavailable means nothing was
	// decided: the caller falls back (see Limit.PerReplica).
	Allow(ctx context.Context, key string, l Limit) (Decision, error)
}

// Limit is a rate: Events per Per on average, with up to Burst at once.
type Limit struct {
	Events int
	Per    time.Duration
	// Burst is how many events an idle key may take at once; 0 means 1.
	Burst int
}

// Interval is the time one event's share of the rate takes (Per/Events),
// truncated to whole microseconds (the resolution backends compute in),
// at least 1µs.
func (l Limit) Interval() time.Duration {
	us := l.Per.Microseconds() / int64(l.Events)
	return time.Duration(max(us, 1)) * time.Microsecond
}

// BurstOrDefault is Burst, or 1 when it is 0.
func (l Limit) BurstOrDefault() int { return max(l.Burst, 1) }

// Validate reports ErrInvalid unless Events, Per and Burst make a rate.
func (l Limit) Validate() error {
	if l.Events <= 0 || l.Per < time.Microsecond || l.Burst < 0 {
		return fmt.Errorf("%w: rate limit needs events > 0, per >= 1µs and burst >= 0 (got %d per %s, burst %d)", ErrInvalid, l.Events, l.Per, l.Burst)
	}
	return nil
}

// PerReplica is the share of l one of n replicas enforces on its own while
// the shared backend is unavailable: the rate divided by n, and the burst
// too (at least 1). Together the replicas allow about l.
func (l Limit) PerReplica(n int) Limit {
	if n <= 1 {
		return l
	}
	return Limit{Events: l.Events, Per: l.Per * time.Duration(n), Burst: max(l.BurstOrDefault()/n, 1)}
}

// Decision is the answer of RateLimiter.Allow.
type Decision struct {
	Allowed bool
	// RetryAfter is when the next event would be allowed, when refused.
	RetryAfter time.Duration
	// Remaining is how many more events the bucket allows now.
	Remaining int
}

// Replicas is the registry of live gateway replicas: each heartbeats its
// id and advertise URL, and lapses when it stops.
type Replicas interface {
	// Heartbeat registers or renews replica r for ttl (> 0).
	Heartbeat(ctx context.Context, r Replica, ttl time.Duration) error
	// LiveReplicas returns the replicas whose heartbeat has not lapsed,
	// sorted by id.
	LiveReplicas(ctx context.Context) ([]Replica, error)
	// Deregister removes replica id at once (a clean shutdown).
	Deregister(ctx context.Context, id string) error
}

// Replica is one gateway process of the fleet.
type Replica struct {
	ID  string
	URL string // where other replicas reach it
}

// StreamOwners records which replica holds a session's standalone GET
// stream, so that the others forward its server-initiated messages there.
// A newer stream replaces an older one wherever it was opened.
type StreamOwners interface {
	// ClaimStream makes o the owner of session id's stream for ttl (> 0)
	// unless the recorded owner is newer: it succeeds when there is none,
	// when o.Version is greater, or when it is the same claim (same
	// replica and version: a renewal). It returns the owner now recorded.
	ClaimStream(ctx context.Context, id string, o StreamOwner, ttl time.Duration) (current StreamOwner, ok bool, err error)
	// StreamOwnerOf returns the owner of session id's stream; ok is false
	// when none is recorded.
	StreamOwnerOf(ctx context.Context, id string) (o StreamOwner, ok bool, err error)
	// ReleaseStream forgets the owner of session id's stream if it is
	// still o (the stream closed); a newer claim is left alone.
	ReleaseStream(ctx context.Context, id string, o StreamOwner) error
}

// StreamOwner is a replica holding a stream. Version orders claims, for
// example the time the stream was opened in Unix nanoseconds.
type StreamOwner struct {
	Replica string
	Version int64
}

// MaxEventsPerStream bounds the maxLen of Events.AppendEvent.
const MaxEventsPerStream = 100_000

// Events holds resumable SSE event buffers: the last events of each
// stream, so that a client reconnecting with Last-Event-ID on any replica
// gets what it missed, once (SPEC S15).
type Events interface {
	// AppendEvent appends data to stream's buffer, keeps its last maxLen
	// (1 to MaxEventsPerStream) events, renews its ttl (> 0), and returns
	// the event's id: 1 for a stream's first event, then each the one
	// before plus one.
	AppendEvent(ctx context.Context, stream string, data []byte, maxLen int, ttl time.Duration) (uint64, error)
	// EventsAfter returns stream's buffered events with ids greater than
	// after, oldest first. complete is false when some of them are no
	// longer held (dropped by the bound, or the buffer lapsed): the caller
	// cannot resume the stream without a gap. after 0 asks for everything.
	EventsAfter(ctx context.Context, stream string, after uint64) (events []Event, complete bool, err error)
}

// Event is one buffered SSE event.
type Event struct {
	ID   uint64
	Data []byte
}

// ParseEventID parses the decimal id of an event, as AppendEvent returned
// it and a client sends it back (Last-Event-ID, after the caller removed
// whatever it wrapped around it): 1 to 20 ASCII digits, no sign, no
// leading zero, no more than the largest uint64. The error never quotes s.
func ParseEventID(s string) (uint64, error) {
	if s == "" || len(s) > 20 || s[0] == '0' {
		return 0, fmt.Errorf("%w: event id must be a decimal number from 1 (got %d bytes)", ErrInvalid, len(s))
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: event id must be a decimal number from 1 (got %d bytes)", ErrInvalid, len(s))
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: event id out of range", ErrInvalid)
	}
	return n, nil
}

// PubSub carries short messages between replicas (catalog invalidations,
// terminations) with at-most-once delivery: a subscriber is told when
// messages may have been lost, and resynchronises from the source.
type PubSub interface {
	// Publish sends data to the current subscribers of topic, on every
	// replica. receivers is how many subscriptions it reached (one per
	// Subscribe naming topic, on every replica; Redis's PUBLISH count):
	// a publisher that waits for each to act on it knows how many to
	// wait for.
	Publish(ctx context.Context, topic string, data []byte) (receivers int, err error)
	// Subscribe subscribes to topics; once it returns, every later
	// Publish to them is delivered or reported lost. The subscription
	// outlives ctx (ctx bounds the subscribing only) until Close.
	Subscribe(ctx context.Context, topics ...string) (Subscription, error)
}

// SubscriptionBuffer is how many messages a subscription holds for a slow
// reader; more are dropped and reported with a Lost message.
const SubscriptionBuffer = 256

// Subscription is an open subscription. C delivers messages in publish
// order per topic; a message with Lost set, and no topic or data, comes
// before the first message after a gap (the backend reconnected, or the
// reader fell SubscriptionBuffer messages behind). Close ends it: C is
// closed and the subscription's goroutines are gone when Close returns.
// Close is safe to call more than once and concurrently with reading C.
type Subscription interface {
	C() <-chan Message
	Close() error
}

// Message is one delivery of a subscription.
type Message struct {
	Topic string
	Data  []byte
	// Lost says messages may have been lost before this point: the
	// subscriber should resynchronise.
	Lost bool
}

// Errors callers branch on (errors.Is).
var (
	// ErrUnavailable: the backend could not be reached or did not answer
	// in time; nothing can be said about the operation's effect.
	ErrUnavailable = errors.New("state backend unavailable")
	// ErrInvalid: an argument broke a documented bound.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("state backend closed")
)

// UnavailableError is an ErrUnavailable with the operation and its cause.
type UnavailableError struct {
	Op  string // "allow", "terminate", ...
	Err error
}

func (e *UnavailableError) Error() string {
	return "state " + e.Op + ": " + ErrUnavailable.Error() + ": " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// MaxKeyLen bounds every key and id a backend is given (session ids,
// rate-limit keys, replica ids, stream names, topics).
const MaxKeyLen = 512

// CheckKey reports ErrInvalid unless key is 1 to MaxKeyLen bytes. what
// names it in the message; the key itself is never quoted.
func CheckKey(what, key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %s must be 1 to %d bytes (got %d)", ErrInvalid, what, MaxKeyLen, len(key))
	}
	return nil
}

// MaxFieldLen bounds the name and the value of a session field.
const MaxFieldLen = 4096

// CheckFields reports ErrInvalid unless fields has 1 to MaxSessionFields
// entries with names of 1 to MaxFieldLen bytes and values of at most
// MaxFieldLen. Names and values are never quoted.
func CheckFields(fields map[string]string) error {
	if len(fields) == 0 || len(fields) > MaxSessionFields {
		return fmt.Errorf("%w: session state needs 1 to %d fields (got %d)", ErrInvalid, MaxSessionFields, len(fields))
	}
	for k, v := range fields {
		if k == "" || len(k) > MaxFieldLen || len(v) > MaxFieldLen {
			return fmt.Errorf("%w: session field names must be 1 to %d bytes and values at most %d", ErrInvalid, MaxFieldLen, MaxFieldLen)
		}
	}
	return nil
}

// CheckTTL reports ErrInvalid unless ttl is at least a millisecond, the
// resolution backends keep.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl must be >= 1ms (got %s)", ErrInvalid, ttl)
	}
	return nil
}

// CheckMaxLen reports ErrInvalid unless maxLen is 1 to MaxEventsPerStream.
func CheckMaxLen(maxLen int) error {
	if maxLen < 1 || maxLen > MaxEventsPerStream {
		return fmt.Errorf("%w: event buffer length must be 1 to %d (got %d)", ErrInvalid, MaxEventsPerStream, maxLen)
	}
	return nil
}
