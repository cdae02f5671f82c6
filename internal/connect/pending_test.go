package connect

import (
	"testing"
	"time"
)

// A pending account connect (S19) is its browser's: the authorization
// answer brought by another browser (another connect cookie) takes
// nothing and leaves the request for its own browser, which takes it
// once.
func TestConnectRequestStaysWithItsBrowser(t *testing.T) {
	var c pending
	now := time.Now()
	c.states = map[string]*connState{"state-1": {person: "key:alice", server: "linear", binding: "alice-browser", expires: now.Add(time.Minute)}}
	if st, got := c.takeRequest("state-1", "mallory-browser", now); got != requestForeign || st != nil {
		t.Errorf("another browser: %v %v, want requestForeign", st, got)
	}
	if st, got := c.takeRequest("state-1", "", now); got != requestForeign || st != nil {
		t.Errorf("no browser cookie: %v %v, want requestForeign", st, got)
	}
	if st, got := c.takeRequest("state-1", "alice-browser", now); got != requestTaken || st == nil || st.person != "key:alice" {
		t.Errorf("its own browser: %v %v, want it taken", st, got)
	}
	if _, got := c.takeRequest("state-1", "alice-browser", now); got != requestUnknown {
		t.Errorf("taken twice: %v, want requestUnknown", got)
	}
}
