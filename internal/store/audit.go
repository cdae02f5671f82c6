package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Page sizes for ListAudit and ListToolCalls.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// ActorMaster is the AuditEntry.Actor of actions taken with the master key.
const ActorMaster = "master"

// MaxSessionIDPrefix bounds ToolCall.SessionIDPrefix: a prefix identifies a
// session to an operator without being usable as the session id.
const MaxSessionIDPrefix = 8

// AuditEntry records one administrative action.
type AuditEntry struct {
	ID     int64           // assigned by the store
	Time   time.Time       // set to now when zero
	Actor  string          // key alias, or ActorMaster
	Action string          // "key.create", "session.terminate", ...
	Target string          // what was acted on: an alias, a server name, a session id prefix
	Detail json.RawMessage // optional JSON; never secrets
}

// Cursor is a position in a newest-first listing: the (Time, ID) of the
// last record of a page.
type Cursor struct {
	Time time.Time
	ID   int64
}

// AuditFilter selects audit entries. Zero fields do not filter.
type AuditFilter struct {
	Since  time.Time // Time >= Since
	Until  time.Time // Time < Until
	Actor  string
	Action string
	Limit  int     // page size; <= 0 means DefaultPageSize, capped at MaxPageSize
	Before *Cursor // resume after this position (the next cursor of the previous page)
}

// ToolCall records one tools/call as seen by the gateway. Arguments and
// results are never recorded.
type ToolCall struct {
	ID              int64     // assigned by the store
	Time            time.Time // when the call started; set to now when zero
	KeyAlias        string
	User            string
	Team            string
	Server          string
	Tool            string
	DurationMs      int64
	Outcome         string // OutcomeOK, OutcomeToolError or a fault class (Fault*)
	ErrorClass      string // the fault class (Fault*) when the call failed; "" for ok and tool_error
	SessionIDPrefix string // at most MaxSessionIDPrefix characters
	RequestBytes    int64
	ResponseBytes   int64
	// Guardrail names the guardrail that blocked the call (Outcome
	// OutcomeBlocked); "" otherwise (SPEC S21).
	Guardrail string
	// Cost is the call's price from its server's tools.costs and
	// cost_per_kb, in the operator's currency units; 0 when unpriced.
	Cost float64
}

// MaxGuardrailName bounds ToolCall.Guardrail.
const MaxGuardrailName = 200

// How a tools/call ended: the audit record's Outcome and the outcome
// label of mcpgate_tool_calls_total. This is the one list of them
// (docs/failures.md shows it to operators); every call that reaches the
// gateway's dispatch ends with exactly one record and one sample, whichever
// stage ended it.
//
// A call that failed has a fault class, in both Outcome and ErrorClass;
// one the upstream answered (even with isError) has none.
const (
	OutcomeOK        = "ok"         // the upstream answered with a result
	OutcomeToolError = "tool_error" // the upstream answered with a result saying isError

	// Faults of the upstream, from internal/upstream's Classify (C6.6).
	FaultTimeout         = "timeout"          // no answer within the server's timeout, or a deadline of ours
	FaultUnreachable     = "unreachable"      // dial refused, DNS, TLS, connection or session lost, process exited, backing off after failed connects
	FaultAuth            = "auth"             // the upstream (or its token endpoint) refused the gateway's credential: 401/403
	FaultRateLimited     = "rate_limited"     // the upstream answered 429
	FaultUpstreamError   = "upstream_error"   // the upstream answered an HTTP error (500, 503...) or its own JSON-RPC error
	FaultInvalidResponse = "invalid_response" // the upstream answered something that is not MCP: content type, JSON, protocol version, size
	FaultInternal        = "internal"         // a bug or misconfiguration of the gateway

	// Ends of a call that are not the upstream's fault.
	FaultCancelled   = "cancelled"    // the caller gave up (cancelled, disconnected) before the answer
	FaultClientError = "client_error" // the client answered the upstream's question with an error
	FaultDenied      = "denied"       // policy: the name is unknown, hidden from the caller, ambiguous or missing
	FaultRefused     = "refused"      // the caller's budget is spent: the gateway refused the call
	FaultBlocked     = "blocked"      // a guardrail blocked the call (Guardrail names it)
)

// OutcomeBlocked is the outcome of a call a guardrail refused.
const OutcomeBlocked = FaultBlocked

// FaultClasses lists every fault class, in the order the docs show them.
var FaultClasses = []string{
	FaultTimeout, FaultUnreachable, FaultAuth, FaultRateLimited, FaultUpstreamError, FaultInvalidResponse,
	FaultInternal, FaultCancelled, FaultClientError, FaultDenied, FaultRefused, FaultBlocked,
}

// ToolCallFilter selects tool calls. Zero fields do not filter.
type ToolCallFilter struct {
	Since    time.Time
	Until    time.Time
	KeyAlias string
	User     string
	Team     string
	Server   string
	Tool     string
	Outcome  string
	Limit    int
	Before   *Cursor
}

// PageSize returns the effective page size for a requested limit.
func PageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultPageSize
	case limit > MaxPageSize:
		return MaxPageSize
	}
	return limit
}

// Validate checks an audit entry before it is written.
func (e *AuditEntry) Validate() error {
	if e.Actor == "" || e.Action == "" {
		return fmt.Errorf("audit entry needs an actor and an action: %w", ErrInvalid)
	}
	if len(e.Detail) > 0 && !json.Valid(e.Detail) {
		return fmt.Errorf("audit entry %s: detail is not valid JSON: %w", e.Action, ErrInvalid)
	}
	return nil
}

// Validate checks a tool-call record before it is written.
func (c *ToolCall) Validate() error {
	// A denied call may name no server (its name resolved to none) and
	// no tool (it had no name); any other names both.
	if c.Outcome == "" || c.Outcome != FaultDenied && (c.Server == "" || c.Tool == "") {
		return fmt.Errorf("tool call needs a server, a tool and an outcome: %w", ErrInvalid)
	}
	if len(c.SessionIDPrefix) > MaxSessionIDPrefix {
		return fmt.Errorf("tool call: session id prefix longer than %d characters: %w", MaxSessionIDPrefix, ErrInvalid)
	}
	if len(c.Guardrail) > MaxGuardrailName {
		return fmt.Errorf("tool call: guardrail name longer than %d characters: %w", MaxGuardrailName, ErrInvalid)
	}
	if c.DurationMs < 0 || c.RequestBytes < 0 || c.ResponseBytes < 0 || c.Cost < 0 || math.IsNaN(c.Cost) || math.IsInf(c.Cost, 0) {
		return fmt.Errorf("tool call: negative or invalid duration, size or cost: %w", ErrInvalid)
	}
	return nil
}

// Usage groupings (UsageFilter.By).
const (
	UsageByKey  = "key"
	UsageByUser = "user"
	UsageByTeam = "team"
)

// UsageFilter selects the tool calls summed by SumUsage: By is a
// grouping, Since and Until (zero: unbounded) the period [Since, Until).
type UsageFilter struct {
	By    string
	Since time.Time
	Until time.Time
	// Key, when set, sums only that key alias's calls (a budget's check).
	Key string
}

// Usage is the calls and cost of one key alias, user or team ("" for
// calls without one) over a period.
type Usage struct {
	Group string
	Calls int64
	Cost  float64
}

// UsageLog is the optional capability of an AuditLog to sum tool calls'
// costs; both built-in stores have it. Safe for concurrent use.
type UsageLog interface {
	// SumUsage returns one Usage per group, costliest first (then by
	// name); an unknown By is ErrInvalid.
	SumUsage(ctx context.Context, f UsageFilter) ([]Usage, error)
}

// UsageColumn is the tool_calls column of a grouping; ok false for an
// unknown one.
func UsageColumn(by string) (col string, ok bool) {
	switch by {
	case UsageByKey:
		return "key_alias", true
	case UsageByUser:
		return "user_id", true
	case UsageByTeam:
		return "team_id", true
	}
	return "", false
}
