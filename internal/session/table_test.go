package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// entry stands for the gateway's type: a *Session and what it adds.
type entry struct {
	*Session
	route string
}

// clock is a settable time for lastUsed.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func newEntry(c *clock, owner string) *entry {
	return &entry{Session: New(Params{Who: Who{Owner: owner}, MaxInflight: 4, Now: c.Now})}
}

// ended ends e and takes it out of t, as the gateway's close does.
func ended(t *Table[*entry], e *entry) {
	e.End()
	t.Remove(e)
}

func TestCheckOwnerRefusesOthers(t *testing.T) {
	s := New(Params{Who: Who{Owner: "key:alice"}, MaxInflight: 1})
	if err := s.CheckOwner("key:alice"); err != nil {
		t.Errorf("its owner refused: %v", err)
	}
	for _, other := range []string{"key:bob", "", "anonymous", "KEY:alice"} {
		if err := s.CheckOwner(other); !errors.Is(err, ErrForeign) {
			t.Errorf("owner %q: %v, want ErrForeign", other, err)
		}
	}
	if got := New(Params{MaxInflight: 1}).Owner(); got != "anonymous" {
		t.Errorf("a session with no owner belongs to %q, want anonymous", got)
	}
}

func TestLookups(t *testing.T) {
	var tab Table[*entry]
	c := newClock()
	local := newEntry(c, "key:a")
	sealed := &entry{Session: New(Params{Token: "sealed-token", Who: Who{Owner: "key:a"}, MaxInflight: 1, Now: c.Now})}
	tab.Insert(local)
	tab.Insert(sealed)
	if e, ok := tab.Live(local.ID(), local.ID(), false); !ok || e != local {
		t.Errorf("local id: %v %v", e, ok)
	}
	// A sealed session is found by its token only: its local id is not a
	// credential.
	if _, ok := tab.Live(sealed.ID(), sealed.ID(), false); ok {
		t.Error("a sealed session was found by its bare local id")
	}
	if e, ok := tab.Live("sealed-token", sealed.ID(), true); !ok || e != sealed {
		t.Errorf("sealed: %v %v", e, ok)
	}
	if e, ok := tab.ByHash(Hash(local.ID())); !ok || e != local {
		t.Errorf("by hash: %v %v", e, ok)
	}
	local.End()
	if _, ok := tab.Live(local.ID(), local.ID(), false); ok {
		t.Error("an ended session was found by id")
	}
	if _, ok := tab.ByHash(local.Hash()); ok {
		t.Error("an ended session was found by hash")
	}
	if _, ok := tab.Get(local.ID()); !ok {
		t.Error("Get lost an ended session not yet removed")
	}
	tab.Remove(local)
	if tab.Len() != 1 {
		t.Errorf("Len %d after Remove, want 1", tab.Len())
	}
}

func TestInsertNewKeepsTheFirst(t *testing.T) {
	var tab Table[*entry]
	c := newClock()
	first := newEntry(c, "key:a")
	again := &entry{Session: New(Params{ID: first.ID(), Who: Who{Owner: "key:b"}, MaxInflight: 1, Now: c.Now})}
	if _, ok := tab.InsertNew(first); !ok {
		t.Fatal("first not inserted")
	}
	held, ok := tab.InsertNew(again)
	if ok || held != first {
		t.Fatalf("second copy: inserted %v, held %p, want the first %p", ok, held, first)
	}
	// Removing the copy that lost does not remove the one held.
	tab.Remove(again)
	if e, ok := tab.Get(first.ID()); !ok || e != first {
		t.Error("removing a copy removed the session held")
	}
	if own := tab.Owned("key:b"); len(own) != 0 {
		t.Errorf("the losing copy's owner has %d sessions", len(own))
	}
}

func TestAdmitEvictsOnlyTheOwnersIdleSessions(t *testing.T) {
	var tab Table[*entry]
	c := newClock()
	var alice []*entry
	for range 3 {
		e := newEntry(c, "key:alice")
		tab.Insert(e)
		alice = append(alice, e)
		c.Add(time.Second)
	}
	bob := newEntry(c, "key:bob")
	tab.Insert(bob)
	// The oldest is busy: the next oldest goes.
	end := alice[0].Begin(jsonrpc.ID{}, nil)
	evict := func(e *entry) { ended(&tab, e) }
	if !tab.Admit("key:alice", 3, evict) {
		t.Fatal("alice refused with an idle session to evict")
	}
	if !alice[1].Closed() || alice[0].Closed() || alice[2].Closed() {
		t.Errorf("evicted: %v %v %v, want only the oldest idle one", alice[0].Closed(), alice[1].Closed(), alice[2].Closed())
	}
	if bob.Closed() {
		t.Error("another owner's session was evicted")
	}
	if n := len(tab.Owned("key:alice")); n != 2 {
		t.Errorf("alice holds %d, want 2", n)
	}
	// Every one of hers busy: refused, nothing evicted.
	end2 := alice[2].Begin(jsonrpc.ID{}, nil)
	tab.Insert(newEntry(c, "key:alice"))
	if n := len(tab.Owned("key:alice")); n != 3 {
		t.Fatalf("alice holds %d, want 3", n)
	}
	busy := tab.Owned("key:alice")
	for _, e := range busy {
		if e != alice[0] && e != alice[2] {
			defer e.Begin(jsonrpc.ID{}, nil)()
		}
	}
	if tab.Admit("key:alice", 3, evict) {
		t.Error("alice admitted over the cap with every session busy")
	}
	if n := len(tab.Owned("key:alice")); n != 3 {
		t.Errorf("alice holds %d after a refusal, want 3", n)
	}
	end()
	end2()
	if !tab.Admit("key:alice", 0, evict) {
		t.Error("no cap refused")
	}
}

// stream is a Stream that only records its end.
type stream struct {
	mu   sync.Mutex
	done bool
	sent int
}

func (s *stream) Send(*jsonrpc.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errors.New("done")
	}
	s.sent++
	return nil
}
func (s *stream) Finish()    { s.mu.Lock(); s.done = true; s.mu.Unlock() }
func (s *stream) Done() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.done }

func TestIdleSweep(t *testing.T) {
	var tab Table[*entry]
	c := newClock()
	idle, busy, streaming, fresh := newEntry(c, "a"), newEntry(c, "a"), newEntry(c, "b"), newEntry(c, "c")
	for _, e := range []*entry{idle, busy, streaming} {
		tab.Insert(e)
	}
	end := busy.Begin(jsonrpc.ID{}, nil)
	defer end()
	st := &stream{}
	if !streaming.AttachStream(st) {
		t.Fatal("stream not attached")
	}
	c.Add(time.Minute)
	tab.Insert(fresh)
	fresh.Touch()
	got := tab.Idle(c.Now().Add(-30 * time.Second))
	if len(got) != 1 || got[0] != idle {
		t.Fatalf("idle: %v, want only the idle one", got)
	}
	// A stream that ended does not keep its session.
	st.Finish()
	if got := tab.Idle(c.Now().Add(-30 * time.Second)); len(got) != 2 {
		t.Errorf("idle after the stream ended: %d, want 2", len(got))
	}
}

func TestEndCancelsAndReleases(t *testing.T) {
	s := New(Params{MaxInflight: 1})
	s.MarkReady()
	ctx, cancel := context.WithCancel(context.Background())
	end := s.Begin(jsonrpc.Int64ID(7), cancel)
	if ok, _ := s.Acquire(nil); !ok {
		t.Fatal("first request not admitted")
	}
	waited := make(chan bool)
	go func() {
		_, ended := s.Acquire(nil) // no slot left: waits for the end
		waited <- ended
	}()
	st := &stream{}
	s.AttachStream(st)
	s.SetSub("mem://a", "srv", true)
	e, ok := s.End()
	if !ok || e.Subs["mem://a"] != "srv" {
		t.Errorf("End: %v %v", e, ok)
	}
	if ctx.Err() == nil {
		t.Error("the call in flight was not cancelled")
	}
	if !<-waited {
		t.Error("the waiting request was not released as ended")
	}
	if !st.Done() {
		t.Error("the stream did not end")
	}
	if _, again := s.End(); again {
		t.Error("End twice")
	}
	if s.AttachStream(&stream{}) {
		t.Error("a stream attached to an ended session")
	}
	// Begun after the end: cancelled at once.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer s.Begin(jsonrpc.Int64ID(8), cancel2)()
	if ctx2.Err() == nil {
		t.Error("a call begun after the end was not cancelled")
	}
	end()
}

func TestCancelCallByIdentity(t *testing.T) {
	s := New(Params{MaxInflight: 2})
	ctx1, cancel1 := context.WithCancel(context.Background())
	end1 := s.Begin(jsonrpc.Int64ID(1), cancel1)
	// The client reuses the id: the second call's cancel is the one kept,
	// and the first one's end does not forget it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	end2 := s.Begin(jsonrpc.Int64ID(1), cancel2)
	end1()
	s.CancelCall(jsonrpc.Int64ID(1).Raw())
	if ctx2.Err() == nil {
		t.Error("the second call was not cancelled")
	}
	if ctx1.Err() != nil {
		t.Error("the first call, done, was cancelled")
	}
	end2()
	if s.InFlight() != 0 {
		t.Errorf("in flight %d, want 0", s.InFlight())
	}
}

func TestLevelsAndStreams(t *testing.T) {
	s := New(Params{MaxInflight: 1})
	if _, ok := s.PendingLevel(); ok {
		t.Error("a level pending at the start")
	}
	s.AdoptLevel(3)
	if idx, ok := s.PendingLevel(); !ok || idx != 3 {
		t.Errorf("pending %d %v, want 3", idx, ok)
	}
	if _, ok := s.PendingLevel(); ok {
		t.Error("the same level pending twice")
	}
	s.AdoptLevel(3) // unchanged: nothing to hear
	if _, ok := s.PendingLevel(); ok {
		t.Error("an unchanged level pending")
	}
	if s.WantsLog(2) || !s.WantsLog(4) {
		t.Error("WantsLog does not follow the level")
	}
	old, newer := &stream{}, &stream{}
	s.TakeOverStream(old, 10)
	s.LearnRemoteStream(5) // older than its own: ignored
	if s.RemoteStream() != 0 {
		t.Errorf("remote %d after an older claim, want 0", s.RemoteStream())
	}
	if !s.SupersedeStream(11) || !old.Done() {
		t.Error("an older GET stream was not superseded")
	}
	if s.RemoteStream() != 11 {
		t.Errorf("remote %d, want 11", s.RemoteStream())
	}
	s.TakeOverStream(newer, 12)
	if s.RemoteStream() != 0 || !s.StreamClaimed() {
		t.Error("taking the stream over did not make it this replica's")
	}
	if !s.Notify(jsonrpc.NewNotification("x", nil)) || newer.sent != 1 {
		t.Error("Notify did not reach the stream")
	}
	s.ForgetRemoteStream()
}

// TestTableConcurrent runs every operation at once; with -race it checks
// the locking.
func TestTableConcurrent(t *testing.T) {
	var tab Table[*entry]
	c := newClock()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			owner := fmt.Sprintf("key:%d", w%3)
			for range 200 {
				e := newEntry(c, owner)
				if !tab.Admit(owner, 5, func(e *entry) { ended(&tab, e) }) {
					continue
				}
				tab.Insert(e)
				end := e.Begin(jsonrpc.Int64ID(1), func() {})
				e.SetSub("u", "s", true)
				e.AdoptLevel(2)
				if got, ok := tab.Live(e.ID(), e.ID(), false); ok && got != e {
					t.Errorf("Live found another session")
				}
				tab.ByHash(e.Hash())
				_ = tab.Idle(c.Now())
				_ = tab.All()
				end()
				c.Add(time.Millisecond)
				if w%2 == 0 {
					ended(&tab, e)
				}
			}
		})
	}
	wg.Wait()
	// The indexes agree: every session held is its owner's, once.
	owned := 0
	for owner := range 3 {
		owned += len(tab.Owned(fmt.Sprintf("key:%d", owner)))
	}
	if n := tab.Len(); owned != n {
		t.Errorf("owners hold %d sessions, the table %d", owned, n)
	}
}
