package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What the CLI prints for people comes in large part from others: tool
// names and descriptions from upstreams, client names from any caller's
// initialize, user names from token claims, error texts from upstreams,
// all through the admin API or the store. A terminal acts on some
// characters instead of showing them: ESC starts sequences that clear
// the screen, move the cursor, set the window title or write the
// clipboard (OSC 52), C1 controls do the same in one byte, CR and BS
// overwrite what was printed, and bidi overrides and other invisible
// format characters make text look like other text. So every string the
// CLI prints for people goes through termSafe (one line: table cells,
// names) or termText (several lines: a tool's text result, an error),
// which show such characters as visible escapes (\u001b, \u202e; an
// invalid UTF-8 byte as \xff); JSON
// output goes through termJSON, which writes them as JSON escapes, so
// the value stays exactly the API's.

// termSafe is s with every character a terminal could act on, or that
// shows as nothing, written as a visible escape; newlines and tabs
// included, so the result is one line.
func termSafe(s string) string { return escapeTerminal(s, false) }

// termText is termSafe keeping newlines and tabs: for text of several
// lines.
func termText(s string) string { return escapeTerminal(s, true) }

// termPrintable reports whether r is shown as itself: a graphic
// character (letters, marks, numbers, punctuation, symbols, spaces) that
// is not ignorable (fillers that render as blank), or, with lines, a
// newline or tab. Everything else is a control (C0, DEL, C1), a format
// character (Cf: bidi overrides and isolates, zero-width spaces and
// joiners, the BOM), a line or paragraph separator, a private-use,
// surrogate or unassigned code point.
func termPrintable(r rune, lines bool) bool {
	if r < utf8.RuneSelf {
		return (r >= 0x20 && r < 0x7f) || (lines && (r == '\n' || r == '\t'))
	}
	return unicode.IsGraphic(r) && !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

func escapeTerminal(s string, lines bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !termPrintable(r, lines) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case termPrintable(r, lines):
			b.WriteString(s[i : i+n])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// termJSON rewrites a JSON text so that a terminal shows it as it is:
// every character termSafe would escape (it can only be inside a string:
// JSON allows nothing else outside one, and a valid encoder escapes C0
// controls already) is written as a \u escape, a code point beyond the
// BMP as its surrogate pair, an invalid UTF-8 byte as \ufffd (what a
// decoder reads for it). The JSON value is unchanged.
func termJSON(data []byte) []byte {
	i := 0
	for i < len(data) {
		r, n := utf8.DecodeRune(data[i:])
		if (r == utf8.RuneError && n == 1) || !termPrintable(r, true) && r >= 0x20 {
			break
		}
		i += n
	}
	if i == len(data) {
		return data
	}
	out := make([]byte, 0, len(data)+32)
	out = append(out, data[:i]...)
	for i < len(data) {
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r < 0x20 || termPrintable(r, true):
			// Whitespace between tokens; other C0 bytes cannot be in
			// valid JSON.
			out = append(out, data[i:i+n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}
