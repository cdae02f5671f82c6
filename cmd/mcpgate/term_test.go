package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ in, want, wantText string }{
		{in: "calc__add", want: "calc__add"},
		{in: "Grüße, 東京 ✓ 🚀 a\u00a0b", want: "Grüße, 東京 ✓ 🚀 a\u00a0b"},
		{in: `C:\tmp\u001b literal`, want: `C:\tmp\u001b literal`},
		{in: "x\x1b[2J\x1b]0;pwned\x07y", want: `x\u001b[2J\u001b]0;pwned\u0007y`},
		{in: "\x1b]52;c;ZWNobyBwd25lZA==\x07", want: `\u001b]52;c;ZWNobyBwd25lZA==\u0007`},
		{in: "cli\u001b[2Jent", want: `cli\u001b[2Jent`},
		{in: "csi\u009b2J", want: `csi\u009b2J`},
		{in: "del\x7f nul\x00 bs\b", want: `del\u007f nul\u0000 bs\u0008`},
		{in: "line1\nline2\tcol\rover", want: `line1\u000aline2\u0009col\u000dover`, wantText: "line1\nline2\tcol\\u000dover"},
		{in: "admin\u202egpj.exe", want: `admin\u202egpj.exe`},
		{in: "zero\u200bwidth\u200d\ufeff\u2066x\u2069", want: `zero\u200bwidth\u200d\ufeff\u2066x\u2069`},
		{in: "sep\u2028par\u2029", want: `sep\u2028par\u2029`},
		{in: "fill\u3164er", want: `fill\u3164er`},
		{in: "tag\U000e0041", want: `tag\U000e0041`},
		{in: "bad\xff\xfeutf8", want: `bad\xff\xfeutf8`},
		{in: "private\ue000use", want: `private\ue000use`},
	} {
		if got := termSafe(tc.in); got != tc.want {
			t.Errorf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
		}
		wantText := tc.wantText
		if wantText == "" {
			wantText = tc.want
		}
		if got := termText(tc.in); got != wantText {
			t.Errorf("termText(%q) = %q, want %q", tc.in, got, wantText)
		}
	}
}

// termJSON keeps the value and leaves nothing a terminal acts on.
func TestTermJSON(t *testing.T) {
	v := map[string]any{
		"tool": "x\x1b[2J\x1b]0;pwned\x07y", "csi": "a\u009bb", "del": "d\x7f", "bidi": "\u202eabc",
		"astral": "\U000e0041", "plain": "Grüße 🚀", "n": 1.5, "list": []any{"\u200b", true, nil},
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := termJSON(raw)
	assertTerminalSafe(t, string(out), true)
	var got any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var want any
	_ = json.Unmarshal(raw, &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("value changed:\n got %#v\nwant %#v", got, want)
	}
	if plain := []byte(`{"a": "Grüße 🚀", "b": [1, 2]}`); string(termJSON(plain)) != string(plain) {
		t.Errorf("safe JSON changed: %s", termJSON(plain))
	}
	if got := string(termJSON([]byte("\"a\xffb\""))); got != `"a\ufffdb"` {
		t.Errorf("invalid UTF-8: %s", got)
	}
}

// assertTerminalSafe fails when out holds a character a terminal could
// act on (lines: newlines and tabs allowed).
func assertTerminalSafe(t testing.TB, out string, lines bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("invalid UTF-8 in %q", out)
	}
	for i, r := range out {
		if !termPrintable(r, lines) {
			t.Fatalf("%U at %d of %q", r, i, out)
		}
	}
}

func FuzzTermSafe(f *testing.F) {
	for _, s := range []string{"", "plain", "x\x1b[2J\x1b]0;pwned\x07y", "\u009b\u202e\u200b\ufeff", "a\nb\tc\r", "\xff\xc3", "🚀\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, lines := range []bool{false, true} {
			out := escapeTerminal(s, lines)
			assertTerminalSafe(t, out, lines)
			safe := utf8.ValidString(s)
			for _, r := range s {
				safe = safe && termPrintable(r, lines)
			}
			if safe != (out == s) {
				t.Fatalf("lines=%t: %q -> %q: a safe string must pass unchanged, any other must change", lines, s, out)
			}
			if !lines && strings.ContainsAny(out, "\n\t") {
				t.Fatalf("termSafe(%q) = %q spans lines", s, out)
			}
		}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out := termJSON(raw)
		assertTerminalSafe(t, string(out), true)
		var got, want string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("termJSON(%s) = %s: %v", raw, out, err)
		}
		_ = json.Unmarshal(raw, &want)
		if got != want {
			t.Fatalf("termJSON changed %q to %q", want, got)
		}
	})
}
