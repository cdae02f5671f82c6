package state

import "testing"

// Confirmations count subscribers, not messages: one subscriber
// confirming two messages of one key does not stand in for another; an
// empty key or confirmer counts for nothing; a message nobody received
// is confirmed at once; dropped waits are forgotten.
func TestConfirmsCountSubscribers(t *testing.T) {
	var c Confirms
	first, second := c.Add("k"), c.Add("k")
	c.Expect(first, 2)
	c.Expect(second, 2)
	c.Heard("k", "b")
	c.Heard("k", "b")
	c.Heard("k", "")
	c.Heard("", "a")
	c.Heard("other", "a")
	if first.Confirmed() || second.Confirmed() {
		t.Fatal("two confirmations from one subscriber confirmed a message two received")
	}
	c.Heard("k", "a")
	if !first.Confirmed() || !second.Confirmed() {
		t.Fatal("both subscribers confirmed; the waits are not done")
	}
	c.Drop(first)
	c.Drop(second)
	if n := c.pending(); n != 0 {
		t.Errorf("%d dropped waits are kept", n)
	}
	none := c.Add("k")
	defer c.Drop(none)
	c.Expect(none, 0)
	select {
	case <-none.Done():
	default:
		t.Error("a message that reached no subscription waits")
	}
	// Confirmations before Expect count (one may come back before
	// Publish returns).
	early := c.Add("e")
	defer c.Drop(early)
	c.Heard("e", "a")
	c.Expect(early, 1)
	if !early.Confirmed() {
		t.Error("a confirmation heard before Expect was not counted")
	}
}

// pending is how many waits c holds.
func (c *Confirms) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ws := range c.waits {
		n += len(ws)
	}
	return n
}
