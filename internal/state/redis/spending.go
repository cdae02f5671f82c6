package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Spending: a string key holding the sum as a decimal (INCRBYFLOAT), with
// a PX expiry. Sums go back as strings: a Lua number in a reply is
// truncated to an integer.
//
// reserve: KEYS[1]; ARGV limit, cost, ttl ms, seed ("" for none).
// Returns {allowed, unknown, spent}.
var reserveSpend = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  if ARGV[4] == '' then return {0, 1, '0'} end
  v = ARGV[4]
  redis.call('SET', KEYS[1], v, 'PX', ARGV[3])
end
if tonumber(v) >= tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0, 0, v}
end
redis.call('INCRBYFLOAT', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, 0, v}
`)

// spend: KEYS[1]; ARGV delta, ttl ms. Only a sum that exists changes.
var spend = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

func decimal(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Reserve implements state.Spending.
func (b *Backend) Reserve(ctx context.Context, key string, r state.Reservation) (state.SpendDecision, error) {
	if err := errors.Join(state.CheckReservation(key, r), b.open("reserve")); err != nil {
		return state.SpendDecision{}, err
	}
	seed := ""
	if r.Seeded {
		seed = decimal(r.Seed)
	}
	res, err := reserveSpend.Run(ctx, b.c, []string{b.key("spent", key)}, decimal(r.Limit), decimal(r.Cost), ms(r.TTL), seed).Slice()
	if err != nil {
		return state.SpendDecision{}, b.fail(ctx, "reserve", err)
	}
	if len(res) != 3 {
		return state.SpendDecision{}, fmt.Errorf("state reserve: redis: %d values from the script, want 3", len(res))
	}
	allowed, _ := res[0].(int64)
	unknown, _ := res[1].(int64)
	s, _ := res[2].(string)
	spent, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return state.SpendDecision{}, fmt.Errorf("state reserve: redis: a sum that is not a number")
	}
	return state.SpendDecision{Allowed: allowed == 1, Unknown: unknown == 1, Spent: spent}, nil
}

// Spend implements state.Spending.
func (b *Backend) Spend(ctx context.Context, key string, delta float64, ttl time.Duration) error {
	if err := errors.Join(state.CheckSpend(key, delta, ttl), b.open("spend")); err != nil {
		return err
	}
	if err := spend.Run(ctx, b.c, []string{b.key("spent", key)}, decimal(delta), ms(ttl)).Err(); err != nil {
		return b.fail(ctx, "spend", err)
	}
	return nil
}
