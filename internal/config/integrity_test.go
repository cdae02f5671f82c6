package config

import (
	"strings"
	"testing"
)

// TestIntegrityConfig: the top-level block is every server's default, a
// server's own overrides mode and approve, and the defaults are warn and
// auto.
func TestIntegrityConfig(t *testing.T) {
	c, err := Parse([]byte(`
integrity:
  mode: pin
  approve: manual
  patterns:
    - name: wallet
      match: "(?i)seed phrase"
      severity: quarantine
    - name: tracking
      match: utm_source
servers:
  a: {transport: stdio, command: /bin/true}
  b: {transport: stdio, command: /bin/true, integrity: {mode: warn}}
  c: {transport: stdio, command: /bin/true, integrity: {approve: auto, mode: off}}
`), "", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for server, want := range map[string][2]string{"a": {"pin", "manual"}, "b": {"warn", "manual"}, "c": {"off", "auto"}} {
		if m, a := c.IntegrityOf(server); m != want[0] || a != want[1] {
			t.Errorf("%s: %s/%s, want %s/%s", server, m, a, want[0], want[1])
		}
	}
	if p := c.IntegrityPatterns(); len(p) != 2 || p[1].Severity != "warn" {
		t.Errorf("patterns %+v: want two, the second warn by default", p)
	}
	c, err = Parse([]byte("servers:\n  a: {transport: stdio, command: /bin/true}\n"), "", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m, a := c.IntegrityOf("a"); m != "warn" || a != "auto" {
		t.Errorf("defaults %s/%s, want warn/auto", m, a)
	}
}

// TestIntegrityConfigErrors: each mistake names its path and line.
func TestIntegrityConfigErrors(t *testing.T) {
	_, err := Parse([]byte(`integrity:
  mode: strict
  patterns:
    - name: x
      match: "("
    - name: x
      match: a
      severity: block
servers:
  a:
    transport: stdio
    command: /bin/true
    integrity:
      approve: later
      patterns: [{name: y, match: b}]
`), "", envOf(nil))
	got := map[string]int{}
	for _, fe := range fieldErrors(t, err) {
		got[fe.Path] = fe.Line
	}
	for path, line := range map[string]int{
		"integrity.mode":                 2,
		"integrity.patterns[0].match":    5,
		"integrity.patterns[1].name":     6,
		"integrity.patterns[1].severity": 8,
		"servers.a.integrity.approve":    14,
		"servers.a.integrity.patterns":   15,
	} {
		if l, ok := got[path]; !ok || l != line {
			t.Errorf("%s: line %d (reported: %v), want line %d; all: %v", path, l, ok, line, err)
		}
	}
	if !strings.Contains(err.Error(), "top-level integrity block") {
		t.Errorf("error %v does not say where patterns belong", err)
	}
}
