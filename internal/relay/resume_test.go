package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
)

const (
	instA   = "aaaaaaaaaaaa"
	instB   = "bbbbbbbbbbbb"
	session = "5e55105e55105e55105e55105e55105e55105e55105e55105e55105e55105e55"
)

func newResumables(t *testing.T, ev state.Events, inst string, f *config.Fleet) *Resumables {
	rs := NewResumables(ResumablesOptions{Events: ev, Instance: inst, Fleet: func() *config.Fleet { return f }})
	t.Cleanup(rs.Stop)
	return rs
}

// sink collects a replay's output.
type sink struct {
	mu  sync.Mutex
	out strings.Builder
}

func (s *sink) out_() Out {
	return Out{
		Write: func(b []byte) error { s.mu.Lock(); defer s.mu.Unlock(); s.out.Write(b); return nil },
		Flush: func() error { return nil },
	}
}

func (s *sink) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.out.String() }

func TestParseResumeID(t *testing.T) {
	key := strings.Repeat("0a", 16)
	if k, n, err := ParseResumeID(key + "-7"); err != nil || k != key || n != 7 {
		t.Errorf("ParseResumeID(valid) = %q, %d, %v", k, n, err)
	}
	for _, id := range []string{"", key, key + "-", key + "-x", "0a-1", strings.ToUpper(key) + "-1", key + "0-1", "-1"} {
		if _, _, err := ParseResumeID(id); !errors.Is(err, ErrBadEventID) {
			t.Errorf("ParseResumeID(%q) = %v, want ErrBadEventID", id, err)
		} else if id != "" && strings.Contains(err.Error(), id) {
			t.Errorf("the error quotes the id: %v", err)
		}
	}
}

// Events appended on one replica are replayed on another from the id a
// client last saw, up to the final response, which ends the replay.
func TestReplayFromAnotherReplica(t *testing.T) {
	st := memState(t)
	a, b := newResumables(t, st, instA, nil), newResumables(t, st, instB, nil)
	s := a.Open(session)
	if !strings.HasPrefix(s.Key(), instA) || len(s.Key()) != KeyLen {
		t.Fatalf("key %q: want %d characters naming replica %s", s.Key(), KeyLen, instA)
	}
	var ids []string
	for i, d := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		id, err := s.Append([]byte(d), i == 2)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ids[0] != s.Key()+"-1" || ids[2] != s.Key()+"-3" {
		t.Fatalf("ids %v", ids)
	}
	res, err := b.Begin(context.Background(), session, "5e55105e", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if res.Ended() {
		t.Fatal("Ended before the final response was replayed")
	}
	var out sink
	done := make(chan struct{})
	go func() { defer close(done); res.Replay(context.Background(), out.out_()) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the replay did not end at the final response")
	}
	want := "id: " + ids[1] + "\ndata: {\"n\":2}\n\nid: " + ids[2] + "\ndata: {\"n\":3}\n\n"
	if got := out.String(); got != want {
		t.Errorf("replayed:\n%q\nwant:\n%q", got, want)
	}
	if b.Resumed() != 1 || a.Resumed() != 0 {
		t.Errorf("resumed counts a=%d b=%d, want 0 and 1", a.Resumed(), b.Resumed())
	}
	// From the final response: nothing follows.
	res, err = b.Begin(context.Background(), session, "5e55105e", ids[2])
	if err != nil || !res.Ended() {
		t.Errorf("Begin after the final event: ended=%v, %v; want ended", res != nil && res.Ended(), err)
	}
	// Another session's hash names no buffer.
	other := strings.Repeat("0", 64)
	if _, err := b.Begin(context.Background(), other, "00000000", ids[0]); !errors.Is(err, ErrNoStream) {
		t.Errorf("Begin of another session's stream: %v, want ErrNoStream", err)
	}
}

// A buffer bounded by fleet.resume_events cannot replay from an id it
// dropped: the client is told, not handed a hole.
func TestResumeBeyondTheBound(t *testing.T) {
	st := memState(t)
	rs := newResumables(t, st, instA, &config.Fleet{ResumeEvents: 2})
	s := rs.Open(session)
	for range 5 {
		if _, err := s.Append([]byte(`{}`), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.Begin(context.Background(), session, "", s.Key()+"-1"); !errors.Is(err, ErrTruncated) {
		t.Errorf("Begin from a dropped event: %v, want ErrTruncated", err)
	}
	if _, err := rs.Begin(context.Background(), session, "", s.Key()+"-3"); err != nil {
		t.Errorf("Begin from a kept event: %v", err)
	}
}

// flakyEvents fails the appends while down is set.
type flakyEvents struct {
	state.Events
	down atomic.Bool
}

func (f *flakyEvents) AppendEvent(ctx context.Context, stream string, data []byte, maxLen int, ttl time.Duration) (uint64, error) {
	if f.down.Load() {
		return 0, state.ErrUnavailable
	}
	return f.Events.AppendEvent(ctx, stream, data, maxLen, ttl)
}

// An event that could not be buffered leaves a gap marker before the next
// one, so that a resume from before it is refused instead of silently
// missing it.
func TestUnbufferedEventLeavesAGap(t *testing.T) {
	ev := &flakyEvents{Events: memState(t)}
	rs := newResumables(t, ev, instA, nil)
	s := rs.Open(session)
	first, err := s.Append([]byte(`{"n":1}`), false)
	if err != nil {
		t.Fatal(err)
	}
	ev.down.Store(true)
	if _, err := s.Append([]byte(`{"n":2}`), false); err == nil {
		t.Fatal("an append to a down backend succeeded")
	}
	ev.down.Store(false)
	third, err := s.Append([]byte(`{"n":3}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Begin(context.Background(), session, "", first); !errors.Is(err, ErrGap) {
		t.Errorf("Begin from before the gap: %v, want ErrGap", err)
	}
	if _, err := rs.Begin(context.Background(), session, "", third); err != nil {
		t.Errorf("Begin from after the gap: %v", err)
	}
}

// A call whose client went away is cancelled once no reader was seen for
// the window, and lives on while a reader is seen; one that had sent
// nothing is cancelled at once.
func TestOutliveWindow(t *testing.T) {
	window := 300 * time.Millisecond
	rs := newResumables(t, memState(t), instA, &config.Fleet{ResumeWindow: window})
	run := func(started bool, beat bool) (time.Duration, bool) {
		s := rs.Open(session)
		done, reqDone := make(chan struct{}), make(chan struct{})
		cancelled := make(chan time.Time, 1)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			rs.Outlive(s, done, reqDone, func() bool { return started }, func() { cancelled <- time.Now() })
		}()
		stopBeat := make(chan struct{})
		var wg sync.WaitGroup
		if beat {
			wg.Go(func() {
				t := time.NewTicker(window / 4)
				defer t.Stop()
				for {
					select {
					case <-stopBeat:
						return
					case <-t.C:
						rs.SawReader(s.Key())
					}
				}
			})
		}
		start := time.Now()
		close(reqDone)
		var took time.Duration
		var got bool
		select {
		case at := <-cancelled:
			took, got = at.Sub(start), true
		case <-time.After(3 * window):
		}
		close(stopBeat)
		wg.Wait()
		close(done)
		<-ended
		return took, got
	}
	if took, ok := run(false, false); !ok || took > window/2 {
		t.Errorf("a call that sent nothing: cancelled=%v after %s, want at once", ok, took)
	}
	if took, ok := run(true, false); !ok || took < window || took > 2*window {
		t.Errorf("a dropped call: cancelled=%v after %s, want after the window (%s)", ok, took, window)
	}
	if _, ok := run(true, true); ok {
		t.Error("a call whose reader beats was cancelled")
	}
}

// A replay of a call whose replica left the registry ends once no event
// came for ProducerCheck, and marks the buffer so that the next resume
// is refused at once.
func TestReplayEndsWhenTheProducerIsGone(t *testing.T) {
	st := memState(t)
	a := newResumables(t, st, instA, nil)
	var told atomic.Int32
	b := NewResumables(ResumablesOptions{Events: st, Instance: instB,
		Alive: func(_ context.Context, id string) bool { return id != instA },
		Tell:  func(string) { told.Add(1) }})
	t.Cleanup(b.Stop)
	s := a.Open(session)
	first, _ := s.Append([]byte(`{"n":1}`), false)
	res, err := b.Begin(context.Background(), session, "", first)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out sink
	res.Replay(context.Background(), out.out_())
	if took := time.Since(start); took < ProducerCheck || took > ProducerCheck+3*time.Second {
		t.Errorf("the replay ended after %s, want about %s", took, ProducerCheck)
	}
	if told.Load() == 0 {
		t.Error("the replay told no reader heartbeat")
	}
	if _, err := b.Begin(context.Background(), session, "", first); !errors.Is(err, ErrGap) {
		t.Errorf("the next resume: %v, want ErrGap", err)
	}
}

// Stop ends a replay that waits for events.
func TestStopEndsReplay(t *testing.T) {
	st := memState(t)
	rs := newResumables(t, st, instA, nil)
	s := rs.Open(session)
	first, _ := s.Append([]byte(`{}`), false)
	res, err := rs.Begin(context.Background(), session, "", first)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var out sink
	go func() { defer close(done); res.Replay(context.Background(), out.out_()) }()
	time.Sleep(100 * time.Millisecond)
	rs.Stop()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Stop did not end the replay")
	}
}
