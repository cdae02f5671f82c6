package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/config"
)

// The commands that talk to a running gateway (keys, servers status,
// toolsets, sessions, tools, call, audit) share the connection flags and
// the admin client in this file; each command lives in its own file.

// adminRequestTimeout bounds one admin API request.
const adminRequestTimeout = 10 * time.Second

// maxAdminAnswer bounds an admin API answer the CLI reads.
const maxAdminAnswer = 8 << 20

// adminFlags are the flags every admin subcommand takes.
type adminFlags struct {
	url    string
	config string
	key    string
	json   bool
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "base URL of the running gateway (default: $MCPGATE_URL, else --config's listen address, else http://"+config.DefaultListen+")")
	fs.StringVar(&f.config, "config", "", "config file whose listen address to ask (default: $MCPGATE_CONFIG, else ./"+defaultConfigFile+" if there is one)")
	fs.StringVar(&f.key, "admin-key", "", "admin or master key (default: $MCPGATE_ADMIN_KEY, else $MCPGATE_MASTER_KEY)")
	fs.BoolVar(&f.json, "json", false, "print the API's JSON answer")
}

// client resolves where the gateway is and who we are. The base URL comes
// from --url, else $MCPGATE_URL, else the listen address of --config
// ($MCPGATE_CONFIG, ./mcpgate.yaml), else the default listen address; the key from --admin-key, else
// $MCPGATE_ADMIN_KEY, else $MCPGATE_MASTER_KEY.
//
// warn hears what an answer warns about (a change not every replica
// confirmed): the command's stderr; nil for a command that changes
// nothing.
func (f *adminFlags) client(warn io.Writer) (*adminClient, error) {
	base, err := f.baseURL()
	if err != nil {
		return nil, err
	}
	key := f.key
	for _, env := range []string{"MCPGATE_ADMIN_KEY", "MCPGATE_MASTER_KEY"} {
		if key == "" {
			key = os.Getenv(env)
		}
	}
	return &adminClient{base: base, key: key, http: http.DefaultClient, timeout: adminRequestTimeout, warn: warn}, nil
}

// baseURL is the gateway's base URL, without a trailing slash (client).
func (f *adminFlags) baseURL() (string, error) {
	base, from := f.url, "--url"
	if base == "" {
		base, from = os.Getenv("MCPGATE_URL"), "$MCPGATE_URL"
	}
	if path := implicitConfig(f.config); base == "" && path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			return "", fmt.Errorf("invalid config:\n%w", err)
		}
		base, from = "http://"+dialable(cfg.Listen), path+" listen"
	}
	if base == "" {
		base = "http://" + config.DefaultListen
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", &usageError{fmt.Sprintf("%s: want an http(s) URL, got %q", from, base)}
	}
	return strings.TrimRight(base, "/"), nil
}

// adminClient calls the admin API of a running gateway. It is safe for
// concurrent use.
type adminClient struct {
	base    string // scheme://host[:port][/prefix], no trailing slash
	key     string // sent as X-Mcpgate-Api-Key when not empty
	http    *http.Client
	timeout time.Duration // per request; 0 means none
	// warn hears what an answer warns about (stderr); nil: nothing.
	warn io.Writer
}

// apiError is a non-2xx answer of the admin API.
type apiError struct {
	Status int
	// Body is the answer as it came (reload's problems are read from it).
	Body []byte
	// Message is the answer's error and details, without a repeat of
	// the status text; "" when it had none.
	Message string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// get, post, patch and delete call path (relative to /admin/v1/, with its
// query if any). in, when not nil, is sent as JSON; out, when not nil,
// receives the JSON answer (a *json.RawMessage receives it as is).
func (c *adminClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *adminClient) post(ctx context.Context, path string, in, out any) error {
	return c.do(ctx, http.MethodPost, path, in, out)
}

func (c *adminClient) delete(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodDelete, path, nil, nil)
}

func (c *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+admin.Prefix+"/"+path, body)
	if err != nil {
		return fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "mcpgate-cli/"+version())
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("X-Mcpgate-Api-Key", c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ask the gateway at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer+1))
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	// Before the status: a refusal that comes after a committed change
	// (a grant stored, its reload failed) carries the warning too.
	c.warnUnconfirmed(resp.Header)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &apiError{Status: resp.StatusCode, Body: b, Message: errorMessage(resp.StatusCode, b)}
		if resp.StatusCode == http.StatusUnauthorized && c.key == "" {
			const hint = "no key given: use --admin-key, $MCPGATE_ADMIN_KEY or $MCPGATE_MASTER_KEY"
			if e.Message == "" {
				e.Message = hint
			} else {
				e.Message += " (" + hint + ")"
			}
		}
		return e
	}
	if len(b) > maxAdminAnswer {
		return fmt.Errorf("the answer exceeds %d bytes", maxAdminAnswer)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the gateway's answer to %s %s is not the expected JSON: %w", method, path, err)
	}
	return nil
}

// warnUnconfirmed says, when an answer's header does, that some of the
// request's changes were made but not confirmed by every replica of a
// fleet in time (admin.HeaderUnconfirmed). Only a count is printed: the
// header is the server's, not text for the terminal.
func (c *adminClient) warnUnconfirmed(h http.Header) {
	n, err := strconv.Atoi(h.Get(admin.HeaderUnconfirmed))
	if err != nil || n <= 0 || c.warn == nil {
		return
	}
	fmt.Fprintf(c.warn, "warning: %d change(s) made, but not every replica confirmed applying them within 2s; "+
		"those apply them once they hear of them or at their next resync (the gateway's log says which)\n", n)
}

// errorMessage reads the message of an error answer: the admin API's
// {"error": title, "details": ...}, or the JSON-RPC-shaped body of a
// refused key, or else the start of the body.
func errorMessage(status int, body []byte) string {
	text := http.StatusText(status)
	var e struct {
		Error   json.RawMessage `json:"error"`
		Details string          `json:"details"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var title string
		var rpc struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &title) != nil && json.Unmarshal(e.Error, &rpc) == nil {
			title = rpc.Message
		}
		title = strings.TrimPrefix(title, text+": ")
		switch {
		case title == text || title == "":
			return e.Details
		case e.Details == "":
			return title
		}
		return title + ": " + e.Details
	}
	return truncate(strings.Join(strings.Fields(string(body)), " "), 200)
}

// printJSON prints an API answer indented by two spaces, terminal-safe
// (termJSON).
func printJSON(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return fmt.Errorf("the gateway's answer is not JSON: %w", err)
	}
	b.WriteByte('\n')
	_, err := w.Write(termJSON(b.Bytes()))
	return err
}

// newTable is the tabwriter of every table the CLI prints.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// cell makes s fit a table cell: one line, no tabs, "-" when empty. Cells
// show what upstreams (tool names and descriptions), clients and tokens
// chose, so they go through termSafe: a terminal must not run a control
// (an ESC sequence could rewrite the screen or the window title) nor
// reorder or hide what follows.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	return termSafe(s)
}

// row writes one table row: each value through cell, so that no table
// prints a value as it came.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, cell(c))
	}
	io.WriteString(w, "\n")
}

// truncate shortens s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(0, n-3)]) + "..."
}

// parseArgs parses flags that may come before, between or after the
// positional arguments, and returns the positional ones. -h is a usage
// error carrying the flags' help.
func parseArgs(fs *flag.FlagSet, synopsis string, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flagsHelp(fs, synopsis)
			}
			return nil, &usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// After "--" everything is positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// listFlag is a comma-separated list flag that remembers whether it was
// given; repeating it appends.
type listFlag struct {
	vals []string
	set  bool
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(s string) error {
	l.set = true
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.vals = append(l.vals, v)
		}
	}
	return nil
}

// parseNoArgs is parseArgs for a command that takes no positional
// argument.
func parseNoArgs(fs *flag.FlagSet, synopsis string, args []string) error {
	pos, err := parseArgs(fs, synopsis, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	return nil
}

// getReport is the shape of every listing command: it parses flags (no
// arguments), GETs path from the admin API and, with --json, prints the
// answer as it came. Otherwise it decodes the answer into out for the
// command's table; printed reports whether the JSON was printed instead.
func getReport(ctx context.Context, name string, args []string, path string, stdout io.Writer, out any) (printed bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	if err := parseNoArgs(fs, name+" [flags]", args); err != nil {
		return false, err
	}
	cl, err := af.client(nil)
	if err != nil {
		return false, err
	}
	return fetchReport(ctx, cl, af.json, name, path, stdout, out)
}

// fetchReport GETs path and, when asJSON, prints the answer as it came;
// otherwise it decodes the answer into out. printed reports whether the
// JSON was printed.
func fetchReport(ctx context.Context, cl *adminClient, asJSON bool, name, path string, stdout io.Writer, out any) (printed bool, err error) {
	var raw json.RawMessage
	if err := cl.get(ctx, path, &raw); err != nil {
		return false, err
	}
	if asJSON {
		return true, printJSON(stdout, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("the gateway's answer to %s is not what %s expects: %w", path, name, err)
	}
	return false, nil
}

// withQuery is path with the pairs of kv (name, value, ...) whose value
// is not empty as its query.
func withQuery(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// subcommand is one verb of a command with several (keys create, ...).
type subcommand struct {
	name string
	run  func(ctx context.Context, args []string) error
}

// runSubcommand runs the subcommand args[0] names, with the usage errors
// every such command gives: none named, help, an unknown one.
func runSubcommand(ctx context.Context, args []string, usage string, subs ...subcommand) error {
	if len(args) == 0 {
		names := make([]string, 0, len(subs))
		for _, s := range subs {
			names = append(names, s.name)
		}
		want := names[len(names)-1]
		if len(names) > 1 {
			want = strings.Join(names[:len(names)-1], ", ") + " or " + want
		}
		return &usageError{"want a subcommand: " + want + "\n" + usage}
	}
	switch args[0] {
	case "-h", "--help", "help":
		return &helpError{strings.TrimRight(usage, "\n")}
	}
	names := make([]string, 0, len(subs))
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:])
		}
		names = append(names, s.name)
	}
	return &usageError{fmt.Sprintf("unknown subcommand %q%s\n%s", args[0], didYouMean(args[0], names), usage)}
}
