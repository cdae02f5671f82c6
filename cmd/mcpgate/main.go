// Command mcpgate is the MCP gateway: one endpoint in front of many MCP
// servers. main only parses the subcommand, wires components and maps
// errors to exit codes; each subcommand lives in its own file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

const usage = `mcpgate: one MCP endpoint in front of many MCP servers.

Usage:
  mcpgate serve    --config FILE [--listen ADDR]   serve MCP over HTTP
  mcpgate stdio    --config FILE [--key KEY]       serve MCP over stdin/stdout, as a key ($MCPGATE_KEY)
  mcpgate validate --config FILE [--json]          check a config file, serve nothing
  mcpgate doctor   --config FILE [--json] [--timeout D]   check the config and reach each upstream
  mcpgate config schema|reference                  the config file's JSON Schema, or its reference
  mcpgate servers preview --config FILE NAME       the request sent to upstream NAME, secrets masked
  mcpgate vault rotate --config FILE               re-encrypt the credential vault under its first key
  mcpgate import FILE [--from F] [--out FILE] [--dry-run]   a client's MCP servers as mcpgate servers
  mcpgate connect CLIENT [--route R] [--key K] [--write]   the client entry that points CLIENT at mcpgate
  mcpgate version                                  print the version

Administer a running gateway (its admin API):
  mcpgate reload                                   apply the config file again, without a restart
  mcpgate keys create --alias A [flags]            create a virtual key; prints its secret once
  mcpgate keys list                                list virtual keys
  mcpgate keys revoke ALIAS                        revoke a key; it stops working at once
  mcpgate servers list|status                      health of each upstream
  mcpgate toolsets list                            toolsets and their tools
  mcpgate sessions list                            live downstream sessions
  mcpgate sessions terminate [--id P] [--user U]   end sessions
  mcpgate tools list [--as KEY] [--route R]        the catalog as a key sees it
  mcpgate call TOOL [--args JSON] [--as KEY]       call a tool
  mcpgate audit [--follow] [filters]               recent tool calls
  mcpgate usage [--by key|user|team] [--since T]  calls and cost per key, user or team (--until T)
  mcpgate credentials set SERVER --value V         store your own credential (user_api_key servers)
  mcpgate credentials list|delete SERVER           your stored credentials
  mcpgate connections list [--server S] [--person P]   people's connected accounts and credentials
  mcpgate connections revoke PERSON [SERVER]       revoke one or all of a person's; at once

Common flags: --log-format json|text (default text), --log-level debug|info|warn|error (default info).
Admin commands: --url URL (default $MCPGATE_URL, else --config FILE's listen address, else
http://127.0.0.1:4000), --admin-key KEY (default $MCPGATE_ADMIN_KEY, else $MCPGATE_MASTER_KEY),
--json to print the API's JSON instead of a table.
`

// defaultGCPercent is used when GOGC is not set. The gateway's live heap
// is small and its per-call garbage is large relative to it, so the
// default of 100 collects far more often than useful: 400 cut the
// gateway's CPU per call by ~15% in bench/run.sh at a max RSS of ~33 MiB
// under 64 concurrent callers. GOGC and GOMEMLIMIT still rule when set.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

// runContext runs the command of args until it ends or ctx does (tests
// cancel ctx where a user would press Ctrl-C).
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var cmd command
	switch args[0] {
	case "serve":
		cmd = &serveCommand{stderr: stderr}
	case "stdio":
		cmd = &stdioCommand{stdin: os.Stdin, stdout: stdout, stderr: stderr}
	case "validate":
		cmd = &validateCommand{stdout: stdout}
	case "doctor":
		cmd = &doctorCommand{stdout: stdout, stderr: stderr}
	case "config":
		cmd = &configCommand{stdout: stdout}
	case "version":
		cmd = &versionCommand{stdout: stdout}
	case "servers":
		cmd = &serversCommand{stdout: stdout}
	case "keys":
		cmd = &keysCommand{stdout: stdout, stderr: stderr}
	case "credentials":
		cmd = &credentialsCommand{stdout: stdout, stderr: stderr}
	case "connections":
		cmd = &connectionsCommand{stdout: stdout}
	case "toolsets":
		cmd = &toolsetsCommand{stdout: stdout}
	case "sessions":
		cmd = &sessionsCommand{stdout: stdout}
	case "tools":
		cmd = &toolsCommand{stdout: stdout}
	case "call":
		cmd = &callCommand{stdout: stdout}
	case "audit":
		cmd = &auditCommand{stdout: stdout, stderr: stderr}
	case "usage":
		cmd = &usageCommand{stdout: stdout}
	case "vault":
		cmd = &vaultCommand{stdout: stdout}
	case "reload":
		cmd = &reloadCommand{stdout: stdout}
	case "import":
		cmd = &importCommand{stdout: stdout, stderr: stderr}
	case "connect":
		cmd = &connectCommand{stdout: stdout, stderr: stderr}
	default:
		fmt.Fprintf(stderr, "mcpgate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := cmd.Run(ctx, args[1:]); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stderr, "mcpgate %s: %s\n", args[0], termText(err.Error()))
			}
			return 2
		}
		fmt.Fprintf(stderr, "mcpgate %s: %s\n", args[0], termText(err.Error()))
		return 1
	}
	return 0
}

// logFlags are shared by the commands that run the gateway.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: json or text")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

// logger builds the process logger; logs always go to stderr (stdout may
// be the MCP channel).
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, &usageError{fmt.Sprintf("--log-level: unknown level %q", l.level)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(l.format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, &usageError{fmt.Sprintf("--log-format: want json or text, got %q", l.format)}
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// runFlags are the flags of the commands that run the gateway.
type runFlags struct {
	config string
	logFlags
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "config file (required)")
	f.logFlags.register(fs)
}

// load parses args, builds the logger (to stderr) and loads the config.
func (f *runFlags) load(fs *flag.FlagSet, args []string, stderr io.Writer) (*config.Config, *slog.Logger, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if f.config == "" {
		return nil, nil, &usageError{"--config is required"}
	}
	log, err := f.logger(stderr)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid config:\n%w", err)
	}
	return cfg, log, nil
}
