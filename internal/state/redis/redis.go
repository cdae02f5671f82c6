// Package redis is the state.Backend of a fleet: every replica's shared
// state in one Redis server (7.0 or later; a single server or a
// Sentinel-managed primary, not Redis Cluster), through go-redis. main
// wires it when the config says state.driver: redis; nothing else imports
// it.
//
// Every operation that reads and writes is one Lua script, so it is one
// round trip and atomic; time-based decisions (rate limits, replica
// heartbeats) use the server's clock (TIME), so replicas need not agree
// on theirs. Keys live under a prefix ("mcpgate:" by default) so that one
// server can hold several fleets, or a test's isolated namespaces.
//
// It owns the mapping of go-redis errors to the state errors: a network
// failure, a timeout, or a server that is loading or read-only is
// state.ErrUnavailable (an *state.UnavailableError), which callers answer
// by falling back to replica-local state. It never logs or returns the
// URL: it may carry a password.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/internal/delivery"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "mcpgate:"

// Timeouts for a URL that sets none: short, so that a caller learns soon
// that the backend is unavailable and falls back (go-redis's own are 5s
// with retries).
const (
	DefaultDialTimeout = time.Second
	DefaultIOTimeout   = time.Second
)

// Options configure Open. The zero value of each field is its default.
type Options struct {
	// URL is redis://[user:password@]host[:port][/db],
	// rediss://... (TLS) or unix://[user:password@]/path/to.sock[?db=N];
	// go-redis's query options (dial_timeout, pool_size, ...) apply.
	URL string
	// Prefix is put before every key and channel; "" means DefaultPrefix.
	Prefix string
}

// Backend is the Redis state.Backend.
type Backend struct {
	c           *goredis.Client
	prefix      string
	readTimeout time.Duration
	closed      atomic.Bool

	mu   sync.Mutex
	subs map[*subscription]struct{}
}

var _ state.Backend = (*Backend)(nil)

// Open builds the backend for opts. It does no I/O: a server that is down
// makes calls fail with ErrUnavailable, not Open (a replica starting
// during an outage still serves, on its fallbacks). The error never quotes
// the URL.
func Open(opts Options) (*Backend, error) {
	o, err := parseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Backend{c: goredis.NewClient(o), prefix: prefix, readTimeout: o.ReadTimeout, subs: map[*subscription]struct{}{}}, nil
}

// parseURL parses a state URL into go-redis options, with this package's
// timeouts where the URL sets none.
func parseURL(raw string) (*goredis.Options, error) {
	const form = "redis://[user:password@]host[:port][/db], rediss://... or unix:///path/to.sock"
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis url: not a URL (want %s)", form)
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, fmt.Errorf("redis url: scheme must be redis, rediss or unix (want %s)", form)
	}
	o, err := goredis.ParseURL(raw)
	if err != nil {
		// go-redis's messages are about the URL's parts, but may quote
		// them; keep only the shape.
		return nil, fmt.Errorf("redis url: not a valid Redis URL (want %s)", form)
	}
	q := u.Query()
	if !q.Has("dial_timeout") {
		o.DialTimeout = DefaultDialTimeout
	}
	if !q.Has("read_timeout") {
		o.ReadTimeout = DefaultIOTimeout
	}
	if !q.Has("write_timeout") {
		o.WriteTimeout = DefaultIOTimeout
	}
	if !q.Has("max_retries") {
		o.MaxRetries = 1
	}
	o.DialerRetries = 1
	o.ContextTimeoutEnabled = true
	return o, nil
}

// Name is "redis".
func (b *Backend) Name() string { return "redis" }

// Close ends the open subscriptions and closes the connection pool.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	var subs []*subscription
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	if err := b.c.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("close redis: %w", err)
	}
	return nil
}

// key is the Redis key of kind's k.
func (b *Backend) key(kind, k string) string { return b.prefix + kind + ":" + k }

// fail maps an error of operation op.
func (b *Backend) fail(ctx context.Context, op string, err error) error {
	switch {
	case b.closed.Load() || errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("state %s: %w", op, state.ErrClosed)
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("state %s: %w", op, ctx.Err())
	case ctx.Err() != nil:
		// The caller's deadline passed waiting for Redis: it did not
		// answer in time, which is unavailable (and still
		// context.DeadlineExceeded for errors.Is).
		return &state.UnavailableError{Op: op, Err: ctx.Err()}
	}
	var re goredis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY"} {
			if goredis.HasErrorPrefix(err, p) {
				return &state.UnavailableError{Op: op, Err: err}
			}
		}
		// A reply we did not expect (a script error, a wrong type): a
		// bug or a foreign key under our prefix, not an outage.
		return fmt.Errorf("state %s: redis: %w", op, err)
	}
	return &state.UnavailableError{Op: op, Err: err}
}

// open fails with ErrClosed once closed, without a round trip.
func (b *Backend) open(op string) error {
	if b.closed.Load() {
		return fmt.Errorf("state %s: %w", op, state.ErrClosed)
	}
	return nil
}

// Ping implements state.Backend.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.open("ping"); err != nil {
		return err
	}
	if err := b.c.Ping(ctx).Err(); err != nil {
		return b.fail(ctx, "ping", err)
	}
	return nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Terminate implements state.Terminations.
func (b *Backend) Terminate(ctx context.Context, id string, ttl time.Duration) error {
	if err := errors.Join(state.CheckKey("session id", id), state.CheckTTL(ttl), b.open("terminate")); err != nil {
		return err
	}
	if err := b.c.Set(ctx, b.key("term", id), "1", ttl).Err(); err != nil {
		return b.fail(ctx, "terminate", err)
	}
	return nil
}

// Terminated implements state.Terminations.
func (b *Backend) Terminated(ctx context.Context, id string) (bool, error) {
	if err := errors.Join(state.CheckKey("session id", id), b.open("terminated")); err != nil {
		return false, err
	}
	n, err := b.c.Exists(ctx, b.key("term", id)).Result()
	if err != nil {
		return false, b.fail(ctx, "terminated", err)
	}
	return n == 1, nil
}

// setFields: HSET unless the hash would pass its bound, then PEXPIRE.
// KEYS[1] the hash; ARGV ttl ms, max fields, then name, value pairs.
// Returns 0, or the size refused.
var setFields = goredis.NewScript(`
local added = 0
for i = 3, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then added = added + 1 end
end
local n = redis.call('HLEN', KEYS[1]) + added
if n > tonumber(ARGV[2]) then return n end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`)

// SetSessionFields implements state.Sessions.
func (b *Backend) SetSessionFields(ctx context.Context, id string, fields map[string]string, ttl time.Duration) error {
	if err := errors.Join(state.CheckKey("session id", id), state.CheckFields(fields), state.CheckTTL(ttl), b.open("set session fields")); err != nil {
		return err
	}
	args := make([]any, 0, 2+2*len(fields))
	args = append(args, ms(ttl), state.MaxSessionFields)
	for k, v := range fields {
		args = append(args, k, v)
	}
	n, err := setFields.Run(ctx, b.c, []string{b.key("sess", id)}, args...).Int64()
	if err != nil {
		return b.fail(ctx, "set session fields", err)
	}
	if n != 0 {
		return fmt.Errorf("%w: session state would have %d fields, more than %d", state.ErrInvalid, n, state.MaxSessionFields)
	}
	return nil
}

// DeleteSessionFields implements state.Sessions.
func (b *Backend) DeleteSessionFields(ctx context.Context, id string, ttl time.Duration, fields ...string) error {
	if err := errors.Join(state.CheckKey("session id", id), state.CheckTTL(ttl), b.open("delete session fields")); err != nil {
		return err
	}
	k := b.key("sess", id)
	_, err := b.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		if len(fields) > 0 {
			p.HDel(ctx, k, fields...)
		}
		p.PExpire(ctx, k, ttl) // a no-op once the last field is gone
		return nil
	})
	if err != nil {
		return b.fail(ctx, "delete session fields", err)
	}
	return nil
}

// SessionFields implements state.Sessions.
func (b *Backend) SessionFields(ctx context.Context, id string) (map[string]string, error) {
	if err := errors.Join(state.CheckKey("session id", id), b.open("session fields")); err != nil {
		return nil, err
	}
	m, err := b.c.HGetAll(ctx, b.key("sess", id)).Result()
	if err != nil {
		return nil, b.fail(ctx, "session fields", err)
	}
	if m == nil {
		m = map[string]string{}
	}
	return m, nil
}

// TouchSession implements state.Sessions.
func (b *Backend) TouchSession(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if err := errors.Join(state.CheckKey("session id", id), state.CheckTTL(ttl), b.open("touch session")); err != nil {
		return false, err
	}
	ok, err := b.c.PExpire(ctx, b.key("sess", id), ttl).Result()
	if err != nil {
		return false, b.fail(ctx, "touch session", err)
	}
	return ok, nil
}

// DeleteSession implements state.Sessions.
func (b *Backend) DeleteSession(ctx context.Context, id string) error {
	if err := errors.Join(state.CheckKey("session id", id), b.open("delete session")); err != nil {
		return err
	}
	if err := b.c.Del(ctx, b.key("sess", id)).Err(); err != nil {
		return b.fail(ctx, "delete session", err)
	}
	return nil
}

// listSession returns a session's fields whose names begin with one of
// the prefixes (every field when none is given), filtered on the server
// so that a session's subscriptions do not cross the network. KEYS[1]
// the hash; ARGV the prefixes. Returns {} for no session, else {1,
// name, value, ...}.
var listSession = goredis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then return {} end
local out = {1}
for i = 1, #all, 2 do
  local keep = #ARGV == 0
  for j = 1, #ARGV do
    if string.sub(all[i], 1, #ARGV[j]) == ARGV[j] then keep = true break end
  end
  if keep then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
`)

// scanBatch is the COUNT of one SCAN of ListSessions.
const scanBatch = 500

// globEscape makes s match itself in a SCAN pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ListSessions implements state.Sessions: SCAN over the session keys of
// this prefix, each batch's fields read in one pipelined round trip.
func (b *Backend) ListSessions(ctx context.Context, limit int, prefixes ...string) ([]state.SessionState, bool, error) {
	if err := errors.Join(state.CheckListLimit(limit), b.open("list sessions")); err != nil {
		return nil, false, err
	}
	args := make([]any, len(prefixes))
	for i, p := range prefixes {
		args[i] = p
	}
	if err := listSession.Load(ctx, b.c).Err(); err != nil {
		return nil, false, b.fail(ctx, "list sessions", err)
	}
	keyPrefix := b.key("sess", "")
	match := globEscape(keyPrefix) + "*"
	seen := map[string]bool{}
	out := []state.SessionState{}
	var cursor uint64
	for {
		keys, next, err := b.c.Scan(ctx, cursor, match, scanBatch).Result()
		if err != nil {
			return nil, false, b.fail(ctx, "list sessions", err)
		}
		var todo []string
		for _, k := range keys {
			if !seen[k] { // SCAN may return a key twice
				seen[k] = true
				todo = append(todo, k)
			}
		}
		if len(todo) > 0 {
			cmds, err := b.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for _, k := range todo {
					listSession.EvalSha(ctx, p, []string{k}, args...)
				}
				return nil
			})
			if err != nil && !errors.Is(err, goredis.Nil) {
				return nil, false, b.fail(ctx, "list sessions", err)
			}
			for i, c := range cmds {
				r, err := c.(*goredis.Cmd).Slice()
				if err != nil {
					return nil, false, b.fail(ctx, "list sessions", err)
				}
				if len(r) == 0 {
					continue // lapsed or deleted since the SCAN
				}
				fields := make(map[string]string, (len(r)-1)/2)
				for j := 1; j+1 < len(r); j += 2 {
					name, _ := r[j].(string)
					value, _ := r[j+1].(string)
					fields[name] = value
				}
				out = append(out, state.SessionState{ID: strings.TrimPrefix(todo[i], keyPrefix), Fields: fields})
				if len(out) > limit {
					return out[:limit], false, nil
				}
			}
		}
		if next == 0 {
			return out, true, nil
		}
		cursor = next
	}
}

// gcra is state.GCRA in Lua, on the server's clock, in microseconds (exact
// in a Lua double until the year 2255). KEYS[1] the bucket's tat; ARGV
// interval µs, burst. Returns {allowed, retry after µs, remaining}.
var gcra = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local newtat = tat + interval
local allowat = newtat - interval * burst
if now < allowat then return {0, allowat - now, 0} end
redis.call('SET', KEYS[1], string.format('%.0f', newtat), 'PX', math.ceil((newtat - now) / 1000))
return {1, 0, math.floor((now - allowat) / interval)}
`)

// Allow implements state.RateLimiter.
func (b *Backend) Allow(ctx context.Context, key string, l state.Limit) (state.Decision, error) {
	if err := errors.Join(state.CheckKey("rate limit key", key), l.Validate(), b.open("allow")); err != nil {
		return state.Decision{}, err
	}
	r, err := gcra.Run(ctx, b.c, []string{b.key("rate", key)}, l.Interval().Microseconds(), l.BurstOrDefault()).Int64Slice()
	if err != nil {
		return state.Decision{}, b.fail(ctx, "allow", err)
	}
	if len(r) != 3 {
		return state.Decision{}, fmt.Errorf("state allow: redis: %d values from the script, want 3", len(r))
	}
	return state.Decision{Allowed: r[0] == 1, RetryAfter: time.Duration(r[1]) * time.Microsecond, Remaining: int(r[2])}, nil
}

// Replicas: a sorted set of ids scored by expiry (ms, server clock) and a
// hash of their URLs; a listing drops the lapsed ones from both.
const nowMS = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// KEYS the set, the hash; ARGV id, ttl ms, url.
var heartbeat = goredis.NewScript(nowMS + `
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
`)

// KEYS the set, the hash. Returns id, url, id, url...
var liveReplicas = goredis.NewScript(nowMS + `
local cut = string.format('%.0f', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cut)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut)
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. cut, '+inf')
local out = {}
if #ids == 0 then return out end
local urls = redis.call('HMGET', KEYS[2], unpack(ids))
for i = 1, #ids do
  out[2 * i - 1] = ids[i]
  out[2 * i] = urls[i] or ''
end
return out
`)

func (b *Backend) replicaKeys() []string {
	return []string{b.prefix + "replicas", b.prefix + "replica-urls"}
}

// Heartbeat implements state.Replicas.
func (b *Backend) Heartbeat(ctx context.Context, r state.Replica, ttl time.Duration) error {
	if err := errors.Join(state.CheckKey("replica id", r.ID), state.CheckKey("replica url", r.URL), state.CheckTTL(ttl), b.open("heartbeat")); err != nil {
		return err
	}
	if err := heartbeat.Run(ctx, b.c, b.replicaKeys(), r.ID, ms(ttl), r.URL).Err(); err != nil {
		return b.fail(ctx, "heartbeat", err)
	}
	return nil
}

// LiveReplicas implements state.Replicas.
func (b *Backend) LiveReplicas(ctx context.Context) ([]state.Replica, error) {
	if err := b.open("live replicas"); err != nil {
		return nil, err
	}
	r, err := liveReplicas.Run(ctx, b.c, b.replicaKeys()).StringSlice()
	if err != nil {
		return nil, b.fail(ctx, "live replicas", err)
	}
	out := []state.Replica{}
	for i := 0; i+1 < len(r); i += 2 {
		out = append(out, state.Replica{ID: r[i], URL: r[i+1]})
	}
	slices.SortFunc(out, func(a, b state.Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Deregister implements state.Replicas.
func (b *Backend) Deregister(ctx context.Context, id string) error {
	if err := errors.Join(state.CheckKey("replica id", id), b.open("deregister")); err != nil {
		return err
	}
	k := b.replicaKeys()
	_, err := b.c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.ZRem(ctx, k[0], id)
		p.HDel(ctx, k[1], id)
		return nil
	})
	if err != nil {
		return b.fail(ctx, "deregister", err)
	}
	return nil
}

// Stream owners: a hash {r: replica, v: version, hi, lo}. Versions are
// int64 and a Lua number is a double, exact only to 2^53, so the script
// compares the version's high and low 32 bits. KEYS[1]; ARGV replica, v,
// hi, lo, ttl ms. Returns {ok, replica, v}.
var claimStream = goredis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'r', 'v', 'hi', 'lo')
if cur[1] then
  local chi, clo = tonumber(cur[3]), tonumber(cur[4])
  local hi, lo = tonumber(ARGV[3]), tonumber(ARGV[4])
  local older = hi < chi or (hi == chi and lo < clo)
  local same = hi == chi and lo == clo
  if older or (same and cur[1] ~= ARGV[1]) then return {0, cur[1], cur[2]} end
end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 'v', ARGV[2], 'hi', ARGV[3], 'lo', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, ARGV[1], ARGV[2]}
`)

// KEYS[1]; ARGV replica, v.
var releaseStream = goredis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'r', 'v')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then redis.call('DEL', KEYS[1]) end
return 1
`)

// ClaimStream implements state.StreamOwners.
func (b *Backend) ClaimStream(ctx context.Context, id string, o state.StreamOwner, ttl time.Duration) (state.StreamOwner, bool, error) {
	if err := errors.Join(state.CheckKey("session id", id), state.CheckKey("replica id", o.Replica), state.CheckTTL(ttl), b.open("claim stream")); err != nil {
		return state.StreamOwner{}, false, err
	}
	hi, lo := o.Version>>32, o.Version&0xffffffff
	r, err := claimStream.Run(ctx, b.c, []string{b.key("owner", id)}, o.Replica, o.Version, hi, lo, ms(ttl)).Slice()
	if err != nil {
		return state.StreamOwner{}, false, b.fail(ctx, "claim stream", err)
	}
	if len(r) != 3 {
		return state.StreamOwner{}, false, fmt.Errorf("state claim stream: redis: %d values from the script, want 3", len(r))
	}
	ok, _ := r[0].(int64)
	cur, err := owner(r[1], r[2])
	if err != nil {
		return state.StreamOwner{}, false, fmt.Errorf("state claim stream: %w", err)
	}
	return cur, ok == 1, nil
}

// owner decodes a stored replica and version.
func owner(replica, version any) (state.StreamOwner, error) {
	r, _ := replica.(string)
	vs, _ := version.(string)
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil || r == "" {
		return state.StreamOwner{}, errors.New("redis: a stream owner that is not one (a foreign key under the prefix?)")
	}
	return state.StreamOwner{Replica: r, Version: v}, nil
}

// StreamOwnerOf implements state.StreamOwners.
func (b *Backend) StreamOwnerOf(ctx context.Context, id string) (state.StreamOwner, bool, error) {
	if err := errors.Join(state.CheckKey("session id", id), b.open("stream owner")); err != nil {
		return state.StreamOwner{}, false, err
	}
	r, err := b.c.HMGet(ctx, b.key("owner", id), "r", "v").Result()
	if err != nil {
		return state.StreamOwner{}, false, b.fail(ctx, "stream owner", err)
	}
	if len(r) != 2 || r[0] == nil {
		return state.StreamOwner{}, false, nil
	}
	o, err := owner(r[0], r[1])
	if err != nil {
		return state.StreamOwner{}, false, fmt.Errorf("state stream owner: %w", err)
	}
	return o, true, nil
}

// ReleaseStream implements state.StreamOwners.
func (b *Backend) ReleaseStream(ctx context.Context, id string, o state.StreamOwner) error {
	if err := errors.Join(state.CheckKey("session id", id), b.open("release stream")); err != nil {
		return err
	}
	if err := releaseStream.Run(ctx, b.c, []string{b.key("owner", id)}, o.Replica, o.Version).Err(); err != nil {
		return b.fail(ctx, "release stream", err)
	}
	return nil
}

// Event buffers are Redis streams whose entry ids are 0-1, 0-2, ...
// (XADD 0-*: Redis 7 numbers them), trimmed exactly with MAXLEN. KEYS[1];
// ARGV max length, ttl ms, data. Returns the entry id.
var appendEvent = goredis.NewScript(`
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], '0-*', 'd', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return id
`)

// KEYS[1]; ARGV the exclusive start id (or "" for none after it).
// Returns {} for no stream, else {last id, entries}.
var eventsAfter = goredis.NewScript(`
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return {} end
local entries = {}
if ARGV[1] ~= '' then entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+') end
return {last[1][1], entries}
`)

// seqOf parses an entry id 0-n.
func seqOf(id string) (uint64, error) {
	s, ok := strings.CutPrefix(id, "0-")
	if !ok {
		return 0, errors.New("redis: an event id not of this package (a foreign key under the prefix?)")
	}
	return strconv.ParseUint(s, 10, 64)
}

// AppendEvent implements state.Events.
func (b *Backend) AppendEvent(ctx context.Context, stream string, data []byte, maxLen int, ttl time.Duration) (uint64, error) {
	if err := errors.Join(state.CheckKey("stream", stream), state.CheckMaxLen(maxLen), state.CheckTTL(ttl), b.open("append event")); err != nil {
		return 0, err
	}
	id, err := appendEvent.Run(ctx, b.c, []string{b.key("events", stream)}, maxLen, ms(ttl), data).Text()
	if err != nil {
		return 0, b.fail(ctx, "append event", err)
	}
	n, err := seqOf(id)
	if err != nil {
		return 0, fmt.Errorf("state append event: %w", err)
	}
	return n, nil
}

// EventsAfter implements state.Events.
func (b *Backend) EventsAfter(ctx context.Context, stream string, after uint64) ([]state.Event, bool, error) {
	if err := errors.Join(state.CheckKey("stream", stream), b.open("events after")); err != nil {
		return nil, false, err
	}
	start := "(0-" + strconv.FormatUint(after, 10)
	if after == 1<<64-1 {
		start = "" // nothing can follow; XRANGE refuses the exclusive start
	}
	r, err := eventsAfter.Run(ctx, b.c, []string{b.key("events", stream)}, start).Slice()
	if err != nil {
		return nil, false, b.fail(ctx, "events after", err)
	}
	if len(r) == 0 {
		return []state.Event{}, after == 0, nil
	}
	events, last, err := decodeEvents(r)
	if err != nil {
		return nil, false, fmt.Errorf("state events after: %w", err)
	}
	complete := after >= last || len(events) > 0 && events[0].ID <= after+1
	return events, complete, nil
}

// decodeEvents decodes eventsAfter's {last id, entries}.
func decodeEvents(r []any) ([]state.Event, uint64, error) {
	bad := errors.New("redis: an event buffer not of this package (a foreign key under the prefix?)")
	lastID, _ := r[0].(string)
	last, err := seqOf(lastID)
	if err != nil || len(r) != 2 {
		return nil, 0, bad
	}
	entries, _ := r[1].([]any)
	events := make([]state.Event, 0, len(entries))
	for _, e := range entries {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			return nil, 0, bad
		}
		id, _ := pair[0].(string)
		n, err := seqOf(id)
		fv, _ := pair[1].([]any)
		if err != nil || len(fv) != 2 {
			return nil, 0, bad
		}
		data, _ := fv[1].(string)
		events = append(events, state.Event{ID: n, Data: []byte(data)})
	}
	return events, last, nil
}

// channel is topic's Redis channel.
func (b *Backend) channel(topic string) string { return b.key("topic", topic) }

// Publish implements state.PubSub.
func (b *Backend) Publish(ctx context.Context, topic string, data []byte) (int, error) {
	if err := errors.Join(state.CheckKey("topic", topic), b.open("publish")); err != nil {
		return 0, err
	}
	n, err := b.c.Publish(ctx, b.channel(topic), data).Result()
	if err != nil {
		return 0, b.fail(ctx, "publish", err)
	}
	return int(n), nil
}

// subscription relays a go-redis PubSub into a delivery queue. go-redis
// reconnects and resubscribes by itself; a subscribe confirmation after
// the first ones means it did, and messages published meanwhile are lost.
type subscription struct {
	b      *Backend
	ps     *goredis.PubSub
	q      *delivery.Queue[state.Message]
	pumped chan struct{}
	once   sync.Once
}

// Subscribe implements state.PubSub: it returns once Redis confirmed every
// topic.
func (b *Backend) Subscribe(ctx context.Context, topics ...string) (state.Subscription, error) {
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: subscribe needs a topic", state.ErrInvalid)
	}
	var errs []error
	for _, t := range topics {
		errs = append(errs, state.CheckKey("topic", t))
	}
	if err := errors.Join(append(errs, b.open("subscribe"))...); err != nil {
		return nil, err
	}
	chans := make([]string, len(topics))
	for i, t := range topics {
		chans[i] = b.channel(t)
	}
	want := len(slices.Compact(slices.Sorted(slices.Values(chans))))
	ps := b.c.Subscribe(ctx)
	err := ps.Subscribe(ctx, chans...)
	for confirmed := map[string]bool{}; err == nil && len(confirmed) < want; {
		var m any
		if m, err = ps.ReceiveTimeout(ctx, b.readTimeout); err == nil {
			if s, ok := m.(*goredis.Subscription); ok && s.Kind == "subscribe" {
				confirmed[s.Channel] = true
			}
		}
	}
	if err != nil {
		ps.Close()
		return nil, b.fail(ctx, "subscribe", err)
	}
	s := &subscription{b: b, ps: ps, q: delivery.New(state.SubscriptionBuffer, state.Message{Lost: true}), pumped: make(chan struct{})}
	go s.pump(ps.ChannelWithSubscriptions(goredis.WithChannelSize(state.SubscriptionBuffer)))
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	if b.closed.Load() { // Close ran meanwhile and did not see s
		s.Close()
		return nil, fmt.Errorf("state subscribe: %w", state.ErrClosed)
	}
	return s, nil
}

func (s *subscription) pump(ch <-chan any) {
	defer close(s.pumped)
	for m := range ch {
		switch m := m.(type) {
		case *goredis.Message:
			topic := strings.TrimPrefix(m.Channel, s.b.prefix+"topic:")
			s.q.Push(state.Message{Topic: topic, Data: []byte(m.Payload)})
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				s.q.MarkLost()
			}
		}
	}
}

func (s *subscription) C() <-chan state.Message { return s.q.C() }

// Close ends the subscription: go-redis's goroutines, the pump and the
// queue's have ended when it returns.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.b.mu.Lock()
		delete(s.b.subs, s)
		s.b.mu.Unlock()
		_ = s.ps.Close()
		<-s.pumped
		s.q.Close()
	})
	<-s.pumped
	s.q.Close()
	return nil
}
