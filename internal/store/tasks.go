package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Task statuses as the store keeps them (MCP 2025-11-25 tasks); the last
// three are terminal, and a terminal row never changes again.
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// TaskTerminal says whether status is a final one.
func TaskTerminal(status string) bool {
	return status == TaskCompleted || status == TaskFailed || status == TaskCancelled
}

// MaxTaskID bounds TaskRecord.ID.
const MaxTaskID = 64

// ErrTaskLimit is what CreateTaskWithin says when the owner already holds
// as many tasks as it may: nothing was written.
var ErrTaskLimit = errors.New("task limit reached")

// TaskRecord is one gateway-run MCP task (internal/tasks), kept so that
// every replica of a fleet, and this one after a restart, can answer for
// it. It holds no secret: ID is the key the task table holds the task by
// (the id's nonce), never the sealed id a caller presents, and Owner is a
// fingerprint of the owner, never a credential. Result, Error and Input
// reach the store sealed by the task table (a JSON string, for Result and
// Error); rows of an older version may hold clear results. The store checks
// shapes; who may see a task is the task table's to decide.
type TaskRecord struct {
	ID     string // the task's key (hex of the sealed id's nonce)
	Owner  string // sha256 hex fingerprint of the task's owner
	Route  string
	Server string
	// Status is one of the Task* statuses, StatusMessage its message.
	Status        string
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	ExpiresAt     time.Time // CreatedAt + TTL: the row is swept after
	TTL           time.Duration
	Replica       string // the instance id of the replica running the call
	// Result is the call's result, Error its JSON-RPC error object; at
	// most one is set, and only once the status is terminal.
	Result json.RawMessage
	Error  json.RawMessage
	// Input is the task's pending input requests (a JSON object, sealed
	// by the caller as results are): raw bytes to the store, written by
	// CreateTask and, when not nil, by UpdateTask (empty clears it). A
	// terminal status clears it: nothing is pending for a task that ended.
	Input []byte
}

// MaxTaskAnswerKey bounds the key of a task answer.
const MaxTaskAnswerKey = 256

// Tasks stores the task records.
type Tasks interface {
	// CreateTask adds a task. ErrConflict when its ID is taken,
	// ErrInvalid when it cannot be stored.
	CreateTask(ctx context.Context, t TaskRecord) error
	// CreateTaskWithin adds a task unless its owner already holds limit
	// unexpired tasks (expiring after t.CreatedAt, whatever their status)
	// of t.Server on t.Route: ErrTaskLimit then, and nothing is written.
	// The count and the insert are one atomic step, so replicas sharing
	// the store never let more than limit in between them. limit <= 0:
	// no limit (CreateTask). Otherwise as CreateTask.
	CreateTaskWithin(ctx context.Context, t TaskRecord, limit int) error
	// GetTask is the task of that ID, expired or not (the caller
	// checks). ErrNotFound when there is none.
	GetTask(ctx context.Context, id string) (TaskRecord, error)
	// ListTasks is owner's tasks, oldest first (then by ID).
	ListTasks(ctx context.Context, owner string) ([]TaskRecord, error)
	// UpdateTask writes t's status, message, UpdatedAt, Result and Error
	// to the row of t.ID, unless that row is terminal already: it says
	// whether it wrote (false: terminal, or no such row). So a cancel and
	// a result racing on two replicas settle on whichever came first.
	UpdateTask(ctx context.Context, t TaskRecord) (bool, error)
	// SweepTasks deletes the tasks that expired at or before now, and
	// their answers, and returns how many tasks.
	SweepTasks(ctx context.Context, now time.Time) (int64, error)
	// PutTaskAnswers keeps answers (to the task's input requests, by
	// request key) until TakeTaskAnswers takes them: a key the task
	// already has an answer for keeps its first (insert or ignore). The
	// bodies are raw bytes to the store (sealing them is the caller's
	// business). ErrNotFound when there is no task of that ID, ErrInvalid
	// for a key that is empty, longer than MaxTaskAnswerKey, or not UTF-8
	// without NUL; nothing is written then.
	PutTaskAnswers(ctx context.Context, taskID string, answers map[string][]byte) error
	// TakeTaskAnswers returns the task's answers and deletes them, in one
	// atomic step: each answer is taken once, by one caller. An empty map
	// when there are none (or no such task).
	TakeTaskAnswers(ctx context.Context, taskID string) (map[string][]byte, error)
}

// TaskTables is what SQLTasks asks of a backend: the statements on its
// tasks table, handed checked records.
type TaskTables interface {
	// CreateTask inserts t; limit > 0: only if the owner holds fewer
	// than limit unexpired tasks of t.Server on t.Route, in the same
	// atomic step, else ErrTaskLimit.
	CreateTask(ctx context.Context, t TaskRecord, limit int) error
	GetTask(ctx context.Context, id string) (TaskRecord, error)
	ListTasks(ctx context.Context, owner string) ([]TaskRecord, error)
	UpdateTask(ctx context.Context, t TaskRecord) (bool, error)
	SweepTasks(ctx context.Context, now time.Time) (int64, error)
	// PutTaskAnswers is handed checked, non-nil bodies.
	PutTaskAnswers(ctx context.Context, taskID string, answers map[string][]byte) error
	TakeTaskAnswers(ctx context.Context, taskID string) (map[string][]byte, error)
}

// SQLTasks is the Tasks of a SQL backend: checks here, statements in
// Tables. A backend embeds it.
type SQLTasks struct {
	Tables TaskTables
}

var _ Tasks = SQLTasks{}

func checkTaskStatus(t TaskRecord) error {
	switch t.Status {
	case TaskWorking, TaskInputRequired, TaskCompleted, TaskFailed, TaskCancelled:
	default:
		return fmt.Errorf("task status %q: %w", t.Status, ErrInvalid)
	}
	if len(t.Result) > 0 && len(t.Error) > 0 {
		return fmt.Errorf("task has both a result and an error: %w", ErrInvalid)
	}
	if (len(t.Result) > 0 || len(t.Error) > 0) && !TaskTerminal(t.Status) {
		return fmt.Errorf("task has an outcome but is %s: %w", t.Status, ErrInvalid)
	}
	for _, doc := range []json.RawMessage{t.Result, t.Error} {
		if len(doc) > 0 && !json.Valid(doc) {
			return fmt.Errorf("task outcome is not valid JSON: %w", ErrInvalid)
		}
	}
	return nil
}

func checkTaskID(id string) error {
	if id == "" || len(id) > MaxTaskID {
		return fmt.Errorf("task id must be 1 to %d bytes: %w", MaxTaskID, ErrInvalid)
	}
	return nil
}

// CheckTask returns ErrInvalid when t cannot be stored.
func CheckTask(t TaskRecord) error {
	if err := checkTaskID(t.ID); err != nil {
		return err
	}
	if !isDigest(t.Owner) {
		return fmt.Errorf("task owner is not a sha256 hex digest: %w", ErrInvalid)
	}
	if err := CheckName("server name", t.Server); err != nil {
		return err
	}
	if t.Route == "" || len(t.Route) > MaxPinName {
		return fmt.Errorf("task route must be 1 to %d bytes: %w", MaxPinName, ErrInvalid)
	}
	if t.TTL <= 0 || t.ExpiresAt.IsZero() || t.CreatedAt.IsZero() {
		return fmt.Errorf("task needs a creation time, a TTL and an expiry: %w", ErrInvalid)
	}
	return checkTaskStatus(t)
}

func (s SQLTasks) CreateTask(ctx context.Context, t TaskRecord) error {
	return s.CreateTaskWithin(ctx, t, 0)
}

func (s SQLTasks) CreateTaskWithin(ctx context.Context, t TaskRecord, limit int) error {
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = t.CreatedAt
	}
	if err := CheckTask(t); err != nil {
		return fmt.Errorf("create task: %w", err)
	}
	if err := s.Tables.CreateTask(ctx, t, max(limit, 0)); err != nil {
		return fmt.Errorf("create task: %w", err)
	}
	return nil
}

func (s SQLTasks) GetTask(ctx context.Context, id string) (TaskRecord, error) {
	t, err := s.Tables.GetTask(ctx, id)
	if err != nil {
		return TaskRecord{}, fmt.Errorf("get task: %w", err)
	}
	return t, nil
}

func (s SQLTasks) ListTasks(ctx context.Context, owner string) ([]TaskRecord, error) {
	out, err := s.Tables.ListTasks(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

func (s SQLTasks) UpdateTask(ctx context.Context, t TaskRecord) (bool, error) {
	if err := checkTaskID(t.ID); err != nil {
		return false, fmt.Errorf("update task: %w", err)
	}
	if err := checkTaskStatus(t); err != nil {
		return false, fmt.Errorf("update task: %w", err)
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = now()
	}
	ok, err := s.Tables.UpdateTask(ctx, t)
	if err != nil {
		return false, fmt.Errorf("update task: %w", err)
	}
	return ok, nil
}

func (s SQLTasks) SweepTasks(ctx context.Context, at time.Time) (int64, error) {
	n, err := s.Tables.SweepTasks(ctx, at)
	if err != nil {
		return 0, fmt.Errorf("sweep tasks: %w", err)
	}
	return n, nil
}

// CheckTaskAnswerKey returns ErrInvalid for a key no backend can store.
func CheckTaskAnswerKey(key string) error {
	if key == "" || len(key) > MaxTaskAnswerKey || !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		return fmt.Errorf("task answer key must be 1 to %d bytes of UTF-8 without NUL: %w", MaxTaskAnswerKey, ErrInvalid)
	}
	return nil
}

func (s SQLTasks) PutTaskAnswers(ctx context.Context, taskID string, answers map[string][]byte) error {
	if err := checkTaskID(taskID); err != nil {
		return fmt.Errorf("put task answers: %w", err)
	}
	if len(answers) == 0 {
		return nil
	}
	checked := make(map[string][]byte, len(answers))
	for k, body := range answers {
		if err := CheckTaskAnswerKey(k); err != nil {
			return fmt.Errorf("put task answers: %w", err)
		}
		if body == nil {
			body = []byte{}
		}
		checked[k] = body
	}
	if err := s.Tables.PutTaskAnswers(ctx, taskID, checked); err != nil {
		return fmt.Errorf("put task answers: %w", err)
	}
	return nil
}

func (s SQLTasks) TakeTaskAnswers(ctx context.Context, taskID string) (map[string][]byte, error) {
	if err := checkTaskID(taskID); err != nil {
		return nil, fmt.Errorf("take task answers: %w", err)
	}
	out, err := s.Tables.TakeTaskAnswers(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("take task answers: %w", err)
	}
	if out == nil {
		out = map[string][]byte{}
	}
	return out, nil
}
