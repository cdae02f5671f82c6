package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
)

// callCommand calls one tool through a running gateway's admin API, as a
// key or as the master key.
type callCommand struct{ stdout io.Writer }

const callUsage = `Usage:
  mcpgate call TOOL [--args JSON-OBJECT] [--as ALIAS] [--route /mcp]
                    [--url URL | --config FILE] [--admin-key KEY] [--json]
`

// callResult is the part of an MCP CallToolResult the CLI prints.
type callResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError"`
}

// Run prints the text contents one per line and any other content as one
// line of JSON; a result with isError set exits 1 (with --json too).
func (c *callCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	argsJSON := fs.String("args", "", `the tool's arguments, a JSON object such as '{"a": 1}' (default: none)`)
	as := fs.String("as", "", "call as the key ALIAS (default: as the master key)")
	route := fs.String("route", "", "the route to call on, e.g. /mcp or /toolset/NAME/mcp (default /mcp)")
	pos, err := parseArgs(fs, "call TOOL [flags]", args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return &usageError{"want exactly one TOOL name\n" + callUsage}
	}
	in := struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Key       string          `json:"key,omitempty"`
		Route     string          `json:"route,omitempty"`
	}{Name: pos[0], Key: *as, Route: *route}
	if *argsJSON != "" {
		var obj map[string]json.RawMessage
		trimmed := bytes.TrimSpace([]byte(*argsJSON))
		if err := json.Unmarshal(trimmed, &obj); err != nil || obj == nil {
			return &usageError{"--args: want a JSON object such as '{\"a\": 1}'"}
		}
		var b bytes.Buffer
		if err := json.Compact(&b, trimmed); err != nil {
			return &usageError{"--args: " + err.Error()}
		}
		in.Arguments = b.Bytes()
	}
	cl, err := af.client(nil)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := cl.post(ctx, "tools/call", in, &raw); err != nil {
		return err
	}
	var res callResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the gateway's answer is not a tool result: %w", err)
	}
	if af.json {
		if err := printJSON(c.stdout, raw); err != nil {
			return err
		}
	} else if err := printContent(c.stdout, res); err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("tool %s returned an error", in.Name)
	}
	return nil
}

func printContent(w io.Writer, res callResult) error {
	for _, raw := range res.Content {
		var item struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(raw, &item) == nil && item.Type == "text" && item.Text != nil {
			if _, err := fmt.Fprintln(w, termText(*item.Text)); err != nil {
				return err
			}
			continue
		}
		if err := printCompact(w, raw); err != nil {
			return err
		}
	}
	// A result with structured content only still shows something.
	if len(res.Content) == 0 && len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
		return printCompact(w, res.StructuredContent)
	}
	return nil
}

func printCompact(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return fmt.Errorf("the gateway's answer holds invalid JSON: %w", err)
	}
	b.WriteByte('\n')
	_, err := w.Write(termJSON(b.Bytes()))
	return err
}
