package audit

import (
	"bytes"
	"encoding/json"
	"path"
	"strings"
)

// Redacted replaces the value of a redacted argument.
const Redacted = "[REDACTED]"

// RedactArguments returns the JSON value args with the value of every
// object member whose key matches one of patterns replaced by Redacted,
// at any depth of objects and arrays. patterns are path.Match globs,
// matched against the lower-cased key, so they must be lower case
// (config.ServerAudit.RedactPatterns). It returns nil when args is empty
// or not JSON: an argument that cannot be inspected is not exported.
func RedactArguments(args json.RawMessage, patterns []string) json.RawMessage {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber() // keep numbers as written
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return nil
	}
	out, err := json.Marshal(redact(v, patterns))
	if err != nil {
		return nil
	}
	return out
}

func redact(v any, patterns []string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if matchKey(k, patterns) {
				v[k] = Redacted
			} else {
				v[k] = redact(e, patterns)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = redact(e, patterns)
		}
	}
	return v
}

func matchKey(k string, patterns []string) bool {
	// path.Match's * stops at a slash; a key's slash must not hide it.
	k = strings.ReplaceAll(strings.ToLower(k), "/", "_")
	for _, p := range patterns {
		if ok, _ := path.Match(p, k); ok {
			return true
		}
	}
	return false
}
