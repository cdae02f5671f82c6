package state

import "sync"

// Confirmed publishes. A publisher that must not answer before every
// replica acted on its message (an ended session's copies ended, a
// revoked key forgotten) registers a wait before it publishes (Add),
// tells it how many subscriptions the publish reached (Expect: the
// count Publish returns, its own subscription included), and waits for
// Done. Each subscriber, once it acted, publishes a confirmation naming
// the message's key and itself; the publisher's follower hands those to
// Heard. Confirmers are counted once each, not per confirmation, so two
// messages of one key in flight at once (two administrators ending one
// session) do not confirm each other: a subscriber that confirmed
// either has acted on the key.

// Confirms holds the waits of one publisher, by key. Safe for concurrent
// use; the zero value is ready.
type Confirms struct {
	mu    sync.Mutex
	waits map[string]map[*Confirm]struct{}
}

// Confirm is one wait: one published message's confirmations.
type Confirm struct {
	key string
	// want is how many subscribers must confirm: -1 until Expect. from
	// is who did. Both guarded by Confirms.mu.
	want int
	from map[string]struct{}
	done chan struct{} // closed once want subscribers confirmed
}

// Add registers a wait for key's confirmations; call it before
// publishing (a confirmation may come back before Publish returns), and
// Drop it once done with it.
func (c *Confirms) Add(key string) *Confirm {
	w := &Confirm{key: key, want: -1, from: map[string]struct{}{}, done: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waits == nil {
		c.waits = map[string]map[*Confirm]struct{}{}
	}
	if c.waits[key] == nil {
		c.waits[key] = map[*Confirm]struct{}{}
	}
	c.waits[key][w] = struct{}{}
	return w
}

// Expect sets how many subscribers received w's message.
func (c *Confirms) Expect(w *Confirm, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.want = n
	w.check()
}

// Heard counts subscriber from's confirmation of key for every wait of
// key; an empty key or from counts for nothing.
func (c *Confirms) Heard(key, from string) {
	if key == "" || from == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.waits[key] {
		w.from[from] = struct{}{}
		w.check()
	}
}

// Drop forgets w, confirmed or not.
func (c *Confirms) Drop(w *Confirm) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waits[w.key]
	delete(ws, w)
	if len(ws) == 0 {
		delete(c.waits, w.key)
	}
}

// Done is closed once every subscriber that received w's message
// confirmed.
func (w *Confirm) Done() <-chan struct{} { return w.done }

// Confirmed reports whether every subscriber that received w's message
// confirmed.
func (w *Confirm) Confirmed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// check closes done once enough subscribers confirmed; Confirms.mu is
// held.
func (w *Confirm) check() {
	if w.want >= 0 && len(w.from) >= w.want && !w.Confirmed() {
		close(w.done)
	}
}
