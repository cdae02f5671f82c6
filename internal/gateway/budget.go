package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Budgets (issue 17 §4, issue 22 holes 14 and 15): a key with
// auth.keys[].budget may spend at most its amount per period on tool
// calls (the costs the audit records carry). Every tools/call of such a
// key, whatever carried it (a POST alone or in a batch, legacy SSE, the
// stdio front, a 2026-07-28 request, a hop from another replica, an
// operator's call as the key), reserves its expected cost before it runs
// (forward) and is refused while the period's spending, reservations
// included, has reached the budget; after the call the reservation
// becomes the call's actual cost, or is released when it cost nothing.
//
// Without shared state the spending is this replica's: the store's sum
// (Options.Usage, read at most every budgetRefresh per key) plus what this
// replica's calls cost and reserved since. In fleet mode (Options.State)
// it is the fleet's, one sum per key and period in the shared state
// (state.Spending), seeded from the store's sum; so a budget is exceeded
// by at most the calls already in flight when it ran out. When the shared
// state does not answer, a budgeted key's calls are refused (503) rather
// than let every replica spend the budget again.

// budgetRefresh is how stale a key's spent sum from the store may be.
const budgetRefresh = 5 * time.Second

// budgetStateTimeout bounds one round trip to the shared state for a
// budget: a call of a budgeted key waits at most that long for it.
const budgetStateTimeout = 2 * time.Second

// UsageFunc sums the cost of alias's tool calls since a time.
type UsageFunc func(ctx context.Context, alias string, since time.Time) (float64, error)

type budgetSpent struct {
	start    time.Time // the period the sum is of
	fetched  time.Time // when the read of base began
	base     float64   // the store's sum then
	local    []localCost
	reserved float64 // this replica's calls in flight
}

// localCost is one of this replica's settled calls, counted until a read
// of the store that began after it (which has it).
type localCost struct {
	at   time.Time
	cost float64
}

func (s *budgetSpent) sum() float64 {
	t := s.base + s.reserved
	for _, c := range s.local {
		t += c.cost
	}
	return t
}

type budgets struct {
	usage UsageFunc
	// shared is the fleet's spending (fleet mode); nil: this replica's.
	shared state.Spending
	// clock is the gateway's (the reads' times and the calls' must be of
	// one clock); nil: time.Now.
	clock func() time.Time
	mu    sync.Mutex
	m     map[string]*budgetSpent
}

// budgetEntries bounds the per-replica sums; an entry with nothing in
// flight is only a cache of the store.
const budgetEntries = 100_000

// entry returns alias's sum for the period at start, read again from the
// store when stale, with b.mu held (on success only).
func (b *budgets) entry(ctx context.Context, alias string, start, now time.Time) (*budgetSpent, error) {
	b.mu.Lock()
	s := b.m[alias]
	if s != nil && s.start.Equal(start) && now.Sub(s.fetched) < budgetRefresh {
		return s, nil
	}
	b.mu.Unlock()
	began := now
	base, err := b.usage(ctx, alias, start)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if len(b.m) > budgetEntries {
		for k, v := range b.m {
			if v.reserved == 0 {
				delete(b.m, k)
			}
		}
	}
	s = b.m[alias]
	if s == nil || !s.start.Equal(start) {
		s = &budgetSpent{start: start}
		b.m[alias] = s
	}
	if s.fetched.After(began) {
		// A read that began later was applied meanwhile (concurrent
		// calls of one key): it knows more than this one.
		return s, nil
	}
	// What this replica's calls cost before the read began is in the
	// store's sum now (or about to be); what they cost since is not, and
	// what is in flight is not.
	kept := s.local[:0]
	for _, c := range s.local {
		if !c.at.Before(began) {
			kept = append(kept, c)
		}
	}
	s.fetched, s.base, s.local = began, base, kept
	return s, nil
}

func (b *budgets) now() time.Time {
	if b.clock != nil {
		return b.clock()
	}
	return time.Now()
}

// reservation is one call's claim on its key's budget: made before the
// call, settled once with what the call cost (0: released).
type reservation struct {
	b     *budgets
	alias string
	key   string // the shared sum's key; "" for this replica's
	start time.Time
	ttl   time.Duration
	est   float64
	once  sync.Once
	log   func(msg string, args ...any)
}

// reserve claims est of alias's budget of amount for the period at
// start. ok false: the budget is spent (spent says how much, reservations
// included). An error: the spending could not be read (the store, or in
// fleet mode the shared state).
func (b *budgets) reserve(ctx context.Context, r *reservation, amount float64, now time.Time) (spent float64, ok bool, err error) {
	if b.shared == nil {
		s, err := b.entry(ctx, r.alias, r.start, now)
		if err != nil {
			return 0, false, err
		}
		defer b.mu.Unlock()
		spent = s.sum()
		if spent >= amount {
			return spent, false, nil
		}
		s.reserved += r.est
		return spent, true, nil
	}
	sctx, cancel := context.WithTimeout(ctx, budgetStateTimeout)
	defer cancel()
	claim := state.Reservation{Limit: amount, Cost: r.est, TTL: r.ttl}
	d, err := b.shared.Reserve(sctx, r.key, claim)
	if err == nil && d.Unknown {
		// The first call of the period in the fleet (or the sum lapsed):
		// the store knows what was spent so far.
		if claim.Seed, err = b.usage(ctx, r.alias, r.start); err != nil {
			return 0, false, err
		}
		claim.Seeded = true
		d, err = b.shared.Reserve(sctx, r.key, claim)
	}
	if err != nil {
		return 0, false, err
	}
	return d.Spent, d.Allowed, nil
}

// settle turns the reservation into the call's actual cost; only its
// first call counts (a release after it does nothing).
func (r *reservation) settle(ctx context.Context, cost float64) {
	r.once.Do(func() {
		if r.key == "" {
			r.b.mu.Lock()
			if s := r.b.m[r.alias]; s != nil && s.start.Equal(r.start) {
				s.reserved = max(s.reserved-r.est, 0)
				if cost != 0 {
					s.local = append(s.local, localCost{r.b.now(), cost})
				}
			}
			r.b.mu.Unlock()
			return
		}
		if cost == r.est {
			return
		}
		// After the call, whatever its client did meanwhile.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budgetStateTimeout)
		defer cancel()
		if err := r.b.shared.Spend(sctx, r.key, cost-r.est, r.ttl); err != nil {
			// The reservation stands: the key is charged what the call
			// was expected to cost, never less than nothing.
			r.log("budget: could not correct a call's reservation in the shared state", "key", r.alias, "error", err)
		}
	})
}

// release gives back a reservation the call never settled (refused
// before it went upstream, failed without an answer).
func (r *reservation) release(ctx context.Context) { r.settle(ctx, 0) }

type reservationKey struct{}

// reservationOf is the budget reservation of ctx's call, or nil.
func reservationOf(ctx context.Context) *reservation {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	return r
}

// reserveBudget claims a tools/call's expected cost from its caller's
// budget before it runs: nil, nil when the caller has no budget (or the
// store could not be read without shared state: a store outage does not
// stop calls, it is logged). A refusal is the JSON-RPC error the client
// gets, noted for the HTTP answer of a lone request (429 with
// Retry-After, 503 when the fleet's spending cannot be read).
func (g *Gateway) reserveBudget(ctx context.Context, sc *scope, server string, params json.RawMessage) (*reservation, *jsonrpc.Error) {
	if g.budgets == nil {
		return nil, nil
	}
	c := callers.FromContext(ctx)
	if c == nil || c.BudgetAmount <= 0 || c.Alias == "" {
		return nil, nil
	}
	tool, _ := jsonrpc.GetString(params, "name")
	est := 0.0
	if srv := g.st().cfg.Servers[server]; srv != nil && srv.Tools != nil {
		// What the call costs before its result is known; a price per KB
		// of result is charged after it.
		est = srv.Tools.CallCost(tool, 0)
	}
	now := g.now()
	start := store.PeriodStart(c.BudgetPeriod, now)
	end := store.PeriodEnd(c.BudgetPeriod, start)
	r := &reservation{b: g.budgets, alias: c.Alias, start: start, est: est, log: g.log.Warn,
		// The sum lives as long as its period, and a little longer: a
		// replica whose clock is behind still finds it.
		ttl: end.Sub(now) + time.Hour}
	if g.budgets.shared != nil {
		r.key = "budget:" + strconv.FormatInt(start.Unix(), 10) + ":" + c.Alias
	}
	spent, ok, err := g.budgets.reserve(ctx, r, c.BudgetAmount, now)
	switch {
	case err != nil && r.key == "":
		g.log.Warn("budget: could not read the key's spending; the call goes on", "key", c.Alias, "error", err)
		return nil, nil
	case err != nil:
		g.log.Warn("budget: the shared state does not answer; a call of a key with a budget is refused", "key", c.Alias, "error", err)
		noteLimit(sc, http.StatusServiceUnavailable, 5)
		return nil, &jsonrpc.Error{Code: callers.CodeUnavailable, Message: "Service Unavailable: key " + c.Alias +
			" has a budget, and the gateway cannot read its spending right now (the fleet's shared state does not answer); try again"}
	case !ok:
		noteLimit(sc, http.StatusTooManyRequests, int64(end.Sub(now).Seconds())+1)
		return nil, budgetExceeded(c, spent, end)
	}
	return r, nil
}

// budgetExceeded is the error of a call refused because c's budget is
// spent: how much of which budget, and when it renews.
func budgetExceeded(c *callers.Caller, spent float64, end time.Time) *jsonrpc.Error {
	return &jsonrpc.Error{Code: callers.CodeRateLimited,
		Message: "Budget exceeded: key " + c.Alias + " has spent " + strconv.FormatFloat(spent, 'f', -1, 64) +
			" of its " + map[string]string{store.BudgetDay: "daily", store.BudgetWeek: "weekly", store.BudgetMonth: "monthly"}[c.BudgetPeriod] + " budget of " + strconv.FormatFloat(c.BudgetAmount, 'f', -1, 64) +
			"; it renews at " + end.Format(time.RFC3339)}
}

// chargeCall settles ctx's reservation with a recorded call's cost; a
// call without one (no budget) charges nothing.
func chargeCall(ctx context.Context, cost float64) {
	if r := reservationOf(ctx); r != nil {
		r.settle(ctx, cost)
	}
}
