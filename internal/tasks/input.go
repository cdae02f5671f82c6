package tasks

// The input phase of a task (2026-07-28, extension
// io.modelcontextprotocol/tasks; SEP-2322's input requests on the tasks
// surface). A task's call that needs the client (an upstream's
// elicitation, sampling or roots request) asks through Ask: the question
// is kept on the task under a key the table mints, the task is
// input_required and tasks/get shows its open questions as inputRequests;
// tasks/update with inputResponses under those keys answers them (Answer),
// and the call goes on. Answered keys leave inputRequests at once; the
// task is working again when none is left. Only the task's Owner can
// see or answer its questions: Answer opens the id as every other method
// does.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
)

// question is one open question of a task's call.
type question struct {
	req    json.RawMessage      // {"method":…,"params":…}
	answer chan json.RawMessage // buffered 1: Answer never blocks
}

type runKey struct{}

// runState is what a task's run context carries for Ask and ID.
type runState struct {
	t   *Table
	e   *entry
	ctx context.Context // the run's: ends when the task does
}

// ErrNoTask is Ask's answer outside a task's run.
var ErrNoTask = errors.New("not a task's call")

// ID is the id of the task whose run ctx belongs to, "" outside one.
func ID(ctx context.Context) string {
	r, ok := ctx.Value(runKey{}).(*runState)
	if !ok {
		return ""
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.e.task.ID
}

// maxOpenQuestions bounds the questions one task's call may hold open: an
// upstream that asks without end is refused past it.
const maxOpenQuestions = 16

// ErrTooManyQuestions is Ask's answer past maxOpenQuestions.
var ErrTooManyQuestions = errors.New("too many open questions on this task")

// Ask puts a question (method and params of an MCP request to the client)
// to the owner of the task whose run runCtx belongs to, and waits for the
// answer tasks/update brings, until ctx or the task ends. params nil is
// sent as {} (some clients fail on an input request without params).
func Ask(runCtx, ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	r, ok := runCtx.Value(runKey{}).(*runState)
	if !ok {
		return nil, ErrNoTask
	}
	return r.t.ask(r, ctx, method, params)
}

func (t *Table) ask(r *runState, ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	req, err := json.Marshal(struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}{method, params})
	if err != nil {
		return nil, err
	}
	q := &question{req: req, answer: make(chan json.RawMessage, 1)}
	e := r.e
	t.mu.Lock()
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return nil, ErrTerminal
	}
	if len(e.questions) >= maxOpenQuestions {
		t.mu.Unlock()
		return nil, ErrTooManyQuestions
	}
	if e.questions == nil {
		e.questions = map[string]*question{}
	}
	e.asked++
	key := "input-" + strconv.Itoa(e.asked)
	e.questions[key] = q
	snap := t.questionsChangedLocked(e)
	t.mu.Unlock()
	t.publish(e, snap)

	select {
	case a := <-q.answer:
		return a, nil
	case <-ctx.Done():
		t.withdraw(e, key)
		return nil, ctx.Err()
	case <-r.ctx.Done():
		t.withdraw(e, key)
		return nil, context.Cause(r.ctx)
	}
}

// withdraw takes back e's question key, unanswered.
func (t *Table) withdraw(e *entry, key string) {
	t.mu.Lock()
	if _, open := e.questions[key]; !open {
		t.mu.Unlock()
		return
	}
	delete(e.questions, key)
	snap := t.questionsChangedLocked(e)
	t.mu.Unlock()
	t.publish(e, snap)
}

// questionsChangedLocked writes e's open questions into its task:
// input_required while there are any, working again when none is left.
// It returns the snapshot to publish (none when terminal).
func (t *Table) questionsChangedLocked(e *entry) snapshot {
	if e.task.Status.Terminal() {
		return snapshot{}
	}
	if len(e.questions) == 0 {
		e.task.InputRequests = nil
		if e.task.Status == InputRequired {
			e.task.Status, e.task.StatusMessage = Working, ""
		}
	} else {
		m := make(map[string]json.RawMessage, len(e.questions))
		for k, q := range e.questions {
			m[k] = q.req
		}
		e.task.InputRequests, _ = json.Marshal(m)
		e.task.Status, e.task.StatusMessage = InputRequired, "Waiting for the client's answer."
	}
	e.task.Updated = t.now()
	return e.snapshotLocked()
}

// ErrAnswer is Answer's error for responses that are not an object of
// objects.
var ErrAnswer = errors.New("inputResponses must be an object whose members are objects")

// Answer delivers responses (inputResponses: an object keyed as the task's
// inputRequests) to the task id names, if owner's. Keys of no open
// question (answered before, never asked, withdrawn) are ignored, as are
// responses to a terminal task: answering is idempotent. The answered
// keys leave the task's inputRequests before Answer returns.
func (t *Table) Answer(owner Owner, id string, responses json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(responses, &m); err != nil || m == nil {
		return ErrAnswer
	}
	for _, v := range m {
		if v = trimSpace(v); len(v) == 0 || v[0] != '{' {
			return ErrAnswer
		}
	}
	t.mu.Lock()
	e, err := t.openLocked(owner, id)
	if err != nil {
		t.mu.Unlock()
		if t.shared != nil && errors.Is(err, ErrNotFound) {
			// Another replica's task: the answers wait in the store for
			// the replica that runs the call (watch).
			return t.answerShared(owner, id, m)
		}
		return err
	}
	t.answerLocked(e, m)
	return nil
}

// answerLocked hands m's answers to e's open questions and publishes the
// change; t.mu is held, and released.
func (t *Table) answerLocked(e *entry, m map[string]json.RawMessage) {
	answered := 0
	for k, v := range m {
		q, open := e.questions[k]
		if !open {
			continue
		}
		delete(e.questions, k)
		q.answer <- v
		answered++
	}
	if answered == 0 {
		t.mu.Unlock()
		return
	}
	snap := t.questionsChangedLocked(e)
	t.mu.Unlock()
	t.publish(e, snap)
}

// answerShared keeps answers to the open questions of a task another
// replica runs in the store, sealed, for that replica to take (watch), and
// takes the answered keys out of the row's inputRequests at once, so that
// tasks/get on any replica stops showing them.
func (t *Table) answerShared(owner Owner, id string, m map[string]json.RawMessage) error {
	rec, err := t.loadRecord(owner, id)
	if err != nil {
		return err
	}
	if Status(rec.Status) != InputRequired || len(rec.Input) == 0 {
		return nil
	}
	var open map[string]json.RawMessage
	if json.Unmarshal(rec.Input, &open) != nil {
		return nil
	}
	answers := map[string][]byte{}
	for k, v := range m {
		if _, ok := open[k]; ok {
			answers[k] = v
			delete(open, k)
		}
	}
	if len(answers) == 0 {
		return nil
	}
	if err := t.shared.putAnswers(rec.ID, answers); err != nil {
		return err
	}
	cur := taskOf(id, rec)
	cur.Updated = t.now()
	if len(open) == 0 {
		cur.Status, cur.StatusMessage, cur.InputRequests = Working, "", nil
	} else {
		cur.InputRequests, _ = json.Marshal(open)
	}
	// The replica running the call writes the row again when it takes
	// the answers; until then this is what every replica shows.
	_, err = t.shared.update(cur, Outcome{})
	return err
}

// takeRemoteAnswers hands e, a call this replica runs, the answers other
// replicas kept in the store for it.
func (t *Table) takeRemoteAnswers(e *entry, id string) {
	t.mu.Lock()
	asking := len(e.questions) > 0
	t.mu.Unlock()
	if !asking {
		return
	}
	got, err := t.shared.takeAnswers(rowID(id))
	if err != nil || len(got) == 0 {
		return
	}
	m := make(map[string]json.RawMessage, len(got))
	for k, v := range got {
		m[k] = v
	}
	t.mu.Lock()
	if e.task.Status.Terminal() {
		t.mu.Unlock()
		return
	}
	t.answerLocked(e, m)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
