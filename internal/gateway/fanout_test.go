package gateway

import (
	"bufio"
	"context"
	"fmt"
	fleetrelay "github.com/mcpgate/mcpgate/internal/relay"
	sessions "github.com/mcpgate/mcpgate/internal/session"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// S15, S8.2: an administrator's termination on one replica ends the copy
// another replica resumed from the sealed id within a second, through the
// bus; a replica that missed the announcement (a gap) resynchronises
// from the terminations.
func TestTerminationFanOut(t *testing.T) {
	srv := redistest.New(t)
	up := faultyUpstream(t)
	terms := sessions.NewMemTerminations() // the fleet's store
	replica := func() (*Gateway, string) {
		bus, err := redis.Open(redis.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.Close() }) // after the gateway's Close (LIFO)
		return ownerGateway(t, Options{Config: fleetConfig(up.URL, 1), Terminations: terms, Bus: bus, IdleTimeout: time.Minute})
	}
	a, urlA := replica()
	b, urlB := replica()
	waitSubscribed(t, srv, 2)

	sid := initOwned(t, urlA, "alice")
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "alice", sid, listBody); code != 200 {
		t.Fatalf("resume on B: %d", code)
	}
	if localReport(b).Total != 1 {
		t.Fatal("B holds no copy")
	}
	res, err := a.TerminateSessions(context.Background(), "", "alice-user")
	if err != nil || res.Terminated != 1 {
		t.Fatalf("terminate on A: %+v %v", res, err)
	}
	deadline := time.Now().Add(time.Second)
	for localReport(b).Total != 0 {
		if time.Now().After(deadline) {
			t.Fatal("B's copy still live 1s after the termination on A")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "alice", sid, listBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("B after the termination on A: %d %s", code, body)
	}

	// A gap: a termination B never heard of (remembered only) ends B's
	// copy when B resynchronises.
	other := initOwned(t, urlA, "bob")
	if code, _ := send(t, http.MethodPost, urlB+"/mcp", "bob", other, listBody); code != 200 {
		t.Fatalf("resume bob's on B: %d", code)
	}
	var bobs *session
	for _, s := range b.sessions.All() {
		// alice's ended copy may still be in the table.
		if !s.Closed() && s.Owner() == "key:"+hashHex("bob") {
			bobs = s
			break
		}
	}
	if bobs == nil {
		t.Fatal("B holds no copy of bob's session")
	}
	if err := terms.MarkTerminated(context.Background(), hashHex(bobs.ID()), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_ = (*terminations)(b).Resync(context.Background())
	if code, body := send(t, http.MethodPost, urlB+"/mcp", "bob", other, listBody); code != http.StatusNotFound || body != bodyEnded {
		t.Errorf("B after the resync: %d %s", code, body)
	}
}

// The follower rides out a Redis outage, resynchronising once it
// subscribes again, and ends with the gateway.
func TestTerminationFollowerOutage(t *testing.T) {
	srv := redistest.New(t)
	bus, err := redis.Open(redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	up := faultyUpstream(t)
	g, _ := startGatewayWith(t, Options{Config: fleetConfig(up.URL, 1), Bus: bus})
	waitSubscribed(t, srv, 1)
	srv.Stop()
	time.Sleep(50 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, srv, 1)
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "followTerminations") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower outlived Close:\n%s", stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSubscribed waits until n clients subscribe to the terminations
// (PUBSUB NUMSUB, spoken on the server's socket).
func waitSubscribed(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	channel := redis.DefaultPrefix + "topic:" + fleetrelay.TopicTerminated
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := -1
		if c, err := net.Dial("unix", strings.TrimPrefix(srv.URL(), "unix://")); err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "PUBSUB NUMSUB %s\r\n", channel)
			r := bufio.NewReader(c)
			for range 4 { // *2, $len, the channel, :count
				line, err := r.ReadString('\n')
				if err != nil {
					break
				}
				if strings.HasPrefix(line, ":") {
					got, _ = strconv.Atoi(strings.TrimSpace(line[1:]))
				}
			}
			c.Close()
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers to the terminations, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
