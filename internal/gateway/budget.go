package gateway

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Budgets (issue 17 §4): a key with auth.keys[].budget may spend at most
// its amount per period on tool calls (the costs the audit records
// carry). The spent sum comes from the store (Options.Usage) at most
// every budgetRefresh per key, plus what this replica's calls cost since;
// so a budget holds across replicas within seconds, and a burst of calls
// in flight when it runs out may overshoot it by their cost.

// budgetRefresh is how stale a key's spent sum from the store may be.
const budgetRefresh = 5 * time.Second

// UsageFunc sums the cost of alias's tool calls since a time.
type UsageFunc func(ctx context.Context, alias string, since time.Time) (float64, error)

type budgetSpent struct {
	start   time.Time // the period the sum is of
	fetched time.Time // when base was read from the store
	base    float64   // the store's sum then
	local   float64   // this replica's costs since
}

type budgets struct {
	usage UsageFunc
	mu    sync.Mutex
	m     map[string]*budgetSpent
}

// spent is what alias has spent in the period starting at start.
func (b *budgets) spent(ctx context.Context, alias string, start, now time.Time) (float64, error) {
	b.mu.Lock()
	s := b.m[alias]
	if s != nil && s.start.Equal(start) && now.Sub(s.fetched) < budgetRefresh {
		v := s.base + s.local
		b.mu.Unlock()
		return v, nil
	}
	b.mu.Unlock()
	base, err := b.usage(ctx, alias, start)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) > 100_000 {
		clear(b.m) // bounded: stale entries are only a cache
	}
	b.m[alias] = &budgetSpent{start: start, fetched: now, base: base}
	return base, nil
}

// add counts a call's cost for alias until the next read from the store.
func (b *budgets) add(alias string, cost float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.m[alias]; s != nil {
		s.local += cost
	}
}

// overBudget answers a tools/call of a caller whose budget is spent: 429
// with Retry-After until the period ends, and a JSON-RPC error saying so.
// false: the call may go on (no budget, within it, or the sum could not
// be read: a store outage does not stop calls, it is logged).
func (g *Gateway) overBudget(w http.ResponseWriter, r *http.Request, msgs []*jsonrpc.Message) bool {
	if g.budgets == nil {
		return false
	}
	c := callers.FromContext(r.Context())
	if c == nil || c.BudgetAmount <= 0 || c.Alias == "" {
		return false
	}
	var id jsonrpc.ID
	calls := false
	for _, m := range msgs {
		if m.IsRequest() && m.Method == mcpwire.MethodToolsCall {
			calls, id = true, m.ID
		}
	}
	if !calls {
		return false
	}
	now := g.now()
	start := store.PeriodStart(c.BudgetPeriod, now)
	spent, err := g.budgets.spent(r.Context(), c.Alias, start, now)
	if err != nil {
		g.log.Warn("budget: could not read the key's spending; the call goes on", "key", c.Alias, "error", err)
		return false
	}
	if spent < c.BudgetAmount {
		return false
	}
	end := store.PeriodEnd(c.BudgetPeriod, start)
	w.Header().Set("Retry-After", strconv.FormatInt(int64(end.Sub(now).Seconds())+1, 10))
	writeRPCErrorID(w, http.StatusTooManyRequests, id, &jsonrpc.Error{Code: callers.CodeRateLimited,
		Message: "Budget exceeded: key " + c.Alias + " has spent " + strconv.FormatFloat(spent, 'f', -1, 64) +
			" of its " + map[string]string{store.BudgetDay: "daily", store.BudgetWeek: "weekly", store.BudgetMonth: "monthly"}[c.BudgetPeriod] + " budget of " + strconv.FormatFloat(c.BudgetAmount, 'f', -1, 64) +
			"; it renews at " + end.Format(time.RFC3339)})
	return true
}

// noteCost counts a recorded call's cost against its key's budget.
func (g *Gateway) noteCost(c *callers.Caller, cost float64) {
	if g.budgets != nil && c != nil && c.BudgetAmount > 0 && cost > 0 {
		g.budgets.add(c.Alias, cost)
	}
}
