package config

// Helpers shared by several of this package's test files.

import (
	"errors"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v3"
)

// envOf returns a lookupEnv backed by m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// fieldErrors flattens a joined error into its parts, failing the test if
// a part is not a *FieldError.
func fieldErrors(tb testing.TB, err error) []*FieldError {
	tb.Helper()
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else if err != nil {
		parts = []error{err}
	}
	var out []*FieldError
	for _, p := range parts {
		var fe *FieldError
		if !errors.As(p, &fe) {
			tb.Fatalf("error %q (%T) is not a *FieldError", p, p)
		}
		out = append(out, fe)
	}
	return out
}

func timeout(c *Config) any { return c.Servers["s"].Timeout }

// srv returns a document with one valid stdio server "s" plus extra lines,
// each indented to the server's field level by the caller.
func srv(extra string) string {
	return "servers:\n  s:\n    transport: stdio\n    command: x\n    " + extra + "\n"
}

func sessions(c *Config) any { return c.Sessions }

func allow(c *Config) any { return c.Servers["s"].Tools.Allow }

// callers returns doc followed by two valid servers, calc and notes.
func callers(doc string) string {
	return doc + "servers:\n  calc: {transport: http, url: 'http://127.0.0.1:1/mcp'}\n  notes: {transport: stdio, command: x}\n"
}

// keyDoc returns a document with one key, at line 3, carrying fields.
func keyDoc(fields string) string {
	return callers("auth:\n  keys:\n    - {alias: bot, key: " + testKey + fields + "}\n")
}

// toolsDoc returns a document whose server calc has the given tool policy.
func toolsDoc(policy string) string {
	return "servers:\n  calc: {transport: http, url: 'http://x', tools: " + policy + "}\n"
}

func httpSrv(extra string) string {
	return "servers:\n  up:\n    transport: http\n    url: https://up.example.com/mcp\n    " + extra + "\n"
}

func schemaOf(tb testing.TB) *jsonschema.Resolved {
	tb.Helper()
	r, err := resolvedSchema()
	if err != nil {
		tb.Fatalf("the generated schema does not resolve: %v", err)
	}
	return r
}

// yamlValue turns a YAML document into the JSON-like value an editor's
// YAML language server validates: mappings to objects (keys as written),
// !!int, !!float and !!bool to numbers and booleans, null to nil, every
// other scalar (timestamps included) to its text.
func yamlValue(data []byte) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	return nodeValue(doc.Content[0], 0)
}
