package clientconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Format is a client's configuration file format.
type Format string

// The client formats mcpgate reads and writes.
const (
	ClaudeDesktop Format = "claude-desktop" // claude_desktop_config.json: mcpServers, stdio only
	ClaudeCode    Format = "claude-code"    // .mcp.json or ~/.claude.json: mcpServers (+ projects.<path>.mcpServers)
	Cursor        Format = "cursor"         // .cursor/mcp.json: mcpServers, url for remote servers
	VSCode        Format = "vscode"         // .vscode/mcp.json: servers, inputs, type
	Windsurf      Format = "windsurf"       // mcp_config.json: mcpServers, serverUrl for remote servers
)

// Formats lists every format, in the order help texts show them.
var Formats = []Format{ClaudeDesktop, ClaudeCode, Cursor, VSCode, Windsurf}

// ParseFormat returns the format named s (as on the command line).
func ParseFormat(s string) (Format, error) {
	if f := Format(strings.ToLower(strings.TrimSpace(s))); slices.Contains(Formats, f) {
		return f, nil
	}
	return "", fmt.Errorf("unknown client %q (want %s)", s, formatList())
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// ErrUnknownShape is returned by Detect for a document that is no
// client's MCP configuration.
var ErrUnknownShape = errors.New("not an MCP client configuration: want a JSON object with mcpServers (Claude Desktop, Claude Code, Cursor, Windsurf) or servers (VS Code)")

// Server is one server entry of a client file, as the client wrote it.
type Server struct {
	Name    string // the client's name for it
	Project string // for ~/.claude.json's projects.<path>.mcpServers: the path
	Type    string // as written: "", stdio, sse, http, streamable-http, ...
	Command string
	Args    []string
	Env     map[string]string
	EnvFile string // VS Code: a file of more env variables
	Cwd     string
	URL     string // url, or Windsurf's serverUrl
	Headers map[string]string
	// Disabled is set for an entry the client has switched off.
	Disabled bool
	// Ignored lists the entry's keys that have no mcpgate equivalent.
	Ignored []string
}

// Input is a VS Code input variable (${input:id}), prompted by VS Code.
type Input struct {
	ID          string
	Type        string
	Description string
	Password    bool
}

// File is a parsed client configuration.
type File struct {
	Format  Format
	Servers []Server // in the file's order
	Inputs  []Input
}

// Detect tells a file's format from its shape and, where shapes are
// shared, its name (name may be "" or a path).
func Detect(name string, data []byte) (Format, error) {
	top, err := topObject(data)
	if err != nil {
		return "", err
	}
	base := strings.ToLower(filepath.Base(filepath.ToSlash(name)))
	dir := strings.ToLower(filepath.Base(filepath.Dir(filepath.ToSlash(name))))
	_, hasMCP := top["mcpServers"]
	_, hasServers := top["servers"]
	projects := false
	if raw, ok := top["projects"]; ok {
		var p map[string]map[string]json.RawMessage
		if json.Unmarshal(raw, &p) == nil {
			for _, v := range p {
				if _, ok := v["mcpServers"]; ok {
					projects = true
				}
			}
		}
	}
	switch {
	case hasServers && !hasMCP:
		return VSCode, nil
	case projects || base == ".claude.json":
		return ClaudeCode, nil
	case !hasMCP:
		return "", ErrUnknownShape
	case base == "claude_desktop_config.json":
		return ClaudeDesktop, nil
	case base == "mcp_config.json":
		return Windsurf, nil
	case base == ".mcp.json":
		return ClaudeCode, nil
	case dir == ".cursor":
		return Cursor, nil
	}
	var servers map[string]map[string]json.RawMessage
	if err := json.Unmarshal(top["mcpServers"], &servers); err != nil {
		return "", fmt.Errorf("mcpServers: want an object of server objects")
	}
	format := ClaudeDesktop // stdio entries only: every format reads them alike
	for _, s := range servers {
		if _, ok := s["serverUrl"]; ok {
			return Windsurf, nil
		}
		if _, ok := s["type"]; ok {
			format = ClaudeCode
		} else if _, ok := s["url"]; ok && format == ClaudeDesktop {
			format = Cursor
		}
	}
	return format, nil
}

// topObject decodes data (JSON, with comments and trailing commas
// allowed) as an object of raw values.
// VS Code's user settings.json holds the same document under "mcp".
func topObject(data []byte) (map[string]json.RawMessage, error) {
	clean, err := StripJSONC(data)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(clean, &top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
		}
		return nil, ErrUnknownShape
	}
	if top == nil {
		return nil, ErrUnknownShape
	}
	if _, ok := top["mcpServers"]; !ok && top["servers"] == nil && top["mcp"] != nil {
		var inner map[string]json.RawMessage
		if json.Unmarshal(top["mcp"], &inner) == nil && inner["servers"] != nil {
			return inner, nil
		}
	}
	return top, nil
}

// Parse reads a client file of format f.
func Parse(data []byte, f Format) (*File, error) {
	top, err := topObject(data)
	if err != nil {
		return nil, err
	}
	out := &File{Format: f}
	key := "mcpServers"
	if f == VSCode {
		key = "servers"
	}
	if raw, ok := top[key]; ok {
		servers, err := parseServers(raw, key, "")
		if err != nil {
			return nil, err
		}
		out.Servers = servers
	} else if f != ClaudeCode {
		return nil, fmt.Errorf("%s: no %s object", f, key)
	}
	if f == ClaudeCode {
		if raw, ok := top["projects"]; ok {
			projects, err := orderedObject(raw)
			if err != nil {
				return nil, fmt.Errorf("projects: %w", err)
			}
			for _, p := range projects {
				var proj map[string]json.RawMessage
				if json.Unmarshal(p.value, &proj) != nil || proj["mcpServers"] == nil {
					continue
				}
				servers, err := parseServers(proj["mcpServers"], "projects."+p.key+".mcpServers", p.key)
				if err != nil {
					return nil, err
				}
				out.Servers = append(out.Servers, servers...)
			}
		}
		if _, ok := top["mcpServers"]; !ok && len(out.Servers) == 0 {
			if _, ok := top["projects"]; !ok {
				return nil, fmt.Errorf("%s: no mcpServers object", f)
			}
		}
	}
	if f == VSCode {
		if raw, ok := top["inputs"]; ok {
			var inputs []struct {
				ID          string `json:"id"`
				Type        string `json:"type"`
				Description string `json:"description"`
				Password    bool   `json:"password"`
			}
			if err := json.Unmarshal(raw, &inputs); err != nil {
				return nil, fmt.Errorf("inputs: want a list of {type, id, description, password}")
			}
			for _, in := range inputs {
				out.Inputs = append(out.Inputs, Input(in))
			}
		}
	}
	return out, nil
}

// entryKeys are the keys of a server entry mcpgate understands.
var entryKeys = []string{"type", "transport", "transportType", "command", "args", "env", "envFile", "cwd", "url", "serverUrl", "headers", "disabled"}

func parseServers(raw json.RawMessage, path, project string) ([]Server, error) {
	entries, err := orderedObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Server
	for _, e := range entries {
		p := path + "." + e.key
		var m map[string]json.RawMessage
		if err := json.Unmarshal(e.value, &m); err != nil || m == nil {
			return nil, fmt.Errorf("%s: want an object", p)
		}
		s := Server{Name: e.key, Project: project}
		var errs []error
		str := func(k string) string {
			v, err := scalar(m[k])
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %w", p, k, err))
			}
			return v
		}
		// transport and transportType are older spellings some clients
		// (Cline, Roo Code) still write.
		for _, k := range []string{"type", "transport", "transportType"} {
			if s.Type == "" {
				s.Type = strings.ToLower(str(k))
			}
		}
		s.Command = str("command")
		s.EnvFile = str("envFile")
		s.Cwd = str("cwd")
		s.URL = str("url")
		if u := str("serverUrl"); u != "" && s.URL == "" {
			s.URL = u
		}
		if raw, ok := m["args"]; ok && !isNull(raw) {
			var args []json.RawMessage
			if err := json.Unmarshal(raw, &args); err != nil {
				errs = append(errs, fmt.Errorf("%s.args: want a list of strings", p))
			}
			for i, a := range args {
				v, err := scalar(a)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s.args[%d]: %w", p, i, err))
				}
				s.Args = append(s.Args, v)
			}
		}
		for _, k := range []string{"env", "headers"} {
			raw, ok := m[k]
			if !ok || isNull(raw) {
				continue
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: want an object of strings", p, k))
				continue
			}
			vals := make(map[string]string, len(obj))
			for name, rv := range obj {
				v, err := scalar(rv)
				if err != nil {
					// The name only: the value may be a secret.
					errs = append(errs, fmt.Errorf("%s.%s.%s: %w", p, k, name, err))
				}
				vals[name] = v
			}
			if k == "env" {
				s.Env = vals
			} else {
				s.Headers = vals
			}
		}
		if raw, ok := m["disabled"]; ok {
			var b bool
			if json.Unmarshal(raw, &b) == nil {
				s.Disabled = b
			}
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		for k := range m {
			if !slices.Contains(entryKeys, k) {
				s.Ignored = append(s.Ignored, k)
			}
		}
		slices.Sort(s.Ignored)
		out = append(out, s)
	}
	return out, nil
}

// scalar returns a JSON string, number or boolean as a string; null and
// absent are "". Its error never quotes the value.
func scalar(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&n); err == nil {
		return n.String(), nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil {
		return strconv.FormatBool(b), nil
	}
	return "", errors.New("want a string")
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// member is one key of a JSON object, in document order.
type member struct {
	key   string
	value json.RawMessage
}

// orderedObject decodes a JSON object keeping its keys' order (a later
// duplicate key replaces the earlier one's value, as encoding/json does).
func orderedObject(raw json.RawMessage) ([]member, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("want an object")
	}
	var out []member
	for d.More() {
		kt, err := d.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(out, func(m member) bool { return m.key == k }); i >= 0 {
			out[i].value = v
			continue
		}
		out = append(out, member{k, v})
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// StripJSONC turns JSON with comments (// and /* */) and trailing commas,
// as VS Code and Cursor accept, into plain JSON. Offsets are kept: a
// comment becomes spaces (newlines stay), so a syntax error's offset
// still points into the original text.
func StripJSONC(data []byte) ([]byte, error) {
	out := make([]byte, len(data))
	copy(out, data)
	blank := func(i, j int) {
		for ; i < j; i++ {
			if out[i] != '\n' && out[i] != '\r' {
				out[i] = ' '
			}
		}
	}
	lastComma := -1 // a comma not yet followed by a value
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			lastComma = -1
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
			if i >= len(out) {
				return nil, errors.New("invalid JSON: unterminated string")
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			j := bytes.IndexByte(out[i:], '\n')
			if j < 0 {
				j = len(out) - i
			}
			blank(i, i+j)
			i += j - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			j := bytes.Index(out[i+2:], []byte("*/"))
			if j < 0 {
				return nil, errors.New("invalid JSON: unterminated /* comment")
			}
			blank(i, i+2+j+2)
			i += 2 + j + 1
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out, nil
}
