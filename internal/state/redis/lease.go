package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Leases: a string key holding the holder, with a PX expiry. KEYS[1];
// ARGV holder, ttl ms. Returns 1 when held by holder now.
var acquireLease = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// KEYS[1]; ARGV holder. Deletes only the holder's own lease.
var releaseLease = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// AcquireLease implements state.Leases.
func (b *Backend) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (bool, error) {
	if err := errors.Join(state.CheckLease(key, holder, ttl), b.open("acquire lease")); err != nil {
		return false, err
	}
	n, err := acquireLease.Run(ctx, b.c, []string{b.key("lease", key)}, holder, ms(ttl)).Int()
	if err != nil {
		return false, b.fail(ctx, "acquire lease", err)
	}
	return n == 1, nil
}

// ReleaseLease implements state.Leases.
func (b *Backend) ReleaseLease(ctx context.Context, key, holder string) error {
	if err := errors.Join(state.CheckLease(key, holder, time.Millisecond), b.open("release lease")); err != nil {
		return err
	}
	if err := releaseLease.Run(ctx, b.c, []string{b.key("lease", key)}, holder).Err(); err != nil {
		return b.fail(ctx, "release lease", err)
	}
	return nil
}
