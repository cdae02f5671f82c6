package state

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/state/internal/delivery"
)

// MemoryOptions configure NewMemory. The zero value is the default.
type MemoryOptions struct {
	// Now is the clock TTLs and rate limits are measured on; nil means
	// time.Now.
	Now func() time.Time
}

// sweepEvery is how often a write also drops every lapsed entry, so that
// keys written once and never read again do not accumulate.
const sweepEvery = time.Minute

// Memory is the single-process Backend: everything in maps under one
// mutex, lapsed entries ignored on read and swept on write. It is what a
// lone gateway uses, and the fallback of a replica whose shared backend
// is unavailable.
type Memory struct {
	now func() time.Time

	mu         sync.Mutex
	closed     bool
	lastSweep  time.Time
	terminated map[string]time.Time // id -> expiry
	sessions   map[string]*memSession
	buckets    map[string]memBucket
	replicas   map[string]memReplica
	owners     map[string]memOwner
	streams    map[string]*memStream
	leases     map[string]memLease
	tickets    map[string]memTicket
	spent      map[string]memSpent
	subs       map[string]map[*memSub]struct{} // topic -> subscriptions
}

type memSession struct {
	fields map[string]string
	exp    time.Time
}

type memBucket struct {
	tat int64 // µs since the epoch
	exp time.Time
}

type memReplica struct {
	url string
	exp time.Time
}

type memOwner struct {
	o   StreamOwner
	exp time.Time
}

type memStream struct {
	last   uint64
	events []Event
	exp    time.Time
}

var _ Backend = (*Memory)(nil)

// NewMemory returns an empty in-memory backend.
func NewMemory(opts MemoryOptions) *Memory {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Memory{
		now:        now,
		lastSweep:  now(),
		terminated: map[string]time.Time{},
		sessions:   map[string]*memSession{},
		buckets:    map[string]memBucket{},
		replicas:   map[string]memReplica{},
		owners:     map[string]memOwner{},
		streams:    map[string]*memStream{},
		leases:     map[string]memLease{},
		tickets:    map[string]memTicket{},
		subs:       map[string]map[*memSub]struct{}{},
	}
}

// Name is "memory".
func (m *Memory) Name() string { return "memory" }

// Ping fails only once the backend is closed.
func (m *Memory) Ping(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.check("ping")
}

// Close ends every subscription and makes later calls fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var subs []*memSub
	for _, set := range m.subs {
		for s := range set {
			subs = append(subs, s)
		}
	}
	m.subs = map[string]map[*memSub]struct{}{}
	m.mu.Unlock()
	for _, s := range subs {
		s.q.Close()
	}
	return nil
}

// check reports ErrClosed once closed; m.mu is held.
func (m *Memory) check(op string) error {
	if m.closed {
		return fmt.Errorf("state %s: %w", op, ErrClosed)
	}
	return nil
}

// write starts a write at now: ErrClosed once closed, and a sweep when one
// is due. m.mu is held.
func (m *Memory) write(op string, now time.Time) error {
	if err := m.check(op); err != nil {
		return err
	}
	if now.Sub(m.lastSweep) < sweepEvery {
		return nil
	}
	m.lastSweep = now
	live := func(exp time.Time) bool { return now.Before(exp) }
	maps.DeleteFunc(m.terminated, func(_ string, exp time.Time) bool { return !live(exp) })
	maps.DeleteFunc(m.sessions, func(_ string, s *memSession) bool { return !live(s.exp) })
	maps.DeleteFunc(m.buckets, func(_ string, b memBucket) bool { return !live(b.exp) })
	maps.DeleteFunc(m.replicas, func(_ string, r memReplica) bool { return !live(r.exp) })
	maps.DeleteFunc(m.owners, func(_ string, o memOwner) bool { return !live(o.exp) })
	maps.DeleteFunc(m.streams, func(_ string, s *memStream) bool { return !live(s.exp) })
	maps.DeleteFunc(m.leases, func(_ string, l memLease) bool { return !live(l.exp) })
	maps.DeleteFunc(m.tickets, func(_ string, t memTicket) bool { return !live(t.exp) })
	maps.DeleteFunc(m.spent, func(_ string, s memSpent) bool { return !live(s.exp) })
	return nil
}

// Terminate implements Terminations.
func (m *Memory) Terminate(_ context.Context, id string, ttl time.Duration) error {
	if err := CheckKey("session id", id); err != nil {
		return err
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("terminate", now); err != nil {
		return err
	}
	m.terminated[id] = now.Add(ttl)
	return nil
}

// Terminated implements Terminations.
func (m *Memory) Terminated(_ context.Context, id string) (bool, error) {
	if err := CheckKey("session id", id); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("terminated"); err != nil {
		return false, err
	}
	exp, ok := m.terminated[id]
	return ok && m.now().Before(exp), nil
}

// session returns session id's live state, or nil; m.mu is held.
func (m *Memory) session(id string, now time.Time) *memSession {
	s := m.sessions[id]
	if s == nil || !now.Before(s.exp) {
		delete(m.sessions, id)
		return nil
	}
	return s
}

// SetSessionFields implements Sessions.
func (m *Memory) SetSessionFields(_ context.Context, id string, fields map[string]string, ttl time.Duration) error {
	if err := CheckKey("session id", id); err != nil {
		return err
	}
	if err := CheckFields(fields); err != nil {
		return err
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("set session fields", now); err != nil {
		return err
	}
	s := m.session(id, now)
	if s == nil {
		s = &memSession{fields: map[string]string{}}
	}
	added := 0
	for k := range fields {
		if _, ok := s.fields[k]; !ok {
			added++
		}
	}
	if n := len(s.fields) + added; n > MaxSessionFields {
		return fmt.Errorf("%w: session state would have %d fields, more than %d", ErrInvalid, n, MaxSessionFields)
	}
	maps.Copy(s.fields, fields)
	s.exp = now.Add(ttl)
	m.sessions[id] = s
	return nil
}

// DeleteSessionFields implements Sessions.
func (m *Memory) DeleteSessionFields(_ context.Context, id string, ttl time.Duration, fields ...string) error {
	if err := CheckKey("session id", id); err != nil {
		return err
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("delete session fields", now); err != nil {
		return err
	}
	s := m.session(id, now)
	if s == nil {
		return nil
	}
	for _, f := range fields {
		delete(s.fields, f)
	}
	if len(s.fields) == 0 {
		delete(m.sessions, id)
		return nil
	}
	s.exp = now.Add(ttl)
	return nil
}

// SessionFields implements Sessions.
func (m *Memory) SessionFields(_ context.Context, id string) (map[string]string, error) {
	if err := CheckKey("session id", id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("session fields"); err != nil {
		return nil, err
	}
	s := m.session(id, m.now())
	if s == nil {
		return map[string]string{}, nil
	}
	return maps.Clone(s.fields), nil
}

// TouchSession implements Sessions.
func (m *Memory) TouchSession(_ context.Context, id string, ttl time.Duration) (bool, error) {
	if err := CheckKey("session id", id); err != nil {
		return false, err
	}
	if err := CheckTTL(ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("touch session", now); err != nil {
		return false, err
	}
	s := m.session(id, now)
	if s == nil {
		return false, nil
	}
	s.exp = now.Add(ttl)
	return true, nil
}

// DeleteSession implements Sessions.
func (m *Memory) DeleteSession(_ context.Context, id string) error {
	if err := CheckKey("session id", id); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("delete session"); err != nil {
		return err
	}
	delete(m.sessions, id)
	return nil
}

// ListSessions implements Sessions, in id order.
func (m *Memory) ListSessions(_ context.Context, limit int, prefixes ...string) ([]SessionState, bool, error) {
	if err := CheckListLimit(limit); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("list sessions"); err != nil {
		return nil, false, err
	}
	now := m.now()
	ids := make([]string, 0, len(m.sessions))
	for id, s := range m.sessions {
		if now.Before(s.exp) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	complete := len(ids) <= limit
	if !complete {
		ids = ids[:limit]
	}
	out := make([]SessionState, 0, len(ids))
	for _, id := range ids {
		fields := map[string]string{}
		for k, v := range m.sessions[id].fields {
			if HasFieldPrefix(k, prefixes) {
				fields[k] = v
			}
		}
		out = append(out, SessionState{ID: id, Fields: fields})
	}
	return out, complete, nil
}

// Allow implements RateLimiter with GCRA.
func (m *Memory) Allow(_ context.Context, key string, l Limit) (Decision, error) {
	if err := CheckKey("rate limit key", key); err != nil {
		return Decision{}, err
	}
	if err := l.Validate(); err != nil {
		return Decision{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("allow", now); err != nil {
		return Decision{}, err
	}
	b, ok := m.buckets[key]
	if !ok || !now.Before(b.exp) {
		b = memBucket{}
	}
	nowUS := now.UnixMicro()
	tat, d := GCRA(nowUS, b.tat, l.Interval().Microseconds(), int64(l.BurstOrDefault()))
	if d.Allowed {
		m.buckets[key] = memBucket{tat: tat, exp: now.Add(time.Duration(tat-nowUS) * time.Microsecond)}
	}
	return d, nil
}

// Heartbeat implements Replicas.
func (m *Memory) Heartbeat(_ context.Context, r Replica, ttl time.Duration) error {
	if err := CheckKey("replica id", r.ID); err != nil {
		return err
	}
	if err := CheckKey("replica url", r.URL); err != nil {
		return err
	}
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("heartbeat", now); err != nil {
		return err
	}
	m.replicas[r.ID] = memReplica{url: r.URL, exp: now.Add(ttl)}
	return nil
}

// LiveReplicas implements Replicas.
func (m *Memory) LiveReplicas(context.Context) ([]Replica, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("live replicas"); err != nil {
		return nil, err
	}
	now := m.now()
	out := []Replica{}
	for id, r := range m.replicas {
		if now.Before(r.exp) {
			out = append(out, Replica{ID: id, URL: r.url})
		}
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Deregister implements Replicas.
func (m *Memory) Deregister(_ context.Context, id string) error {
	if err := CheckKey("replica id", id); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("deregister"); err != nil {
		return err
	}
	delete(m.replicas, id)
	return nil
}

// owner returns session id's live stream owner; m.mu is held.
func (m *Memory) owner(id string, now time.Time) (StreamOwner, bool) {
	o, ok := m.owners[id]
	if !ok || !now.Before(o.exp) {
		return StreamOwner{}, false
	}
	return o.o, true
}

// ClaimStream implements StreamOwners.
func (m *Memory) ClaimStream(_ context.Context, id string, o StreamOwner, ttl time.Duration) (StreamOwner, bool, error) {
	if err := CheckKey("session id", id); err != nil {
		return StreamOwner{}, false, err
	}
	if err := CheckKey("replica id", o.Replica); err != nil {
		return StreamOwner{}, false, err
	}
	if err := CheckTTL(ttl); err != nil {
		return StreamOwner{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("claim stream", now); err != nil {
		return StreamOwner{}, false, err
	}
	cur, ok := m.owner(id, now)
	if ok && o.Version < cur.Version || ok && o.Version == cur.Version && o.Replica != cur.Replica {
		return cur, false, nil
	}
	m.owners[id] = memOwner{o: o, exp: now.Add(ttl)}
	return o, true, nil
}

// StreamOwnerOf implements StreamOwners.
func (m *Memory) StreamOwnerOf(_ context.Context, id string) (StreamOwner, bool, error) {
	if err := CheckKey("session id", id); err != nil {
		return StreamOwner{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("stream owner"); err != nil {
		return StreamOwner{}, false, err
	}
	o, ok := m.owner(id, m.now())
	return o, ok, nil
}

// ReleaseStream implements StreamOwners.
func (m *Memory) ReleaseStream(_ context.Context, id string, o StreamOwner) error {
	if err := CheckKey("session id", id); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("release stream"); err != nil {
		return err
	}
	if cur, ok := m.owner(id, m.now()); ok && cur == o {
		delete(m.owners, id)
	}
	return nil
}

// AppendEvent implements Events.
func (m *Memory) AppendEvent(_ context.Context, stream string, data []byte, maxLen int, ttl time.Duration) (uint64, error) {
	if err := CheckKey("stream", stream); err != nil {
		return 0, err
	}
	if err := CheckMaxLen(maxLen); err != nil {
		return 0, err
	}
	if err := CheckTTL(ttl); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("append event", now); err != nil {
		return 0, err
	}
	s := m.streams[stream]
	if s == nil || !now.Before(s.exp) {
		s = &memStream{}
		m.streams[stream] = s
	}
	s.last++
	s.events = append(s.events, Event{ID: s.last, Data: slices.Clone(data)})
	if drop := len(s.events) - maxLen; drop > 0 {
		clear(s.events[:drop])
		s.events = slices.Clone(s.events[drop:])
	}
	s.exp = now.Add(ttl)
	return s.last, nil
}

// EventsAfter implements Events.
func (m *Memory) EventsAfter(_ context.Context, stream string, after uint64) ([]Event, bool, error) {
	if err := CheckKey("stream", stream); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("events after"); err != nil {
		return nil, false, err
	}
	s := m.streams[stream]
	if s == nil || !m.now().Before(s.exp) {
		return []Event{}, after == 0, nil
	}
	out := []Event{}
	for _, e := range s.events {
		if e.ID > after {
			out = append(out, Event{ID: e.ID, Data: slices.Clone(e.Data)})
		}
	}
	complete := after >= s.last || s.events[0].ID <= after+1
	return out, complete, nil
}

// memSub is a subscription to the memory backend.
type memSub struct {
	m      *Memory
	topics []string
	q      *delivery.Queue[Message]
	once   sync.Once
}

// Publish implements PubSub: it queues data on every subscription of
// topic and never blocks.
func (m *Memory) Publish(_ context.Context, topic string, data []byte) (int, error) {
	if err := CheckKey("topic", topic); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("publish"); err != nil {
		return 0, err
	}
	for s := range m.subs[topic] {
		s.q.Push(Message{Topic: topic, Data: slices.Clone(data)})
	}
	return len(m.subs[topic]), nil
}

// Subscribe implements PubSub.
func (m *Memory) Subscribe(_ context.Context, topics ...string) (Subscription, error) {
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: subscribe needs a topic", ErrInvalid)
	}
	for _, t := range topics {
		if err := CheckKey("topic", t); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("subscribe"); err != nil {
		return nil, err
	}
	s := &memSub{m: m, topics: slices.Clone(topics), q: delivery.New(SubscriptionBuffer, Message{Lost: true})}
	for _, t := range topics {
		if m.subs[t] == nil {
			m.subs[t] = map[*memSub]struct{}{}
		}
		m.subs[t][s] = struct{}{}
	}
	return s, nil
}

func (s *memSub) C() <-chan Message { return s.q.C() }

func (s *memSub) Close() error {
	s.once.Do(func() {
		s.m.mu.Lock()
		for _, t := range s.topics {
			delete(s.m.subs[t], s)
			if len(s.m.subs[t]) == 0 {
				delete(s.m.subs, t)
			}
		}
		s.m.mu.Unlock()
	})
	s.q.Close()
	return nil
}
