package clientconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// Defaults of a Target.
const (
	DefaultEntryName = "mcpgate"
	DefaultKeyVar    = "MCPGATE_API_KEY"
	DefaultGateway   = "http://127.0.0.1:4000/mcp"
	// VSCodeInputID is the VS Code input that prompts for the gateway key
	// (VS Code keeps the answer in its secret storage).
	VSCodeInputID = "mcpgate-api-key"
)

// Target is what a client's mcpgate entry points at, and with which key.
type Target struct {
	Name string // the entry's name; "" means DefaultEntryName
	URL  string // the gateway's MCP endpoint; "" means DefaultGateway
	// KeyVar is the environment variable holding the gateway key, which
	// the entry references in the client's syntax; "" means
	// DefaultKeyVar. VS Code prompts for it instead unless KeyVar is set.
	KeyVar string
	// Key, if set, is written into the entry itself: the client file then
	// holds a secret.
	Key string
}

func (t Target) name() string { return orDefault(t.Name, DefaultEntryName) }
func (t Target) url() string  { return orDefault(t.URL, DefaultGateway) }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// keyValue is the header value in format f's variable syntax.
func (t Target) keyValue(f Format) string {
	if t.Key != "" {
		return t.Key
	}
	switch f {
	case ClaudeCode:
		return "${" + orDefault(t.KeyVar, DefaultKeyVar) + "}"
	case VSCode:
		if t.KeyVar == "" {
			return "${input:" + VSCodeInputID + "}"
		}
	}
	return "${env:" + orDefault(t.KeyVar, DefaultKeyVar) + "}"
}

// serversKey is the object of server entries in format f.
func serversKey(f Format) string {
	if f == VSCode {
		return "servers"
	}
	return "mcpServers"
}

// Entry is the JSON object of t's entry in format f. Claude Desktop
// launches only stdio servers, so its entry runs the mcp-remote bridge
// (npx mcp-remote URL --header ...), which expands ${VAR} in its
// arguments from its environment.
func Entry(f Format, t Target) json.RawMessage {
	header := callers.HeaderAPIKey
	var v any
	switch f {
	case ClaudeDesktop:
		args := []string{"-y", "mcp-remote", t.url(), "--header", header + ":${" + orDefault(t.KeyVar, DefaultKeyVar) + "}"}
		if u, err := url.Parse(t.url()); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
			args = append(args, "--allow-http")
		}
		e := map[string]any{"command": "npx", "args": args}
		if t.Key != "" {
			e["env"] = map[string]string{orDefault(t.KeyVar, DefaultKeyVar): t.Key}
		}
		v = orderedEntry(e, "command", "args", "env")
	case Windsurf:
		v = orderedEntry(map[string]any{"serverUrl": t.url(), "headers": map[string]string{header: t.keyValue(f)}}, "serverUrl", "headers")
	case Cursor:
		v = orderedEntry(map[string]any{"url": t.url(), "headers": map[string]string{header: t.keyValue(f)}}, "url", "headers")
	default: // Claude Code, VS Code
		v = orderedEntry(map[string]any{"type": "http", "url": t.url(), "headers": map[string]string{header: t.keyValue(f)}}, "type", "url", "headers")
	}
	b, _ := json.Marshal(v)
	return b
}

// vscodeInput is the input VS Code prompts the key with, or nil.
func vscodeInput(f Format, t Target) json.RawMessage {
	if f != VSCode || t.Key != "" || t.KeyVar != "" {
		return nil
	}
	b, _ := json.Marshal(orderedEntry(map[string]any{"type": "promptString", "id": VSCodeInputID, "description": "mcpgate API key", "password": true}, "type", "id", "description", "password"))
	return b
}

func loopback(host string) bool { return netaddr.IsLoopbackHost(host) }

// orderedEntry marshals m with its keys in the order given.
type ordered []member

func (o ordered) MarshalJSON() ([]byte, error) { return encodeObject(o), nil }

func orderedEntry(m map[string]any, keys ...string) ordered {
	var o ordered
	for _, k := range keys {
		if v, ok := m[k]; ok {
			b, _ := json.Marshal(v)
			o = append(o, member{k, b})
		}
	}
	return o
}

func encodeObject(o []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Document is a whole client file holding only t's entry.
func Document(f Format, t Target) []byte {
	out, _, _ := MergeEntry(nil, f, t)
	return out
}

// MergeEntry returns the client file existing (empty: a new file) with
// t's entry added, or replacing an entry of the same name in place; every
// other key and entry is kept, in order (and VS Code's input for the key
// added once). JSON comments cannot be kept: lostComments reports that
// existing had some.
func MergeEntry(existing []byte, f Format, t Target) (out []byte, lostComments bool, err error) {
	var top []member
	if len(bytes.TrimSpace(existing)) > 0 {
		clean, err := StripJSONC(existing)
		if err != nil {
			return nil, false, err
		}
		lostComments = !bytes.Equal(compactOrNil(clean), compactOrNil(existing))
		if top, err = orderedObject(clean); err != nil {
			return nil, false, fmt.Errorf("client file is not a JSON object: %w", err)
		}
	}
	if f == VSCode && !slices.ContainsFunc(top, func(m member) bool { return m.key == "servers" }) {
		// A user settings.json: the MCP document is its "mcp" object.
		if i := slices.IndexFunc(top, func(m member) bool { return m.key == "mcp" }); i >= 0 {
			inner, _, err := MergeEntry(top[i].value, f, t)
			if err != nil {
				return nil, false, fmt.Errorf("mcp: %w", err)
			}
			top[i].value = inner
			return indent(top, lostComments)
		}
	}
	key := serversKey(f)
	top = setMember(top, key, func(old json.RawMessage) (json.RawMessage, error) {
		var servers []member
		if len(old) > 0 && !isNull(old) {
			var err error
			if servers, err = orderedObject(old); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		servers = setMember(servers, t.name(), func(json.RawMessage) (json.RawMessage, error) { return Entry(f, t), nil }, &err)
		return encodeObject(servers), nil
	}, &err)
	if in := vscodeInput(f, t); in != nil && err == nil {
		top = setMember(top, "inputs", func(old json.RawMessage) (json.RawMessage, error) {
			var inputs []json.RawMessage
			if len(old) > 0 && !isNull(old) {
				if err := json.Unmarshal(old, &inputs); err != nil {
					return nil, errors.New("inputs: want a list")
				}
			}
			inputs = slices.DeleteFunc(inputs, func(r json.RawMessage) bool {
				var in struct{ ID string }
				return json.Unmarshal(r, &in) == nil && in.ID == VSCodeInputID
			})
			inputs = append(inputs, in)
			return json.Marshal(inputs)
		}, &err)
	}
	if err != nil {
		return nil, false, err
	}
	return indent(top, lostComments)
}

func indent(top []member, lostComments bool) ([]byte, bool, error) {
	var b bytes.Buffer
	if err := json.Indent(&b, encodeObject(top), "", "  "); err != nil {
		return nil, false, err
	}
	b.WriteByte('\n')
	return b.Bytes(), lostComments, nil
}

func compactOrNil(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return nil
	}
	return out.Bytes()
}

// setMember replaces key's value with fn(old) in place, or appends it.
func setMember(o []member, key string, fn func(old json.RawMessage) (json.RawMessage, error), errp *error) []member {
	if *errp != nil {
		return o
	}
	i := slices.IndexFunc(o, func(m member) bool { return m.key == key })
	var old json.RawMessage
	if i >= 0 {
		old = o[i].value
	}
	v, err := fn(old)
	if err != nil {
		*errp = err
		return o
	}
	if i >= 0 {
		o[i].value = v
		return o
	}
	return append(o, member{key, v})
}

// DefaultPath is where client f keeps the config file mcpgate connect
// writes: the user-wide file for Claude Desktop, Cursor and Windsurf,
// the project's for Claude Code (.mcp.json) and VS Code (.vscode/mcp.json).
// goos is runtime.GOOS; home the user's home; appData %APPDATA% on
// Windows; cwd the project directory.
func DefaultPath(f Format, goos, home, appData, cwd string) string {
	switch f {
	case ClaudeDesktop:
		switch goos {
		case "darwin":
			return filepath.Join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json")
		case "windows":
			return filepath.Join(appData, "Claude", "claude_desktop_config.json")
		}
		return filepath.Join(home, ".config", "Claude", "claude_desktop_config.json")
	case ClaudeCode:
		return filepath.Join(cwd, ".mcp.json")
	case Cursor:
		return filepath.Join(home, ".cursor", "mcp.json")
	case VSCode:
		return filepath.Join(cwd, ".vscode", "mcp.json")
	case Windsurf:
		return filepath.Join(home, ".codeium", "windsurf", "mcp_config.json")
	}
	return ""
}
