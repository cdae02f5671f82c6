package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mcpgate/mcpgate/internal/config"
)

// validateCommand loads and validates a config and reports; it serves
// nothing and starts no upstream.
type validateCommand struct{ stdout io.Writer }

// problem is one entry of validate --json: a field, its line (0 when
// unknown) and what is wrong, without the path or line in the text.
type problem struct {
	Path    string `json:"path"`
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// errInvalid is exit code 1 after validate --json printed the problems.
var errInvalid = errors.New("invalid config")

func (c *validateCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "", configFlagHelp)
	asJSON := fs.Bool("json", false, "print the problems as a JSON list of {path, line, message}")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path, err := configPathOf(path)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if *asJSON {
		problems := []problem{}
		for _, fe := range config.FieldErrors(err) {
			msg := "invalid"
			if fe.Err != nil {
				msg = fe.Err.Error()
			}
			problems = append(problems, problem{Path: fe.Path, Line: fe.Line, Message: msg})
		}
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(problems); werr != nil {
			return werr
		}
		if err != nil {
			return errInvalid
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	fmt.Fprintf(c.stdout, "%s: ok (%d servers", termSafe(*path), len(cfg.Servers))
	for _, name := range cfg.ServerNames() {
		fmt.Fprintf(c.stdout, "; %s: %s", termSafe(name), termSafe(cfg.Servers[name].Transport))
	}
	fmt.Fprintln(c.stdout, ")")
	return nil
}

// configCommand prints what the config types generate: the JSON Schema of
// the file (for editors) or its reference (docs/config.md).
type configCommand struct{ stdout io.Writer }

func (c *configCommand) Run(_ context.Context, args []string) error {
	const configUsage = "usage: mcpgate config schema|reference\n  schema     the config file's JSON Schema (for editors)\n  reference  the config file's reference (docs/config.md)"
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "help" {
			return &helpError{configUsage}
		}
	}
	if len(args) != 1 {
		return &usageError{"want config schema or config reference"}
	}
	switch args[0] {
	case "schema":
		_, err := c.stdout.Write(config.JSONSchema())
		return err
	case "reference":
		_, err := c.stdout.Write(config.Reference())
		return err
	}
	return &usageError{fmt.Sprintf("unknown config subcommand %q%s (want schema or reference)", args[0], didYouMean(args[0], []string{"schema", "reference"}))}
}
