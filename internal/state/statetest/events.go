package statetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/state"
)

var eventTests = []test{
	{"AppendReplay", testEventsReplay},
	{"Bound", testEventsBound},
	{"Lapse", testEventsLapse},
	{"ConcurrentAppends", testEventsConcurrent},
}

func appendN(t *testing.T, b state.Backend, stream string, from, to, maxLen int) {
	t.Helper()
	for i := from; i <= to; i++ {
		id, err := b.AppendEvent(t.Context(), stream, fmt.Appendf(nil, "e%d", i), maxLen, long)
		mustNot(t, "AppendEvent", err)
		if id != uint64(i) {
			t.Fatalf("event %d got id %d", i, id)
		}
	}
}

// ids returns the ids of events, checking each one's data.
func ids(t *testing.T, events []state.Event) []uint64 {
	t.Helper()
	out := []uint64{}
	for _, e := range events {
		if want := fmt.Sprintf("e%d", e.ID); string(e.Data) != want {
			t.Errorf("event %d: data %q, want %q", e.ID, e.Data, want)
		}
		out = append(out, e.ID)
	}
	return out
}

func replay(t *testing.T, b state.Backend, stream string, after uint64, wantIDs []uint64, wantComplete bool) {
	t.Helper()
	events, complete, err := b.EventsAfter(t.Context(), stream, after)
	mustNot(t, "EventsAfter", err)
	if diff := cmp.Diff(ids(t, events), wantIDs); diff != "" || complete != wantComplete {
		t.Errorf("EventsAfter(%s, %d): complete %v (want %v), ids (-got +want):\n%s", stream, after, complete, wantComplete, diff)
	}
}

func testEventsReplay(t *testing.T, b state.Backend) {
	replay(t, b, "s", 0, []uint64{}, true) // nothing yet, nothing missed
	appendN(t, b, "s", 1, 5, 100)
	appendN(t, b, "other", 1, 2, 100) // ids are per stream
	replay(t, b, "s", 0, []uint64{1, 2, 3, 4, 5}, true)
	replay(t, b, "s", 3, []uint64{4, 5}, true) // after Last-Event-ID 3: no duplicates
	replay(t, b, "s", 5, []uint64{}, true)
	replay(t, b, "s", 99, []uint64{}, true) // an id from the future: nothing to send
	// Resuming twice from the same id gives the same events.
	appendN(t, b, "s", 6, 6, 100)
	replay(t, b, "s", 3, []uint64{4, 5, 6}, true)
	replay(t, b, "other", 1, []uint64{2}, true)
	// Data is kept as given, bytes included.
	bin := []byte{0, 1, 0xff, '\n', '\r'}
	id, err := b.AppendEvent(t.Context(), "bin", bin, 10, long)
	mustNot(t, "AppendEvent", err)
	events, _, err := b.EventsAfter(t.Context(), "bin", 0)
	mustNot(t, "EventsAfter", err)
	if len(events) != 1 || events[0].ID != id || !slices.Equal(events[0].Data, bin) {
		t.Errorf("binary event: %+v", events)
	}
	// Empty data is an event too.
	if id, err := b.AppendEvent(t.Context(), "bin", nil, 10, long); err != nil || id != 2 {
		t.Errorf("empty event: id %d, %v", id, err)
	}
}

// A buffer keeps the last maxLen events; a resumption from before them is
// incomplete.
func testEventsBound(t *testing.T, b state.Backend) {
	appendN(t, b, "s", 1, 10, 3)
	replay(t, b, "s", 0, []uint64{8, 9, 10}, false)
	replay(t, b, "s", 5, []uint64{8, 9, 10}, false)
	replay(t, b, "s", 7, []uint64{8, 9, 10}, true)
	replay(t, b, "s", 8, []uint64{9, 10}, true)
	replay(t, b, "s", 10, []uint64{}, true)
	// The bound is per append: a smaller one trims further.
	appendN(t, b, "s", 11, 11, 1)
	replay(t, b, "s", 10, []uint64{11}, true)
	replay(t, b, "s", 9, []uint64{11}, false)
}

func testEventsLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for range 3 {
		_, err := b.AppendEvent(ctx, "s", []byte("x"), 10, ttl)
		mustNot(t, "AppendEvent", err)
	}
	eventually(t, "the buffer lapses", func() (bool, error) {
		events, _, err := b.EventsAfter(ctx, "s", 0)
		return len(events) == 0, err
	})
	// Gone, it cannot resume anything...
	replay(t, b, "s", 2, []uint64{}, false)
	// ...and a new stream of that name starts again from 1.
	if id, err := b.AppendEvent(ctx, "s", []byte("e1"), 10, long); err != nil || id != 1 {
		t.Errorf("append after lapse: id %d, %v; want 1", id, err)
	}
}

// Concurrent appends to one stream get distinct ids, 1 to n, and the
// buffer holds every one of them in order.
func testEventsConcurrent(t *testing.T, b state.Backend) {
	const writers, each = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := []uint64{}
	for range writers {
		wg.Go(func() {
			for range each {
				id, err := b.AppendEvent(t.Context(), "s", []byte("x"), writers*each, long)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	want := make([]uint64, writers*each)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("ids (-got +want):\n%s", diff)
	}
	events, complete, err := b.EventsAfter(t.Context(), "s", 0)
	mustNot(t, "EventsAfter", err)
	if len(events) != writers*each || !complete || !slices.IsSortedFunc(events, func(a, b state.Event) int { return int(a.ID) - int(b.ID) }) {
		t.Errorf("%d events (complete %v), want %d in order", len(events), complete, writers*each)
	}
}
