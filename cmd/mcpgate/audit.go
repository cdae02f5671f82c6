package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// auditCommand prints the tool calls of a running gateway's audit log,
// once or (--follow) as they are recorded.
type auditCommand struct{ stdout, stderr io.Writer }

// auditRecord is one tool call of GET /admin/v1/audit. It is comparable:
// --follow tells records apart by all their fields.
type auditRecord struct {
	Time          string  `json:"time"`
	KeyAlias      string  `json:"key_alias"`
	User          string  `json:"user"`
	Team          string  `json:"team"`
	Server        string  `json:"server"`
	Tool          string  `json:"tool"`
	Outcome       string  `json:"outcome"`
	Fault         string  `json:"fault"`
	DurationMs    int64   `json:"duration_ms"`
	Session       string  `json:"session"`
	RequestBytes  int64   `json:"request_bytes"`
	ResponseBytes int64   `json:"response_bytes"`
	Guardrail     string  `json:"guardrail"`
	Cost          float64 `json:"cost"`
}

// auditEntry is a record with its JSON as the API sent it.
type auditEntry struct {
	rec auditRecord
	raw json.RawMessage
}

const (
	// auditPollPage is the page size of --follow's polls (the API's maximum).
	auditPollPage = 1000
	// auditPollPages bounds the pages one poll reads.
	auditPollPages = 100
)

func (c *auditCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	filters := map[string]*string{}
	for _, f := range []struct{ name, help string }{
		{"key", "only the calls of key alias A"}, {"user", "only the calls of user U"}, {"team", "only the calls of team T"},
		{"server", "only the calls to server S"}, {"tool", "only the calls of tool T"},
		{"outcome", "only the calls with outcome O (ok, error, denied, timeout, ...)"},
		{"since", "only the calls made at or after this time: a duration ago (1h, 7d) or an RFC 3339 time"},
	} {
		filters[f.name] = fs.String(f.name, "", f.help)
	}
	limit := fs.Int("limit", 0, "at most N calls (default: the API's page size)")
	before := fs.String("before", "", "the page after CURSOR (printed as next by the previous page)")
	follow := fs.Bool("follow", false, "print the newest calls, then new calls as they are recorded, until interrupted")
	interval := fs.Duration("interval", time.Second, "with --follow, how often to poll")
	lookback := fs.Duration("lookback", 0, "with --follow, also look this far behind the newest call seen, for calls recorded late")
	if err := parseNoArgs(fs, "audit [flags]", args); err != nil {
		return err
	}
	switch {
	case *limit < 0:
		return &usageError{"--limit: must be >= 0"}
	case *follow && *interval <= 0:
		return &usageError{"--interval: must be > 0"}
	case *follow && *lookback < 0:
		return &usageError{"--lookback: must be >= 0"}
	case *follow && *before != "":
		return &usageError{"--before and --follow exclude each other"}
	}
	if s := *filters["since"]; s != "" {
		t, err := parseTimeArg("since", s, time.Now(), false)
		if err != nil {
			return err
		}
		*filters["since"] = t.UTC().Format(time.RFC3339Nano)
	}
	q := url.Values{}
	for name, v := range filters {
		if *v != "" {
			q.Set(name, *v)
		}
	}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	if *before != "" {
		q.Set("before", *before)
	}
	cl, err := af.client(nil)
	if err != nil {
		return err
	}
	if s := *filters["server"]; s != "" {
		if err := checkServerNames(ctx, cl, "--server", []string{s}); err != nil {
			return err
		}
		if t := *filters["tool"]; t != "" {
			if known, ok := serverTools(ctx, cl, s); ok && !slices.Contains(known, t) && closest(t, known) != "" {
				return unknownName("--tool", "tool of "+s, t, known)
			}
		}
	}
	if *follow {
		return c.follow(ctx, cl, q, *interval, *lookback, af.json)
	}
	raw, entries, next, err := auditPage(ctx, cl, q)
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "TIME\tKEY\tSERVER\tTOOL\tOUTCOME\tMS")
	for _, e := range entries {
		r := e.rec
		row(tw, r.Time, r.KeyAlias, r.Server, r.Tool, outcomeCell(r), strconv.FormatInt(r.DurationMs, 10))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.stderr, "more: --before %s\n", termSafe(next))
	}
	return nil
}

// outcomeCell is the OUTCOME cell of r: its outcome and its fault or
// guardrail, as a cell.
func outcomeCell(r auditRecord) string {
	if r.Fault != "" {
		return cell(r.Outcome) + "/" + cell(r.Fault)
	}
	if r.Guardrail != "" {
		return cell(r.Outcome) + "/" + cell(r.Guardrail)
	}
	return cell(r.Outcome)
}

// auditPage is one page of GET /admin/v1/audit, newest first.
func auditPage(ctx context.Context, cl *adminClient, q url.Values) (json.RawMessage, []auditEntry, string, error) {
	var raw json.RawMessage
	path := "audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := cl.get(ctx, path, &raw); err != nil {
		return nil, nil, "", err
	}
	var page struct {
		Calls []json.RawMessage `json:"calls"`
		Next  string            `json:"next"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, nil, "", fmt.Errorf("the gateway's answer is not an audit page: %w", err)
	}
	entries := make([]auditEntry, len(page.Calls))
	for i, r := range page.Calls {
		entries[i].raw = r
		if err := json.Unmarshal(r, &entries[i].rec); err != nil {
			return nil, nil, "", fmt.Errorf("the gateway's answer is not an audit page: %w", err)
		}
	}
	return raw, entries, page.Next, nil
}

// follow prints the newest page oldest first, then polls every interval
// for the calls recorded since (see follower for what counts as new),
// until ctx ends. A poll that fails for a reason that may pass (the
// gateway is restarting, a 5xx) is reported and retried; a refusal ends
// the command.
func (c *auditCommand) follow(ctx context.Context, cl *adminClient, q url.Values, interval, lookback time.Duration, asJSON bool) error {
	_, entries, _, err := auditPage(ctx, cl, q)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	f := &follower{lookback: lookback}
	if !asJSON {
		fmt.Fprintf(c.stdout, auditFollowFormat, "TIME", "KEY", "SERVER", "TOOL", "OUTCOME", "MS")
	}
	if err := c.emit(f.advance(entries), asJSON); err != nil {
		return err
	}
	poll := maps.Clone(q)
	poll.Set("limit", strconv.Itoa(auditPollPage))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if since := f.since(); !since.IsZero() {
			poll.Set("since", since.UTC().Format(time.RFC3339Nano))
		}
		entries, err := pollAudit(ctx, cl, poll)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ae *apiError
			if errors.As(err, &ae) && ae.Status < 500 {
				return err
			}
			fmt.Fprintf(c.stderr, "mcpgate audit: %s; retrying\n", termSafe(err.Error()))
			continue
		}
		if err := c.emit(f.advance(entries), asJSON); err != nil {
			return err
		}
	}
}

// pollAudit reads every page of q, newest first.
func pollAudit(ctx context.Context, cl *adminClient, q url.Values) ([]auditEntry, error) {
	var all []auditEntry
	q = maps.Clone(q)
	for range auditPollPages {
		_, entries, next, err := auditPage(ctx, cl, q)
		if err != nil {
			return nil, err
		}
		all = append(all, entries...)
		if next == "" {
			return all, nil
		}
		q.Set("before", next)
	}
	return nil, fmt.Errorf("more than %d calls since the last poll", auditPollPage*auditPollPages)
}

// auditFollowFormat lays --follow's rows out in fixed columns: they are
// printed as they come, so a tabwriter could not align them.
const auditFollowFormat = "%-24s  %-16s  %-16s  %-24s  %-12s  %6s\n"

func (c *auditCommand) emit(entries []auditEntry, asJSON bool) error {
	for _, e := range entries {
		if asJSON {
			// One compact object per line (JSON Lines), as the API sent it.
			if err := printCompact(c.stdout, e.raw); err != nil {
				return err
			}
			continue
		}
		r := e.rec
		if _, err := fmt.Fprintf(c.stdout, auditFollowFormat, cell(r.Time), cell(r.KeyAlias), cell(r.Server), cell(r.Tool),
			outcomeCell(r), strconv.FormatInt(r.DurationMs, 10)); err != nil {
			return err
		}
	}
	return nil
}

// follower decides which records of a poll are new.
//
// The audit API lists newest first and its records carry no id, only a
// time (when the call started, to the millisecond). So each poll asks for
// every record at or after since() -- the newest time seen, minus
// lookback; the API's since is inclusive -- and a record is new unless an
// identical record (every field equal) was seen in that window before.
// Identical records are counted, so two identical calls in the same
// millisecond both print, once. A call recorded with a time older than
// since() (a long call that started before the newest one seen, or one
// whose batch was written late) is never printed: --lookback widens the
// window for those, at the price of rereading it on every poll.
type follower struct {
	lookback time.Duration
	newest   time.Time
	seen     map[auditRecord]int // the records at or after newest-lookback
}

// since is where the next poll starts; zero before any record was seen.
func (f *follower) since() time.Time {
	if f.newest.IsZero() {
		return time.Time{}
	}
	return f.newest.Add(-f.lookback)
}

// advance takes the records of a poll (newest first, every record at or
// after since()) and returns the new ones, oldest first.
func (f *follower) advance(entries []auditEntry) []auditEntry {
	left := maps.Clone(f.seen)
	var fresh []auditEntry
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if left[e.rec] > 0 {
			left[e.rec]--
			continue
		}
		fresh = append(fresh, e)
	}
	if len(entries) == 0 {
		return nil
	}
	times := make([]time.Time, len(entries))
	for i, e := range entries {
		// A time that does not parse counts as long ago.
		times[i], _ = time.Parse(time.RFC3339Nano, e.rec.Time)
		if times[i].After(f.newest) {
			f.newest = times[i]
		}
	}
	// The poll held every record of the new window: it starts no
	// earlier than the one the poll asked for.
	cut := f.since()
	f.seen = map[auditRecord]int{}
	for i, e := range entries {
		if !times[i].Before(cut) {
			f.seen[e.rec]++
		}
	}
	return fresh
}
