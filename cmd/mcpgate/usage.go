package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"
)

// usageCommand prints tool calls and their cost summed per key, user or
// team over a period (GET /admin/v1/usage).
type usageCommand struct{ stdout io.Writer }

func (c *usageCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	by := fs.String("by", "key", "sum per key, user or team")
	since := fs.String("since", "", "only the calls made at or after this time: a duration ago (24h, 30d) or an RFC 3339 time")
	until := fs.String("until", "", "only the calls made before this time: a duration ago or an RFC 3339 time")
	if err := parseNoArgs(fs, "usage [--by key|user|team] [--since T] [--until T]", args); err != nil {
		return err
	}
	switch *by {
	case "key", "user", "team":
	default:
		return &usageError{fmt.Sprintf("--by: want key, user or team, got %q", *by)}
	}
	q := url.Values{"by": {*by}}
	now := time.Now()
	for name, v := range map[string]string{"since": *since, "until": *until} {
		if v == "" {
			continue
		}
		t, err := parseTimeArg(name, v, now, false)
		if err != nil {
			return err
		}
		q.Set(name, t.UTC().Format(time.RFC3339Nano))
	}
	cl, err := af.client(nil)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := cl.get(ctx, "usage?"+q.Encode(), &raw); err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	var rep struct {
		Total float64 `json:"total"`
		Usage []struct {
			Group string  `json:"group"`
			Calls int64   `json:"calls"`
			Cost  float64 `json:"cost"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("the gateway's answer is not a usage report: %w", err)
	}
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "%s\tCALLS\tCOST\n", map[string]string{"key": "KEY", "user": "USER", "team": "TEAM"}[*by])
	for _, u := range rep.Usage {
		row(tw, u.Group, strconv.FormatInt(u.Calls, 10), strconv.FormatFloat(u.Cost, 'g', -1, 64))
	}
	fmt.Fprintf(tw, "TOTAL\t\t%g\n", rep.Total)
	return tw.Flush()
}
