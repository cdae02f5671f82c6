package session

import "github.com/mcpgate/mcpgate/internal/jsonrpc"

// This file holds what a session asked for and where it listens: its log
// level, its resource subscriptions and its standalone stream.

// LogLevel is the minimum level relayed to it (an index into the
// gateway's levels); -1: all.
func (s *Session) LogLevel() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.logLevel)
}

// SetLogLevel records the level its client set here: the upstreams this
// replica calls hear it now, so none is pending.
func (s *Session) SetLogLevel(idx int) {
	s.mu.Lock()
	s.logLevel = int32(idx)
	s.mu.Unlock()
	s.levelPending.Store(false)
}

// AdoptLevel records a level set through another replica (idx < 0: none
// set): when it changes, the upstreams this replica calls for s must hear
// it before its next call (PendingLevel).
func (s *Session) AdoptLevel(idx int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if idx >= 0 && int32(idx) != s.logLevel {
		s.logLevel = int32(idx)
		s.levelPending.Store(true)
	}
}

// PendingLevel takes the level AdoptLevel left for the upstreams to hear:
// ok once per adopted change.
func (s *Session) PendingLevel() (idx int, ok bool) {
	if !s.levelPending.CompareAndSwap(true, false) {
		return 0, false
	}
	return s.LogLevel(), true
}

// WantsLog reports whether a message of level idx reaches it.
func (s *Session) WantsLog(idx int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logLevel < 0 || idx < 0 || idx >= int(s.logLevel)
}

// SetSub records (sub) or forgets its subscription to uri on server;
// prev and had are what it held for uri before.
func (s *Session) SetSub(uri, server string, sub bool) (prev string, had bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, had = s.subs[uri]
	if sub {
		s.putSubLocked(uri, server)
	} else {
		s.dropSubLocked(uri)
	}
	return prev, had
}

// AddSub records its subscription to uri on server unless it holds one
// for uri: false when it did.
func (s *Session) AddSub(uri, server string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, had := s.subs[uri]; had {
		return false
	}
	s.putSubLocked(uri, server)
	return true
}

// putSubLocked records a subscription, making the map on the first.
func (s *Session) putSubLocked(uri, server string) {
	if s.subs == nil {
		s.subs = map[string]string{}
	}
	s.subs[uri] = server
}

// dropSubLocked forgets one, and the map with the last: a map keeps its
// buckets, an idle session keeps none.
func (s *Session) dropSubLocked(uri string) {
	delete(s.subs, uri)
	if len(s.subs) == 0 {
		s.subs = nil
	}
}

// RemoveSub forgets its subscription to uri.
func (s *Session) RemoveSub(uri string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropSubLocked(uri)
}

// SubServer is the server it subscribed to uri on; "": none.
func (s *Session) SubServer(uri string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[uri]
}

// SubsOn is the uris it subscribed to on server.
func (s *Session) SubsOn(server string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var uris []string
	for uri, sv := range s.subs {
		if sv == server {
			uris = append(uris, uri)
		}
	}
	return uris
}

// HasSubs reports whether it holds any subscription.
func (s *Session) HasSubs() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs) > 0
}

// DropSubs forgets the subscriptions keep refuses and returns them
// (uri -> server).
func (s *Session) DropSubs(keep func(uri string) bool) (dropped map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uri, server := range s.subs {
		if keep(uri) {
			continue
		}
		if dropped == nil {
			dropped = map[string]string{}
		}
		dropped[uri] = server
		s.dropSubLocked(uri)
	}
	return dropped
}

// AttachStream installs the standalone stream; only one at a time: false
// when one is live or the session ended.
func (s *Session) AttachStream(st Stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (s.stream != nil && !s.stream.Done()) {
		return false
	}
	s.stream = st
	return true
}

// DetachStream removes st if it is still the session's stream.
func (s *Session) DetachStream(st Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream == st {
		s.stream = nil
	}
}

// Stream is its standalone stream; nil: none.
func (s *Session) Stream() Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream
}

// Streaming reports whether it has a live standalone stream.
func (s *Session) Streaming() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream != nil && !s.stream.Done()
}

// Notify sends msg on its standalone stream: false when it has none or
// the send failed.
func (s *Session) Notify(msg *jsonrpc.Message) bool {
	st := s.Stream()
	if st == nil {
		return false
	}
	return st.Send(msg) == nil
}

// The fleet's GET streams: a session's copies on several replicas agree
// that the newest GET stream (by the version it was opened at) is the one,
// wherever it is.

// TakeOverStream makes st, opened at version, its GET stream, ending the
// one it replaces. false: the session ended.
func (s *Session) TakeOverStream(st Stream, version int64) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.stream
	s.stream, s.streamVersion, s.remoteStream = st, version, 0
	s.mu.Unlock()
	if old != nil && old != st {
		old.Finish()
	}
	return true
}

// SupersedeStream records that another replica holds its GET stream
// since version, and ends this replica's if it is older: true when it
// did.
func (s *Session) SupersedeStream(version int64) bool {
	s.mu.Lock()
	if version > s.remoteStream && version > s.streamVersion {
		s.remoteStream = version
	}
	st := s.stream
	old := st != nil && s.streamVersion != 0 && s.streamVersion < version
	s.mu.Unlock()
	if old {
		st.Finish()
	}
	return old
}

// LearnRemoteStream records that another replica holds a GET stream
// opened at version, when it is newer than this replica's.
func (s *Session) LearnRemoteStream(version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if version > s.streamVersion {
		s.remoteStream = version
	}
}

// ForgetRemoteStream records that no replica holds its GET stream.
func (s *Session) ForgetRemoteStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remoteStream = 0
}

// RemoteStream is the version of a newer GET stream another replica
// holds; 0: none known.
func (s *Session) RemoteStream() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remoteStream
}

// StreamClaimed reports whether this replica holds its live GET stream in
// the fleet (one it claimed, TakeOverStream).
func (s *Session) StreamClaimed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream != nil && s.streamVersion != 0 && !s.stream.Done()
}
