package jsonrpc

import "testing"

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
