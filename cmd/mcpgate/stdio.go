package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// stdioHelp is `mcpgate stdio --help`.
const stdioHelp = `Usage: mcpgate stdio --config FILE [--key KEY]

Serves the gateway's /mcp route over stdin/stdout (newline-delimited
JSON-RPC), for MCP clients that can only launch a local server.

The front is a caller like any HTTP client: it acts as the gateway key
--key names (or $MCPGATE_KEY): a key of auth.keys, one created through
the admin API, or the master key. The key's servers, tools and
servers.<name>.tools allow/deny lists decide what is listed and callable
(a denied tool is hidden even from the master key), guardrails, the key's
rate limit and budget apply to every call, a person's own credentials
(user_api_key, oauth2_user) are the key's, and every tools/call is
audited under the key. The key is checked again for each message, so a
revoked key stops at once. Passthrough servers are left out (a stdio
client cannot send its own token).

When the config requires keys (auth.master_key, auth.keys, auth.oidc or
auth.login, without auth.anonymous) and no key is given, it refuses to
start. Without any auth configured (the quickstart) it serves as an
anonymous caller, as the HTTP gateway does on loopback.

Flags:
  --config FILE        config file (required)
  --key KEY            the gateway key to act as (default $MCPGATE_KEY)
  --log-format F       json or text (default text), to stderr
  --log-level L        debug, info, warn or error (default info)
`

// stdioCommand serves the merged view over stdin/stdout, for clients that
// can only launch a local server.
type stdioCommand struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// getenv reads MCPGATE_KEY (nil: os.Getenv).
	getenv func(string) string
}

func (c *stdioCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stdio", flag.ContinueOnError)
	var rf runFlags
	rf.register(fs)
	key := fs.String("key", "", "the gateway key the front acts as (default $MCPGATE_KEY)")
	cfg, log, err := rf.load(fs, args, c.stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stderr, stdioHelp)
		return nil
	}
	if err != nil {
		return err
	}
	if *key == "" {
		getenv := c.getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		*key = getenv("MCPGATE_KEY")
	}
	// The whole stack, as serve builds it (the store, keys, audit,
	// budgets, vault, shared state), only without a listener: the front's
	// calls are recorded and limited like any other. Its "listen" is
	// loopback: the front serves this machine's process only.
	stk, err := build(ctx, cfg, log, "127.0.0.1:0")
	if err != nil {
		return err
	}
	g := stk.gw
	g.Start(ctx)
	err = g.ServeStdioAs(ctx, *key, c.stdin, c.stdout)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	g.Shutdown()
	if cerr := stk.close(dctx); cerr != nil && err == nil {
		log.Warn("stdio: closing the gateway", "error", cerr)
	}
	return err
}
