package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// The functions in this file read and splice raw JSON without decoding it
// into Go values, so that everything the gateway does not rewrite keeps its
// exact bytes (key order, number text, whitespace inside values). They
// assume syntactically valid JSON (messages are validated when framed) and
// return ErrMalformed rather than panicking when it is not.

// ErrMalformed reports JSON that could not be scanned.
var ErrMalformed = errors.New("malformed JSON")

func skipWS(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just past the JSON value starting at d[i].
func skipValue(d []byte, i int) (int, error) {
	if i >= len(d) {
		return 0, ErrMalformed
	}
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				j, err := skipString(d, i)
				if err != nil {
					return 0, err
				}
				i = j
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, ErrMalformed
	default:
		j := i
		for j < len(d) {
			c := d[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				break
			}
			j++
		}
		if j == i {
			return 0, ErrMalformed
		}
		return j, nil
	}
}

// skipString returns the index after the string that opens at d[i]. The
// string ends at the first quote not escaped, that is not preceded by an
// odd run of backslashes; finding the quotes with bytes.IndexByte (vector
// instructions) instead of byte by byte is what makes skipping a tool's
// text output cheap (a reply's result is skipped whole when its envelope
// is read).
func skipString(d []byte, i int) (int, error) {
	start := i + 1 // after the opening quote
	for i = start; i < len(d); {
		j := bytes.IndexByte(d[i:], '"')
		if j < 0 {
			break
		}
		q := i + j
		n := 0
		for k := q - 1; k >= start && d[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		i = q + 1
	}
	return 0, ErrMalformed
}

// keyEquals compares a raw JSON string token (with quotes) to key. Keys
// with escapes or invalid UTF-8 are decoded first, as a decoder would
// (invalid bytes become U+FFFD).
func keyEquals(tok []byte, key string) bool {
	if keyNeedsDecode(tok) {
		var s string
		if json.Unmarshal(tok, &s) != nil {
			return false
		}
		return s == key
	}
	return string(tok[1:len(tok)-1]) == key
}

// keyNeedsDecode reports whether a key token differs from its decoded text.
func keyNeedsDecode(tok []byte) bool {
	return bytes.IndexByte(tok, '\\') >= 0 || !utf8.Valid(tok)
}

// field is one member of an object: the key token span and value span.
type field struct{ keyStart, valStart, valEnd int }

// scanObject calls fn for each top-level member of the object obj.
func scanObject(obj []byte, fn func(f field, key []byte) bool) error {
	return scanMembers(obj, false, fn)
}

// scanMembers is scanObject; with prefix, obj may be cut off anywhere and
// a member whose value may go on past the end (PrefixValue) is not given
// to fn.
func scanMembers(obj []byte, prefix bool, fn func(f field, key []byte) bool) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrMalformed
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return ErrMalformed
		}
		ks := i
		ke, err := skipString(obj, i)
		if err != nil {
			return err
		}
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return ErrMalformed
		}
		vs := skipWS(obj, i+1)
		ve, err := skipValue(obj, vs)
		if err != nil {
			return err
		}
		if prefix && ve == len(obj) && mayGoOn(obj[vs]) {
			return ErrMalformed // a scalar at the end of a prefix may go on
		}
		if !fn(field{ks, vs, ve}, obj[ks:ke]) {
			return nil
		}
		i = skipWS(obj, ve)
		if i >= len(obj) {
			return ErrMalformed
		}
		if obj[i] == '}' {
			return nil
		}
		if obj[i] != ',' {
			return ErrMalformed
		}
		i = skipWS(obj, i+1)
	}
	return ErrMalformed
}

// Fields calls fn with each top-level key (decoded) and raw value of obj,
// stopping when fn returns false.
func Fields(obj []byte, fn func(key string, val []byte) bool) error {
	return fields(obj, false, fn)
}

// PrefixFields is Fields for the first bytes of an object that may be cut
// off anywhere: fn gets the members that are complete within them, and
// the error says the object did not end there.
func PrefixFields(obj []byte, fn func(key string, val []byte) bool) error {
	return fields(obj, true, fn)
}

func fields(obj []byte, prefix bool, fn func(key string, val []byte) bool) error {
	return scanMembers(obj, prefix, func(f field, key []byte) bool {
		k := string(key[1 : len(key)-1])
		if keyNeedsDecode(key) {
			if json.Unmarshal(key, &k) != nil {
				return true
			}
		}
		return fn(k, obj[f.valStart:f.valEnd])
	})
}

// Get returns the raw value of the top-level member key of obj. When the
// key is repeated, the last one counts, as in encoding/json, JSON.parse and
// most other decoders: the gateway must read what the upstream will read.
func Get(obj []byte, key string) ([]byte, bool) {
	f, n := lastMember(obj, key)
	if n == 0 {
		return nil, false
	}
	return obj[f.valStart:f.valEnd], true
}

// lastMember returns the last member named key and how many there are.
func lastMember(obj []byte, key string) (last field, n int) {
	_ = scanObject(obj, func(f field, k []byte) bool {
		if keyEquals(k, key) {
			last = f
			n++
		}
		return true
	})
	return last, n
}

// GetPath follows keys through nested objects.
func GetPath(obj []byte, keys ...string) ([]byte, bool) {
	cur := obj
	for _, k := range keys {
		v, ok := Get(cur, k)
		if !ok {
			return nil, false
		}
		cur = v
	}
	return cur, true
}

// GetString returns the top-level member key as a Go string, if it is one.
func GetString(obj []byte, key string) (string, bool) {
	v, ok := Get(obj, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	if s, ok := plainString(v); ok {
		return s, true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// plainString is the string a JSON string token decodes to when it needs
// no decoding: no escape, no control character, valid UTF-8. It costs one
// allocation where json.Unmarshal costs two and a reflection walk; the
// method, name and id of nearly every message take this path.
func plainString(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[len(tok)-1] != '"' {
		return "", false
	}
	in := tok[1 : len(tok)-1]
	ascii := true
	for _, c := range in {
		if c < 0x20 || c == '\\' || c == '"' {
			return "", false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(in) {
		return "", false // json.Unmarshal replaces invalid bytes with U+FFFD
	}
	return string(in), true
}

// Set returns a copy of obj with the top-level member key set to val: the
// value bytes are replaced in place when the key exists, otherwise the member
// is appended. Everything else keeps its bytes, except that earlier copies of
// a repeated key are removed, so that every decoder (first or last wins)
// reads val. obj must be an object (or empty, meaning {}).
func Set(obj []byte, key string, val []byte) ([]byte, error) { return set(obj, key, val, false) }

// SetShared is Set, except that obj itself comes back, not a copy, when it
// already holds key once with exactly val's bytes (what Set would return
// is then byte for byte obj). For a caller that never writes to either.
func SetShared(obj []byte, key string, val []byte) ([]byte, error) { return set(obj, key, val, true) }

func set(obj []byte, key string, val []byte, shared bool) ([]byte, error) {
	if len(skipWSBytes(obj)) == 0 {
		obj = []byte("{}")
	}
	if err := scanObject(obj, func(field, []byte) bool { return true }); err != nil {
		return nil, err
	}
	hit, n := lastMember(obj, key)
	if shared && n == 1 && bytes.Equal(obj[hit.valStart:hit.valEnd], val) {
		return obj, nil
	}
	for ; n > 1; n-- {
		var err error
		if obj, _, err = deleteFirst(obj, key); err != nil {
			return nil, err
		}
		hit, _ = lastMember(obj, key)
	}
	if n == 1 {
		out := make([]byte, 0, len(obj)-(hit.valEnd-hit.valStart)+len(val))
		out = append(out, obj[:hit.valStart]...)
		out = append(out, val...)
		return append(out, obj[hit.valEnd:]...), nil
	}
	end := len(obj) - 1
	for end >= 0 && obj[end] != '}' {
		end--
	}
	if end < 0 {
		return nil, ErrMalformed
	}
	empty := true
	for j := end - 1; j >= 0; j-- {
		c := obj[j]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			continue
		}
		empty = c == '{'
		break
	}
	out := make([]byte, 0, len(obj)+len(key)+len(val)+4)
	out = append(out, obj[:end]...)
	if !empty {
		out = append(out, ',')
	}
	out = appendString(out, key)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, obj[end:]...), nil
}

// SetPath sets a member inside nested objects, creating them as needed.
func SetPath(obj []byte, val []byte, keys ...string) ([]byte, error) {
	switch len(keys) {
	case 0:
		return nil, errors.New("jsonrpc: SetPath needs at least one key")
	case 1:
		return Set(obj, keys[0], val)
	}
	inner, ok := Get(obj, keys[0])
	if !ok || len(inner) == 0 || inner[0] != '{' {
		inner = []byte("{}")
	}
	inner, err := SetPath(inner, val, keys[1:]...)
	if err != nil {
		return nil, err
	}
	return Set(obj, keys[0], inner)
}

// Delete returns obj without the top-level member key (every copy of it,
// when the key is repeated).
func Delete(obj []byte, key string) ([]byte, error) {
	for {
		out, found, err := deleteFirst(obj, key)
		if err != nil || !found {
			return out, err
		}
		obj = out
	}
}

// deleteFirst removes the first member named key.
func deleteFirst(obj []byte, key string) ([]byte, bool, error) {
	// hit is a copy, not &f: taking the address of the callback's
	// parameter would allocate it on every member scanned.
	var hit field
	found := false
	err := scanObject(obj, func(f field, k []byte) bool {
		if keyEquals(k, key) {
			hit, found = f, true
			return false
		}
		return true
	})
	if err != nil || !found {
		return obj, false, err
	}
	start, end := hit.keyStart, skipWS(obj, hit.valEnd)
	if end < len(obj) && obj[end] == ',' {
		end = skipWS(obj, end+1)
	} else {
		// Last member: remove the comma before it instead.
		j := start - 1
		for j >= 0 && (obj[j] == ' ' || obj[j] == '\t' || obj[j] == '\r' || obj[j] == '\n') {
			j--
		}
		if j >= 0 && obj[j] == ',' {
			start = j
		}
	}
	out := make([]byte, 0, len(obj)-(end-start))
	out = append(out, obj[:start]...)
	return append(out, obj[end:]...), true, nil
}

// Elements calls fn with each element of the JSON array arr.
func Elements(arr []byte, fn func(elem []byte) bool) error {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return ErrMalformed
	}
	i = skipWS(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for i < len(arr) {
		e, err := skipValue(arr, i)
		if err != nil {
			return err
		}
		if !fn(arr[i:e]) {
			return nil
		}
		i = skipWS(arr, e)
		if i >= len(arr) {
			return ErrMalformed
		}
		if arr[i] == ']' {
			return nil
		}
		if arr[i] != ',' {
			return ErrMalformed
		}
		i = skipWS(arr, i+1)
	}
	return ErrMalformed
}

func skipWSBytes(b []byte) []byte { return b[skipWS(b, 0):] }

// String returns s encoded as a JSON string.
func String(s string) []byte { return appendString(nil, s) }
