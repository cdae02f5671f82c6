package guard

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Budgets (issue 17 §4, issue 22 holes 14 and 15): a key with
// auth.keys[].budget may spend at most its amount per period on tool
// calls (the costs the audit records carry). Every tools/call of such a
// key, whatever carried it, reserves its expected cost before it runs and
// is refused while the period's spending, reservations included, has
// reached the budget; after the call the reservation becomes the call's
// actual cost, or is released when it cost nothing.
//
// Without shared state the spending is this replica's: the store's sum
// (the UsageFunc, read at most every budgetRefresh per key) plus what this
// replica's calls cost and reserved since. In fleet mode it is the
// fleet's, one sum per key and period in the shared state
// (state.Spending), seeded from the store's sum; so a budget is exceeded
// by at most the calls already in flight when it ran out. What a refusal
// looks like to the client is the gateway's to say.

// budgetRefresh is how stale a key's spent sum from the store may be.
const budgetRefresh = 5 * time.Second

// budgetReadShare spaces a key's reads of the store by at least this many
// times what the last one took: the sum is of the whole period (a month
// of a busy key's calls), and reading it every budgetRefresh must not
// become a CPU's worth of work. The sum is then at most that much stale;
// this replica's own calls are counted exactly meanwhile.
const budgetReadShare = 50

// budgetStateTimeout bounds one round trip to the shared state for a
// budget: a call of a budgeted key waits at most that long for it.
const budgetStateTimeout = 2 * time.Second

// budgetEntries bounds the per-replica sums; an entry with nothing in
// flight is only a cache of the store.
const budgetEntries = 100_000

// UsageFunc sums the cost of alias's tool calls since a time.
type UsageFunc func(ctx context.Context, alias string, since time.Time) (float64, error)

// Budgets owns the keys' spending a replica knows of: its own sums read
// from the store, or the fleet's in the shared state. Safe for concurrent
// use.
type Budgets struct {
	usage UsageFunc
	// shared is the fleet's spending (fleet mode); nil: this replica's.
	shared state.Spending
	// clock is the gateway's (the reads' times and the calls' must be of
	// one clock); nil: time.Now.
	clock func() time.Time

	// mu guards the fields below.
	mu sync.Mutex
	m  map[string]*budgetSpent // by key alias
}

// NewBudgets returns the budgets of keys whose spending usage sums;
// shared, when not nil, holds the fleet's sums; clock nil is time.Now.
func NewBudgets(usage UsageFunc, shared state.Spending, clock func() time.Time) *Budgets {
	return &Budgets{usage: usage, shared: shared, clock: clock, m: map[string]*budgetSpent{}}
}

// Shared reports whether the spending is the fleet's (a failure to read
// it then refuses the call rather than let every replica spend the
// budget again).
func (b *Budgets) Shared() bool { return b.shared != nil }

type budgetSpent struct {
	start    time.Time // the period the sum is of
	fetched  time.Time // when the read of base began
	base     float64   // the store's sum then
	local    []localCost
	localSum float64       // the sum of local's costs
	took     time.Duration // how long the read of base took
	reserved float64       // this replica's calls in flight
	// reading: a read of the store for this entry is in flight; its
	// caller applies it, and the key's other calls count from the entry
	// as it is meanwhile, rather than each read the store again: under
	// load every call of a key in flight found the entry stale at once,
	// and each read the period's whole sum (a quarter of the gateway's
	// CPU at c=64, bench/features.sh).
	reading bool
	// ready is closed when the entry's first read ends (nil after it):
	// the key's calls that arrive meanwhile wait for it.
	ready chan struct{}
}

// localCost is one of this replica's settled calls, counted until a read
// of the store that began after it (which has it).
type localCost struct {
	at   time.Time
	cost float64
}

func (s *budgetSpent) sum() float64 { return s.base + s.reserved + s.localSum }

// entryLocked returns alias's sum for the period at start, read again
// from the store when stale; it takes b.mu and returns with it held (on
// success only). One read per key is in flight at a time: a call that
// finds its key's entry stale while another call reads it counts from
// the entry as it is (stale by at most budgetRefresh and that read's
// time), and a call that finds no entry yet waits for the first read.
func (b *Budgets) entryLocked(ctx context.Context, alias string, start, now time.Time) (*budgetSpent, error) {
	for {
		b.mu.Lock()
		s := b.m[alias]
		if s != nil && s.start.Equal(start) {
			if ready := s.ready; ready != nil {
				b.mu.Unlock()
				select {
				case <-ready:
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if s.reading || now.Sub(s.fetched) < max(budgetRefresh, budgetReadShare*s.took) {
				return s, nil
			}
			s.reading = true
		} else {
			if len(b.m) >= budgetEntries {
				for k, v := range b.m {
					if v.reserved == 0 && !v.reading {
						delete(b.m, k)
					}
				}
			}
			s = &budgetSpent{start: start, reading: true, ready: make(chan struct{})}
			b.m[alias] = s
		}
		b.mu.Unlock()
		return b.read(ctx, alias, s, now)
	}
}

// read reads s's base from the store, the read beginning at began, and
// applies it; it returns with b.mu held (on success only).
func (b *Budgets) read(ctx context.Context, alias string, s *budgetSpent, began time.Time) (*budgetSpent, error) {
	base, err := b.usage(ctx, alias, s.start)
	took := b.now().Sub(began)
	b.mu.Lock()
	s.reading = false
	first := s.ready != nil
	if first {
		// The waiters go on: with the base, or to read it themselves.
		close(s.ready)
		s.ready = nil
	}
	if err != nil {
		if first && b.m[alias] == s {
			delete(b.m, alias)
		}
		b.mu.Unlock()
		return nil, err
	}
	// What this replica's calls cost before the read began is in the
	// store's sum now (or about to be); what they cost since is not, and
	// what is in flight is not.
	kept, sum := s.local[:0], 0.0
	for _, c := range s.local {
		if !c.at.Before(began) {
			kept = append(kept, c)
			sum += c.cost
		}
	}
	s.fetched, s.base, s.local, s.localSum, s.took = began, base, kept, sum, max(took, 0)
	return s, nil
}

func (b *Budgets) now() time.Time {
	if b.clock != nil {
		return b.clock()
	}
	return time.Now()
}

// Reservation is one call's claim on its key's budget: made before the
// call, settled once with what the call cost (0: released).
type Reservation struct {
	b     *Budgets
	alias string
	key   string // the shared sum's key; "" for this replica's
	start time.Time
	at    time.Time // when it was made
	end   time.Time // when the period renews
	ttl   time.Duration
	est   float64
	once  sync.Once
}

// Alias is the key whose budget r claims.
func (r *Reservation) Alias() string { return r.alias }

// End is when the period r claims from ends and the budget renews.
func (r *Reservation) End() time.Time { return r.end }

// Left is how long the period had left when r was made.
func (r *Reservation) Left() time.Duration { return r.end.Sub(r.at) }

// Reserve claims est (what the call costs before its result is known) of
// alias's budget of amount per period (store.BudgetDay, ...). ok false:
// the budget is spent (spent says how much, reservations included). An
// error: the spending could not be read (the store, or in fleet mode the
// shared state). r is returned in every case (its End says when a spent
// budget renews); only an allowed one must be settled or released.
func (b *Budgets) Reserve(ctx context.Context, alias, period string, amount, est float64) (r *Reservation, spent float64, ok bool, err error) {
	now := b.now()
	start := store.PeriodStart(period, now)
	end := store.PeriodEnd(period, start)
	r = &Reservation{b: b, alias: alias, start: start, at: now, end: end, est: est,
		// The sum lives as long as its period, and a little longer: a
		// replica whose clock is behind still finds it.
		ttl: end.Sub(now) + time.Hour}
	if b.shared != nil {
		r.key = "budget:" + strconv.FormatInt(start.Unix(), 10) + ":" + alias
	}
	spent, ok, err = b.reserve(ctx, r, amount, now)
	return r, spent, ok, err
}

// reserve claims r.est of r.alias's budget of amount for the period at
// r.start.
func (b *Budgets) reserve(ctx context.Context, r *Reservation, amount float64, now time.Time) (spent float64, ok bool, err error) {
	if b.shared == nil {
		s, err := b.entryLocked(ctx, r.alias, r.start, now)
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

// Settle turns the reservation into the call's actual cost; only its
// first call counts (a Release after it does nothing). An error: the
// shared state could not be corrected, and the reservation stands (the
// key is charged what the call was expected to cost, never less than
// nothing).
func (r *Reservation) Settle(ctx context.Context, cost float64) error {
	var err error
	r.once.Do(func() {
		if r.key == "" {
			r.b.mu.Lock()
			if s := r.b.m[r.alias]; s != nil && s.start.Equal(r.start) {
				s.reserved = max(s.reserved-r.est, 0)
				if cost != 0 {
					s.local = append(s.local, localCost{r.b.now(), cost})
					s.localSum += cost
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
		err = r.b.shared.Spend(sctx, r.key, cost-r.est, r.ttl)
	})
	return err
}

// Release gives back a reservation the call never settled (refused
// before it went upstream, failed without an answer).
func (r *Reservation) Release(ctx context.Context) error { return r.Settle(ctx, 0) }
