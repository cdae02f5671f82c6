package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Shared tasks. Every task's record is written to the store when it is
// made, at each change of status, and with its result or error the moment
// the call ends; any table sealing ids under the same keys then answers
// tasks/get, tasks/result, tasks/list and tasks/cancel for it. The store
// row is the truth: a terminal row never changes again (store.Tasks), so a
// cancel on one replica and the result on another settle on the first.
//
// A cancel reaching a replica that does not run the call marks the row
// cancelled; the replica running it reads its running tasks' rows every
// Shared.Watch and stops a call whose row another replica ended (the
// cost: one row read per running task per Watch, and a call that runs up
// to Watch after its cancel). A task left unfinished by a replica that is
// no longer alive (Shared.Alive) is failed, with a message saying so, by
// whichever replica is asked for it first.
//
// What the row keeps of the call (result, error) is sealed (seal.go)
// under SealKeys and bound to the row: a row that does not open is
// ErrStore, never a result.

// ErrStore is what a table says when its store cannot be reached: the
// task's state is unknown, which is not the same as not found.
var ErrStore = errors.New("task store unavailable")

// ReplicaStopped is the status message of a task whose replica stopped
// while its call ran.
const ReplicaStopped = "The replica running this task stopped before the call finished."

// Shared is where a table keeps its tasks beside its memory.
type Shared struct {
	Store store.Tasks
	// Replica is this replica's id (its instance id), written in each
	// task it runs.
	Replica string
	// Alive says whether the replica of that id still runs (the fleet's
	// registry). nil: no other replica runs, so a task of another id
	// was this store's user before a restart.
	Alive func(ctx context.Context, replica string) bool
	// Watch is how often a replica re-reads the rows of the calls it
	// runs (0: PollInterval), Timeout bounds each store call (0: 5s).
	Watch, Timeout time.Duration
	Logger         *slog.Logger
	// SealKeys seal what the store keeps of each call (seal.go): the
	// first seals, every one opens. Every replica must hold the same
	// (fleet.TaskResultKeys). None: keys derived from the table's id
	// keys.
	SealKeys [][]byte

	sealer *sealer // set by init
}

// init completes s for a table whose ids are sealed under idKeys.
func (s *Shared) init(idKeys [][]byte) {
	keys := s.SealKeys
	if len(keys) == 0 {
		keys = sealKeysOf(idKeys)
	}
	sl, err := newSealer(keys)
	if err != nil {
		// Keys come from HKDF (32 bytes): only a caller's bug gets here.
		panic(err)
	}
	s.sealer = sl
	if s.Watch <= 0 {
		s.Watch = PollInterval
	}
	if s.Timeout <= 0 {
		s.Timeout = 5 * time.Second
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
}

// op bounds one store call. It does not end with the table: a result is
// still written while the table closes.
func (s *Shared) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.Timeout)
}

func (s *Shared) alive(ctx context.Context, replica string) bool {
	if replica == s.Replica {
		return true
	}
	return s.Alive != nil && s.Alive(ctx, replica)
}

// ownerPrint is what the store keeps of an owner: a fingerprint, never
// the caller's credential.
func ownerPrint(o Owner) string {
	sum := sha256.Sum256([]byte("mcpgate task owner\x00" + o.Caller + "\x00" + o.Route + "\x00" + o.Session))
	return hex.EncodeToString(sum[:])
}

// rowID is the store's key of a task: its nonce, not its id.
func rowID(id string) string {
	nonce, _, _ := ParseID(id)
	return hex.EncodeToString(nonce[:])
}

// create stores the record of a new task, unless owner already holds
// limit tasks of server (ErrTooMany), counted by the store on every
// replica in the same atomic step as the insert. limit <= 0: no limit.
func (s *Shared) create(nonce [nonceLen]byte, owner Owner, server string, t Task, expires time.Time, limit int) error {
	ctx, cancel := s.op()
	defer cancel()
	err := s.Store.CreateTaskWithin(ctx, store.TaskRecord{
		ID: hex.EncodeToString(nonce[:]), Owner: ownerPrint(owner), Route: owner.Route, Server: server,
		Status: string(t.Status), StatusMessage: t.StatusMessage, CreatedAt: t.Created, UpdatedAt: t.Updated,
		ExpiresAt: expires, TTL: t.TTL, Replica: s.Replica,
	}, limit)
	switch {
	case errors.Is(err, store.ErrTaskLimit):
		return ErrTooMany
	case err != nil:
		s.Logger.Error("a task could not be stored; it was not started", "error", err)
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	return nil
}

// update writes t (and its outcome) through, unless its row is terminal.
func (s *Shared) update(t Task, out Outcome) (bool, error) {
	rec := store.TaskRecord{ID: rowID(t.ID), Status: string(t.Status), StatusMessage: t.StatusMessage, UpdatedAt: t.Updated}
	if t.Status == InputRequired {
		// The open questions, for tasks/get on any replica (input.go).
		rec.Input = t.InputRequests
	}
	if t.Status.Terminal() {
		switch {
		case out.Err != nil:
			rec.Error, _ = json.Marshal(out.Err)
		case out.Result != nil:
			rec.Result = out.Result
		}
	}
	ctx, cancel := s.op()
	defer cancel()
	ok, err := s.put(ctx, rec)
	if err != nil {
		s.Logger.Error("a task's status could not be stored", "status", string(t.Status), "error", err)
		return false, fmt.Errorf("%w: %v", ErrStore, err)
	}
	return ok, nil
}

// put writes rec through UpdateTask with its outcome and input sealed (an
// empty input stays empty: it clears the column).
func (s *Shared) put(ctx context.Context, rec store.TaskRecord) (bool, error) {
	rec.Result = s.sealer.seal(rec.ID, fieldResult, rec.Result)
	rec.Error = s.sealer.seal(rec.ID, fieldError, rec.Error)
	if len(rec.Input) > 0 {
		rec.Input = s.sealer.seal(rec.ID, fieldInput, rec.Input)
	}
	return s.Store.UpdateTask(ctx, rec)
}

// get reads the row of id with its outcome and input opened. A row that
// does not open is ErrStore (logged without any part of it): what the
// store holds cannot be shown, and nothing else may be shown instead.
func (s *Shared) get(ctx context.Context, id string) (store.TaskRecord, error) {
	rec, err := s.Store.GetTask(ctx, id)
	if err != nil {
		return rec, err
	}
	res, err1 := s.sealer.open(rec.ID, fieldResult, rec.Result)
	e, err2 := s.sealer.open(rec.ID, fieldError, rec.Error)
	in, err3 := s.sealer.open(rec.ID, fieldInput, rec.Input)
	if err := errors.Join(err1, err2, err3); err != nil {
		s.Logger.Error("a stored task's outcome does not open: altered or moved in the store, or sealed under a key this replica does not hold", "error", err)
		return store.TaskRecord{}, fmt.Errorf("%w: %v", ErrStore, err)
	}
	rec.Result, rec.Error, rec.Input = res, e, in
	return rec, nil
}

// answerField is the sealed field of the answer to input request key.
func answerField(key string) string { return "answer:" + key }

// putAnswers keeps answers to the input requests of the task id names
// (row: rowID), each body sealed to its task and key, until takeAnswers
// takes them; a key already answered keeps its first answer. ErrNotFound
// when the task's row is gone, ErrStore when the store cannot say.
func (s *Shared) putAnswers(row string, answers map[string][]byte) error {
	sealed := make(map[string][]byte, len(answers))
	for k, body := range answers {
		sealed[k] = s.sealer.seal(row, answerField(k), body)
	}
	ctx, cancel := s.op()
	defer cancel()
	err := s.Store.PutTaskAnswers(ctx, row, sealed)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	return nil
}

// takeAnswers takes the answers kept for the task of row, each once: a
// body that does not open (moved from another task or key, altered) is
// ErrStore, and no answer of that take is used.
func (s *Shared) takeAnswers(row string) (map[string][]byte, error) {
	ctx, cancel := s.op()
	defer cancel()
	got, err := s.Store.TakeTaskAnswers(ctx, row)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	out := make(map[string][]byte, len(got))
	for k, sealed := range got {
		body, err := s.sealer.open(row, answerField(k), sealed)
		if err != nil || body == nil {
			s.Logger.Error("a stored task answer does not open: altered or moved in the store, or sealed under a key this replica does not hold")
			return nil, fmt.Errorf("%w: %v", ErrStore, errSealed)
		}
		out[k] = body
	}
	return out, nil
}

// finish stores how the call ended and returns the task's final state:
// t and out, or the row's when another replica ended it first.
func (s *Shared) finish(t Task, out Outcome) (Task, Outcome) {
	ok, err := s.update(t, out)
	if err != nil || ok {
		// Unstored, the result is still this replica's to show (logged).
		return t, out
	}
	ctx, cancel := s.op()
	defer cancel()
	rec, err := s.get(ctx, rowID(t.ID))
	if err != nil || !store.TaskTerminal(rec.Status) {
		return t, out
	}
	return taskOf(t.ID, rec), outcomeOf(rec)
}

func taskOf(id string, rec store.TaskRecord) Task {
	t := Task{ID: id, Status: Status(rec.Status), StatusMessage: rec.StatusMessage, Created: rec.CreatedAt,
		Updated: rec.UpdatedAt, TTL: rec.TTL, PollInterval: PollInterval}
	if t.Status == InputRequired && len(rec.Input) > 0 {
		t.InputRequests = json.RawMessage(rec.Input)
	}
	return t
}

func outcomeOf(rec store.TaskRecord) Outcome {
	var out Outcome
	if len(rec.Error) > 0 {
		var e jsonrpc.Error
		if json.Unmarshal(rec.Error, &e) == nil {
			out.Err = &e
		}
	}
	if len(rec.Result) > 0 {
		out.Result = rec.Result
	}
	return out
}

// orphan fails rec, whose replica stopped, unless the row ended
// meanwhile; it returns the row as it now is (ErrStore when the ended row
// does not open). A store that cannot be written leaves rec as it was.
func (s *Shared) orphan(ctx context.Context, rec store.TaskRecord, now time.Time) (store.TaskRecord, error) {
	e, _ := json.Marshal(jsonrpc.NewError(jsonrpc.CodeInternalError, "%s", ReplicaStopped))
	failed := rec
	failed.Status, failed.StatusMessage, failed.UpdatedAt, failed.Error, failed.Result = store.TaskFailed, ReplicaStopped, now, e, nil
	ok, err := s.put(ctx, failed)
	if err != nil {
		return rec, nil
	}
	if ok {
		s.Logger.Warn("a task's replica stopped while its call ran; the task is failed", "replica", rec.Replica, "server", rec.Server)
		return failed, nil
	}
	cur, err := s.get(ctx, rec.ID)
	if errors.Is(err, ErrStore) {
		return store.TaskRecord{}, err
	}
	if err != nil {
		return rec, nil
	}
	return cur, nil
}

// load reads the task id names from the store, if owner's and not
// expired; a task whose replica stopped is failed first.
func (t *Table) load(owner Owner, id string) (Task, Outcome, error) {
	rec, err := t.loadRecord(owner, id)
	if err != nil {
		return Task{}, Outcome{}, err
	}
	return taskOf(id, rec), outcomeOf(rec), nil
}

func (t *Table) loadRecord(owner Owner, id string) (store.TaskRecord, error) {
	nonce, ok := t.checkID(owner, id)
	if !ok {
		return store.TaskRecord{}, ErrNotFound
	}
	ctx, cancel := t.shared.op()
	defer cancel()
	rec, err := t.shared.get(ctx, hex.EncodeToString(nonce[:]))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.TaskRecord{}, ErrNotFound
	case errors.Is(err, ErrStore):
		return store.TaskRecord{}, err
	case err != nil:
		return store.TaskRecord{}, fmt.Errorf("%w: %v", ErrStore, err)
	}
	now := t.now()
	// The fingerprint check is the MAC's twin, as in openLocked.
	if rec.Owner != ownerPrint(owner) || rec.Route != owner.Route || !now.Before(rec.ExpiresAt) {
		return store.TaskRecord{}, ErrNotFound
	}
	if !store.TaskTerminal(rec.Status) && !t.runsHere(nonce, rec.Replica) && !t.shared.alive(ctx, rec.Replica) {
		return t.shared.orphan(ctx, rec, now)
	}
	return rec, nil
}

// runsHere says whether a task of this replica's id is one of its calls:
// a row of this id that the table does not hold is no one's.
func (t *Table) runsHere(nonce [nonceLen]byte, replica string) bool {
	if replica != t.shared.Replica {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[nonce]
	return ok
}

// awaitShared polls the store until the task id names ends.
func (t *Table) awaitShared(ctx context.Context, owner Owner, id string) (Task, Outcome, error) {
	tick := time.NewTicker(t.shared.Watch)
	defer tick.Stop()
	for {
		task, out, err := t.load(owner, id)
		if err != nil || task.Status.Terminal() {
			return task, out, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Task{}, Outcome{}, ctx.Err()
		case <-t.ctx.Done():
			return Task{}, Outcome{}, ErrClosed
		}
	}
}

// cancelShared cancels, in the store, a task this table does not run.
func (t *Table) cancelShared(owner Owner, id string) (Task, error) {
	rec, err := t.loadRecord(owner, id)
	if err != nil {
		return Task{}, err
	}
	if store.TaskTerminal(rec.Status) {
		return Task{}, ErrTerminal
	}
	task := taskOf(id, rec)
	task.Status, task.StatusMessage, task.Updated = Cancelled, "The task was cancelled by request.", t.now()
	ok, err := t.shared.update(task, Outcome{})
	if err != nil {
		return Task{}, err
	}
	if !ok {
		return Task{}, ErrTerminal
	}
	return task, nil
}

// listShared is owner's unexpired tasks as the store has them.
func (t *Table) listShared(owner Owner) ([]Task, error) {
	ctx, cancel := t.shared.op()
	defer cancel()
	recs, err := t.shared.Store.ListTasks(ctx, ownerPrint(owner))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	now := t.now()
	alive := map[string]bool{}
	var out []Task
	for _, rec := range recs {
		var nonce [nonceLen]byte
		if b, err := hex.DecodeString(rec.ID); err != nil || len(b) != nonceLen || rec.Route != owner.Route || !now.Before(rec.ExpiresAt) {
			continue
		} else {
			copy(nonce[:], b)
		}
		if !store.TaskTerminal(rec.Status) {
			a, seen := alive[rec.Replica]
			if !seen {
				a = t.shared.alive(ctx, rec.Replica)
				alive[rec.Replica] = a
			}
			if !a || (rec.Replica == t.shared.Replica && !t.runsHere(nonce, rec.Replica)) {
				if cur, err := t.shared.orphan(ctx, rec, now); err == nil {
					rec = cur
				} else if raw, err := t.shared.Store.GetTask(ctx, rec.ID); err == nil {
					// The row ended and its outcome does not open; a
					// list shows the status alone, which is the row's.
					rec = raw
				}
			}
		}
		out = append(out, taskOf(formatID(nonce, idMAC(t.keys[0], nonce, owner)), rec))
	}
	return out, nil
}

// watch re-reads the rows of the calls this table runs, every Watch, and
// stops those another replica ended (a cancel); once a minute it sweeps
// expired rows. It ends with the table.
func (t *Table) watch() {
	defer t.wg.Done()
	tick := time.NewTicker(t.shared.Watch)
	defer tick.Stop()
	var nextSweep time.Time
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		t.mu.Lock()
		// A call past its TTL ends here even if nobody asks for it
		// (Get and Peek read the store, not the map).
		t.sweepLocked(t.now())
		var running []*entry
		for _, e := range t.m {
			if !e.task.Status.Terminal() {
				running = append(running, e)
			}
		}
		t.mu.Unlock()
		for _, e := range running {
			t.mu.Lock()
			id := e.task.ID
			t.mu.Unlock()
			ctx, cancel := t.shared.op()
			rec, err := t.shared.get(ctx, rowID(id))
			cancel()
			if err == nil && !store.TaskTerminal(rec.Status) {
				// Answers another replica took for this call's questions.
				t.takeRemoteAnswers(e, id)
			}
			if err != nil || !store.TaskTerminal(rec.Status) {
				// A row that does not open leaves the call running: its
				// end is this replica's to store and show (finish).
				continue
			}
			t.mu.Lock()
			if e.task.Status.Terminal() {
				t.mu.Unlock()
				continue
			}
			e.task, e.out = taskOf(id, rec), outcomeOf(rec)
			t.endLocked(e, string(e.task.Status))
			snap, notify := e.task, e.notify
			t.mu.Unlock()
			e.cancel()
			if notify != nil {
				notify(snap)
			}
		}
		if now := t.now(); !now.Before(nextSweep) {
			nextSweep = now.Add(time.Minute)
			ctx, cancel := t.shared.op()
			if _, err := t.shared.Store.SweepTasks(ctx, now); err != nil {
				t.shared.Logger.Warn("expired tasks could not be swept", "error", err)
			}
			cancel()
		}
	}
}
