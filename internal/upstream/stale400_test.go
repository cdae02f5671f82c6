package upstream

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// A 400 to a request that carried a session id is an expiry when its body
// says the session is unknown, in JSON-RPC (the TypeScript SDK's
// examples) or plain text (the Python SDK before late 2025); any other
// 400, or one to a request without a session, stays the call's error.
func TestStale400IsAnExpiry(t *testing.T) {
	b := &httpBase{c: &conn{server: "srv"}}
	for _, tc := range []struct {
		name, ct, body string
		withSession    bool
		expired        bool
	}{
		{"ts sdk", "application/json; charset=utf-8", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`, true, true},
		{"python sdk", "", "Bad Request: No valid session ID provided", true, true},
		{"python sdk text/plain", "text/plain; charset=utf-8", "Bad Request: Invalid session ID", true, true},
		{"session not found", "application/json", `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Session not found"}}`, true, true},
		{"other bad request", "application/json", `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params"}}`, true, false},
		{"session word only", "text/plain", "Bad Request: Mcp-Session-Id header is required", true, false},
		{"no session sent", "application/json", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(tc.body))}
			if tc.ct != "" {
				resp.Header.Set("Content-Type", tc.ct)
			}
			err := b.statusError(resp, tc.withSession)
			if got := errors.Is(err, ErrSessionExpired); got != tc.expired {
				t.Fatalf("expired %v, want %v: %v", got, tc.expired, err)
			}
			if !tc.expired {
				return
			}
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, "upstream srv") || !strings.Contains(rpc.Message, "HTTP 400") {
				t.Errorf("the relayed error %v names no server", rpc)
			}
		})
	}
}
