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

// helpError is help the user asked for (-h, --help, help): printed on
// stdout, exit code 0, as kubectl and caddy do.
type helpError struct{ text string }

func (e *helpError) Error() string { return e.text }

// flagsHelp is the help of fs: its synopsis and flags.
func flagsHelp(fs *flag.FlagSet, synopsis string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: mcpgate %s\n", synopsis)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return &helpError{strings.TrimRight(b.String(), "\n")}
}

// commandNames are the subcommands, for "did you mean".
var commandNames = []string{"serve", "stdio", "validate", "doctor", "health", "config", "version", "servers", "keys",
	"credentials", "connections", "toolsets", "sessions", "tools", "call", "audit", "usage", "vault", "reload",
	"import", "connect", "help"}

// defaultConfigFile is the config file read when neither --config nor
// $MCPGATE_CONFIG names one, in the working directory (as caddy reads
// ./Caddyfile).
const defaultConfigFile = "mcpgate.yaml"

const configFlagHelp = "config file (default: $MCPGATE_CONFIG, else ./" + defaultConfigFile + ")"

// configPath is the config file to read: flagValue, else
// $MCPGATE_CONFIG, else ./mcpgate.yaml when it exists; the error says
// where it looked.
func configPath(flagValue string) (string, error) {
	if p := implicitConfig(flagValue); p != "" {
		return p, nil
	}
	wd, _ := os.Getwd()
	return "", &usageError{fmt.Sprintf("--config is required: $MCPGATE_CONFIG is not set and there is no %s in %s", defaultConfigFile, wd)}
}

// configPathOf is configPath of a flag's value, as a pointer to the
// path so that commands keep reading *path.
func configPathOf(flagValue *string) (*string, error) {
	p, err := configPath(*flagValue)
	return &p, err
}

// implicitConfig is configPath without the error: "" when there is no
// config file to read.
func implicitConfig(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if p := os.Getenv("MCPGATE_CONFIG"); p != "" {
		return p
	}
	if st, err := os.Stat(defaultConfigFile); err == nil && !st.IsDir() {
		return defaultConfigFile
	}
	return ""
}

const usage = `mcpgate: one MCP endpoint in front of many MCP servers.

Usage:
  mcpgate serve    [--config FILE] [--listen ADDR] serve MCP over HTTP
  mcpgate stdio    [--config FILE] [--key KEY]     serve MCP over stdin/stdout, as a key ($MCPGATE_KEY)
  mcpgate validate [--config FILE] [--json]        check a config file, serve nothing
  mcpgate doctor   [--config FILE] [--json] [--timeout D]   check the config and reach each upstream
  mcpgate health   [--url URL] [--timeout D]       exit 0 when the local gateway is ready (container health checks)
  mcpgate config schema|reference                  the config file's JSON Schema, or its reference
  mcpgate servers preview [--config FILE] NAME     the request sent to upstream NAME, secrets masked
  mcpgate vault rotate [--config FILE]             re-encrypt the credential vault under its first key
  mcpgate import FILE [--from F] [--out FILE] [--dry-run]   a client's MCP servers as mcpgate servers
  mcpgate connect CLIENT [--route R] [--key K] [--write]   the client entry that points CLIENT at mcpgate
  mcpgate version                                  print the version (also --version)

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
  mcpgate tools changes [--server S] [--diff]      tool definitions awaiting review (tool integrity)
  mcpgate tools approve|reject SERVER [TOOL...]    settle them: all of the server's, or those named
  mcpgate call TOOL [--args JSON] [--as KEY]       call a tool
  mcpgate audit [--follow] [filters]               recent tool calls
  mcpgate usage [--by key|user|team] [--since T]  calls and cost per key, user or team (--until T)
  mcpgate credentials set SERVER --value V         store your own credential (user_api_key servers)
  mcpgate credentials list|delete SERVER           your stored credentials
  mcpgate connections list [--server S] [--person P]   people's connected accounts and credentials
  mcpgate connections revoke PERSON [SERVER]       revoke one or all of a person's; at once

Every command takes -h/--help. The config file is --config FILE, else $MCPGATE_CONFIG, else ./mcpgate.yaml.
Common flags: --log-format json|text (default text), --log-level debug|info|warn|error (default info).
Admin commands: --url URL (default $MCPGATE_URL, else --config FILE's listen address, else
http://127.0.0.1:4000), --admin-key KEY (default $MCPGATE_ADMIN_KEY, else $MCPGATE_MASTER_KEY),
--json to print the API's JSON instead of a table.
`

func main() {
	// The memory settings follow the machine (gc.go), unless GOGC or
	// GOMEMLIMIT says otherwise.
	planGC(os.Getenv, procSelfCgroup, cgroupRoot).apply()
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
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "-version", "-v":
		args = []string{"version"}
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
	case "health":
		cmd = &healthCommand{stdout: stdout}
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
		cmd = &connectionsCommand{stdout: stdout, stderr: stderr}
	case "toolsets":
		cmd = &toolsetsCommand{stdout: stdout}
	case "sessions":
		cmd = &sessionsCommand{stdout: stdout, stderr: stderr}
	case "tools":
		cmd = &toolsCommand{stdout: stdout, stderr: stderr}
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
		fmt.Fprintf(stderr, "mcpgate: unknown command %q%s\n\n%s", args[0], didYouMean(args[0], commandNames), usage)
		return 2
	}
	if err := cmd.Run(ctx, args[1:]); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		var he *helpError
		if errors.As(err, &he) {
			// Asked for: the help goes to stdout and is a success.
			fmt.Fprintln(stdout, he.text)
			return 0
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
	// Access lines may wait in a batch; every other record flushes it
	// (logbatch.go).
	b := newLineBatch(w)
	switch strings.ToLower(l.format) {
	case "json":
		return slog.New(newBatchHandler(b, formatJSON, opts)), nil
	case "text":
		return slog.New(newBatchHandler(b, formatText, opts)), nil
	}
	return nil, &usageError{fmt.Sprintf("--log-format: want json or text, got %q", l.format)}
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flagsHelp(fs, fs.Name()+" [flags]")
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
	fs.StringVar(&f.config, "config", "", configFlagHelp)
	f.logFlags.register(fs)
}

// load parses args, builds the logger (to stderr) and loads the config.
func (f *runFlags) load(fs *flag.FlagSet, args []string, stderr io.Writer) (*config.Config, *slog.Logger, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	path, err := configPath(f.config)
	if err != nil {
		return nil, nil, err
	}
	f.config = path
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
