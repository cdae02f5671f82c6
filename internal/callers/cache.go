package callers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// lookupTimeout bounds one store lookup. The lookup is detached from the
// request that started it, because other requests may be waiting for it.
const lookupTimeout = 5 * time.Second

// keyInfo is what a stored key means to Authenticate, computed once per
// cache fill.
type keyInfo struct {
	caller   Caller // template: everything but KeyFromAuthorization
	disabled bool
	cidrs    []netip.Prefix // the parseable allowed_cidrs
	limited  bool           // allowed_cidrs is not empty
}

type cacheEntry struct {
	info    *keyInfo // nil: no key has this digest
	expires time.Time
}

// call is one store lookup in progress; requests for the same digest wait
// for it instead of starting their own.
type call struct {
	done chan struct{}
	info *keyInfo
	err  error
}

// keyCache caches GetKeyByHash by digest, hits and misses in separate maps
// of at most size entries each, so that a flood of wrong keys cannot push
// the valid ones out. Its methods are safe for concurrent use.
type keyCache struct {
	keys   KeyStore
	logger *slog.Logger
	ttl    time.Duration // <= 0: results are not kept
	size   int

	mu       sync.Mutex
	hits     map[string]cacheEntry
	misses   map[string]cacheEntry
	purged   time.Time // when expired entries were last dropped
	inflight map[string]*call
	gen      uint64            // bumped by invalidations: a lookup begun before one is not kept
	aliases  map[string]string // alias -> digest of a hit, for lookupAlias

	// fresh, while it reports true, makes lookups skip what is cached
	// (Authenticator.SetFresh); nil: never.
	fresh atomic.Pointer[func() bool]
}

// cached reports whether cached entries may answer now.
func (c *keyCache) cached() bool {
	f := c.fresh.Load()
	return f == nil || !(*f)()
}

func newKeyCache(keys KeyStore, logger *slog.Logger, ttl time.Duration, size int) *keyCache {
	return &keyCache{
		keys:     keys,
		logger:   logger,
		ttl:      ttl,
		size:     size,
		hits:     make(map[string]cacheEntry),
		misses:   make(map[string]cacheEntry),
		inflight: make(map[string]*call),
		aliases:  make(map[string]string),
	}
}

// lookupAlias is lookup by alias, for the tokens mcpgate's authorization
// server issues to a person who logged in with a key (they name the key,
// not its secret): a hit is served from the cache like a key presented
// itself, so such a caller costs no store read per request. Unknown
// aliases are not cached (they are not on a hot path: the token carrying
// one is refused).
func (c *keyCache) lookupAlias(ctx context.Context, alias string, now time.Time) (*keyInfo, error) {
	cached := c.cached()
	c.mu.Lock()
	if h, ok := c.aliases[alias]; ok && cached {
		if e, ok := c.hits[h]; ok && now.Before(e.expires) {
			c.mu.Unlock()
			return e.info, nil
		}
	}
	gen := c.gen
	c.mu.Unlock()
	ks, ok := c.keys.(keyByAlias)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	k, err := ks.GetKeyByAlias(ctx, alias)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up key: %w", err)
	}
	info := c.newKeyInfo(&k)
	c.mu.Lock()
	if gen == c.gen && c.ttl > 0 {
		c.put(c.hits, k.KeyHash, cacheEntry{info: info, expires: now.Add(c.ttl)}, now)
		if len(c.aliases) >= c.size {
			clear(c.aliases) // stale entries only cost a store read
		}
		c.aliases[alias] = k.KeyHash
	}
	c.mu.Unlock()
	return info, nil
}

// lookup returns the key whose digest is hash, nil when there is none, or
// the store's error (never cached).
func (c *keyCache) lookup(ctx context.Context, hash string, now time.Time) (*keyInfo, error) {
	cached := c.cached()
	c.mu.Lock()
	if e, ok := c.hits[hash]; ok && cached && now.Before(e.expires) {
		c.mu.Unlock()
		return e.info, nil
	}
	if e, ok := c.misses[hash]; ok && cached && now.Before(e.expires) {
		c.mu.Unlock()
		return nil, nil
	}
	if cl, ok := c.inflight[hash]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.info, cl.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[hash] = cl
	gen := c.gen
	c.mu.Unlock()

	cl.info, cl.err = c.fetch(ctx, hash)

	c.mu.Lock()
	if c.inflight[hash] == cl {
		delete(c.inflight, hash)
	}
	if cl.err == nil && gen == c.gen && c.ttl > 0 {
		m := c.misses
		if cl.info != nil {
			m = c.hits
		}
		c.put(m, hash, cacheEntry{info: cl.info, expires: now.Add(c.ttl)}, now)
	}
	c.mu.Unlock()
	close(cl.done)
	return cl.info, cl.err
}

func (c *keyCache) fetch(ctx context.Context, hash string) (*keyInfo, error) {
	if c.keys == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	k, err := c.keys.GetKeyByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up key: %w", err)
	}
	if k.KeyHash != hash {
		// A backend that returned another key would let one key act as
		// another; refuse rather than trust it.
		return nil, fmt.Errorf("look up key: store returned a different key (%q)", k.Alias)
	}
	return c.newKeyInfo(&k), nil
}

func (c *keyCache) newKeyInfo(k *store.Key) *keyInfo {
	info := &keyInfo{
		caller: Caller{
			Alias:        k.Alias,
			User:         k.User,
			Team:         k.Team,
			Admin:        k.Admin,
			NoMCP:        k.NoMCP,
			Servers:      k.Servers,
			Tools:        k.Tools,
			DenyTools:    k.DenyTools,
			Toolsets:     k.Toolsets,
			AccessGroups: k.AccessGroups,
			RateLimitRPM: k.RateLimitRPM,
			BudgetAmount: k.BudgetAmount,
			BudgetPeriod: k.BudgetPeriod,
			ExpiresAt:    k.ExpiresAt,
			keyHash:      k.KeyHash,
		},
		disabled: k.Disabled,
		limited:  len(k.AllowedCIDRs) > 0,
	}
	info.caller.Owner = OwnerKey + sha256Hex(k.KeyHash)
	for _, s := range k.AllowedCIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			// Fail closed: the entry admits nobody; the others still apply.
			c.logger.Warn("ignoring invalid allowed_cidrs entry", attrAlias, k.Alias, attrErr, err)
			continue
		}
		info.cidrs = append(info.cidrs, p)
	}
	return info
}

// parseCIDR accepts a prefix ("10.0.0.0/8", "2001:db8::/32") or a single
// address (as a /32 or /128). IPv4-mapped IPv6 prefixes are unmapped, as
// client addresses are.
func parseCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		a := p.Addr()
		if a.Is4In6() && p.Bits() >= 96 {
			return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked(), nil
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("not a CIDR or IP address: %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// put adds e under hash to m, making room when m is full: first by
// dropping expired entries (at most once per ttl), then an arbitrary one.
// Called with mu held.
func (c *keyCache) put(m map[string]cacheEntry, hash string, e cacheEntry, now time.Time) {
	if _, ok := m[hash]; !ok && len(m) >= c.size {
		if now.Sub(c.purged) >= c.ttl {
			c.purged = now
			for _, mm := range []map[string]cacheEntry{c.hits, c.misses} {
				for h, e := range mm {
					if !now.Before(e.expires) {
						delete(mm, h)
					}
				}
			}
		}
		for h := range m {
			if len(m) < c.size {
				break
			}
			delete(m, h)
		}
	}
	m[hash] = e
}

// invalidate forgets the digest s, or every digest of the key whose alias
// is s, and makes lookups already under way not be kept.
func (c *keyCache) invalidate(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.inflight)
	delete(c.hits, s)
	delete(c.misses, s)
	delete(c.aliases, s)
	for h, e := range c.hits {
		if e.info.caller.Alias == s {
			delete(c.hits, h)
		}
	}
}

func (c *keyCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.inflight)
	clear(c.hits)
	clear(c.misses)
	clear(c.aliases)
}
