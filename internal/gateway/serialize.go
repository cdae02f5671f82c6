package gateway

// Concurrency within a session (S11): the requests of one stateful
// session run concurrently, each holding one of the session's
// limits.max_inflight_per_session slots, and all wait for initialize to
// complete. JSON-RPC responses (answers to a server-initiated request,
// which a call in flight waits for) and notifications/cancelled (the way
// to stop a call) never wait: a response queued behind the calls waiting
// for it would never arrive. The decision is taken on the first bytes of
// the body, before the rest is read, so a waiting request holds no body.

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
	i := skipWS(b, 0)
	if i >= len(b) {
		return bodyResponse
	}
	switch b[i] {
	case '{':
		method, found := topLevelMethod(b, i)
		switch {
		case !found:
			return bodyResponse
		case method == "notifications/cancelled":
			return bodyCancel
		}
		return bodyRequest
	case '[':
		// Each element of a batch at depth 1.
		i++
		sawAny := false
		for {
			i = skipWS(b, i)
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
			end := skipValue(b, i)
			if end < 0 {
				return bodyResponse // cut off inside a response element
			}
			sawAny = true
			i = end
		}
	}
	return bodyRequest
}

// topLevelMethod scans the object starting at b[start] == '{' for a key
// "method" at its own depth and returns its string value.
func topLevelMethod(b []byte, start int) (method string, found bool) {
	i := start + 1
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] == '}' {
			return "", false
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] != '"' {
			return "", false
		}
		keyEnd := skipString(b, i)
		if keyEnd < 0 {
			return "", false
		}
		key := b[i+1 : keyEnd-1]
		i = skipWS(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return "", false
		}
		i = skipWS(b, i+1)
		if string(key) == "method" {
			if i < len(b) && b[i] == '"' {
				if end := skipString(b, i); end > 0 {
					return string(b[i+1 : end-1]), true
				}
			}
			return "", true
		}
		i = skipValue(b, i)
		if i < 0 {
			return "", false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"',
// or -1 when it is cut off.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at b[i], or
// -1 when it is cut off. Strings are skipped whole, so brackets inside
// them do not change the depth.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j)
				if j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		for j := i; j < len(b); j++ {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
		}
		return -1
	}
}
