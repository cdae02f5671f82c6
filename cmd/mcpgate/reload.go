package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mcpgate/mcpgate/internal/admin"
)

// reloadCommand asks a running gateway to apply its config file again
// (POST /admin/v1/reload): the same as sending it SIGHUP, but with the
// answer: what changed, what needs a restart, or the file's problems.
type reloadCommand struct{ stdout io.Writer }

func (c *reloadCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	if err := parseNoArgs(fs, "reload [--url URL | --config FILE] [--admin-key KEY] [--json]", args); err != nil {
		return err
	}
	cl, err := af.client(nil)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	err = cl.post(ctx, "reload", nil, &raw)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity {
		if af.json {
			_ = printJSON(c.stdout, ae.Body)
			return &exitError{code: 1}
		}
		var body struct {
			Problems []admin.ConfigProblem `json:"problems"`
		}
		_ = json.Unmarshal(ae.Body, &body)
		msgs := make([]string, 0, len(body.Problems))
		for _, p := range body.Problems {
			msgs = append(msgs, "  "+problemString(p))
		}
		return fmt.Errorf("the config file is invalid; nothing changed:\n%s", strings.Join(msgs, "\n"))
	}
	if err != nil {
		return err
	}
	if af.json {
		return printJSON(c.stdout, raw)
	}
	var rep admin.ReloadReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("the gateway's answer is not a reload report: %w", err)
	}
	return printReload(c.stdout, &rep)
}

// printReload writes what a reload changed, one line per kind.
func printReload(w io.Writer, rep *admin.ReloadReport) error {
	if !rep.Changed && len(rep.RestartRequired) == 0 {
		_, err := fmt.Fprintln(w, "reloaded: nothing changed")
		return err
	}
	var b strings.Builder
	b.WriteString("reloaded\n")
	line := func(what string, names []string) {
		if len(names) > 0 {
			fmt.Fprintf(&b, "  %-17s %s\n", what, termSafe(strings.Join(names, ", ")))
		}
	}
	line("servers added", rep.Servers.Added)
	line("servers removed", rep.Servers.Removed)
	line("servers changed", rep.Servers.Changed)
	line("keys added", rep.Keys.Added)
	line("keys removed", rep.Keys.Removed)
	line("keys changed", rep.Keys.Changed)
	line("also changed", rep.Sections)
	line("restart required", rep.RestartRequired)
	_, err := io.WriteString(w, b.String())
	return err
}
