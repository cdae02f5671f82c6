package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/clientconf"
	"github.com/mcpgate/mcpgate/internal/config"
)

// importCommand turns a client's MCP configuration (Claude Desktop,
// Claude Code, Cursor, VS Code, Windsurf) into mcpgate servers, secrets
// moved to ${VAR} references, and prints the client entry that points the
// client at mcpgate instead. It starts nothing and reaches no server.
type importCommand struct{ stdout, stderr io.Writer }

// importReport is the document of import --json.
type importReport struct {
	File      string              `json:"file"`
	Format    string              `json:"format"`
	Out       string              `json:"out"`
	Written   bool                `json:"written"`
	Servers   []importedServer    `json:"servers"`
	Renamed   []clientconf.Rename `json:"renamed"`
	Replaced  []string            `json:"replaced"`
	Variables []clientconf.Var    `json:"variables"`
	Warnings  []string            `json:"warnings"`
	YAML      string              `json:"yaml"`   // the servers: section added
	Client    json.RawMessage     `json:"client"` // the client file pointing at mcpgate
}

type importedServer struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
}

// placeholderValue stands in for an unset variable when the result is
// validated: the variables are set only where the gateway will run.
const placeholderValue = "http://mcpgate-import-placeholder.invalid"

func (c *importCommand) Run(_ context.Context, args []string) error {
	fl := flag.NewFlagSet("import", flag.ContinueOnError)
	from := fl.String("from", "auto", "the client format: auto, "+strings.Join(formatNames(), ", "))
	out := fl.String("out", "mcpgate.yaml", "the mcpgate config to write; an existing one gets the servers added")
	dryRun := fl.Bool("dry-run", false, "print what would be written, write nothing")
	force := fl.Bool("force", false, "replace servers of --out that have the imported names")
	gatewayURL := fl.String("gateway-url", clientconf.DefaultGateway, "the gateway's MCP endpoint the client is pointed at")
	asJSON := fl.Bool("json", false, "print a JSON report")
	path, err := parseWithArg(fl, args, "FILE")
	if err != nil {
		return err
	}
	if u, err := url.Parse(*gatewayURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &usageError{"--gateway-url: want an http or https URL"}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	format := clientconf.Format("")
	if *from == "auto" {
		if format, err = clientconf.Detect(path, data); err != nil {
			return fmt.Errorf("%s: %w (name the client with --from)", path, err)
		}
	} else if format, err = clientconf.ParseFormat(*from); err != nil {
		return &usageError{"--from: " + err.Error()}
	}
	file, err := clientconf.Parse(data, format)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	existing, err := os.ReadFile(*out)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	res, err := clientconf.Convert(file, clientconf.Options{Path: path, Separator: separatorOf(existing), ReadFile: os.ReadFile})
	if err != nil {
		return fmt.Errorf("%s:\n%w", path, err)
	}
	merged, replaced, err := clientconf.MergeServers(existing, res, *force)
	if err != nil {
		return fmt.Errorf("%s: %w", *out, err)
	}
	absOut, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	if _, err := config.Parse(merged, filepath.Dir(absOut), lookupOrPlaceholder); err != nil {
		return fmt.Errorf("the imported config would be invalid, nothing written:\n%w", err)
	}
	written := false
	if !*dryRun {
		if err := writeFileAtomic(*out, merged); err != nil {
			return err
		}
		written = true
	}
	target := clientconf.Target{URL: *gatewayURL}
	rep := importReport{
		File: path, Format: string(format), Out: *out, Written: written,
		Renamed: nonNil(res.Renames), Replaced: nonNil(replaced), Variables: nonNil(res.Vars), Warnings: nonNil(res.Warnings),
		YAML: string(clientconf.ServersYAML(res)), Client: clientconf.Document(format, target),
	}
	for _, n := range res.Names {
		rep.Servers = append(rep.Servers, importedServer{Name: n, Transport: res.Servers[n].Transport})
	}
	if *asJSON {
		return writeJSON(c.stdout, rep)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(c.stderr, "mcpgate import: %s\n", termText(w))
	}
	printImport(c.stdout, rep, len(existing) > 0, *dryRun)
	return nil
}

func printImport(w io.Writer, rep importReport, merged, dryRun bool) {
	var names []string
	for _, s := range rep.Servers {
		names = append(names, s.Name+" ("+s.Transport+")")
	}
	// The imported file is someone else's (a project's .mcp.json, say):
	// its names and values are printed terminal-safe.
	fmt.Fprintf(w, "%s (%s): %d servers: %s\n", termSafe(rep.File), rep.Format, len(rep.Servers), termSafe(strings.Join(names, ", ")))
	switch {
	case dryRun:
		fmt.Fprintf(w, "\n%s would get (dry run, nothing written):\n\n%s", termSafe(rep.Out), termText(rep.YAML))
	case merged:
		fmt.Fprintf(w, "%s: servers added, the rest of the file kept", termSafe(rep.Out))
		if len(rep.Replaced) > 0 {
			fmt.Fprintf(w, " (replaced: %s)", termSafe(strings.Join(rep.Replaced, ", ")))
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "%s: written\n", termSafe(rep.Out))
	}
	if len(rep.Renamed) > 0 {
		fmt.Fprintln(w, "\nRenamed:")
		for _, r := range rep.Renamed {
			fmt.Fprintf(w, "  %q -> %s: %s\n", r.From, termSafe(r.To), termSafe(r.Reason))
		}
	}
	if len(rep.Variables) > 0 {
		fmt.Fprintln(w, "\nSet these variables where mcpgate runs (names only):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, v := range rep.Variables {
			fmt.Fprintf(tw, "  %s\t%s\n", cell(v.Name), cell(v.Source))
		}
		tw.Flush()
		if slices.ContainsFunc(rep.Variables, func(v clientconf.Var) bool { return v.Moved }) {
			fmt.Fprintf(w, "The values moved out of %s are still there: remove them once the variables are set.\n", termSafe(rep.File))
		}
	}
	fmt.Fprintf(w, "\nThen point %s at mcpgate instead, with this one entry in place of the servers above:\n%s", rep.Format, termText(string(rep.Client)))
	if rep.Format == string(clientconf.ClaudeDesktop) {
		fmt.Fprintf(w, "(Claude Desktop launches only local servers: the entry runs the mcp-remote bridge, which reads %s from its environment.)\n", clientconf.DefaultKeyVar)
	}
	fmt.Fprintf(w, "mcpgate connect %s --write --file %s adds it there (after a backup); then remove the servers mcpgate now serves.\n", rep.Format, termSafe(shellQuote(rep.File)))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./~:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func formatNames() []string {
	var out []string
	for _, f := range clientconf.Formats {
		out = append(out, string(f))
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// separatorOf is the tool_name_separator of an existing config ("" when
// unset or unreadable: the default).
func separatorOf(data []byte) string {
	var c struct {
		Sep string `yaml:"tool_name_separator"`
	}
	if yaml.Unmarshal(data, &c) != nil {
		return ""
	}
	return c.Sep
}

// lookupOrPlaceholder resolves a variable from the environment, or with a
// placeholder when it is not set here.
func lookupOrPlaceholder(name string) (string, bool) {
	if v, ok := os.LookupEnv(name); ok {
		return v, true
	}
	return placeholderValue, true
}

// parseWithArg parses flags around exactly one positional argument,
// named what in the usage error.
func parseWithArg(fs *flag.FlagSet, args []string, what string) (string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", flagsHelp(fs, fs.Name()+" "+what+" [flags]")
			}
			return "", &usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		return "", &usageError{fmt.Sprintf("want one %s argument", what)}
	}
	return pos[0], nil
}

// writeFileAtomic replaces path with data through a temporary file in the
// same directory, keeping an existing file's mode (0600 for a new one).
func writeFileAtomic(path string, data []byte) error {
	mode := fs.FileMode(0o600)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
