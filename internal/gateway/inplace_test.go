package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Through mcpgate serve's listener the caller, its identity and the
// access line's entry go into the request's own context in place
// (setInPlace): several callers taking turns on one keep-alive
// connection (a proxy in front of the gateway pools them so) are each
// themselves. A wrong key or none after a good one is refused, not
// served as the caller before; a session opened by one key is not the
// next key's; the access lines name each request's own caller.
func TestCallersTakeTurnsOnOneConnection(t *testing.T) {
	keys := &memKeys{}
	ada := keys.add(t, store.Key{Alias: "ada-laptop", User: "ada"})
	bob := keys.add(t, store.Key{Alias: "bob-laptop", User: "bob"})
	g, _, buf := accessLogGateway(t, keys)
	addr := serveListener(t, g)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	send := func(headers map[string]string, body string) (*http.Response, string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n", addr, len(body))
		for k, v := range headers {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
		b.WriteString("\r\n" + body)
		if _, err := io.WriteString(nc, b.String()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(out)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{}}}`

	resp, body := send(map[string]string{callers.HeaderAPIKey: ada}, initBody)
	if resp.StatusCode != 200 {
		t.Fatalf("ada's initialize: %d %s", resp.StatusCode, body)
	}
	adaSession := resp.Header.Get(mcpwire.HeaderSessionID)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		body    string
		status  int
	}{
		{"a wrong key after ada's", map[string]string{callers.HeaderAPIKey: "mcpg_wrong-key-0123456789", mcpwire.HeaderSessionID: adaSession}, call, 401},
		{"no key after ada's", map[string]string{mcpwire.HeaderSessionID: adaSession}, call, 401},
		{"bob on ada's session", map[string]string{callers.HeaderAPIKey: bob, mcpwire.HeaderSessionID: adaSession}, call, 403},
		{"ada on her session", map[string]string{callers.HeaderAPIKey: ada, mcpwire.HeaderSessionID: adaSession}, call, 200},
		{"bob's own initialize", map[string]string{callers.HeaderAPIKey: bob}, initBody, 200},
	} {
		resp, body := send(tc.headers, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
	}
	var aliases []string
	for _, l := range buf.lines() {
		a, _ := l["alias"].(string)
		aliases = append(aliases, a)
	}
	if want := []string{"ada-laptop", "", "", "bob-laptop", "ada-laptop", "bob-laptop"}; strings.Join(aliases, ",") != strings.Join(want, ",") {
		t.Errorf("access lines' aliases %q, want %q", aliases, want)
	}
}
