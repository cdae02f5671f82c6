package tasks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

var (
	alice    = Owner{Caller: "key:alice", Route: "r1"}
	bob      = Owner{Caller: "key:bob", Route: "r1"}
	aliceR2  = Owner{Caller: "key:alice", Route: "r2"}
	cfgShort = Config{TTL: time.Minute, MaxPerCaller: 3}
)

// block is a Run that waits for release or its context.
func block(release <-chan struct{}, res string) Run {
	return func(ctx context.Context) Outcome {
		select {
		case <-release:
			return Outcome{Result: json.RawMessage(res)}
		case <-ctx.Done():
			return Outcome{Err: jsonrpc.NewError(jsonrpc.CodeInternalError, "cancelled")}
		}
	}
}

func TestTaskLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		release := make(chan struct{})
		var notes []Status
		notified := make(chan struct{}, 4)
		task, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{"content":[]}`), func(x Task) {
			notes = append(notes, x.Status)
			notified <- struct{}{}
		})
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != Working || task.TTL != time.Minute || !strings.HasPrefix(task.ID, IDPrefix) {
			t.Fatalf("created %+v", task)
		}
		got, err := tb.Get(alice, task.ID)
		if err != nil || got.Status != Working {
			t.Fatalf("get = %+v, %v", got, err)
		}
		close(release)
		fin, out, err := tb.Result(t.Context(), alice, task.ID)
		if err != nil || fin.Status != Completed || string(out.Result) != `{"content":[]}` {
			t.Fatalf("result = %+v %s %v", fin, out.Result, err)
		}
		<-notified
		if len(notes) != 1 || notes[0] != Completed {
			t.Fatalf("notifications %v", notes)
		}
		if _, err := tb.Cancel(alice, task.ID); !errors.Is(err, ErrTerminal) {
			t.Fatalf("cancel of a completed task: %v", err)
		}
	})
}

func TestTaskErrorResultFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		release := make(chan struct{})
		close(release)
		task, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{"content":[],"isError":true}`), nil)
		fin, _, err := tb.Result(t.Context(), alice, task.ID)
		if err != nil || fin.Status != Failed {
			t.Fatalf("result = %+v %v", fin, err)
		}
	})
}

// TestTaskIsolation: another caller, the same caller on another route, a
// forged or altered id: each is told "not found", and nothing they do
// touches the task.
func TestTaskIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		release := make(chan struct{})
		task, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		nonce, mac, err := ParseID(task.ID)
		if err != nil {
			t.Fatal(err)
		}
		altered := mac
		altered[0] ^= 1
		otherNonce := nonce
		otherNonce[15] ^= 1
		ids := map[string]string{
			"own id":        task.ID,
			"altered mac":   formatID(nonce, altered),
			"altered nonce": formatID(otherNonce, mac),
			// A MAC made for bob under another key: forged.
			"forged":  formatID(nonce, idMAC([]byte("not the table's key"), nonce, bob)),
			"garbage": "mcpt1.xyz",
		}
		for _, who := range []Owner{bob, aliceR2, {Caller: "key:alice", Route: "r1", Session: "s2"}} {
			for name, id := range ids {
				if _, err := tb.Get(who, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("%+v get %s: %v", who, name, err)
				}
				if _, err := tb.Cancel(who, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("%+v cancel %s: %v", who, name, err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				if _, _, err := tb.Result(ctx, who, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("%+v result %s: %v", who, name, err)
				}
				cancel()
			}
			if l, _, err := tb.List(who, ""); err != nil || len(l) != 0 {
				t.Errorf("%+v lists %v, %v", who, l, err)
			}
		}
		for name, id := range ids {
			if name == "own id" {
				continue
			}
			if _, err := tb.Get(alice, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("alice get %s: %v", name, err)
			}
		}
		if got, err := tb.Get(alice, task.ID); err != nil || got.Status != Working {
			t.Fatalf("the owner's task was touched: %+v %v", got, err)
		}
		if l, _, _ := tb.List(alice, ""); len(l) != 1 || l[0].ID != task.ID {
			t.Fatalf("alice lists %v", l)
		}
		close(release)
	})
}

func TestTaskCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		ended := make(chan error, 1)
		task, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
			<-ctx.Done()
			ended <- ctx.Err()
			return Outcome{Result: json.RawMessage(`{"late":true}`)}
		}, nil)
		c, err := tb.Cancel(alice, task.ID)
		if err != nil || c.Status != Cancelled {
			t.Fatalf("cancel = %+v %v", c, err)
		}
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("the call's context: %v", err)
		}
		synctest.Wait()
		// Cancelled stays cancelled though the call returned a result.
		fin, out, err := tb.Result(t.Context(), alice, task.ID)
		if err != nil || fin.Status != Cancelled || out.Result != nil {
			t.Fatalf("after cancel: %+v %s %v", fin, out.Result, err)
		}
		if _, err := tb.Cancel(alice, task.ID); !errors.Is(err, ErrTerminal) {
			t.Fatalf("second cancel: %v", err)
		}
	})
}

// TestTaskTTL: a finished task is kept until its TTL, then gone; a
// running one past its TTL is cancelled and gone; a requested TTL above
// the server's is capped.
func TestTaskTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		done := make(chan struct{})
		close(done)
		fin, _ := tb.Start(t.Context(), alice, "s", cfgShort, 10*time.Second, block(done, `{}`), nil)
		if fin.TTL != 10*time.Second {
			t.Fatalf("ttl %v", fin.TTL)
		}
		capped, _ := tb.Start(t.Context(), alice, "s", cfgShort, time.Hour, block(done, `{}`), nil)
		if capped.TTL != time.Minute {
			t.Fatalf("capped ttl %v", capped.TTL)
		}
		stopped := make(chan struct{})
		running, _ := tb.Start(t.Context(), alice, "s", cfgShort, 20*time.Second, func(ctx context.Context) Outcome {
			<-ctx.Done()
			close(stopped)
			return Outcome{}
		}, nil)
		synctest.Wait()
		time.Sleep(9 * time.Second)
		if _, err := tb.Get(alice, fin.ID); err != nil {
			t.Fatalf("kept before its ttl: %v", err)
		}
		time.Sleep(time.Second)
		if _, err := tb.Get(alice, fin.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after its ttl: %v", err)
		}
		time.Sleep(10 * time.Second)
		if l, _, _ := tb.List(alice, ""); len(l) != 1 || l[0].ID != capped.ID {
			t.Fatalf("listed after ttl: %v", l)
		}
		<-stopped // the running task's call was cancelled by its expiry
		if _, err := tb.Get(alice, running.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("running past ttl: %v", err)
		}
		if tb.Len() != 1 {
			t.Fatalf("table holds %d", tb.Len())
		}
	})
}

func TestTaskMaxPerCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		release := make(chan struct{})
		defer close(release)
		for range 3 {
			if _, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{}`), nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{}`), nil); !errors.Is(err, ErrTooMany) {
			t.Fatalf("fourth: %v", err)
		}
		// Another caller, or another server, has its own count.
		if _, err := tb.Start(t.Context(), bob, "s", cfgShort, 0, block(release, `{}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.Start(t.Context(), alice, "t", cfgShort, 0, block(release, `{}`), nil); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTaskListPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		done := make(chan struct{})
		close(done)
		cfg := Config{TTL: time.Hour, MaxPerCaller: 1000}
		for range ListPage + 5 {
			if _, err := tb.Start(t.Context(), alice, "s", cfg, 0, block(done, `{}`), nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		first, next, err := tb.List(alice, "")
		if err != nil || len(first) != ListPage || next == "" {
			t.Fatalf("first page %d %q %v", len(first), next, err)
		}
		second, next2, err := tb.List(alice, next)
		if err != nil || len(second) != 5 || next2 != "" {
			t.Fatalf("second page %d %q %v", len(second), next2, err)
		}
		for _, bad := range []string{"!", base64.RawURLEncoding.EncodeToString([]byte("-1")), base64.RawURLEncoding.EncodeToString([]byte("999"))} {
			if _, _, err := tb.List(alice, bad); !errors.Is(err, ErrCursor) {
				t.Errorf("cursor %q: %v", bad, err)
			}
		}
	})
}

func TestTableCloseCancelsRuns(t *testing.T) {
	tb := New(nil, nil)
	stopped := make(chan struct{})
	if _, err := tb.Start(context.Background(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
		<-ctx.Done()
		close(stopped)
		return Outcome{}
	}, nil); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before the run ended")
	}
	if _, err := tb.Start(context.Background(), alice, "s", cfgShort, 0, block(nil, `{}`), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

func FuzzParseID(f *testing.F) {
	tb := New([]byte("0123456789abcdef0123456789abcdef"), nil)
	defer tb.Close()
	done := make(chan struct{})
	close(done)
	task, _ := tb.Start(context.Background(), alice, "s", cfgShort, 0, block(done, `{}`), nil)
	for _, s := range []string{task.ID, "", IDPrefix, "mcpt1.", "mcpt1.====", task.ID + "A", strings.ToUpper(task.ID), "mcpg1.x.y.z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		nonce, mac, err := ParseID(id)
		if err != nil {
			// One error, naming nothing of the input.
			if err != ErrMalformedID {
				t.Fatalf("error %v", err)
			}
			return
		}
		if formatID(nonce, mac) != id {
			t.Fatalf("%q parses but does not round-trip", id)
		}
		// Only the minted id opens the task, for its owner.
		_, gerr := tb.Get(alice, id)
		if (gerr == nil) != (id == task.ID) {
			t.Fatalf("Get(%q) = %v", id, gerr)
		}
		if _, err := tb.Get(bob, id); err == nil {
			t.Fatalf("bob opened %q", id)
		}
	})
}

func TestTaskReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := New(nil, nil)
		defer tb.Close()
		step := make(chan struct{})
		var seen []Status
		task, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
			Report(ctx, InputRequired, "asks")
			<-step
			Report(ctx, Completed, "not the run's to say")
			Report(ctx, Working, "")
			<-step
			return Outcome{Result: json.RawMessage(`{}`)}
		}, func(x Task) { seen = append(seen, x.Status) })
		synctest.Wait()
		if got, _ := tb.Get(alice, task.ID); got.Status != InputRequired || got.StatusMessage != "asks" {
			t.Fatalf("after report %+v", got)
		}
		step <- struct{}{}
		synctest.Wait()
		if got, _ := tb.Get(alice, task.ID); got.Status != Working {
			t.Fatalf("after second report %+v", got)
		}
		step <- struct{}{}
		synctest.Wait()
		if want := []Status{InputRequired, Working, Completed}; !slices.Equal(seen, want) {
			t.Fatalf("notified %v, want %v", seen, want)
		}
		Report(t.Context(), Working, "outside a task: nothing")
	})
}

// TestOnEndAndRunning: OnEnd hears of every task run here that ends, once,
// with its outcome (completed, failed, cancelled, expired), and Running
// counts the ones still going (the gateway's metrics).
func TestOnEndAndRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		ended := map[string]int{}
		tb := NewTable(Options{OnEnd: func(server, outcome string) {
			mu.Lock()
			ended[server+" "+outcome]++
			mu.Unlock()
		}})
		defer tb.Close()
		release := make(chan struct{})
		okTask, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, block(release, `{}`), nil)
		failTask, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, func(context.Context) Outcome {
			<-release
			return Outcome{Err: jsonrpc.NewError(jsonrpc.CodeInternalError, "no")}
		}, nil)
		cancelled, _ := tb.Start(t.Context(), alice, "s", cfgShort, 0, func(ctx context.Context) Outcome {
			<-ctx.Done()
			return Outcome{}
		}, nil)
		expiring, _ := tb.Start(t.Context(), alice, "x", cfgShort, 5*time.Second, func(ctx context.Context) Outcome {
			<-ctx.Done()
			return Outcome{}
		}, nil)
		synctest.Wait()
		if w, ir := tb.Running(); w != 4 || ir != 0 {
			t.Fatalf("running %d working, %d input_required; want 4, 0", w, ir)
		}
		if _, err := tb.Cancel(alice, cancelled.ID); err != nil {
			t.Fatal(err)
		}
		close(release)
		for _, id := range []string{okTask.ID, failTask.ID} {
			if _, _, err := tb.Result(t.Context(), alice, id); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(6 * time.Second)
		if _, err := tb.Get(alice, expiring.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("past its ttl: %v", err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{"s completed": 1, "s failed": 1, "s cancelled": 1, "x expired": 1}
		if !maps.Equal(ended, want) {
			t.Fatalf("OnEnd heard %v, want %v", ended, want)
		}
		if w, ir := tb.Running(); w != 0 || ir != 0 {
			t.Fatalf("running after all ended: %d, %d", w, ir)
		}
	})
}
