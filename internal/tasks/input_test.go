package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// asker is a Run that asks n questions at once and returns their answers
// in order.
func asker(n int) Run {
	return func(ctx context.Context) Outcome {
		answers := make([]json.RawMessage, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				a, err := Ask(ctx, ctx, "elicitation/create", json.RawMessage(`{"message":"q"}`))
				if err != nil {
					a = json.RawMessage(`"` + err.Error() + `"`)
				}
				answers[i] = a
			})
		}
		wg.Wait()
		b, _ := json.Marshal(answers)
		return Outcome{Result: b}
	}
}

func inputKeys(t *testing.T, task Task) []string {
	t.Helper()
	if task.InputRequests == nil {
		return nil
	}
	var m map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(task.InputRequests, &m); err != nil {
		t.Fatalf("inputRequests %s", task.InputRequests)
	}
	var keys []string
	for k, q := range m {
		if q.Method != "elicitation/create" || string(q.Params) != `{"message":"q"}` {
			t.Fatalf("input request %s", task.InputRequests)
		}
		keys = append(keys, k)
	}
	return keys
}

// TestAskAndAnswer: two questions asked at once are both open
// (input_required); answering one leaves the other, still input_required;
// another owner cannot answer; answering the last lets the call finish
// with both answers; answering again is a no-op.
func TestAskAndAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		var statuses []Status
		var mu sync.Mutex
		task, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, asker(2), func(x Task) {
			mu.Lock()
			statuses = append(statuses, x.Status)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cur, _, err := tb.Peek(alice, task.ID)
		keys := inputKeys(t, cur)
		if err != nil || cur.Status != InputRequired || len(keys) != 2 {
			t.Fatalf("while asking: %+v %v", cur, err)
		}
		if err := tb.Answer(bob, task.ID, json.RawMessage(`{"`+keys[0]+`":{"action":"accept"}}`)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("bob's answer: %v", err)
		}
		if err := tb.Answer(aliceR2, task.ID, json.RawMessage(`{"`+keys[0]+`":{"action":"accept"}}`)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("alice on another route: %v", err)
		}
		for _, bad := range []string{`[]`, `null`, `{"a":1}`, `{"a":"x"}`, `{`} {
			if err := tb.Answer(alice, task.ID, json.RawMessage(bad)); !errors.Is(err, ErrAnswer) {
				t.Errorf("answer %s: %v", bad, err)
			}
		}
		if err := tb.Answer(alice, task.ID, json.RawMessage(`{"`+keys[0]+`":{"n":1},"unknown":{}}`)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cur, _, _ = tb.Peek(alice, task.ID)
		if left := inputKeys(t, cur); cur.Status != InputRequired || len(left) != 1 || left[0] != keys[1] {
			t.Fatalf("after one answer: %+v %v", cur, left)
		}
		if err := tb.Answer(alice, task.ID, json.RawMessage(`{"`+keys[1]+`":{"n":2}}`)); err != nil {
			t.Fatal(err)
		}
		fin, out, err := tb.Result(t.Context(), alice, task.ID)
		if err != nil || fin.Status != Completed || fin.InputRequests != nil {
			t.Fatalf("final %+v %v", fin, err)
		}
		var got []map[string]int
		if json.Unmarshal(out.Result, &got) != nil || len(got) != 2 || got[0]["n"]+got[1]["n"] != 3 {
			t.Fatalf("answers reached the call as %s", out.Result)
		}
		// Answering a finished task is acknowledged and changes nothing.
		if err := tb.Answer(alice, task.ID, json.RawMessage(`{"`+keys[1]+`":{"n":9}}`)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(statuses) < 3 || statuses[0] != InputRequired || statuses[len(statuses)-1] != Completed {
			t.Errorf("notified %v", statuses)
		}
	})
}

// TestAskEndsWithTheTask: a cancel while questions are open withdraws
// them and the call's Ask returns; Ask outside a task's run says so; an
// upstream that asks without end is refused past maxOpenQuestions.
func TestAskEndsWithTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		task, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, asker(maxOpenQuestions+2), nil)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cur, _, _ := tb.Peek(alice, task.ID)
		if n := len(inputKeys(t, cur)); n != maxOpenQuestions {
			t.Fatalf("%d questions open, want %d", n, maxOpenQuestions)
		}
		if _, err := tb.Cancel(alice, task.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cur, _, _ = tb.Peek(alice, task.ID)
		if cur.Status != Cancelled || cur.InputRequests != nil {
			t.Fatalf("after cancel %+v", cur)
		}
		if _, err := Ask(t.Context(), t.Context(), "roots/list", nil); !errors.Is(err, ErrNoTask) {
			t.Fatalf("Ask outside a task: %v", err)
		}
	})
}

// FuzzAnswer: any inputResponses is taken or refused without panic, and
// never answers a question it does not name.
func FuzzAnswer(f *testing.F) {
	for _, s := range []string{`{"input-1":{"action":"accept"}}`, `{}`, `[]`, `{"input-1":[]}`, `{"input-1":{}} `, `{"input-1":{},"input-1":{}}`, "\x00", `{"\u0069nput-1":{}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tb := New(nil, nil)
		defer tb.Close()
		asked := make(chan struct{})
		task, err := tb.Start(context.Background(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
			close(asked)
			a, err := Ask(ctx, ctx, "roots/list", nil)
			if err != nil {
				return Outcome{}
			}
			return Outcome{Result: a}
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		<-asked
		for {
			if cur, _, _ := tb.Peek(alice, task.ID); cur.Status == InputRequired {
				break
			}
		}
		_ = tb.Answer(alice, task.ID, json.RawMessage(s))
		cur, _, _ := tb.Peek(alice, task.ID)
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &m) != nil || m["input-1"] == nil {
			if cur.Status.Terminal() {
				t.Fatalf("%q ended the task: %+v", s, cur)
			}
		}
	})
}

// TestSharedInputAcrossReplicas: replica B shows the open questions of a
// call replica A runs, in the store; an answer on B leaves B's tasks/get
// at once, reaches A's call (A takes it from the store), and the call
// completes with both answers; another owner on B can neither see nor
// answer them.
func TestSharedInputAcrossReplicas(t *testing.T) {
	a, b, _ := twoReplicas(t)
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, asker(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	deadline := time.Now().Add(10 * time.Second)
	for len(keys) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("B never saw the two questions")
		}
		cur, _, err := b.Peek(alice, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		keys = inputKeys(t, cur)
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := b.Peek(bob, task.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob on B: %v", err)
	}
	if err := b.Answer(bob, task.ID, json.RawMessage(`{"`+keys[0]+`":{"n":7}}`)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's answer on B: %v", err)
	}
	if err := b.Answer(alice, task.ID, json.RawMessage(`{"`+keys[0]+`":{"n":1},"unknown":{"n":5}}`)); err != nil {
		t.Fatal(err)
	}
	cur, _, _ := b.Peek(alice, task.ID)
	if left := inputKeys(t, cur); cur.Status != InputRequired || len(left) != 1 || left[0] != keys[1] {
		t.Fatalf("B after one answer: %+v %v", cur, left)
	}
	// A takes the answer: its own view drops the key too.
	for {
		if time.Now().After(deadline) {
			t.Fatal("A never took the answer")
		}
		a.mu.Lock()
		n := 0
		for _, e := range a.m {
			n += len(e.questions)
		}
		a.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Answer(alice, task.ID, json.RawMessage(`{"`+keys[1]+`":{"n":2}}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fin, out, err := b.Result(ctx, alice, task.ID)
	if err != nil || fin.Status != Completed || fin.InputRequests != nil {
		t.Fatalf("final on B: %+v %v", fin, err)
	}
	var got []map[string]int
	if json.Unmarshal(out.Result, &got) != nil || len(got) != 2 || got[0]["n"]+got[1]["n"] != 3 {
		t.Fatalf("answers reached A's call as %s", out.Result)
	}
}

// TestPublishKeepsTheLatest: a running task's snapshots reach the store
// in the order they were taken, whatever order their writers run in. Two
// questions asked at once are two snapshots written outside the table's
// lock; when the one with a single question was written last, the other
// replicas showed one question of two until the next change, and the
// client could not answer the other there (CI caught it as
// TestSharedInputAcrossReplicas's "B never saw the two questions").
func TestPublishKeepsTheLatest(t *testing.T) {
	a, b, _ := twoReplicas(t)
	release := make(chan struct{})
	defer close(release)
	task, err := a.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{"content":[]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	const q = `{"method":"elicitation/create","params":{"message":"q"}}`
	a.mu.Lock()
	var e *entry
	for _, x := range a.m {
		if x.task.ID == task.ID {
			e = x
		}
	}
	if e == nil {
		a.mu.Unlock()
		t.Fatal("the task's entry is not in A's table")
	}
	e.task.Status, e.task.InputRequests = InputRequired, json.RawMessage(`{"input-1":`+q+`}`)
	older := e.snapshotLocked()
	e.task.InputRequests = json.RawMessage(`{"input-1":` + q + `,"input-2":` + q + `}`)
	newer := e.snapshotLocked()
	a.mu.Unlock()

	a.publish(e, newer)
	a.publish(e, older) // its writer ran late: dropped
	cur, _, err := b.Peek(alice, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if keys := inputKeys(t, cur); len(keys) != 2 || cur.Status != InputRequired {
		t.Errorf("B shows %s %v after the newer snapshot was published before the older; want both questions", cur.Status, keys)
	}
}
