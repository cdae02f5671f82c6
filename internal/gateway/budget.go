package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/guard"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Budgets (issue 17 §4, issue 22 holes 14 and 15; guard.Budgets owns the
// spending): every tools/call of a key with auth.keys[].budget, whatever
// carried it (a POST alone or in a batch, legacy SSE, the stdio front, a
// 2026-07-28 request, a hop from another replica, an operator's call as
// the key), reserves its expected cost in the pipeline's budget stage
// before it runs and settles its actual cost in the cost stage
// (pipeline.go). Here is what a refusal looks like to the client: 429
// with Retry-After when the budget is spent; when the fleet's shared
// state does not answer, 503 rather than let every replica spend the
// budget again. Without shared state a store that cannot be read does
// not stop calls; it is logged.

// UsageFunc sums the cost of alias's tool calls since a time.
type UsageFunc = guard.UsageFunc

// reserveBudget claims the call's expected cost from its caller's budget
// before it runs: nil, nil when the caller has no budget (or the store
// could not be read without shared state). A refusal is the JSON-RPC
// error the client gets, noted for the HTTP answer of a lone request.
func (c *call) reserveBudget() (*guard.Reservation, *jsonrpc.Error) {
	g, ctx := c.g, c.ctx
	if g.budgets == nil {
		return nil, nil
	}
	cl := callers.FromContext(ctx)
	if cl == nil || cl.BudgetAmount <= 0 || cl.Alias == "" {
		return nil, nil
	}
	tool, _ := jsonrpc.GetString(c.params, "name")
	est := 0.0
	if srv := g.current().cfg.Servers[c.server]; srv != nil && srv.Tools != nil {
		// What the call costs before its result is known; a price per KB
		// of result is charged after it.
		est = srv.Tools.CallCost(tool, 0)
	}
	r, spent, ok, err := g.budgets.Reserve(ctx, cl.Alias, cl.BudgetPeriod, cl.BudgetAmount, est)
	switch {
	case err != nil && !g.budgets.Shared():
		g.log.Warn("budget: could not read the key's spending; the call goes on", "key", cl.Alias, "error", err)
		return nil, nil
	case err != nil:
		g.log.Warn("budget: the shared state does not answer; a call of a key with a budget is refused", "key", cl.Alias, "error", err)
		noteLimit(c.sc, http.StatusServiceUnavailable, 5)
		return nil, &jsonrpc.Error{Code: callers.CodeUnavailable, Message: "Service Unavailable: key " + cl.Alias +
			" has a budget, and the gateway cannot read its spending right now (the fleet's shared state does not answer); try again"}
	case !ok:
		noteLimit(c.sc, http.StatusTooManyRequests, int64(r.Left().Seconds())+1)
		return nil, budgetExceeded(cl, spent, r.End())
	}
	return r, nil
}

// settle turns the call's reservation into cost (0: released); only the
// first settle counts. When the shared state cannot be corrected the
// reservation stands: the key is charged what the call was expected to
// cost, never less than nothing.
func (c *call) settle(cost float64) {
	if err := c.rsv.Settle(c.ctx, cost); err != nil {
		c.g.log.Warn("budget: could not correct a call's reservation in the shared state", "key", c.rsv.Alias(), "error", err)
	}
}

// budgetExceeded is the error of a call refused because c's budget is
// spent: how much of which budget, and when it renews.
func budgetExceeded(c *callers.Caller, spent float64, end time.Time) *jsonrpc.Error {
	return &jsonrpc.Error{Code: callers.CodeRateLimited,
		Message: "Budget exceeded: key " + c.Alias + " has spent " + strconv.FormatFloat(spent, 'f', -1, 64) +
			" of its " + map[string]string{store.BudgetDay: "daily", store.BudgetWeek: "weekly", store.BudgetMonth: "monthly"}[c.BudgetPeriod] + " budget of " + strconv.FormatFloat(c.BudgetAmount, 'f', -1, 64) +
			"; it renews at " + end.Format(time.RFC3339)}
}
