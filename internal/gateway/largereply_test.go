package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// A JSON reply whose result is larger than a pooled reply buffer is
// written in three parts (the envelope's head, the result as the upstream
// sent it, the closing brace) instead of one copy: the client gets the
// same bytes, with a Content-Length that counts all of them, on either
// side of the threshold.
func TestLargeResultReply(t *testing.T) {
	up := startSDKUpstream(t, "a")
	_, ts := startGateway(t, &config.Config{Servers: map[string]*config.Server{
		"a": {Transport: config.TransportHTTP, URL: up.http.URL},
	}})
	url := ts.URL + "/mcp/a"
	sid := rawSession(t, url, nil, `{}`)
	hdr := map[string]string{mcpwire.HeaderSessionID: sid, "Mcp-Protocol-Version": "2025-11-25"}
	for _, n := range []int{maxPooledReply / 2, maxPooledReply - 100, maxPooledReply + 100, 3 * maxPooledReply} {
		// Text with escapes, non-ASCII and a quote, so the result's bytes
		// are not the text's. The upstream answers "a:" and the text.
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "line %d \"é\" \\ \t ", i)
		}
		text := b.String()
		args, _ := json.Marshal(map[string]string{"text": text})
		code, h, body := rpc(t, url, hdr, `{"jsonrpc":"2.0","id":"big-`+strconv.Itoa(n)+`","method":"tools/call","params":{"name":"echo","arguments":`+string(args)+`}}`)
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("%d bytes: %d %s", n, code, h.Get("Content-Type"))
		}
		if cl := h.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			t.Errorf("%d bytes: Content-Length %s, body %d bytes", n, cl, len(body))
		}
		var reply struct {
			JSONRPC string `json:"jsonrpc"`
			ID      string `json:"id"`
			Result  struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &reply); err != nil {
			t.Fatalf("%d bytes: reply is not JSON: %v", n, err)
		}
		if reply.JSONRPC != "2.0" || reply.ID != "big-"+strconv.Itoa(n) || len(reply.Result.Content) != 1 || reply.Result.Content[0].Text != "a:"+text {
			t.Errorf("%d bytes: reply jsonrpc %q id %q, %d content items, text equal %v", n, reply.JSONRPC, reply.ID,
				len(reply.Result.Content), len(reply.Result.Content) == 1 && reply.Result.Content[0].Text == "a:"+text)
		}
	}
}
