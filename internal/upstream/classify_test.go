package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// Classify is the one mapping from failures to the fault classes of C6.6.
func TestClassify(t *testing.T) {
	rpc408 := jsonrpc.NewError(408, "upstream timeout")
	expired := &Error{Server: "s", Kind: KindUpstreamError, Status: 404,
		Err: fmt.Errorf("%w (HTTP 404): %w", ErrSessionExpired, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Session terminated"))}
	tests := []struct {
		name   string
		err    error
		class  string
		status int
		rpc    bool
	}{
		{"read timeout", &Error{Kind: KindTimeout}, FaultTimeout, 504, false},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), FaultTimeout, 504, false},
		{"refused", &Error{Kind: KindUnreachable}, FaultUnreachable, 502, false},
		{"closed", &Error{Kind: KindClosed, Err: ErrClosed}, FaultUnreachable, 502, false},
		{"401", &Error{Kind: KindAuth, Status: 401}, FaultAuth, 401, false},
		{"403", &Error{Kind: KindAuth, Status: 403}, FaultAuth, 403, false},
		{"token endpoint 400", &Error{Kind: KindAuth, Status: 400}, FaultAuth, 401, false},
		{"429", &Error{Kind: KindRateLimited, Status: 429}, FaultRateLimited, 429, false},
		{"503", &Error{Kind: KindUpstreamError, Status: 503}, FaultUpstreamError, 503, false},
		{"500", &Error{Kind: KindUpstreamError, Status: 500}, FaultUpstreamError, 502, false},
		{"expired session relays its error", expired, FaultUpstreamError, 502, true},
		{"rpc 408 is the upstream's", fmt.Errorf("call: %w", rpc408), FaultUpstreamError, 502, true},
		{"content type", &Error{Kind: KindInvalidResponse}, FaultInvalidResponse, 502, false},
		{"protocol version", &Error{Kind: KindProtocolVersion}, FaultInvalidResponse, 502, false},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), FaultCancelled, 499, false},
		{"bug", errors.New("boom"), FaultInternal, http.StatusInternalServerError, false},
		{"internal kind", &Error{Kind: KindInternal}, FaultInternal, 500, false},
	}
	for _, tt := range tests {
		f := Classify(tt.err)
		if f.Class != tt.class || f.Status != tt.status || (f.RPC != nil) != tt.rpc {
			t.Errorf("%s: %+v, want %s %d rpc=%v", tt.name, f, tt.class, tt.status, tt.rpc)
		}
	}
	if f := Classify(nil); f.Class != "" {
		t.Errorf("nil: %+v", f)
	}
}
