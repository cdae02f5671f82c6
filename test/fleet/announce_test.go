package fleet

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Scenario 4's bounds: an admin change made on one replica is in force on
// the others within announceWithin; the test looks every pollEvery.
const (
	announceWithin = time.Second
	pollEvery      = 10 * time.Millisecond
)

// refused reports a reply that turns the key away (not a transport
// failure, nor another error).
func refused(rep *rpcReply) bool {
	return rep.Status == http.StatusUnauthorized || rep.Status == http.StatusForbidden
}

// testAdminAcrossReplicas: scenario 4. Admin changes made through one
// replica's API are in force on the others within a second (they are
// announced over Redis): a key revoked on a is refused on b, and on a
// session open on c; a server added on b is listed, and callable, on a,
// and its removal there too.
func testAdminAcrossReplicas(t *testing.T, f *Fleet) {
	a, b, c := f.Replicas[0], f.Replicas[1], f.Replicas[2]

	t.Run("key revoked on a is refused on b", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var created struct{ Key string }
		if code := a.Admin(t, http.MethodPost, "/admin/v1/keys", `{"alias":"revocable","servers":["notes"]}`, &created); code != http.StatusCreated || created.Key == "" {
			t.Fatalf("create a key on a: %d %+v", code, created)
		}
		// b serves the key first, so it holds the lookup in its cache
		// (callers.DefaultCacheTTL, 5 s): only the announcement can end
		// it sooner. c holds a session of it.
		onB := statelessClient(http.DefaultClient, b.URL+"/mcp", created.Key)
		if rep, err := onB.Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
			t.Fatalf("the new key on b: %v %v", rep, err)
		}
		onC, err := newRawSession(ctx, http.DefaultClient, c.URL+"/mcp", created.Key)
		if err != nil {
			t.Fatalf("a session of the new key on c: %v", err)
		}
		if rep, err := onC.Request(ctx, "tools/list", nil); err != nil || !rep.OK() {
			t.Fatalf("the new key's session on c: %v %v", rep, err)
		}

		start := time.Now()
		if code := a.Admin(t, http.MethodDelete, "/admin/v1/keys/revocable", "", nil); code != http.StatusNoContent {
			t.Fatalf("revoke on a: %d", code)
		}
		revoked := time.Now()
		var tookB, tookC time.Duration
		var lastB, lastC *rpcReply
		for (tookB == 0 || tookC == 0) && time.Since(revoked) < 3*announceWithin {
			if tookB == 0 {
				rep, err := onB.Request(ctx, "tools/list", nil)
				if err != nil {
					t.Fatalf("b: %v", err)
				}
				if lastB = rep; refused(rep) {
					tookB = time.Since(revoked)
				} else if !rep.OK() {
					t.Fatalf("the revoked key on b: neither served nor refused: %v", rep)
				}
			}
			if tookC == 0 {
				rep, err := onC.Request(ctx, "tools/list", nil)
				if err != nil {
					t.Fatalf("c: %v", err)
				}
				if lastC = rep; refused(rep) {
					tookC = time.Since(revoked)
				} else if !rep.OK() {
					t.Fatalf("the revoked key's session on c: neither served nor refused: %v", rep)
				}
			}
			time.Sleep(pollEvery)
		}
		if tookB == 0 || tookB > announceWithin {
			t.Errorf("the key revoked on a: refused on b after %v (0: not within %v), want within %v; last reply %v", tookB, 3*announceWithin, announceWithin, lastB)
		}
		if tookC == 0 || tookC > announceWithin {
			t.Errorf("the key revoked on a: its session on c refused after %v (0: not within %v), want within %v; last reply %v", tookC, 3*announceWithin, announceWithin, lastC)
		}
		t.Logf("revoke on a answered in %v; refused on b %v after, on c's session %v after (b: HTTP %d)",
			revoked.Sub(start).Round(time.Millisecond), tookB.Round(time.Millisecond), tookC.Round(time.Millisecond), lastB.Status)
	})

	t.Run("server added on b is listed on a", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		// A streamable HTTP MCP server of the test's own (runtime servers
		// are http or sse), with one tool answering a word fresh each run.
		word := "added-" + rand.Text()[:10]
		srv := mcp.NewServer(&mcp.Implementation{Name: "fleet-added", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "whisper", Description: "says the word of this run"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: word}}}, nil, nil
			})
		up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		defer up.Close()
		const name, tool = "fleetadded", "fleetadded__whisper"

		onA := statelessClient(http.DefaultClient, a.URL+"/mcp", masterKey)
		listed := func() bool {
			t.Helper()
			rep, err := onA.Request(ctx, "tools/list", nil)
			if err != nil || !rep.OK() {
				t.Fatalf("tools/list on a: %v %v", rep, err)
			}
			return strings.Contains(rep.Body, `"`+tool+`"`)
		}
		// waitListed polls a until its list shows the tool (want) or not,
		// and returns how long that took after since; 0: not within 3 s.
		waitListed := func(want bool, since time.Time) time.Duration {
			t.Helper()
			for time.Since(since) < 3*announceWithin {
				if listed() == want {
					return time.Since(since)
				}
				time.Sleep(pollEvery)
			}
			return 0
		}
		if listed() {
			t.Fatalf("a lists %s before it was added", tool)
		}

		added := false
		t.Cleanup(func() {
			if added { // the test failed half-way: leave the fleet as it was
				b.Admin(t, http.MethodDelete, "/admin/v1/servers/"+name, "", nil)
			}
		})
		start := time.Now()
		if code := b.Admin(t, http.MethodPost, "/admin/v1/servers", `{"name":"`+name+`","transport":"http","url":"`+up.URL+`"}`, nil); code != http.StatusCreated {
			t.Fatalf("add the server on b: %d", code)
		}
		added = true
		answered := time.Now()
		took := waitListed(true, answered)
		if took == 0 || took > announceWithin {
			t.Fatalf("the server added on b: listed on a after %v (0: not within %v), want within %v", took, 3*announceWithin, announceWithin)
		}
		rep, err := onA.Call(ctx, tool, map[string]any{})
		if err != nil || !rep.OK() || !strings.Contains(rep.Body, word) {
			t.Errorf("call %s on a: %v %v; want %q", tool, rep, err, word)
		}

		if code := b.Admin(t, http.MethodDelete, "/admin/v1/servers/"+name, "", nil); code != http.StatusNoContent {
			t.Fatalf("remove the server on b: %d", code)
		}
		added = false
		removed := time.Now()
		gone := waitListed(false, removed)
		if gone == 0 || gone > announceWithin {
			t.Errorf("the server removed on b: still listed on a after %v (0: for %v), want gone within %v", gone, 3*announceWithin, announceWithin)
		}
		t.Logf("add on b answered in %v; listed on a %v after; removed on b, gone from a %v after",
			answered.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond), gone.Round(time.Millisecond))
	})
}
