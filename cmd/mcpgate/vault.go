package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/vault"
)

// vaultCommand administers the per-person credential vault in the
// config's store: `rotate` re-encrypts every entry under the
// first of vault.keys.
type vaultCommand struct{ stdout io.Writer }

const vaultUsage = `Usage:
  mcpgate vault rotate --config FILE
      Re-encrypt every vault entry under the first key of vault.keys; then
      the other keys can be removed from the config. Best run with the
      gateway stopped: a credential the gateway writes at the same moment
      can otherwise be lost (the person reconnects).
`

func (c *vaultCommand) Run(ctx context.Context, args []string) error {
	return runSubcommand(ctx, args, vaultUsage, subcommand{"rotate", c.rotate})
}

func (c *vaultCommand) rotate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("vault rotate", flag.ContinueOnError)
	path := fs.String("config", "", configFlagHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path, err := configPathOf(path)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	if cfg.Vault == nil {
		return errors.New("the config has no vault section: nothing to rotate")
	}
	st, err := openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := vault.New(st, cfg.Vault.Keys, nil)
	if err != nil {
		return err
	}
	n, err := v.Rotate(ctx)
	fmt.Fprintf(c.stdout, "re-encrypted %d vault entries under key %s\n", n, termSafe(v.KeyID()))
	if err != nil {
		return fmt.Errorf("some entries were not re-encrypted (keep their keys in vault.keys until they are):\n%w", err)
	}
	return nil
}
