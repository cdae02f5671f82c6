package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/h1server"
)

// watchedCall counts the ContextEnded calls a reqContext makes.
type watchedCall struct{ n atomic.Int32 }

func (w *watchedCall) ContextEnded() { w.n.Add(1) }

// A request's context ends as context.WithCancel's did: by its parent
// (a client gone) or its own cancel (notifications/cancelled, the
// session's end, serve's return), with Done closed, the parent's error,
// what the standard library derived from it cancelled too (no goroutine
// left), the upstream calls watching told once, and its registration on
// the parent withdrawn by its own cancel.
func TestReqContext(t *testing.T) {
	checkGoroutines(t)
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	for _, byParent := range []bool{true, false} {
		parent, cancelParent := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
		var rc reqContext
		rc.start(parent)
		if reqContextOf(&rc) != &rc || rc.Value(key{}) != "v" || reqContextOf(parent) != nil {
			t.Fatalf("values: %v, %v", reqContextOf(&rc), rc.Value(key{}))
		}
		if d, ok := rc.Deadline(); !ok || !d.Equal(deadline) {
			t.Errorf("deadline %v %v, want the parent's", d, ok)
		}
		var one, two, gone watchedCall
		if !rc.Watch(&one) || !rc.Watch(&two) || !rc.Watch(&gone) {
			t.Fatal("Watch on a live context")
		}
		rc.Unwatch(&gone)
		child, stopChild := context.WithCancel(&rc)
		defer stopChild()
		after := make(chan struct{})
		context.AfterFunc(&rc, func() { close(after) })
		stopped := context.AfterFunc(&rc, func() { t.Error("a stopped AfterFunc ran") })
		if !stopped() {
			t.Error("AfterFunc's stop")
		}
		done := rc.Done()
		select {
		case <-done:
			t.Fatal("done before the end")
		default:
		}
		if byParent {
			cancelParent()
		} else {
			rc.cancel()
			rc.cancel()
			if parent.Err() != nil {
				t.Fatal("the request's cancel reached its parent")
			}
			cancelParent()
		}
		<-done
		<-child.Done()
		<-after
		if !errors.Is(rc.Err(), context.Canceled) || !errors.Is(context.Cause(&rc), context.Canceled) || !errors.Is(context.Cause(child), context.Canceled) {
			t.Errorf("err %v, cause %v, child's cause %v", rc.Err(), context.Cause(&rc), context.Cause(child))
		}
		time.Sleep(10 * time.Millisecond) // a second ContextEnded would come now
		if one.n.Load() != 1 || two.n.Load() != 1 || gone.n.Load() != 0 {
			t.Errorf("ContextEnded: %d, %d, unwatched %d; want 1, 1, 0", one.n.Load(), two.n.Load(), gone.n.Load())
		}
		if rc.Watch(&gone) {
			t.Error("Watch on an ended context")
		}
	}

	// A parent that never ends costs no registration; ended before
	// anyone asked, Done is closed at once.
	var rc reqContext
	rc.start(context.Background())
	if rc.stop != nil {
		t.Error("a registration on a parent that never ends")
	}
	rc.cancel()
	select {
	case <-rc.Done():
	default:
		t.Error("Done of an ended context is open")
	}
}

// C9.1 through the listener mcpgate serve runs (h1server in front of the
// gateway): a client that drops its call's stream mid-call ends the
// request's context from the listener's, and the upstream request is
// cancelled at once; notifications/cancelled ends another call the same
// way, from the session.
func TestH1ClientGoneCancelsUpstream(t *testing.T) {
	up := newStepper(t)
	g, _ := startGateway(t, &config.Config{Servers: map[string]*config.Server{"s": httpServer(up.http)}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := h1server.New(&http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second})
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	url := "http://" + ln.Addr().String() + "/mcp"
	sid := initSession(t, url)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"s__steps","arguments":{"steps":200,"delay_ms":20},"_meta":{"progressToken":"t"}}}`

	resp := openSSE(t, http.MethodPost, url, sid, nil, call)
	readEvents(t, resp.Body, 1, 5*time.Second)
	resp.Body.Close()
	waitCancelled := func(n int32, what string) {
		t.Helper()
		start := time.Now()
		for up.cancelled.Load() < n {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s: the upstream call not cancelled after %s", what, time.Since(start))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCancelled(1, "client gone")

	resp = openSSE(t, http.MethodPost, url, sid, nil, strings.Replace(call, `"id":7`, `"id":8`, 1))
	defer resp.Body.Close()
	readEvents(t, resp.Body, 1, 5*time.Second)
	if st, _, body := rpc(t, url, map[string]string{"Mcp-Session-Id": sid},
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}`); st != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", st, body)
	}
	waitCancelled(2, "notifications/cancelled")
}
