package jsonrpc

import (
	"strings"
	"testing"
)

// A prefix scan never takes a cut-off value for a whole one: the id 12 of
// a body cut inside 123 is not 12.
func TestPrefixValue(t *testing.T) {
	tests := []struct {
		in   string
		end  int
		want bool
	}{
		{`"ab\"c",`, 7, true},
		{`"ab\"c`, 0, false},
		{`{"a":[1,"]"],"b":{}} `, 20, true},
		{`{"a":[1,"]"`, 0, false},
		{`123,`, 3, true},
		{`123`, 0, false}, // may go on: 1234
		{`true}`, 4, true},
		{`,`, 0, false}, // no value at all
		{``, 0, false},
	}
	for _, tt := range tests {
		end, ok := PrefixValue([]byte(tt.in), 0)
		if ok != tt.want || (ok && end != tt.end) {
			t.Errorf("PrefixValue(%q) = %d, %v; want %d, %v", tt.in, end, ok, tt.end, tt.want)
		}
	}
	if i := SkipSpace([]byte(" \t\r\n x"), 0); i != 5 {
		t.Errorf("SkipSpace = %d, want 5", i)
	}
}

// PrefixFields gives fn the members complete within a prefix, and no
// member whose value may go on past it.
func TestPrefixFields(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":123,"result":{"a":`, `jsonrpc="2.0" id=123`},
		{`{"jsonrpc":"2.0","id":12`, `jsonrpc="2.0"`}, // 12 may be 123
		{`{"i\u0064":"x","method":"m"}`, `id="x" method="m"`},
		{`{"id":[1,`, ``},
	} {
		var got []string
		_ = PrefixFields([]byte(tc.in), func(k string, v []byte) bool {
			got = append(got, k+"="+string(v))
			return true
		})
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("PrefixFields(%s) = %q, want %q", tc.in, s, tc.want)
		}
	}
}
