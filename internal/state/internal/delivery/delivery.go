// Package delivery is the subscriber side of the state backends' pub/sub:
// a bounded queue between a backend's receiver, which must never block,
// and a subscriber's channel, which may be read slowly. It owns the rule
// for lost messages and nothing about topics or transports.
//
// When the queue is full a message is dropped and a Lost marker queued in
// its place; a reconnection queues one too. At most one marker waits at a
// time: the subscriber resynchronises when it reads the marker, which is
// after every loss that happened while the marker waited.
package delivery

import "sync"

// Queue delivers pushed messages of type T to C in order, from its own
// goroutine; a Lost marker is the value given to New. Push, MarkLost and
// Close are safe for concurrent use. (It is generic so that package state,
// whose Message it carries, can use it without an import cycle.)
type Queue[T any] struct {
	max    int
	lost   T
	out    chan T
	notify chan struct{}
	done   chan struct{}
	ended  chan struct{}
	once   sync.Once

	mu     sync.Mutex
	items  []item[T]
	marker bool // a Lost marker is in items, not yet delivered
	closed bool
}

type item[T any] struct {
	m    T
	lost bool
}

// New starts a queue holding up to max messages (plus one Lost marker);
// lost is the marker delivered for a gap.
func New[T any](max int, lost T) *Queue[T] {
	q := &Queue[T]{
		max:    max,
		lost:   lost,
		out:    make(chan T),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		ended:  make(chan struct{}),
	}
	go q.run()
	return q
}

// C is the subscriber's channel; it is closed by Close.
func (q *Queue[T]) C() <-chan T { return q.out }

// Push queues m, or drops it and queues a Lost marker when the queue is
// full. It never blocks.
func (q *Queue[T]) Push(m T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if len(q.items) >= q.max {
		q.markLocked()
		return
	}
	q.items = append(q.items, item[T]{m: m})
	q.wake()
}

// MarkLost queues a Lost marker (messages may have been lost: the backend
// reconnected), unless one is waiting already.
func (q *Queue[T]) MarkLost() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.markLocked()
	}
}

func (q *Queue[T]) markLocked() {
	if q.marker {
		return
	}
	q.marker = true
	q.items = append(q.items, item[T]{m: q.lost, lost: true})
	q.wake()
}

func (q *Queue[T]) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Close stops delivery and closes C; the queue's goroutine has ended when
// it returns. Messages not yet read are dropped.
func (q *Queue[T]) Close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.items = nil
		q.mu.Unlock()
		close(q.done)
	})
	<-q.ended
}

func (q *Queue[T]) run() {
	defer close(q.ended)
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.mu.Unlock()
			select {
			case <-q.notify:
				continue
			case <-q.done:
				return
			}
		}
		it := q.items[0]
		q.mu.Unlock()
		select {
		case q.out <- it.m:
		case <-q.done:
			return
		}
		q.mu.Lock()
		if len(q.items) > 0 { // Close may have emptied it
			q.items[0] = item[T]{}
			q.items = q.items[1:]
			if it.lost {
				q.marker = false
			}
		}
		q.mu.Unlock()
	}
}
