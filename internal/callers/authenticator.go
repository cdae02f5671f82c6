package callers

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Defaults for the zero values of Options.
const (
	DefaultCacheTTL  = 5 * time.Second
	DefaultCacheSize = 10000
)

// Log attribute keys.
const (
	attrAlias  = "alias"
	attrErr    = "err"
	attrReason = "reason"
)

// KeyStore is the part of store.Keys the Authenticator uses; every
// store.Keys is one. GetKeyByHash is called concurrently from request
// goroutines (at most once per digest at a time); TouchKey only from one
// background goroutine, with a context that is cancelled by Close.
type KeyStore interface {
	GetKeyByHash(ctx context.Context, hash string) (store.Key, error)
	TouchKey(ctx context.Context, alias string, at time.Time) error
}

var _ KeyStore = store.Keys(nil)

// Options configure an Authenticator. The zero value of every field means
// its documented default.
type Options struct {
	// Keys finds the stored keys and records their use. nil: only the
	// master key (and anonymous callers) are served.
	Keys KeyStore
	// MasterKey administers everything; "" disables it.
	MasterKey string
	// Anonymous serves requests that present no gateway key, as anonymous
	// callers. A key that is presented must still be valid.
	Anonymous bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives store errors and rejected keys, never a secret
	// (default: discard).
	Logger *slog.Logger
	// CacheTTL is how long a key lookup, found or not, is reused: the
	// longest a key changed in the store without Invalidate keeps its old
	// meaning on this replica (default DefaultCacheTTL; negative: no
	// caching).
	CacheTTL time.Duration
	// CacheSize bounds the cached lookups, found and not found each
	// (default DefaultCacheSize).
	CacheSize int
	// Tokens verifies JWT bearer callers (SPEC S5.3); nil: a JWT is an
	// upstream token like any other bearer that is not a gateway key.
	Tokens TokenVerifier
	// Grants say what JWT callers may use (config auth.grants); nil: no
	// grants, so JWT callers may use nothing. GrantSet takes precedence
	// when set (runtime grants of the admin API beside the file's).
	Grants   []config.Grant
	GrantSet *GrantSet

	// RateLimiter, when set, enforces the keys' and grants' rate limits
	// for the whole fleet (a shared state backend, SPEC S15) instead of
	// in this process: a limit of rpm is a GCRA bucket of rpm a minute
	// with a burst of rpm, like the local bucket. While it is unavailable
	// each replica enforces rpm/Replicas() on its own, asking it again
	// once a second. nil: limits are per process.
	RateLimiter state.RateLimiter
	// Replicas is how many replicas are assumed to share the limits while
	// RateLimiter is unavailable (nil, or less than 1: 1).
	Replicas func() int
	// OnLimitMode is told when the limits become replica-local (true)
	// and global again (false).
	OnLimitMode func(degraded bool)
	// OnLimitLocal is called for each rate-limit decision taken locally
	// because RateLimiter failed.
	OnLimitLocal func()
}

// Authenticator authenticates requests (see the package doc). It is safe
// for concurrent use. It owns a background goroutine that records key use;
// Close stops it.
type Authenticator struct {
	anonymous  bool
	hasMaster  bool
	masterHash [64]byte // store.HashKey(MasterKey)
	masterInfo *keyInfo
	now        func() time.Time
	logger     *slog.Logger

	cache   *keyCache
	limiter limiter
	shared  *sharedLimits // nil: limits are local
	toucher *toucher
	keys    KeyStore
	tokens  TokenVerifier
	grants  *GrantSet

	closeOnce sync.Once
}

// New returns an Authenticator for opts. Call Close when done with it.
func New(opts Options) *Authenticator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	a := &Authenticator{
		anonymous: opts.Anonymous,
		now:       opts.Now,
		logger:    opts.Logger,
		cache:     newKeyCache(opts.Keys, opts.Logger, opts.CacheTTL, opts.CacheSize),
		keys:      opts.Keys,
		tokens:    opts.Tokens,
		grants:    opts.GrantSet,
	}
	if a.grants == nil {
		a.grants = NewGrantSet(opts.Grants)
	}
	if opts.RateLimiter != nil {
		a.shared = &sharedLimits{rl: opts.RateLimiter, replicas: opts.Replicas, logger: opts.Logger,
			onMode: opts.OnLimitMode, onLocal: opts.OnLimitLocal}
	}
	if opts.MasterKey != "" {
		a.hasMaster = true
		h := store.HashKey(opts.MasterKey)
		copy(a.masterHash[:], h)
		a.masterInfo = &keyInfo{caller: Caller{
			Master:  true,
			Admin:   true,
			Owner:   OwnerKey + sha256Hex(h),
			keyHash: h,
		}}
	}
	if opts.Keys != nil {
		a.toucher = newToucher(opts.Keys, opts.Logger)
	}
	return a
}

// Close stops the background work. Touches not yet written are dropped.
// It is safe to call more than once; Authenticate must not be called after.
func (a *Authenticator) Close() error {
	a.closeOnce.Do(func() {
		if a.toucher != nil {
			a.toucher.close()
		}
	})
	return nil
}

// Invalidate forgets the cached lookup of a key, named by its alias or its
// digest (store.HashKey), so the next request reads the store. The admin
// API calls it after creating, updating, rotating, disabling or deleting a
// key, so that the change takes effect at once on this replica.
func (a *Authenticator) Invalidate(aliasOrHash string) { a.cache.invalidate(aliasOrHash) }

// Flush forgets every cached lookup (after a config reload synced keys).
func (a *Authenticator) Flush() { a.cache.flush() }

// SetFresh makes every key lookup read the store while fresh reports
// true, instead of serving a cached one (concurrent lookups of one key
// still share a read). A replica that may have missed another replica's
// announcement that a key changed (its bus is not heard) sets it, so a
// key revoked there is refused here at once rather than after CacheTTL.
func (a *Authenticator) SetFresh(fresh func() bool) { a.cache.fresh.Store(&fresh) }

// Authenticate identifies the caller of r, or says why it may not call.
// Exactly one of the results is non-nil. The rules are in the package doc;
// in short: a missing key -> anonymous caller or 401; an unknown, disabled
// or expired key -> the same 401; a key used from outside its allowed
// CIDRs -> 403; over its rate limit -> 429 with Retry-After; the store
// failing -> 503. When a stored key is accepted, its last_used_at is
// recorded by the background worker, at most once a minute per key;
// refused requests and the master key record nothing.
func (a *Authenticator) Authenticate(r *http.Request) (*Caller, *Failure) {
	now := a.now()
	var (
		secret   string
		fromAuth bool
	)
	if v, ok := apiKeyHeader(r.Header.Get(HeaderAPIKey)); ok {
		secret = v
	} else if tok, ok := bearerToken(r.Header.Get("Authorization")); ok {
		if a.tokens != nil && !strings.HasPrefix(tok, SecretPrefix) && oauth.LooksLikeJWT(tok) {
			return a.authenticateJWT(r, tok, now)
		}
		secret, fromAuth = tok, true
	} else {
		return a.noKey(r)
	}

	prefixed := strings.HasPrefix(secret, SecretPrefix)
	if len(secret) > maxKeyLen {
		if fromAuth && !prefixed {
			return a.noKey(r) // a long bearer (a JWT) is an upstream token
		}
		a.reject("too long", "")
		return nil, unauthorized(RefusedMalformed)
	}
	hash := store.HashKey(secret)

	var info *keyInfo
	if a.isMaster(hash) {
		info = a.masterInfo
	} else {
		var err error
		info, err = a.cache.lookup(r.Context(), hash, now)
		if err != nil {
			// A client that went away while waiting for another request's
			// lookup is not a store failure worth logging.
			if r.Context().Err() == nil {
				a.logger.Error("authenticate", attrErr, err)
			}
			return nil, unavailable()
		}
		if info == nil {
			if fromAuth && !prefixed {
				return a.noKey(r) // not a gateway key: the caller's upstream token
			}
			a.reject("unknown key", "")
			return nil, unauthorized(RefusedUnknown)
		}
	}

	c := info.caller
	if info.disabled {
		a.reject("disabled", c.Alias)
		return nil, unauthorized(RefusedDisabled)
	}
	if !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt) {
		a.reject("expired", c.Alias)
		return nil, unauthorized(RefusedExpired)
	}
	if info.limited && !allowedAddress(r, info.cidrs) {
		a.reject("client address not allowed", c.Alias)
		return nil, forbiddenAddress()
	}
	if c.RateLimitRPM > 0 {
		if ok, wait := a.allow(r.Context(), limitKeyAlias, c.Alias, c.RateLimitRPM, now); !ok {
			return nil, rateLimited(retryAfterSeconds(wait))
		}
	}
	if a.toucher != nil && !c.Master {
		a.toucher.touch(c.Alias, now)
	}
	c.KeyFromAuthorization = fromAuth
	return &c, nil
}

// allow takes one request from the bucket of id (an alias or an owner,
// prefix says which) under rpm, in the shared limiter when there is one.
// A request another replica already counted takes nothing.
func (a *Authenticator) allow(ctx context.Context, prefix, id string, rpm int, now time.Time) (bool, time.Duration) {
	if ctx.Value(rateCountedKey{}) != nil {
		return true, 0
	}
	if a.shared == nil {
		return a.limiter.allow(id, rpm, now)
	}
	return a.shared.allow(ctx, prefix+id, rpm, now)
}

// AllowCall takes one request from the rate limit of c (a caller
// Authenticate returned) for a JSON-RPC request that no HTTP request of
// its own paid for: the second and later requests of a batch, the
// requests of a stdio front, a call an operator makes as c. A limit
// counts requests wherever they come from, so that a batch of twenty
// costs what twenty requests cost. It reports whether the request may
// proceed and, if not, how long until it may; ctx marked by
// [WithRateCounted] takes nothing (the replica that forwarded it counted
// it). The bucket is the one Authenticate takes from.
func (a *Authenticator) AllowCall(ctx context.Context, c *Caller) (bool, time.Duration) {
	if c == nil || c.RateLimitRPM <= 0 {
		return true, 0
	}
	if c.Issuer != "" {
		return a.allow(ctx, limitKeyOwner, c.Owner, c.RateLimitRPM, a.now())
	}
	return a.allow(ctx, limitKeyAlias, c.Alias, c.RateLimitRPM, a.now())
}

// RetryAfterSeconds is the Retry-After value, in whole seconds (at least
// one), of a refusal whose limit frees up in d.
func RetryAfterSeconds(d time.Duration) int64 { return retryAfterSeconds(d) }

// StillValid reports whether the key c was accepted with would still be
// accepted now: not revoked, disabled or expired. Long-lived streams ask it
// from time to time, so that a revocation reaches them too. The master key
// and anonymous callers stay valid; a store failure counts as valid (an
// outage does not cut every stream).
func (a *Authenticator) StillValid(ctx context.Context, c *Caller) bool {
	if c != nil && c.Issuer != "" {
		// A JWT caller's stream is not cut when its access token expires:
		// the client would then refresh from the stream's reconnect and
		// from its next POST at once, and the second use of the rotated
		// refresh token reads as reuse and revokes the person's login.
		// Every POST is judged with a current token; a key login's
		// stream ends with its key.
		if c.Alias != "" {
			_, f := a.loginKey(ctx, c.Alias, a.now())
			return f == nil || f.Status == http.StatusServiceUnavailable
		}
		return true
	}
	if c == nil || c.Master || c.Anonymous || c.keyHash == "" {
		return true
	}
	now := a.now()
	info, err := a.cache.lookup(ctx, c.keyHash, now)
	if err != nil {
		return true
	}
	if info == nil || info.disabled {
		return false
	}
	return info.caller.ExpiresAt.IsZero() || now.Before(info.caller.ExpiresAt)
}

// noKey answers a request that presented no gateway key.
// AnonymousRequest reports whether Authenticate would serve r as an
// anonymous caller on the request alone: anonymous callers are allowed
// and r carries no gateway key (no X-Mcpgate-Api-Key, no bearer token).
// Authenticate then returns what noKey builds, &Caller{Anonymous: true}
// with OwnerOf's owner, and nothing else: a caller that can build that
// more cheaply (a per-address cache) may skip Authenticate.
func (a *Authenticator) AnonymousRequest(r *http.Request) bool {
	if !a.anonymous {
		return false
	}
	if _, ok := apiKeyHeader(r.Header.Get(HeaderAPIKey)); ok {
		return false
	}
	_, ok := bearerToken(r.Header.Get("Authorization"))
	return !ok
}

func (a *Authenticator) noKey(r *http.Request) (*Caller, *Failure) {
	if !a.anonymous {
		return nil, unauthorized(RefusedNoKey)
	}
	c := &Caller{Anonymous: true}
	c.Owner = OwnerOf(c, r)
	return c, nil
}

// isMaster compares digests in constant time, so neither the master key's
// content nor its length leaks through timing.
func (a *Authenticator) isMaster(hash string) bool {
	if !a.hasMaster || len(hash) != len(a.masterHash) {
		return false
	}
	var h [64]byte
	copy(h[:], hash)
	return subtle.ConstantTimeCompare(h[:], a.masterHash[:]) == 1
}

func (a *Authenticator) reject(reason, alias string) {
	if alias == "" {
		a.logger.Debug("rejected api key", attrReason, reason)
		return
	}
	a.logger.Debug("rejected api key", attrReason, reason, attrAlias, alias)
}

// allowedAddress reports whether r's client address is in one of cidrs.
// An address that cannot be parsed is in none.
func allowedAddress(r *http.Request, cidrs []netip.Prefix) bool {
	ip, ok := clientAddr(r)
	if !ok {
		return false
	}
	for _, p := range cidrs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

type rateCountedKey struct{}

// WithRateCounted marks ctx as that of a request whose rate limits were
// taken already, by the replica of the fleet that forwarded it here
// (which proved so with the fleet's peer MAC): Authenticate judges it in
// every other way but takes nothing from its buckets, so that a forwarded
// request costs one request, not two. Never for a request a client sent.
func WithRateCounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, rateCountedKey{}, true)
}
