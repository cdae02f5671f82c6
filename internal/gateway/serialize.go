package gateway

// Concurrency within a session (S11): the requests of one stateful
// session run concurrently, each holding one of the session's
// limits.max_inflight_per_session slots, and all wait for initialize to
// complete. JSON-RPC responses (answers to a server-initiated request,
// which a call in flight waits for) and notifications/cancelled (the way
// to stop a call) never wait: a response queued behind the calls waiting
// for it would never arrive. The decision is taken on the first bytes of
// the body, before the rest is read, so a waiting request holds no body.

import "github.com/mcpgate/mcpgate/internal/jsonrpc"

// peekSize is how much of a body is looked at to classify it (S2.6).
const peekSize = 4096

// bodyKind is what the first bytes of a body say about it.
type bodyKind int

const (
	bodyRequest  bodyKind = iota // has a top-level "method" (request or notification)
	bodyResponse                 // a JSON-RPC response: no top-level "method"
	bodyCancel                   // notifications/cancelled
)

// classifyBody scans b, the first bytes of a body (truncated when the body
// is longer), for a top-level "method" key, tracking depth so that a
// "method" inside params or a result does not count. A batch is a request
// unless every element is visibly a response. A body that ends (or is cut
// off) before any top-level "method" is a response: waiting for the
// session lock is only safe for messages that can never be what the lock
// holder waits for.
func classifyBody(b []byte) bodyKind {
	i := jsonrpc.SkipSpace(b, 0)
	if i >= len(b) {
		return bodyResponse
	}
	switch b[i] {
	case '{':
		method, found := topLevelMethod(b, i)
		switch {
		case !found:
			return bodyResponse
		case string(method) == "notifications/cancelled":
			return bodyCancel
		}
		return bodyRequest
	case '[':
		// Each element of a batch at depth 1.
		i++
		sawAny := false
		for {
			i = jsonrpc.SkipSpace(b, i)
			if i >= len(b) {
				if sawAny {
					return bodyResponse
				}
				return bodyRequest // cannot tell: the safe default for a batch
			}
			if b[i] == ']' {
				return bodyResponse
			}
			if b[i] == ',' {
				i++
				continue
			}
			if b[i] != '{' {
				return bodyRequest
			}
			if _, found := topLevelMethod(b, i); found {
				return bodyRequest
			}
			end, ok := jsonrpc.PrefixValue(b, i)
			if !ok {
				return bodyResponse // cut off inside a response element
			}
			sawAny = true
			i = end
		}
	}
	return bodyRequest
}

// topLevelMethod scans the object starting at b[start] == '{' for a key
// "method" at its own depth and returns its string value (raw, within b:
// the caller compares it, so nothing is copied).
func topLevelMethod(b []byte, start int) (method []byte, found bool) {
	i := start + 1
	for {
		i = jsonrpc.SkipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return nil, false
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] != '"' {
			return nil, false
		}
		keyEnd, ok := jsonrpc.PrefixString(b, i)
		if !ok {
			return nil, false
		}
		key := b[i+1 : keyEnd-1]
		i = jsonrpc.SkipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = jsonrpc.SkipSpace(b, i+1)
		if string(key) == "method" {
			if i < len(b) && b[i] == '"' {
				if end, ok := jsonrpc.PrefixString(b, i); ok {
					return b[i+1 : end-1], true
				}
			}
			return nil, true
		}
		if i, ok = jsonrpc.PrefixValue(b, i); !ok {
			return nil, false
		}
	}
}
