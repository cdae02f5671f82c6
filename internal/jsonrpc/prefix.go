package jsonrpc

// Scanning the first bytes of a message that may be cut off anywhere: the
// gateway classifies a request body from its first 4 KiB (S2.6, S11) and
// the upstream client finds the id of a reply too large to hold (S23).
// Unlike skipValue, a value that reaches the end of the prefix is not
// taken to end there: a number or literal may go on past it.

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int { return skipWS(b, i) }

// PrefixString returns the index after the string starting at b[i] (a
// '"'), or false when b ends first.
func PrefixString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// PrefixValue returns the index after the JSON value starting at b[i], or
// false when the value does not end within b. It tracks strings and
// brackets only: enough to find where a value ends in a well-formed
// message, not to validate it.
func PrefixValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return PrefixString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := PrefixString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j, j > i
		}
	}
	return 0, false // a scalar running to the end may be cut off
}
