package gateway

import "sync"

// An open stream re-checks its key every Gateway.recheck (auth.go). That
// bounds how long a revoked key keeps one open when nobody says so; when
// the admin API knows a key changed (here, or on another replica through
// its bus), it says so, and every stream re-checks at once.

// recheckSignal wakes every stream's watcher. The zero value is ready.
type recheckSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (s *recheckSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *recheckSignal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// RecheckStreams makes every open stream re-check the key it was opened
// with now rather than at its next periodic check, so that a revoked or
// disabled key's streams end within the time of a store read. The admin
// API calls it after a key changed; the authenticator must have forgotten
// its cached copy of the key first.
func (g *Gateway) RecheckStreams() { g.rechecks.fire() }
