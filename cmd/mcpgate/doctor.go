package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// doctorCommand validates a config, then reaches each of its upstreams
// the way the gateway would (the same upstream.Manager, credentials and
// tls blocks) and reports a verdict per server. It serves nothing, opens
// no store and writes nothing.
type doctorCommand struct {
	stdout, stderr io.Writer
}

// Verdicts of a server check.
const (
	verdictOK   = "ok"
	verdictWarn = "warn"
	verdictFail = "fail"
)

const (
	// defaultDoctorTimeout bounds the check of one server.
	defaultDoctorTimeout = 10 * time.Second
	// doctorParallel is how many servers are checked at once: enough to
	// keep a config of dozens of servers quick, few enough not to start
	// every stdio server of a large config together.
	doctorParallel = 4
	// tlsExpiryWarning is how close a certificate's expiry must be to make
	// the verdict warn.
	tlsExpiryWarning = 14 * 24 * time.Hour
)

// doctorReport is the document of doctor --json. Every field is always
// present (null when not known) so scripts can rely on the shape.
type doctorReport struct {
	Config  doctorConfig  `json:"config"`
	Servers []serverCheck `json:"servers"`
}

type doctorConfig struct {
	Valid  bool      `json:"valid"`
	Errors []problem `json:"errors"`
}

// serverCheck is the outcome for one server.
type serverCheck struct {
	Name            string      `json:"name"`
	Transport       string      `json:"transport"`
	Verdict         string      `json:"verdict"`
	ProtocolVersion string      `json:"protocol_version"`
	ServerInfo      *serverInfo `json:"server_info"`
	Tools           *int        `json:"tools"`
	LatencyMS       *int64      `json:"latency_ms"`
	TLSNotAfter     *time.Time  `json:"tls_not_after"`
	Detail          string      `json:"detail"`
	// Stderr is the end of what a failed stdio server wrote to stderr
	// (its own account of why), secrets redacted; null otherwise.
	Stderr []string `json:"stderr"`
}

// serverInfo is the upstream's serverInfo of its initialize result.
type serverInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// exitError ends a command with a code and no further message (the
// command printed its report already).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func (c *doctorCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	path := fs.String("config", "", configFlagHelp)
	asJSON := fs.Bool("json", false, "print a JSON document instead of a table")
	timeout := fs.Duration("timeout", defaultDoctorTimeout, "bound on the check of each server")
	// The Managers' logs would repeat the report, so they are off unless
	// --log-level or --log-format is given (debug shows each connect).
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	logging := false
	fs.Visit(func(f *flag.Flag) { logging = logging || strings.HasPrefix(f.Name, "log-") })
	if logging {
		var err error
		if log, err = lf.logger(c.stderr); err != nil {
			return err
		}
	}
	path, err := configPathOf(path)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return &usageError{"--timeout must be positive"}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		if *asJSON {
			rep := doctorReport{Config: doctorConfig{Errors: problemsOf(err)}, Servers: []serverCheck{}}
			if werr := writeJSON(c.stdout, rep); werr != nil {
				return werr
			}
			return &exitError{2}
		}
		// The same text as mcpgate validate, with exit code 2.
		fmt.Fprintf(c.stderr, "mcpgate doctor: invalid config:\n%s\n", termText(err.Error()))
		return &exitError{2}
	}
	var onDone func(serverCheck)
	var tbl *streamTable
	start := time.Now()
	if !*asJSON {
		// "config ok" at once, then each server's row as its check ends
		// (a slow server does not hold back the others' verdicts).
		fmt.Fprintf(c.stdout, "%s: config ok (%d servers)\n\n", termSafe(*path), len(cfg.ServerNames()))
		tbl = newCheckTable(c.stdout, cfg)
		onDone = tbl.add
	}
	checks := checkServers(ctx, cfg, *timeout, log, onDone)
	counts := map[string]int{}
	for _, ch := range checks {
		counts[ch.Verdict]++
	}
	failed := counts[verdictFail]
	if *asJSON {
		if err := writeJSON(c.stdout, doctorReport{Config: doctorConfig{Valid: true, Errors: []problem{}}, Servers: checks}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.stdout, "\n%d ok, %d warn, %d fail in %s\n", counts[verdictOK], counts[verdictWarn], failed,
			time.Since(start).Round(10*time.Millisecond))
	}
	if failed > 0 {
		if !*asJSON {
			fmt.Fprintf(c.stderr, "mcpgate doctor: %d of %d servers failed\n", failed, len(checks))
		}
		return &exitError{1}
	}
	return nil
}

// problemsOf lists the field errors of a failed config.Load as validate
// --json does.
func problemsOf(err error) []problem {
	problems := []problem{}
	for _, fe := range config.FieldErrors(err) {
		msg := "invalid"
		if fe.Err != nil {
			msg = fe.Err.Error()
		}
		problems = append(problems, problem{Path: fe.Path, Line: fe.Line, Message: msg})
	}
	return problems
}

// writeJSON prints v as indented JSON, terminal-safe (termJSON).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(termJSON(b.Bytes()))
	return err
}

// streamTable prints doctor's rows one at a time, as checks end, in
// columns sized beforehand (a tabwriter would hold every row back until
// the last): names and transports are known from the config, the other
// cells have bounded widths.
type streamTable struct {
	mu     sync.Mutex
	w      io.Writer
	widths []int
}

// checkColumns are the table's headings; the last column is not padded.
var checkColumns = []string{"SERVER", "TRANSPORT", "VERDICT", "PROTOCOL", "TOOLS", "LATENCY", "TLS EXPIRES", "DETAIL"}

func newCheckTable(w io.Writer, cfg *config.Config) *streamTable {
	t := &streamTable{w: w, widths: make([]int, len(checkColumns))}
	for i, h := range checkColumns {
		t.widths[i] = len(h)
	}
	for name, srv := range cfg.Servers {
		t.widths[0] = max(t.widths[0], utf8.RuneCountInString(cell(name)))
		t.widths[1] = max(t.widths[1], utf8.RuneCountInString(cell(srv.Transport)))
	}
	// verdict, "2026-07-28", a tool count, "12345 ms", a date.
	for i, w := range map[int]int{2: 4, 3: 10, 4: 5, 5: 8, 6: 10} {
		t.widths[i] = max(t.widths[i], w)
	}
	t.row(checkColumns...)
	return t
}

// row writes one row, each value through cell.
func (t *streamTable) row(cells ...string) {
	var b strings.Builder
	for i, c := range cells {
		c = cell(c)
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		b.WriteString(strings.Repeat(" ", max(0, t.widths[i]-utf8.RuneCountInString(c))+2))
	}
	b.WriteByte('\n')
	io.WriteString(t.w, b.String())
}

// add prints ch's row, and under it a failed stdio server's stderr.
func (t *streamTable) add(ch serverCheck) {
	tools, latency, expires := "-", "-", "-"
	if ch.Tools != nil {
		tools = fmt.Sprint(*ch.Tools)
	}
	if ch.LatencyMS != nil {
		latency = fmt.Sprintf("%d ms", *ch.LatencyMS)
	}
	if ch.TLSNotAfter != nil {
		expires = ch.TLSNotAfter.UTC().Format(time.DateOnly)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.row(ch.Name, ch.Transport, ch.Verdict, ch.ProtocolVersion, tools, latency, expires, ch.Detail)
	for _, l := range ch.Stderr {
		fmt.Fprintf(t.w, "    stderr| %s\n", cell(l))
	}
}

// checkServers checks every server of cfg, doctorParallel at a time, each
// within timeout; the result is in name order. onDone, when not nil, is
// called with each outcome as it is reached (concurrently).
func checkServers(ctx context.Context, cfg *config.Config, timeout time.Duration, log *slog.Logger, onDone func(serverCheck)) []serverCheck {
	names := cfg.ServerNames()
	out := make([]serverCheck, len(names))
	sem := make(chan struct{}, doctorParallel)
	// closing waits for the Managers: a stalled upstream's session may
	// take upstream.CloseTimeout to let go, which need not hold a slot,
	// but every stdio process is stopped before doctor returns.
	var wg, closing sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = checkServer(ctx, cfg, name, timeout, log, &closing)
			if onDone != nil {
				onDone(out[i])
			}
		})
	}
	wg.Wait()
	closing.Wait()
	return out
}

// checkServer reaches one server: its certificate for an https URL, then
// a handshake and a tools/list walk through a Manager of its own, closed
// (which stops a stdio server's process) under closing.
func checkServer(ctx context.Context, cfg *config.Config, name string, timeout time.Duration, log *slog.Logger, closing *sync.WaitGroup) (ch serverCheck) {
	srv := cfg.Servers[name]
	ch = serverCheck{Name: name, Transport: srv.Transport, Verdict: verdictOK}
	clean := secretScrubber(srv)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var notes []string
	warn := func(s string) {
		if ch.Verdict == verdictOK {
			ch.Verdict = verdictWarn
		}
		notes = append(notes, s)
	}
	fail := func(s string) {
		ch.Verdict = verdictFail
		notes = append(notes, s)
	}
	defer func() { ch.Detail = clean(strings.Join(notes, "; ")) }()

	if isHTTPS(srv) {
		cert, err := upstream.ServerCertificate(ctx, srv)
		if cert != nil {
			na := cert.NotAfter.UTC()
			ch.TLSNotAfter = &na
			switch left := time.Until(na); {
			case left <= 0:
				fail("tls: certificate expired " + na.Format(time.DateOnly))
			case left < tlsExpiryWarning:
				warn(fmt.Sprintf("tls: certificate expires in %d days", int(left.Hours()/24)))
			}
		}
		if err != nil && cert == nil {
			// The connect below fails too, and says it better for most
			// causes; this keeps the TLS cause when it does not.
			defer func() {
				if ch.Verdict != verdictFail {
					fail("tls: " + strings.TrimPrefix(err.Error(), "tls: "))
				}
			}()
		}
	}
	if why := needsCaller(srv); why != "" {
		warn(why)
		return ch
	}

	tail := newStderrTail(log.Handler())
	m := upstream.NewManager(upstream.ManagerOptions{
		Servers:         map[string]*config.Server{name: srv},
		ClientName:      "mcpgate",
		ClientVersion:   version(),
		Logger:          slog.New(tail),
		MaxMessageBytes: int(cfg.Limits.MaxUpstreamMessage),
	})
	closed := make(chan struct{})
	closeManager := sync.OnceFunc(func() { closing.Go(func() { m.Close(); close(closed) }) })
	defer closeManager()
	start := time.Now()
	info, tools, err := listTools(ctx, m, name)
	if info != nil {
		ch.ProtocolVersion = info.ProtocolVersion
		var si serverInfo
		if json.Unmarshal(info.ServerInfo, &si) == nil && (si.Name != "" || si.Version != "") {
			ch.ServerInfo = &si
		}
	}
	if err != nil {
		fail(describeFailure(ctx, err, timeout))
		if srv.Transport == config.TransportStdio {
			// The failure can overtake the last stderr lines: closing the
			// session reaps the process and drains its stderr.
			closeManager()
			select {
			case <-closed:
			case <-time.After(stderrSettle):
			}
		}
		for _, l := range tail.lines() {
			ch.Stderr = append(ch.Stderr, truncate(clean(l), doctorStderrWidth))
		}
		return ch
	}
	ms := time.Since(start).Milliseconds()
	ch.LatencyMS, ch.Tools = &ms, &tools
	return ch
}

// maxToolPages bounds the tools/list walk of one server, as the
// catalog's does.
const maxToolPages = catalog.DefaultPageCap

// listTools connects to server (the handshake) and counts its tools,
// page by page, all within ctx. It walks by itself rather than through
// the catalog, whose shared walks outlive their callers' contexts.
func listTools(ctx context.Context, m *upstream.Manager, server string) (*upstream.InitInfo, int, error) {
	sess, release, err := m.Acquire(ctx, server)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	info := sess.Info()
	if !info.Caps.Tools {
		return info, 0, nil
	}
	n, cursor := 0, ""
	for range maxToolPages {
		var params json.RawMessage
		if cursor != "" {
			params = append(append([]byte(`{"cursor":`), jsonrpc.String(cursor)...), '}')
		}
		res, err := sess.Call(ctx, mcpwire.MethodToolsList, params)
		if err != nil {
			var rpcErr *jsonrpc.Error
			if errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
				return info, 0, nil
			}
			return info, 0, err
		}
		arr, ok := jsonrpc.Get(res, "tools")
		if !ok || len(arr) == 0 || arr[0] != '[' {
			return info, 0, errors.New("invalid MCP response: tools/list result has no \"tools\" array")
		}
		if err := jsonrpc.Elements(arr, func([]byte) bool { n++; return true }); err != nil {
			return info, 0, fmt.Errorf("invalid MCP response: %w", err)
		}
		if cursor, _ = jsonrpc.GetString(res, "nextCursor"); cursor == "" {
			return info, n, nil
		}
	}
	return info, n, fmt.Errorf("tools/list: more than %d pages", maxToolPages)
}

// needsCaller says why a server cannot be checked without a person or a
// caller ("" when it can): its credentials are not the gateway's own.
func needsCaller(srv *config.Server) string {
	if srv.Auth == nil {
		return ""
	}
	switch t := srv.Auth.Type; {
	case t == config.AuthUserAPIKey || t == config.AuthOAuth2User:
		return "needs a person's connection; not checked"
	case t == config.AuthPassthrough || config.ExchangesCallerToken(t):
		return "needs a caller's token; not checked"
	}
	return ""
}

func isHTTPS(srv *config.Server) bool {
	if srv.Transport == "stdio" {
		return false
	}
	u, err := url.Parse(cmp.Or(srv.URL, srv.BaseURL)) // openapi: the API's base_url
	return err == nil && u.Scheme == "https"
}

// describeFailure is the detail of a failed handshake or tools/list: the
// fault class first, then the upstream package's message (which never
// holds credentials; secretScrubber makes sure).
func describeFailure(ctx context.Context, err error, timeout time.Duration) string {
	var ue *upstream.Error
	f := upstream.Classify(err)
	switch {
	case f.Class == upstream.FaultAuth:
		return fmt.Sprintf("auth: refused (%d)", f.Status)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return fmt.Sprintf("timeout: no answer within %s", timeout)
	case f.Class == upstream.FaultCancelled:
		return "cancelled"
	}
	msg := err.Error()
	if errors.As(err, &ue) && ue.Err != nil {
		msg = ue.Err.Error()
	}
	return f.Class + ": " + msg
}

// secretScrubber returns a function that replaces every credential srv is
// configured with (every value its config marks secret: header and env
// values, auth secrets, private keys; and the password, user and query
// values of its URL) with "***". The URL itself is the operator's own and
// is shown, as the errors that name it show it: masking it whole while
// an error printed its host and path was neither safe nor readable.
func secretScrubber(srv *config.Server) func(string) string {
	var secrets []string
	add := func(s string) {
		if s = strings.TrimSpace(s); len(s) >= 3 {
			secrets = append(secrets, s)
		}
	}
	for _, v := range srv.SecretValues() {
		if v == srv.URL || v == srv.BaseURL {
			// The operator's own URL is shown, as the errors that name
			// it show it: only its secret parts (below) are masked.
			continue
		}
		add(v)
		// "Bearer abc" is sent as is; its bare token may show alone.
		if _, tok, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			add(tok)
		}
	}
	if u, err := url.Parse(cmp.Or(srv.URL, srv.BaseURL)); err == nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
		if u.User != nil {
			add(u.User.Username())
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				add(v)
			}
		}
	}
	// Longest first: the URL goes before the parts of it.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	return func(s string) string {
		for _, sec := range secrets {
			s = strings.ReplaceAll(s, sec, "***")
		}
		return s
	}
}

// Bounds of the stderr doctor shows for a failed stdio server.
const (
	doctorStderrLines = 5
	doctorStderrWidth = 200
	// stderrSettle bounds the wait for a failed stdio server's stderr
	// to be drained (its process stopped) before its row is printed.
	stderrSettle = 2 * time.Second
)

// stderrTail is a slog.Handler that keeps the last doctorStderrLines
// lines a stdio server wrote to stderr (the upstream package logs each as
// "upstream stderr") and passes every record on to next as it would
// have been.
type stderrTail struct {
	next slog.Handler
	buf  *tailBuf
}

type tailBuf struct {
	mu    sync.Mutex
	lines []string
}

func newStderrTail(next slog.Handler) *stderrTail {
	return &stderrTail{next: next, buf: &tailBuf{}}
}

// lines is a copy of the lines kept so far.
func (t *stderrTail) lines() []string {
	t.buf.mu.Lock()
	defer t.buf.mu.Unlock()
	return slices.Clone(t.buf.lines)
}

func (t *stderrTail) Enabled(context.Context, slog.Level) bool { return true }

func (t *stderrTail) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "upstream stderr" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key != "line" {
				return true
			}
			t.buf.mu.Lock()
			t.buf.lines = append(t.buf.lines, a.Value.String())
			if n := len(t.buf.lines); n > doctorStderrLines {
				t.buf.lines = slices.Delete(t.buf.lines, 0, n-doctorStderrLines)
			}
			t.buf.mu.Unlock()
			return false
		})
	}
	if !t.next.Enabled(ctx, r.Level) {
		return nil
	}
	return t.next.Handle(ctx, r)
}

func (t *stderrTail) WithAttrs(as []slog.Attr) slog.Handler {
	return &stderrTail{next: t.next.WithAttrs(as), buf: t.buf}
}

func (t *stderrTail) WithGroup(name string) slog.Handler {
	return &stderrTail{next: t.next.WithGroup(name), buf: t.buf}
}
