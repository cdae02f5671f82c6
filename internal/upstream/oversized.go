package upstream

import (
	"bytes"
	"strconv"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// A stdio line longer than the message limit is discarded as it is read
// (S23): newline-delimited JSON cannot hold a raw newline inside a message,
// so the next line is the next message, and the session goes on. What is
// kept of the line is its two ends, enough to learn which call it answers:
// a JSON-RPC message names its id near one end (the Python SDK writes
// jsonrpc, id, result; the TypeScript SDK result, jsonrpc, id). That call
// alone fails; the others in flight are not the oversized message's.

// keepEnds is how much of each end of an oversized line is kept.
const keepEnds = 4 << 10

// oversized collects the ends of a line being discarded. A nil
// *oversized collects nothing.
type oversized struct {
	head, tail []byte
}

// reset starts a line whose first bytes are b.
func (o *oversized) reset(b []byte) {
	if o == nil {
		return
	}
	o.head = append(o.head[:0], b[:min(len(b), keepEnds)]...)
	o.tail = o.tail[:0]
	o.add(b)
}

// add appends the next bytes of the line, keeping the last keepEnds.
func (o *oversized) add(b []byte) {
	if o == nil {
		return
	}
	if len(b) >= keepEnds {
		o.tail = append(o.tail[:0], b[len(b)-keepEnds:]...)
		return
	}
	o.tail = append(o.tail, b...)
	if len(o.tail) > keepEnds {
		o.tail = o.tail[:copy(o.tail, o.tail[len(o.tail)-keepEnds:])]
	}
}

// oversizedKind is what the ends of an oversized message show it to be.
type oversizedKind int

const (
	oversizedUnknown oversizedKind = iota
	oversizedReply                 // a response, with the id of our call
	oversizedInbound               // a request or notification of the server's
)

// classifyOversized reads the ends of an oversized message: the members
// of its top-level object that are complete in head, then, when that shows
// no id, a final `"id": <integer>` member in tail. Only integer ids are
// read: the gateway's own requests have no others.
func classifyOversized(head, tail []byte) (oversizedKind, int64) {
	id, method := scanHead(head)
	if method {
		return oversizedInbound, 0
	}
	if id == nil {
		id = tailID(tail)
	}
	if id == nil {
		return oversizedUnknown, 0
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil {
		return oversizedUnknown, 0
	}
	return oversizedReply, n
}

// scanHead reads the members of the JSON object b starts with, as far as
// they are complete, and returns the raw value of "id" and whether there
// is a "method" member.
func scanHead(b []byte) (id []byte, method bool) {
	_ = jsonrpc.PrefixFields(b, func(key string, val []byte) bool {
		switch key {
		case "id":
			id = val
		case "method":
			method = true
		}
		return true
	})
	return id, method
}

// tailID returns N when b ends with `,"id":N}` (whitespace allowed): in a
// well-formed message the object's closing brace is then the top-level
// one, and "id" its member. A string value cannot end the line this way,
// since its closing quote would have to follow.
func tailID(b []byte) []byte {
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) == 0 || b[len(b)-1] != '}' {
		return nil
	}
	b = bytes.TrimRight(b[:len(b)-1], " \t\r\n")
	j := len(b)
	for j > 0 && b[j-1] >= '0' && b[j-1] <= '9' {
		j--
	}
	if j > 0 && b[j-1] == '-' {
		j--
	}
	num := b[j:]
	if len(num) == 0 {
		return nil
	}
	b = bytes.TrimRight(b[:j], " \t\r\n")
	if !bytes.HasSuffix(b, []byte(":")) {
		return nil
	}
	b = bytes.TrimRight(b[:len(b)-1], " \t\r\n")
	if !bytes.HasSuffix(b, []byte(`"id"`)) {
		return nil
	}
	b = bytes.TrimRight(b[:len(b)-len(`"id"`)], " \t\r\n")
	if !bytes.HasSuffix(b, []byte(",")) {
		return nil // also refuses \"id" inside a string
	}
	return num
}
