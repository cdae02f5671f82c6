package delivery

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type msg struct {
	n    int
	lost bool
}

func recv(t *testing.T, q *Queue[msg]) msg {
	t.Helper()
	select {
	case m := <-q.C():
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered after 5s")
	}
	panic("unreachable")
}

// One marker per gap, after what was queued before it, and drops while it
// waits are covered by it.
func TestOverflow(t *testing.T) {
	q := New(3, msg{lost: true})
	defer q.Close()
	for i := range 10 {
		q.Push(msg{n: i})
	}
	q.MarkLost() // a marker is waiting: no second one
	var got []string
	for range 4 {
		got = append(got, fmt.Sprint(recv(t, q)))
	}
	// The goroutine may hold the first message while the others queue,
	// so 0..2 or 0..3 come before the marker.
	if s := fmt.Sprint(got); s != "[{0 false} {1 false} {2 false} {0 true}]" && s != "[{0 false} {1 false} {2 false} {3 false}]" {
		t.Errorf("got %v", got)
	}
	q.Push(msg{n: 100})
	for m := recv(t, q); m.n != 100; m = recv(t, q) {
		if m.lost && got[3] == "{0 true}" {
			t.Fatal("a second marker for one gap")
		}
	}
	q.MarkLost()
	q.Push(msg{n: 101})
	if m := recv(t, q); !m.lost {
		t.Errorf("after MarkLost: %+v, want the marker", m)
	}
	if m := recv(t, q); m.n != 101 {
		t.Errorf("after the marker: %+v, want 101", m)
	}
}

// Close ends the goroutine and C while a reader reads and pushes go on.
func TestCloseConcurrent(t *testing.T) {
	q := New(8, msg{lost: true})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				q.Push(msg{n: i})
			}
		}
	})
	// Close comes once the reader has had a few hundred messages: pushes
	// and reads are under way (a wait on the event, not a pause).
	flowing := make(chan struct{})
	wg.Go(func() {
		n := 0
		for range q.C() {
			if n++; n == 300 {
				close(flowing)
			}
		}
	})
	select {
	case <-flowing:
	case <-time.After(10 * time.Second):
		t.Fatal("no messages delivered")
	}
	q.Close()
	q.Close()
	close(stop)
	wg.Wait()
	q.Push(msg{}) // after Close: ignored
	q.MarkLost()
}
