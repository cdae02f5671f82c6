package callers

import (
	"net/http"
	"strconv"
	"strings"
)

// JSON-RPC error codes of the failures. The caller failures use the range
// JSON-RPC reserves for implementation-defined server errors (-32000 to
// -32099), their last digits echoing the HTTP status; a store failure is
// the standard Internal error and the client allowlist the standard
// Invalid Request.
const (
	CodeUnauthorized  = -32001 // 401: no valid gateway key
	CodeForbidden     = -32003 // 403: a valid key used from an address it may not use
	CodeRateLimited   = -32029 // 429: the key's rate limit is spent
	CodeUnavailable   = -32603 // 503: the key could not be checked (store error)
	CodeInvalidClient = -32600 // 403: client application not allowed (SPEC S2.3)
)

// Failure is a refusal the gateway writes as is: status, headers and a
// JSON-RPC-shaped body with a null id (the request has not been read). Its
// fields belong to the receiver; each call returns a fresh Failure.
type Failure struct {
	Status int
	Header http.Header
	Body   []byte
	// OAuth says why a bearer token was refused, for the gateway's
	// WWW-Authenticate challenge; nil for other failures.
	OAuth *OAuthError
	// Reason says why, for the gateway's access log (one of the Refused
	// constants, or an OAuth token's error): never the key, its alias or
	// anything of the token. The body says none of it, so that a caller
	// learns nothing about which keys exist.
	Reason string
}

// Reasons of the refusals (Failure.Reason). A revoked key is deleted, so
// it reads as unknown.
const (
	RefusedNoKey       = "no key"
	RefusedMalformed   = "malformed key"
	RefusedUnknown     = "unknown or revoked key"
	RefusedDisabled    = "disabled key"
	RefusedExpired     = "expired key"
	RefusedAddress     = "address not allowed"
	RefusedRateLimited = "rate limited"
	RefusedUnavailable = "key store unavailable"
	RefusedClient      = "client application not allowed"
)

// Error makes a Failure usable as an error in handlers that return one.
func (f *Failure) Error() string {
	return "callers: " + strconv.Itoa(f.Status) + " " + http.StatusText(f.Status)
}

// Write writes f to w: f's headers (replacing any of the same name),
// Content-Type application/json, the status and the body.
func (f *Failure) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range f.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(f.Body)))
	w.WriteHeader(f.Status)
	w.Write(f.Body)
}

// MessageRateLimited is the message of a refusal because the caller's
// rate limit is spent: of the HTTP 429, and of the JSON-RPC error of a
// request of a batch (or of a stdio front) refused for it.
const MessageRateLimited = msgRateLimited

// Messages of the failures; the bodies are built from them once.
const (
	msgUnauthorized  = "Unauthorized: a valid mcpgate API key is required"
	msgForbiddenCIDR = "API key is not allowed from this address."
	msgRateLimited   = "Too Many Requests: rate limit exceeded for this API key"
	msgUnavailable   = "Service Unavailable: the API key could not be checked; try again"
	msgInvalidClient = "Client application not allowed"
)

var (
	bodyUnauthorized  = errorBody(CodeUnauthorized, msgUnauthorized)
	bodyForbiddenCIDR = errorBody(CodeForbidden, msgForbiddenCIDR)
	bodyRateLimited   = errorBody(CodeRateLimited, msgRateLimited)
	bodyUnavailable   = errorBody(CodeUnavailable, msgUnavailable)
	bodyInvalidClient = errorBody(CodeInvalidClient, msgInvalidClient)
)

// errorBody builds a JSON-RPC error response with a null id. The messages
// are constants without characters JSON would escape, so they need no
// quoting (a test decodes every body).
func errorBody(code int, msg string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":` + strconv.Itoa(code) + `,"message":"` + msg + `"}}`)
}

func newFailure(status int, body []byte, kv ...string) *Failure {
	h := make(http.Header, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &Failure{Status: status, Header: h, Body: append([]byte(nil), body...)}
}

// unauthorized is the one 401: missing, malformed, unknown, disabled and
// expired keys all get exactly these bytes, so a caller learns nothing about
// which keys exist.
func unauthorized(reason string) *Failure {
	f := newFailure(http.StatusUnauthorized, bodyUnauthorized, "WWW-Authenticate", `Bearer realm="mcpgate"`)
	f.Reason = reason
	return f
}

func forbiddenAddress() *Failure {
	f := newFailure(http.StatusForbidden, bodyForbiddenCIDR)
	f.Reason = RefusedAddress
	return f
}

func rateLimited(retryAfterSeconds int64) *Failure {
	f := newFailure(http.StatusTooManyRequests, bodyRateLimited, "Retry-After", strconv.FormatInt(retryAfterSeconds, 10))
	f.Reason = RefusedRateLimited
	return f
}

func unavailable() *Failure {
	f := newFailure(http.StatusServiceUnavailable, bodyUnavailable, "Retry-After", "1")
	f.Reason = RefusedUnavailable
	return f
}

// ClientNotAllowed is CheckClient's refusal, for a JWT caller whose token
// was issued to an OAuth client not on the list.
func ClientNotAllowed() *Failure {
	f := newFailure(http.StatusForbidden, bodyInvalidClient)
	f.Reason = RefusedClient
	return f
}

// CheckClient is the client-application allowlist (SPEC S2.3): when header
// is set, the request must carry it with one of values (compared
// case-insensitively, surrounding whitespace ignored), else 403
// Client application not allowed. header "" means no allowlist; a header
// with no values admits nobody (fail closed on a config mistake the config
// layer should already reject).
func CheckClient(r *http.Request, header string, values []string) *Failure {
	if header == "" {
		return nil
	}
	got := strings.TrimSpace(r.Header.Get(header))
	if got != "" {
		for _, v := range values {
			if strings.EqualFold(got, strings.TrimSpace(v)) {
				return nil
			}
		}
	}
	return ClientNotAllowed()
}
