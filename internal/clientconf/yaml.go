package clientconf

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/config"
)

// NameTakenError is returned by MergeServers when imported servers have
// the names of servers the document already has.
type NameTakenError struct{ Names []string }

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("the config already has servers named %s (use --force to replace them)", strings.Join(e.Names, ", "))
}

// MergeServers adds r's servers to the YAML config document existing
// (empty: a new document) and returns the new document. Every other key,
// comment and server of existing is kept. A name existing already has is
// a *NameTakenError unless force, which replaces those servers (their
// names are returned).
func MergeServers(existing []byte, r *Result, force bool) (out []byte, replaced []string, err error) {
	var doc yaml.Node
	if len(bytes.TrimSpace(existing)) > 0 {
		if err := yaml.Unmarshal(existing, &doc); err != nil {
			return nil, nil, fmt.Errorf("read existing config: %w", err)
		}
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("existing config is not a YAML mapping")
	}
	top := doc.Content[0]
	servers := mapValue(top, "servers")
	if servers == nil || servers.Kind != yaml.MappingNode {
		if servers != nil && servers.Tag != "!!null" {
			return nil, nil, errors.New("existing config: servers is not a mapping")
		}
		fresh := &yaml.Node{Kind: yaml.MappingNode}
		if servers != nil {
			*servers = *fresh
		} else {
			top.Content = append(top.Content, str("servers"), fresh)
			servers = fresh
		}
	}
	var taken []string
	for _, name := range r.Names {
		if mapValue(servers, name) != nil {
			taken = append(taken, name)
		}
	}
	if len(taken) > 0 && !force {
		return nil, nil, &NameTakenError{Names: taken}
	}
	for _, name := range r.Names {
		n := ServerNode(r.Servers[name])
		if v := mapValue(servers, name); v != nil {
			*v = *n
			continue
		}
		servers.Content = append(servers.Content, str(name), n)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("write config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return b.Bytes(), taken, nil
}

// ServersYAML is r's servers: section alone.
func ServersYAML(r *Result) []byte {
	out, _, err := MergeServers(nil, r, false)
	if err != nil {
		return nil // a fresh document has no names to collide with
	}
	return out
}

// mapValue returns the value node of key in the mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// ServerNode is the YAML of one server, keys in the reference's order.
func ServerNode(s *config.Server) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k string, v *yaml.Node) { m.Content = append(m.Content, str(k), v) }
	add("transport", str(s.Transport))
	if s.Command != "" {
		add("command", str(s.Command))
	}
	if len(s.Args) > 0 {
		l := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, a := range s.Args {
			l.Content = append(l.Content, str(a))
		}
		add("args", l)
	}
	if len(s.Env) > 0 {
		add("env", stringMap(s.Env))
	}
	if s.Cwd != "" {
		add("cwd", str(s.Cwd))
	}
	if s.URL != "" {
		add("url", str(s.URL))
	}
	if len(s.Headers) > 0 {
		add("headers", stringMap(s.Headers))
	}
	if s.Timeout != 0 {
		add("timeout", str(s.Timeout.Round(time.Millisecond).String()))
	}
	if s.Auth != nil {
		a := &yaml.Node{Kind: yaml.MappingNode}
		a.Content = append(a.Content, str("type"), str(s.Auth.Type))
		if s.Auth.Value != "" {
			a.Content = append(a.Content, str("value"), str(s.Auth.Value))
		}
		if s.Auth.HeaderName != "" {
			a.Content = append(a.Content, str("header_name"), str(s.Auth.HeaderName))
		}
		add("auth", a)
	}
	if s.Provenance != nil && (s.Provenance.Source != "" || s.Provenance.Version != "") {
		pv := &yaml.Node{Kind: yaml.MappingNode}
		if s.Provenance.Source != "" {
			pv.Content = append(pv.Content, str("source"), str(escapeDollar(s.Provenance.Source)))
		}
		if s.Provenance.Version != "" {
			pv.Content = append(pv.Content, str("version"), str(s.Provenance.Version))
		}
		add("provenance", pv)
	}
	return m
}

func stringMap(m map[string]string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n.Content = append(n.Content, str(k), str(m[k]))
	}
	return n
}
