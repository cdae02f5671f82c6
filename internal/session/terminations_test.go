package session

import (
	"context"
	"testing"
	"time"
)

func TestEndsRememberWhileUsed(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	mem := NewMemTerminations()
	e := Ends{Terminations: mem, Now: c.Now, For: time.Minute}
	id := NewID()
	if err := e.Mark(ctx, Hash(id)); err != nil {
		t.Fatal(err)
	}
	// Asked about within the minute, it is remembered a minute more.
	for range 3 {
		c.Add(45 * time.Second)
		if ended, err := e.Ended(ctx, id); err != nil || !ended {
			t.Fatalf("ended %v %v, want remembered while its client uses it", ended, err)
		}
	}
	if ended, _ := e.Ended(ctx, NewID()); ended {
		t.Error("an id never ended is ended")
	}
	// Left alone, it is forgotten, and the purge drops it.
	c.Add(2 * time.Minute)
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := mem.Len(); n != 0 {
		t.Errorf("%d ids remembered after the purge, want 0", n)
	}
}
