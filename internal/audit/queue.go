package audit

import "sync"

// recordQueue is the Writer's bounded FIFO of records waiting for the
// store: a ring that grows with the backlog, by doubling, up to its bound,
// and shrinks again (trim, on the writer's tick) once a backlog is gone. A channel
// of the bound's capacity held all of it for the process's life: 4096
// records of ~220 bytes, 0.9 MB of live heap that every GC cycle scanned
// and that the GC target multiplied into ~3 MB of peak RSS, for a backlog
// that exists only while the disk stalls. Record pushes (never waiting);
// the writer goroutine pops.
type recordQueue struct {
	// ready holds a token when something was pushed since the writer
	// last woke: the writer waits on it, and drains the ring on waking.
	ready chan struct{}
	bound int // most records held; push refuses past it
	// wakeAt is how many records make a push wake the writer (a
	// batch); fewer wait for its tick, and a durable record always
	// wakes it. One wake-up per record was a futex wake and a
	// goroutine switch on every call's path for a batch that the
	// tick wrote anyway (issue 25).
	wakeAt int

	mu      sync.Mutex // guards the fields below
	buf     []item     // ring; len(buf) is its capacity
	head    int        // index in buf of the oldest record
	n       int        // records held
	durable int        // records held that a caller waits for
	peak    int        // most records held since the last trim
}

// Ring sizes: the first allocation, and the size above which trim may
// shrink it. At c=64 the writer keeps the backlog to a few dozen
// records, so a ring of a batch or so is what the steady state holds.
const (
	queueMinCap      = 64
	queueShrinkAbove = 1024
)

func newRecordQueue(bound, wakeAt int) *recordQueue {
	return &recordQueue{ready: make(chan struct{}, 1), bound: bound, wakeAt: max(wakeAt, 1)}
}

// push adds it at the tail, waking the writer when a batch is waiting or
// it is durable (a caller waits for its commit); false when the queue
// holds bound records.
func (q *recordQueue) push(it item) bool {
	q.mu.Lock()
	if q.n >= q.bound {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.buf) {
		q.growLocked()
	}
	tail := q.head + q.n
	if tail >= len(q.buf) {
		tail -= len(q.buf) // no division on the call's path
	}
	q.buf[tail] = it
	q.n++
	if it.done != nil {
		q.durable++
	}
	q.peak = max(q.peak, q.n)
	wake := q.n >= q.wakeAt || q.durable > 0
	q.mu.Unlock()
	if !wake {
		return true // the writer's tick takes it
	}
	select {
	case q.ready <- struct{}{}:
	default: // a wake-up is already pending; the writer drains all
	}
	return true
}

// growLocked doubles the ring (queueMinCap at first, bound at most),
// stopping once at a batch and a quarter (batchRoom). Under steady load
// the ring holds a batch and what arrives before the writer, woken by the
// push that completed it, takes it: a few records to a few dozen.
// Doubling past a batch for those would leave a ring of two batches, half
// of it never used, for the process's life (trim keeps a ring whose peak
// is over a quarter of it).
func (q *recordQueue) growLocked() {
	size := max(2*len(q.buf), queueMinCap)
	if room := q.batchRoom(); len(q.buf) < room && size > room {
		size = room
	}
	q.resizeLocked(min(size, q.bound))
}

// batchRoom is the ring size that holds a batch (wakeAt) and a quarter,
// queueMinCap at least.
func (q *recordQueue) batchRoom() int { return max(q.wakeAt+q.wakeAt/4, queueMinCap) }

// resizeLocked moves the records, in order from index 0, to a ring of
// size (at least q.n).
func (q *recordQueue) resizeLocked(size int) {
	buf := make([]item, size)
	if q.n > 0 {
		k := copy(buf, q.buf[q.head:min(q.head+q.n, len(q.buf))])
		copy(buf[k:q.n], q.buf[:q.n-k])
	}
	q.buf, q.head = buf, 0
}

// popInto moves the oldest records into b until b holds limit calls or
// the queue is empty.
func (q *recordQueue) popInto(b *pending, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.popLocked(b, limit)
}

// popReady is popInto when a whole batch is queued or a caller waits for
// a queued record's commit; false (nothing taken) otherwise: what is
// left waits for the writer's tick, in the queue, so that the next
// push's count still tells when a batch is waiting.
func (q *recordQueue) popReady(b *pending, limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 || (q.n < limit-len(b.calls) && q.durable == 0) {
		return false
	}
	q.popLocked(b, limit)
	return true
}

func (q *recordQueue) popLocked(b *pending, limit int) {
	for len(b.calls) < limit && q.n > 0 {
		if q.buf[q.head].done != nil {
			q.durable--
		}
		b.add(q.buf[q.head])
		q.buf[q.head] = item{} // the ring must not keep a popped record's strings alive
		if q.head++; q.head == len(q.buf) {
			q.head = 0
		}
		q.n--
	}
}

// trim shrinks a ring that a backlog grew (above queueShrinkAbove) when
// the most it held since the last trim is under a quarter of it, to twice
// that; the writer calls it every FlushInterval. Shrinking only on a
// quiet interval, not whenever the ring drains, keeps a queue that fills
// and drains under sustained overload from reallocating over and over.
func (q *recordQueue) trim() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) > queueShrinkAbove && q.peak < len(q.buf)/4 {
		q.resizeLocked(max(2*q.peak, queueMinCap))
	}
	q.peak = q.n
}

// len is how many records are queued.
func (q *recordQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// capacity is the ring's current size (tests).
func (q *recordQueue) capacity() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}
