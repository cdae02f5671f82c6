// Package tasks owns the MCP tasks (2025-11-25, experimental) that the
// gateway runs itself for its callers: a task-capable client's tool call
// to an upstream that has no tasks is held by the gateway, which answers
// tasks/get, tasks/result, tasks/list and tasks/cancel for it.
//
// The Table is the one owner of that state: the tasks by sealed id
// (id.go), each bound to the Owner (caller and route) that created it,
// their TTL, the per-caller limit, and the goroutines running the calls,
// which Close cancels and waits for. Every method a caller's message
// reaches names the Owner asking, and a task is only ever shown to its
// own: anyone else, with a stolen, altered or made-up id, is told exactly
// what it is told of an id that never existed.
//
// The package knows nothing of JSON-RPC dispatch, routes, policy or
// upstreams: the gateway hands Start the function that makes the call
// (through every stage a plain call passes) and turns what the table
// returns into MCP messages (Task.JSON is the one wire shape it owns).
// Alone it keeps tasks in memory: a restart forgets them, and their calls
// end with the process. Shared (shared.go) it also keeps every task's
// record and result (sealed, seal.go) in the store, written through the
// moment they change, so any replica of a fleet whose ids are sealed
// under the same key answers for any task, and a task whose replica died
// ends failed.
package tasks

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// Status is a task's state (2025-11-25 tasks).
type Status string

// Task statuses. Completed, Failed and Cancelled are terminal.
const (
	Working       Status = "working"
	InputRequired Status = "input_required"
	Completed     Status = "completed"
	Failed        Status = "failed"
	Cancelled     Status = "cancelled"
)

// Terminal says whether s is a final status.
func (s Status) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Owner is who a task belongs to: the caller's owner fingerprint (S4.1)
// on one route (its id). Session is the downstream session's hash when
// the caller's fingerprint cannot tell callers apart (anonymous, or one
// client address): their tasks are then their session's alone. A caller
// that can be told apart keeps its tasks across sessions, which is what
// tasks are for (start a call, disconnect, poll later).
type Owner struct {
	Caller  string
	Route   string
	Session string
}

// Config is a server's task settings (config tasks: block).
type Config struct {
	TTL          time.Duration // the most a task is kept, from its creation
	MaxPerCaller int           // tasks one Owner may hold of one server at once
}

// PollInterval is what tasks/get suggests between polls.
const PollInterval = time.Second

// Task is a task's state as its owner is shown it.
type Task struct {
	ID            string
	Status        Status
	StatusMessage string
	Created       time.Time
	Updated       time.Time
	TTL           time.Duration
	PollInterval  time.Duration
	// InputRequests are the questions the task's call waits on, keyed
	// as tasks/update answers them (an object of {method, params}; nil:
	// none). Only a call that asks through Ask has any (input.go).
	InputRequests json.RawMessage
}

// JSON is the MCP Task object (tasks/get's result, and the task of a
// CreateTaskResult or a notifications/tasks/status).
func (t Task) JSON() json.RawMessage {
	v := struct {
		TaskID        string `json:"taskId"`
		Status        Status `json:"status"`
		StatusMessage string `json:"statusMessage,omitempty"`
		CreatedAt     string `json:"createdAt"`
		LastUpdatedAt string `json:"lastUpdatedAt"`
		TTL           int64  `json:"ttl"`
		PollInterval  int64  `json:"pollInterval,omitempty"`
	}{t.ID, t.Status, t.StatusMessage, t.Created.UTC().Format(time.RFC3339Nano), t.Updated.UTC().Format(time.RFC3339Nano),
		t.TTL.Milliseconds(), t.PollInterval.Milliseconds()}
	b, _ := json.Marshal(v)
	return b
}

// Outcome is how a task's call ended: its result, or the JSON-RPC error
// tasks/result answers with.
type Outcome struct {
	Result json.RawMessage
	Err    *jsonrpc.Error
}

// Run makes a task's call. ctx ends when the task is cancelled, expires
// or the table closes.
type Run func(ctx context.Context) Outcome

// Errors of the table. ErrNotFound is the answer for any id the asking
// Owner does not own: unknown, expired, forged, altered or another's.
var (
	ErrNotFound = errors.New("task not found")
	ErrTerminal = errors.New("task already in a terminal status")
	ErrTooMany  = errors.New("too many tasks for this caller")
	ErrCursor   = errors.New("invalid cursor")
	ErrClosed   = errors.New("task table closed")
)

// Table holds the gateway-run tasks. Safe for concurrent use.
type Table struct {
	keys   [][]byte // the first mints ids, every one opens them
	now    func() time.Time
	shared *Shared // nil: the tasks live in this table alone
	onEnd  func(server, outcome string)

	ctx    context.Context // ends with Close: every run's context derives from it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the runs, waited for by Close

	mu        sync.Mutex // mu guards the fields below
	m         map[[nonceLen]byte]*entry
	nextSweep time.Time
	closed    bool
}

// entry is one task; its fields but owner, server and done are guarded
// by Table.mu.
type entry struct {
	owner  Owner
	server string
	done   chan struct{} // closed when the task is terminal

	task    Task
	expires time.Time
	out     Outcome
	cancel  context.CancelFunc
	notify  func(Task)
	// questions are the call's open questions by key, asked is how many
	// it ever asked (input.go).
	questions map[string]*question
	asked     int
	// snaps numbers the snapshots of the task taken for publish (under
	// the table's lock); published is the last one published, guarded by
	// publishMu, which orders the writes (publish).
	snaps     uint64
	publishMu sync.Mutex
	published uint64
}

// New returns an empty table whose ids are sealed under key (32 random
// bytes when nil); now is its clock (time.Now when nil).
func New(key []byte, now func() time.Time) *Table {
	var keys [][]byte
	if key != nil {
		keys = [][]byte{key}
	}
	return NewTable(Options{Keys: keys, Now: now})
}

// Options configure a Table.
type Options struct {
	// Keys seal task ids: the first mints, every one opens (rotation).
	// None: one random key of this process, so ids die with it.
	Keys [][]byte
	Now  func() time.Time // nil: time.Now
	// Shared keeps the tasks in a store too (shared.go); nil: memory only.
	Shared *Shared
	// OnEnd, when set, is told of each task run here that ends: its
	// server and outcome (completed, failed, cancelled, expired). It is
	// called under the table's lock and must not block (a metric).
	OnEnd func(server, outcome string)
}

// NewTable returns an empty table as o says.
func NewTable(o Options) *Table {
	if len(o.Keys) == 0 {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		o.Keys = [][]byte{key}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Table{keys: o.Keys, now: o.Now, shared: o.Shared, onEnd: o.OnEnd, ctx: ctx, cancel: cancel, m: map[[nonceLen]byte]*entry{}}
	if t.shared != nil {
		t.shared.init(o.Keys)
		t.wg.Add(1)
		go t.watch()
	}
	return t
}

// Close cancels every running task and waits for their calls to return.
func (t *Table) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}

// Start creates a task of owner for a call to server and runs it in the
// background under a context that keeps parent's values but not its
// cancellation (the call outlives the request that made it). ttl is the
// one the caller asked for (0: none), capped at cfg.TTL. notify, when not
// nil, is told of each change of status (notifications/tasks/status); it
// must not block.
func (t *Table) Start(parent context.Context, owner Owner, server string, cfg Config, ttl time.Duration, run Run, notify func(Task)) (Task, error) {
	if ttl <= 0 || ttl > cfg.TTL {
		ttl = cfg.TTL
	}
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:])
	now := t.now()
	e := &entry{owner: owner, server: server, done: make(chan struct{}), notify: notify, expires: now.Add(ttl)}
	e.task = Task{ID: formatID(nonce, idMAC(t.keys[0], nonce, owner)), Status: Working, Created: now, Updated: now, TTL: ttl, PollInterval: PollInterval}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(t.ctx, cancel)
	e.cancel = cancel
	ctx = context.WithValue(ctx, reporterKey{}, func(s Status, msg string) { t.report(e, s, msg) })
	ctx = context.WithValue(ctx, runKey{}, &runState{t: t, e: e, ctx: ctx})
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		stop()
		cancel()
		return Task{}, ErrClosed
	}
	t.sweepLocked(now)
	if t.shared == nil && cfg.MaxPerCaller > 0 {
		n := 0
		for _, o := range t.m {
			if o.owner == owner && o.server == server {
				n++
			}
		}
		if n >= cfg.MaxPerCaller {
			t.mu.Unlock()
			stop()
			cancel()
			return Task{}, ErrTooMany
		}
	}
	// Shared, the store counts every replica's tasks of the owner as it
	// creates the row (create, below), in one atomic step.
	t.m[nonce] = e
	t.wg.Add(1)
	snap := e.task
	t.mu.Unlock()
	if t.shared != nil {
		// The record exists before the caller hears of the id: another
		// replica asked for it at once finds it.
		if err := t.shared.create(nonce, owner, server, snap, e.expires, cfg.MaxPerCaller); err != nil {
			t.mu.Lock()
			delete(t.m, nonce)
			t.mu.Unlock()
			t.wg.Done()
			stop()
			cancel()
			return Task{}, err
		}
	}

	go func() {
		defer t.wg.Done()
		defer stop()
		defer cancel()
		out := run(ctx)
		t.finish(e, out)
	}()
	return snap, nil
}

// finish records how e's call ended, unless it was cancelled first
// (cancelled stays cancelled).
func (t *Table) finish(e *entry, out Outcome) {
	t.mu.Lock()
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return
	}
	snap := e.task
	t.mu.Unlock()
	snap.Status, snap.StatusMessage, snap.InputRequests = Completed, "", nil
	switch {
	case out.Err != nil:
		snap.Status, snap.StatusMessage = Failed, out.Err.Message
	case isError(out.Result):
		// 2025-11-25: a tool result with isError fails its task.
		snap.Status, snap.StatusMessage = Failed, "The tool returned an error result."
	}
	snap.Updated = t.now()
	if t.shared != nil && t.ctx.Err() != nil {
		// The table closes (the replica stops): the call was cut short,
		// which the task says, whatever error the cut call returned.
		snap.Status, snap.StatusMessage = Failed, ReplicaStopped
		out = Outcome{Err: jsonrpc.NewError(jsonrpc.CodeInternalError, "%s", ReplicaStopped)}
	}
	if t.shared != nil {
		// The result is stored the moment it exists; a row another
		// replica made terminal first (a cancel) wins.
		snap, out = t.shared.finish(snap, out)
	}
	t.mu.Lock()
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return
	}
	e.task, e.out = snap, out
	notify := e.notify
	t.endLocked(e, string(snap.Status))
	t.mu.Unlock()
	if notify != nil {
		notify(snap)
	}
}

type reporterKey struct{}

// Report tells the task whose run ctx belongs to of its call's progress:
// working or input_required, with a message (a relayed upstream task's
// status, say). Outside a task's run it does nothing; a terminal status
// is the table's to set, from the run's Outcome.
func Report(ctx context.Context, s Status, msg string) {
	if f, ok := ctx.Value(reporterKey{}).(func(Status, string)); ok && (s == Working || s == InputRequired) {
		f(s, msg)
	}
}

// report sets e's status, unless it is terminal or unchanged.
func (t *Table) report(e *entry, s Status, msg string) {
	t.mu.Lock()
	if e.task.Status.Terminal() || (e.task.Status == s && e.task.StatusMessage == msg) {
		t.mu.Unlock()
		return
	}
	e.task.Status, e.task.StatusMessage, e.task.Updated = s, msg, t.now()
	snap := e.snapshotLocked()
	t.mu.Unlock()
	t.publish(e, snap)
}

// snapshot is a running task's state as one change left it, numbered in
// the order of the changes (entry.snapshotLocked).
type snapshot struct {
	task   Task
	seq    uint64
	notify func(Task)
}

// snapshotLocked numbers e's task as it is now; t.mu is held.
func (e *entry) snapshotLocked() snapshot {
	e.snaps++
	return snapshot{task: e.task, seq: e.snaps, notify: e.notify}
}

// publish writes snap through to the store and tells e's listener,
// unless a later snapshot of e was published already. Snapshots are taken
// under t.mu but written outside it, so two changes at once (two
// questions asked together, a status report beside a question) may reach
// the store in the other order: the older must not overwrite the newer,
// or the other replicas would show a question fewer until the next
// change, and the client could not answer it there.
func (t *Table) publish(e *entry, snap snapshot) {
	if snap.task.ID == "" {
		return
	}
	e.publishMu.Lock()
	defer e.publishMu.Unlock()
	if snap.seq <= e.published {
		return
	}
	e.published = snap.seq
	if t.shared != nil {
		_, _ = t.shared.update(snap.task, Outcome{})
	}
	if snap.notify != nil {
		snap.notify(snap.task)
	}
}

func isError(res json.RawMessage) bool {
	v, ok := jsonrpc.Get(res, "isError")
	return ok && string(v) == "true"
}

// checkID is the nonce of id if its MAC is owner's under one of the
// table's keys.
func (t *Table) checkID(owner Owner, id string) ([nonceLen]byte, bool) {
	nonce, mac, err := ParseID(id)
	if err != nil {
		return nonce, false
	}
	ok := 0
	for _, k := range t.keys {
		want := idMAC(k, nonce, owner)
		ok |= subtle.ConstantTimeCompare(mac[:], want[:])
	}
	return nonce, ok == 1
}

// openLocked finds the task id names for owner: the MAC must be owner's, the
// task still held and not expired.
func (t *Table) openLocked(owner Owner, id string) (*entry, error) {
	nonce, ok := t.checkID(owner, id)
	if !ok {
		return nil, ErrNotFound
	}
	e, ok := t.m[nonce]
	// The owner check is the MAC's twin: a table whose key leaked still
	// shows no one another's task.
	if !ok || e.owner != owner {
		return nil, ErrNotFound
	}
	if now := t.now(); !now.Before(e.expires) {
		t.dropLocked(nonce, e)
		return nil, ErrNotFound
	}
	return e, nil
}

// Get is the task id names, if owner's.
func (t *Table) Get(owner Owner, id string) (Task, error) {
	if t.shared != nil {
		task, _, err := t.load(owner, id)
		return task, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, err := t.openLocked(owner, id)
	if err != nil {
		return Task{}, err
	}
	return e.task, nil
}

// Peek is the task id names, if owner's, and its outcome once it is
// terminal (the zero Outcome before), without waiting.
func (t *Table) Peek(owner Owner, id string) (Task, Outcome, error) {
	if t.shared != nil {
		task, out, err := t.load(owner, id)
		if err == nil && task.Status == InputRequired {
			// The questions are in the memory of the replica that runs
			// the call: this one's, if it does.
			t.mu.Lock()
			if e, lerr := t.openLocked(owner, id); lerr == nil {
				task.InputRequests = e.task.InputRequests
			}
			t.mu.Unlock()
		}
		return task, out, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, err := t.openLocked(owner, id)
	if err != nil {
		return Task{}, Outcome{}, err
	}
	if !e.task.Status.Terminal() {
		return e.task, Outcome{}, nil
	}
	return e.task, e.out, nil
}

// Result waits until the task id names (if owner's) is terminal, or ctx
// ends, and returns its final state and outcome.
func (t *Table) Result(ctx context.Context, owner Owner, id string) (Task, Outcome, error) {
	t.mu.Lock()
	e, err := t.openLocked(owner, id)
	t.mu.Unlock()
	if err != nil && t.shared != nil && errors.Is(err, ErrNotFound) {
		// Another replica's task (or this one's before a restart):
		// the store says when it ends.
		return t.awaitShared(ctx, owner, id)
	}
	if err != nil {
		return Task{}, Outcome{}, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return Task{}, Outcome{}, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// It may have expired while the caller waited.
	if _, err := t.openLocked(owner, id); err != nil {
		return Task{}, Outcome{}, err
	}
	return e.task, e.out, nil
}

// Cancel cancels the task id names, if owner's and not yet terminal: its
// call's context is cancelled and it is cancelled from now on. Shared, a
// task another replica runs is cancelled in the store, and that replica
// stops its call when it next reads the row (watch).
func (t *Table) Cancel(owner Owner, id string) (Task, error) {
	t.mu.Lock()
	e, err := t.openLocked(owner, id)
	if err != nil {
		t.mu.Unlock()
		if t.shared != nil && errors.Is(err, ErrNotFound) {
			return t.cancelShared(owner, id)
		}
		return Task{}, err
	}
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return Task{}, ErrTerminal
	}
	snap := e.task
	t.mu.Unlock()
	snap.Status, snap.StatusMessage, snap.Updated, snap.InputRequests = Cancelled, "The task was cancelled by request.", t.now(), nil
	if t.shared != nil {
		// The store decides a race with the result or another replica's
		// cancel.
		if ok, err := t.shared.update(snap, Outcome{}); err != nil {
			return Task{}, err
		} else if !ok {
			return Task{}, ErrTerminal
		}
	}
	t.mu.Lock()
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return Task{}, ErrTerminal
	}
	e.task = snap
	t.endLocked(e, string(Cancelled))
	notify := e.notify
	t.mu.Unlock()
	e.cancel()
	if notify != nil {
		notify(snap)
	}
	return snap, nil
}

// ListPage is how many tasks one tasks/list page holds.
const ListPage = 50

// List is owner's tasks, oldest first, a page from cursor ("" for the
// first); next is the cursor of the page after, "" at the end.
func (t *Table) List(owner Owner, cursor string) (tasks []Task, next string, err error) {
	off := 0
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil {
			return nil, "", ErrCursor
		}
		n, err := strconv.Atoi(string(b))
		if err != nil || n < 0 {
			return nil, "", ErrCursor
		}
		off = n
	}
	if t.shared != nil {
		if tasks, err = t.listShared(owner); err != nil {
			return nil, "", err
		}
	} else {
		t.mu.Lock()
		t.sweepLocked(t.now())
		for _, e := range t.m {
			if e.owner == owner {
				tasks = append(tasks, e.task)
			}
		}
		t.mu.Unlock()
	}
	slices.SortFunc(tasks, func(a, b Task) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return compareStrings(a.ID, b.ID)
	})
	if off > len(tasks) {
		return nil, "", ErrCursor
	}
	end := min(off+ListPage, len(tasks))
	if end < len(tasks) {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	return tasks[off:end], next, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// endLocked makes e terminal: its waiters go on, and OnEnd hears of it.
func (t *Table) endLocked(e *entry, outcome string) {
	close(e.done)
	if t.onEnd != nil {
		t.onEnd(e.server, outcome)
	}
}

// Running is how many of the table's tasks run here: working, and
// waiting for their client's answer.
func (t *Table) Running() (working, inputRequired int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.m {
		switch e.task.Status {
		case Working:
			working++
		case InputRequired:
			inputRequired++
		}
	}
	return working, inputRequired
}

// Len is how many tasks the table holds (expired ones not yet swept
// included).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// sweepLocked drops expired tasks, at most once a second: an expired
// task is refused by openLocked whenever it is asked for, so the sweep
// only frees what nobody asks for any more.
func (t *Table) sweepLocked(now time.Time) {
	if now.Before(t.nextSweep) {
		return
	}
	t.nextSweep = now.Add(time.Second)
	for n, e := range t.m {
		if !now.Before(e.expires) {
			t.dropLocked(n, e)
		}
	}
}

// dropLocked forgets e, cancelling its call if it still runs: a task
// past its TTL is gone, running or not.
func (t *Table) dropLocked(n [nonceLen]byte, e *entry) {
	delete(t.m, n)
	if !e.task.Status.Terminal() {
		e.task.Status, e.task.StatusMessage, e.task.InputRequests = Failed, "The task expired.", nil
		t.endLocked(e, "expired")
	}
	e.cancel()
}
