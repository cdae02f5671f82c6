package clientconf

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Options tune Convert. The zero value converts with the default tool
// name separator and ignores envFile entries (with a warning).
type Options struct {
	// Path is the client file's path: ${workspaceFolder} is the folder
	// holding its .vscode or .cursor directory, else its directory, and
	// relative commands, cwd and envFile are resolved against that.
	Path string
	// Separator is the gateway's tool name separator; "" means "__".
	Separator string
	// ReadFile reads a VS Code envFile; nil leaves such files out.
	ReadFile func(path string) ([]byte, error)
}

// Result is a client file converted to mcpgate servers.
type Result struct {
	Names    []string                  // mcpgate names, in the client file's order
	Servers  map[string]*config.Server // by mcpgate name
	Vars     []Var                     // variables the gateway needs set, in order of appearance
	Renames  []Rename
	Warnings []string // what was left out or changed, never a value
}

// Var is an environment variable the imported servers reference.
type Var struct {
	Name   string `json:"name"`
	Server string `json:"server"` // the mcpgate server that reads it
	// Source says where its value is: the client's entry and key it was
	// moved from, or the variable or input the client referenced.
	Source string `json:"source"`
	// Moved is set when the value was a literal in the client file (it is
	// still there: set the variable to it, then remove it from the file).
	Moved bool `json:"moved"`
}

// Rename is a server whose client name is not a valid mcpgate name, or
// that collided with another.
type Rename struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// Convert turns a parsed client file into mcpgate servers. Every secret
// value (by its key's name, or a Bearer value) is replaced with a
// ${MCPGATE_<SERVER>_<NAME>} reference; client variables (${env:X},
// ${input:x}, ${workspaceFolder}, ...) are translated; every other "$" is
// escaped. The result is not validated: callers run config.Parse on what
// they write.
func Convert(f *File, opts Options) (*Result, error) {
	sep := opts.Separator
	if sep == "" {
		sep = config.DefaultSeparator
	}
	c := &converter{
		f: f, opts: opts, sep: sep, workspace: workspaceOf(opts.Path),
		res:  &Result{Servers: map[string]*config.Server{}},
		vars: map[string]bool{},
	}
	var errs []string
	for _, s := range f.Servers {
		if s.Disabled {
			c.warnf("%s: skipped, it is disabled in the client", label(s))
			continue
		}
		name := c.name(s)
		srv, err := c.server(name, s)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", label(s), err))
			continue
		}
		c.res.Names = append(c.res.Names, name)
		c.res.Servers[name] = srv
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	if len(c.res.Names) == 0 {
		return nil, fmt.Errorf("%s file has no server to import", f.Format)
	}
	return c.res, nil
}

// label names a client entry in messages.
func label(s Server) string {
	if s.Project != "" {
		return fmt.Sprintf("server %q (project %s)", s.Name, s.Project)
	}
	return fmt.Sprintf("server %q", s.Name)
}

type converter struct {
	f         *File
	opts      Options
	sep       string
	workspace string
	res       *Result
	vars      map[string]bool // names in res.Vars
}

func (c *converter) warnf(format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, fmt.Sprintf(format, args...))
}

// workspaceOf is the folder a client resolves ${workspaceFolder} and
// relative paths against.
func workspaceOf(path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := filepath.Dir(abs)
	if b := filepath.Base(dir); b == ".vscode" || b == ".cursor" {
		return filepath.Dir(dir)
	}
	return dir
}

// name gives a client entry its mcpgate name: normalised to
// [a-z0-9][a-z0-9_-]* without the separator, and unique.
func (c *converter) name(s Server) string {
	base := NormaliseName(s.Name, c.sep)
	name, reason := base, ""
	if base != s.Name {
		reason = "not a valid mcpgate server name ([a-z0-9][a-z0-9_-]*, without " + strconv.Quote(c.sep) + ")"
	}
	join := "-"
	if strings.Contains(c.sep, join) {
		join = "_"
	}
	for i := 2; c.res.Servers[name] != nil || slices.Contains(c.res.Names, name); i++ {
		name = fmt.Sprintf("%s%s%d", base, join, i)
		reason = fmt.Sprintf("collides with another server named %q", base)
	}
	if name != s.Name {
		c.res.Renames = append(c.res.Renames, Rename{From: s.Name, To: name, Reason: reason})
	}
	return name
}

// NormaliseName maps a client's server name to mcpgate's rule:
// lowercase, runs of other characters become "-", no leading "-" or "_",
// the separator never appears, and no character of it at either end.
func NormaliseName(name, sep string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	s := b.String()
	if sep != "" {
		repl := "-"
		if strings.Contains(sep, "-") {
			repl = "_"
		}
		if strings.Contains(sep, repl) {
			repl = ""
		}
		for i := 0; strings.Contains(s, sep) && i < len(name)+1; i++ {
			s = strings.ReplaceAll(s, sep, repl)
		}
	}
	s = strings.TrimLeft(s, "-_")
	s = strings.TrimRight(s, "-")
	// Nor may a name begin or end with one of the separator's
	// characters: its tools' names would read as another server's.
	s = strings.Trim(s, sep)
	if s == "" || (sep != "" && strings.Contains(s, sep)) {
		return "server"
	}
	return s
}

// transport maps an entry's type (or its shape) to an mcpgate transport.
func transport(s Server) (string, error) {
	switch strings.ReplaceAll(strings.ReplaceAll(s.Type, "-", ""), "_", "") {
	case "stdio", "local":
		return config.TransportStdio, nil
	case "sse":
		return config.TransportSSE, nil
	case "http", "streamablehttp", "streamable":
		return config.TransportHTTP, nil
	case "":
		switch {
		case s.Command != "":
			return config.TransportStdio, nil
		case s.URL != "":
			// Clients without a type try streamable HTTP; an endpoint
			// named /sse is the legacy transport.
			if u, err := url.Parse(s.URL); err == nil && strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/sse") {
				return config.TransportSSE, nil
			}
			return config.TransportHTTP, nil
		}
		return "", fmt.Errorf("neither command nor url")
	}
	return "", fmt.Errorf("unknown type %q (want stdio, sse or http)", s.Type)
}

func (c *converter) server(name string, s Server) (*config.Server, error) {
	t, err := transport(s)
	if err != nil {
		return nil, err
	}
	if len(s.Ignored) > 0 {
		c.warnf("%s: ignored %s (no mcpgate equivalent)", label(s), strings.Join(s.Ignored, ", "))
	}
	srv := &config.Server{Transport: t}
	switch t {
	case config.TransportStdio:
		if s.Command == "" {
			return nil, fmt.Errorf("type stdio without a command")
		}
		srv.Command = c.path(c.value(name, s, "command", s.Command))
		srv.Args = c.args(name, s)
		if s.Cwd != "" {
			srv.Cwd = c.path(c.value(name, s, "cwd", s.Cwd))
		}
		env := map[string]string{}
		if s.EnvFile != "" {
			maps.Copy(env, c.envFile(name, s))
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			env[k] = c.secret(name, s, "env", k, s.Env[k])
		}
		if len(env) > 0 {
			srv.Env = env
		}
		if s.URL != "" || len(s.Headers) > 0 {
			c.warnf("%s: url and headers ignored for a stdio server", label(s))
		}
	default:
		if s.URL == "" {
			return nil, fmt.Errorf("type %s without a url", s.Type)
		}
		if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
			c.warnf("%s: command, args and env ignored for a remote server", label(s))
		}
		srv.URL = c.url(name, s)
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			if config.IsReservedHeader(k) {
				c.warnf("%s: header %s left out (mcpgate sets it itself)", label(s), k)
				continue
			}
			v := c.secret(name, s, "header", k, s.Headers[k])
			if strings.EqualFold(k, "Authorization") && srv.Auth == nil && bearer(s.Headers[k]) {
				srv.Auth = &config.Auth{Type: config.AuthBearer, Value: v}
				continue
			}
			if srv.Headers == nil {
				srv.Headers = map[string]string{}
			}
			srv.Headers[k] = v
		}
	}
	srv.Provenance = c.provenance(srv)
	return srv, nil
}

// provenance is where an imported server came from: the client file, and
// for a stdio server started by a package runner the package it runs
// (its arguments are already converted: no secret is in them).
func (c *converter) provenance(srv *config.Server) *config.Provenance {
	p := &config.Provenance{Source: strings.TrimSpace(string(c.f.Format) + " " + c.opts.Path)}
	if srv.Transport == config.TransportStdio {
		p.Version = packageOf(srv.Command, srv.Args)
	}
	return p
}

// packageOf names the package a package runner (npx, uvx, bunx, pnpm
// dlx, docker run) is told to run, as given ("npm @scope/pkg@1.2.3"); ""
// for any other command.
func packageOf(command string, args []string) string {
	base := strings.TrimSuffix(filepath.Base(command), ".cmd")
	base = strings.TrimSuffix(base, ".exe")
	var registry string
	switch base {
	case "npx", "bunx":
		registry = "npm"
	case "uvx", "pipx":
		registry = "pypi"
	case "pnpm", "yarn":
		if len(args) == 0 || args[0] != "dlx" {
			return ""
		}
		registry, args = "npm", args[1:]
	case "docker", "podman":
		if len(args) == 0 || args[0] != "run" {
			return ""
		}
		registry, args = "image", args[1:]
	default:
		return ""
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			continue
		case strings.HasPrefix(a, "-"):
			// A flag; those that take a separate value skip it.
			if !strings.Contains(a, "=") && valueFlags[a] {
				i++
			}
			continue
		}
		if strings.Contains(a, "${") {
			return "" // a variable, not a package name
		}
		return registry + " " + a
	}
	return ""
}

// valueFlags are package runners' flags whose value is the next argument.
var valueFlags = map[string]bool{
	"-p": true, "--package": true, "--from": true, "--with": true, "--python": true, "--index-url": true,
	"-e": true, "--env": true, "-v": true, "--volume": true, "--name": true, "--network": true, "--env-file": true,
	"-w": true, "--workdir": true, "--user": true, "-u": true, "--entrypoint": true, "--mount": true,
}

// args converts a stdio server's arguments. Credentials there move to
// variables too: a value that looks like one (a URL with a password, a
// token format), and the value of a flag named like one (--api-key=X,
// --token X).
func (c *converter) args(name string, s Server) []string {
	var out []string
	secretFlag := "" // the previous argument was --token and the like
	envFlag := false // the previous argument was docker's -e or --env
	for i, a := range s.Args {
		v := c.value(name, s, "args", a)
		flagName, flagValue, hasValue := strings.Cut(a, "=")
		isFlag := strings.HasPrefix(a, "-") && len(strings.TrimLeft(flagName, "-")) > 0
		// docker run -e NAME=value, --env NAME=value, --env=NAME=value:
		// a variable named like a secret, with its value written out.
		envArg := ""
		switch {
		case envFlag && !isFlag:
			envArg = a
		case isFlag && hasValue && (flagName == "-e" || flagName == "--env"):
			envArg = flagValue
		}
		envName, envValue, envHas := strings.Cut(envArg, "=")
		switch {
		case HasReference(v):
		case envHas && envValue != "" && SecretName(envName):
			ref := escapeDollar(envName) + "=${" + c.addVar(name, envName, fmt.Sprintf("the value of %s passed to the container by %s", envName, label(s)), true) + "}"
			if envFlag {
				v = ref
			} else {
				v = flagName + "=" + ref
			}
		case secretFlag != "" && !strings.HasPrefix(a, "-"):
			v = "${" + c.addVar(name, secretFlag, fmt.Sprintf("the value of argument %s of %s", secretFlag, label(s)), true) + "}"
		case isFlag && hasValue && flagValue != "" && SecretName(flagName):
			flag := strings.TrimLeft(flagName, "-")
			v = escapeDollar(flagName) + "=${" + c.addVar(name, flag, fmt.Sprintf("the value of argument %s of %s", flagName, label(s)), true) + "}"
		case SecretValue(a):
			v = "${" + c.addVar(name, fmt.Sprintf("ARG%d", i+1), fmt.Sprintf("argument %d of %s", i+1, label(s)), true) + "}"
		}
		secretFlag = ""
		envFlag = isFlag && !hasValue && (a == "-e" || a == "--env")
		if isFlag && !hasValue && SecretName(flagName) {
			secretFlag = strings.TrimLeft(flagName, "-")
		}
		out = append(out, v)
	}
	return out
}

// bearer reports whether an Authorization value (as the client wrote it,
// possibly a reference) uses the Bearer scheme.
func bearer(v string) bool {
	f := strings.Fields(v)
	return len(f) == 2 && strings.EqualFold(f[0], "bearer")
}

// path makes a relative command or cwd (with a separator) absolute against
// the workspace, where the client would have run it.
func (c *converter) path(p string) string {
	if c.workspace == "" || filepath.IsAbs(p) || !strings.ContainsRune(p, '/') || strings.HasPrefix(p, "$") {
		return p
	}
	return filepath.Join(c.workspace, p)
}

// url converts a server's url; credentials in its user info or in query
// parameters named like secrets move to variables.
func (c *converter) url(name string, s Server) string {
	u, err := url.Parse(s.URL)
	if err != nil || strings.Contains(s.URL, "${") {
		return c.value(name, s, "url", s.URL)
	}
	moved := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "\x00PASSWORD\x00")
			moved = true
		}
	}
	q := u.Query()
	var secretParams []string
	for k := range q {
		if SecretName(k) {
			secretParams = append(secretParams, k)
		}
	}
	slices.Sort(secretParams)
	if !moved && len(secretParams) == 0 {
		return c.value(name, s, "url", s.URL)
	}
	for _, k := range secretParams {
		q.Set(k, "\x00Q"+k+"\x00")
	}
	u.RawQuery = q.Encode()
	out := escapeDollar(u.String())
	if moved {
		v := c.addVar(name, "URL_PASSWORD", fmt.Sprintf("the password in the url of %s", label(s)), true)
		out = strings.Replace(out, "%00PASSWORD%00", "${"+v+"}", 1)
	}
	for _, k := range secretParams {
		v := c.addVar(name, "URL_"+k, fmt.Sprintf("query parameter %s in the url of %s", k, label(s)), true)
		out = strings.Replace(out, url.QueryEscape("\x00Q"+k+"\x00"), "${"+v+"}", 1)
	}
	return out
}

// secret converts the value of an env variable or header: a literal
// secret becomes a reference to a new variable, anything else is
// translated like any value.
func (c *converter) secret(name string, s Server, kind, key, value string) string {
	v := c.value(name, s, kind+" "+key, value)
	if HasReference(v) {
		return v // already a reference: nothing literal to move
	}
	if value == "" || !(SecretName(key) || SecretValue(value)) {
		return v
	}
	ref := c.addVar(name, key, fmt.Sprintf("%s %s of %s", kind, key, label(s)), true)
	return "${" + ref + "}"
}

// envFile reads a VS Code envFile into env values, secrets moved.
func (c *converter) envFile(name string, s Server) map[string]string {
	if c.opts.ReadFile == nil {
		c.warnf("%s: envFile not read; add its variables to env", label(s))
		return nil
	}
	p := c.path(expandClientPath(s.EnvFile, c.workspace))
	if !filepath.IsAbs(p) && c.workspace != "" {
		p = filepath.Join(c.workspace, p)
	}
	data, err := c.opts.ReadFile(p)
	if err != nil {
		c.warnf("%s: envFile %s not read (%v); add its variables to env", label(s), p, err)
		return nil
	}
	out := map[string]string{}
	for k, v := range parseDotenv(data) {
		if SecretName(k) || SecretValue(v) {
			ref := c.addVar(name, k, fmt.Sprintf("%s in envFile %s of %s", k, p, label(s)), true)
			out[k] = "${" + ref + "}"
			continue
		}
		out[k] = escapeDollar(v)
	}
	return out
}

// expandClientPath replaces the workspace variable in a path.
func expandClientPath(p, workspace string) string {
	return strings.ReplaceAll(p, "${workspaceFolder}", workspace)
}

// parseDotenv reads KEY=VALUE lines: # comments, an optional export
// prefix, single or double quotes around the value.
func parseDotenv(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		} else if i := strings.Index(v, " #"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		out[k] = v
	}
	return out
}

// clientVar matches a client's ${...} variable.
var clientVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// value translates one string of a client entry into mcpgate's ${VAR}
// syntax: the client's variables become references (recorded in Vars),
// every other "$" is escaped. Claude Desktop interpolates nothing.
func (c *converter) value(name string, s Server, field, v string) string {
	if !strings.Contains(v, "$") {
		return v
	}
	if c.f.Format == ClaudeDesktop {
		return escapeDollar(v)
	}
	var b strings.Builder
	last := 0
	for _, m := range clientVar.FindAllStringSubmatchIndex(v, -1) {
		b.WriteString(escapeDollar(v[last:m[0]]))
		last = m[1]
		expr := v[m[2]:m[3]]
		if out, ok := c.variable(name, s, field, expr); ok {
			b.WriteString(out)
		} else {
			b.WriteString(escapeDollar(v[m[0]:m[1]]))
		}
	}
	b.WriteString(escapeDollar(v[last:]))
	return b.String()
}

// variable translates the client variable ${expr}; ok is false for one
// mcpgate cannot express (kept literally, with a warning).
func (c *converter) variable(name string, s Server, field, expr string) (string, bool) {
	kind, arg, hasArg := strings.Cut(expr, ":")
	switch {
	case hasArg && kind == "env" && c.f.Format != ClaudeCode && validVar(arg):
		c.refVar(name, arg, fmt.Sprintf("referenced as ${env:%s} by %s", arg, label(s)))
		return "${" + arg + "}", true
	case hasArg && kind == "input" && c.f.Format == VSCode:
		desc := ""
		if i := slices.IndexFunc(c.f.Inputs, func(in Input) bool { return in.ID == arg }); i >= 0 && c.f.Inputs[i].Description != "" {
			desc = ": " + c.f.Inputs[i].Description
		}
		ref := c.addVar(name, arg, fmt.Sprintf("VS Code input %q of %s (prompted%s)", arg, label(s), desc), false)
		return "${" + ref + "}", true
	case c.f.Format == ClaudeCode && validVar(kind) && hasArg && strings.HasPrefix(arg, "-"):
		// mcpgate has no ${VAR:-default}: the default is what the client
		// used unless VAR was set, and it keeps the file valid.
		c.warnf("%s: ${%s:-...} in %s became its default value; write ${%s} there to read the variable", label(s), kind, field, kind)
		return escapeDollar(arg[1:]), true
	case c.f.Format == ClaudeCode && validVar(kind) && !hasArg:
		c.refVar(name, kind, fmt.Sprintf("referenced as ${%s} by %s", kind, label(s)))
		return "${" + kind + "}", true
	case !hasArg && (c.f.Format == VSCode || c.f.Format == Cursor):
		switch expr {
		case "workspaceFolder":
			if c.workspace != "" {
				return escapeDollar(c.workspace), true
			}
		case "workspaceFolderBasename":
			if c.workspace != "" {
				return escapeDollar(filepath.Base(c.workspace)), true
			}
		case "userHome":
			return "${HOME}", true
		case "pathSeparator", "/":
			return string(filepath.Separator), true
		}
	}
	c.warnf("%s: ${%s} in %s has no mcpgate equivalent and is kept as literal text", label(s), expr, field)
	return "", false
}

// addVar records a new variable MCPGATE_<SERVER>_<KEY> (made unique).
func (c *converter) addVar(server, key, source string, moved bool) string {
	base := "MCPGATE_" + envName(server) + "_" + envName(key)
	name := base
	for i := 2; c.vars[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	c.vars[name] = true
	c.res.Vars = append(c.res.Vars, Var{Name: name, Server: server, Source: source, Moved: moved})
	return name
}

// refVar records a variable the client file referenced by name.
func (c *converter) refVar(server, name, source string) {
	if c.vars[name] {
		return
	}
	c.vars[name] = true
	c.res.Vars = append(c.res.Vars, Var{Name: name, Server: server, Source: source})
}

// envName upper-cases s into [A-Z0-9_].
func envName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToUpper(s) {
		if 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
	}
	out := strings.Trim(b.String(), "_")
	if out == "" {
		return "VALUE"
	}
	return out
}

func validVar(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// HasReference reports whether an mcpgate config value refers to a
// variable (${NAME}, not the escaped $${NAME}).
func HasReference(v string) bool {
	for i := 0; i+1 < len(v); i++ {
		if v[i] != '$' {
			continue
		}
		if v[i+1] == '{' {
			return true
		}
		i++ // "$$" or an invalid "$x"
	}
	return false
}

func escapeDollar(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// secretWords mark a name whose value is a credential.
var secretWords = []string{"token", "key", "secret", "password", "passwd", "credential", "authorization", "cookie", "session"}

// SecretName reports whether an env variable, header or query parameter
// named name carries a credential: Authorization, X-API-Key, *token*,
// *key*, *secret*, *password*, ... (case-insensitive).
func SecretName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return n == "pat" || strings.HasSuffix(n, "_pat") || strings.HasSuffix(n, "-pat")
}

// tokenPrefixes start well-known credential formats.
var tokenPrefixes = []string{"ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "sk-", "sk_live_", "rk_live_", "AKIA"}

// SecretValue reports whether a value looks like a credential whatever
// its name: a Bearer or Basic value, a URL with a password, a well-known
// token format.
func SecretValue(v string) bool {
	f := strings.Fields(v)
	if len(f) == 2 && (strings.EqualFold(f[0], "bearer") || strings.EqualFold(f[0], "basic")) {
		return true
	}
	if u, err := url.Parse(v); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return true
		}
	}
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(v, p) && len(v) >= len(p)+8 {
			return true
		}
	}
	return false
}
