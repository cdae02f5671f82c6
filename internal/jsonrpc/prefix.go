package jsonrpc

// Scanning the first bytes of a message that may be cut off anywhere: the
// gateway classifies a request body from its first 4 KiB (S2.6, S11) and
// the upstream client finds the id of a reply too large to hold (S23).
// These are skipValue and skipString with one difference: a scalar that
// reaches the end of the prefix is not taken to end there (a number or
// literal may go on past it: the id 12 of a body cut inside 123).

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int { return skipWS(b, i) }

// PrefixString returns the index after the string starting at b[i] (a
// '"'), or false when b ends first.
func PrefixString(b []byte, i int) (int, bool) {
	j, err := skipString(b, i)
	return j, err == nil
}

// PrefixValue returns the index after the JSON value starting at b[i], or
// false when the value does not end within b. It tracks strings and
// brackets only: enough to find where a value ends in a well-formed
// message, not to validate it.
func PrefixValue(b []byte, i int) (int, bool) {
	j, err := skipValue(b, i)
	if err != nil {
		return 0, false
	}
	if j == len(b) && mayGoOn(b[i]) {
		return 0, false // a scalar running to the end may be cut off
	}
	return j, true
}

// mayGoOn reports whether a value starting with c could continue past the
// end of a prefix it reaches: a scalar, not a closed string or bracket.
func mayGoOn(c byte) bool { return c != '"' && c != '{' && c != '[' }
