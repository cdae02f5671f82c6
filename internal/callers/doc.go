// Package callers decides who is calling the gateway (SPEC S5) and whether
// that caller may make this request at all: it reads the gateway key from
// the request, checks it against the master key and the store, enforces the
// key's allowed client addresses and rate limit, and returns a [Caller] (or
// a [Failure] the gateway writes as is). It also computes the owner
// fingerprint sessions are bound to (SPEC S4.1) and the client-application
// allowlist gate (SPEC S2.3).
//
// It does not decide which servers or tools a caller may use (policy does,
// from the lists on the Caller), does not strip headers itself (the gateway
// does, see [StripCredentials]), and never logs, stores or returns a secret:
// keys are handled as [store.HashKey] digests from the moment they are read.
//
// Flow of [Authenticator.Authenticate]:
//
//	X-Mcpgate-Api-Key, else Authorization: Bearer (only if it is a gateway key)
//	  -> none: anonymous caller, or 401
//	  -> master key (constant time): master caller
//	  -> digest -> cache (hits and misses, CacheTTL) -> store.Keys.GetKeyByHash
//	  -> unknown, disabled or expired: the same 401
//	  -> allowed CIDRs (403) -> rate limit (429)
//	  -> caller; last_used_at is touched later, off the request path
//
// # Where the key is read
//
// The gateway's own header, X-Mcpgate-Api-Key, wins. When it is present,
// Authorization is not looked at: it belongs to the caller and is their
// upstream token (SPEC S5.4), passed through untouched. Otherwise an
// Authorization bearer is taken as the gateway key only when it looks like
// one: it has the [SecretPrefix], or it is the master key, or its digest is
// a stored key (config keys may have any shape). Then
// [Caller.KeyFromAuthorization] is set and the gateway must drop
// Authorization before egress, so the gateway key never reaches an
// upstream. A bearer that is not a gateway key is an upstream token: on an
// anonymous gateway the caller is anonymous (its owner is that token's
// fingerprint), otherwise the request fails with the 401.
//
// A key that was presented but is wrong fails with 401 even on an anonymous
// gateway: silently downgrading a mistyped key to anonymous would hide the
// mistake and change what the caller sees.
//
// # What a rate limit counts
//
// A key's (or a grant's) rate_limit_rpm counts requests, not HTTP
// requests: Authenticate takes one for the HTTP request, which pays for
// the first JSON-RPC request it carries, and the gateway takes one more
// with [Authenticator.AllowCall] for each further request (the rest of a
// batch) and for each request no HTTP request of the caller carried (the
// stdio front, an operator's call as the key). Both take from the same
// bucket; a request another replica forwarded ([WithRateCounted]) takes
// nothing, as it was counted where it came in.
//
// # Client address
//
// The client address is r.RemoteAddr only. X-Forwarded-For and Forwarded are
// not trusted, because any client can send them; behind a reverse proxy
// every request therefore comes from the proxy's address until a
// trusted-proxy setting exists. This affects allowed_cidrs and the ip:
// owner fingerprint.
//
// # State per replica
//
// The lookup cache and the rate-limit buckets live in this process's memory.
// With N replicas a key may make up to N times its rate limit, and a revoked
// key keeps working on other replicas for up to CacheTTL unless they are
// told too (Invalidate is local); a replica that may have missed being
// told reads every key from the store meanwhile ([Authenticator.SetFresh]).
package callers
