package jsonrpc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Event is one server-sent event.
type Event struct {
	ID    string // last "id:" field of the event ("" if none)
	Name  string // "event:" field; "" means "message"
	Data  []byte // "data:" lines joined with "\n"
	Retry int    // "retry:" in milliseconds, 0 if absent
}

// ErrEventTooLarge is returned when one event exceeds the reader's limit.
var ErrEventTooLarge = errors.New("sse: event exceeds size limit")

// DefaultMaxEventBytes bounds one event when no limit is given.
const DefaultMaxEventBytes = 32 << 20

// SSEReader reads server-sent events as specified by the WHATWG HTML
// standard (event stream interpretation), bounded in size.
type SSEReader struct {
	r      *bufio.Reader
	max    int
	skipLF bool  // the last line ended with CR: a following LF belongs to it
	begun  bool  // the byte order mark check is done
	err    error // sticky: after an error the stream position is meaningless
}

// NewSSEReader returns a reader; max <= 0 means DefaultMaxEventBytes.
func NewSSEReader(r io.Reader, max int) *SSEReader {
	if max <= 0 {
		max = DefaultMaxEventBytes
	}
	return &SSEReader{r: bufio.NewReaderSize(r, 16<<10), max: max}
}

// readLine reads one line without its terminator (CRLF, LF or CR). A line
// longer than limit bytes is ErrEventTooLarge. A final line without a
// terminator is returned as a line; the next call then reports io.EOF.
//
// A CR ends the line at once: whether an LF follows is settled on the next
// call, so that an event ending in CR CR is dispatched without waiting for
// more bytes from the network.
func (s *SSEReader) readLine(limit int) ([]byte, error) {
	// The pieces of a line longer than the buffer are kept as they come
	// and joined once at its end: appending them would copy the line at
	// every doubling, and a line refused at the limit would leave about
	// twice the limit behind for the collector.
	var parts [][]byte
	n := 0
	join := func(last []byte) []byte {
		line := make([]byte, 0, n+len(last))
		for _, p := range parts {
			line = append(line, p...)
		}
		return append(line, last...)
	}
	for {
		if s.r.Buffered() == 0 {
			if _, err := s.r.Peek(1); err != nil {
				if err == io.EOF && n > 0 {
					return join(nil), nil
				}
				return nil, err
			}
		}
		chunk, _ := s.r.Peek(s.r.Buffered())
		if s.skipLF {
			s.skipLF = false
			if chunk[0] == '\n' {
				_, _ = s.r.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			i = len(chunk)
		}
		if n+i > limit {
			return nil, ErrEventTooLarge
		}
		if i == len(chunk) {
			parts = append(parts, bytes.Clone(chunk))
			n += i
			_, _ = s.r.Discard(i)
			continue
		}
		line := join(chunk[:i])
		s.skipLF = chunk[i] == '\r'
		_, _ = s.r.Discard(i + 1)
		return line, nil
	}
}

// Next returns the next event with data. Comments and events without data
// lines are skipped (per the standard). At a clean end of stream it returns
// io.EOF; an event cut off by the end of the stream is discarded and
// io.ErrUnexpectedEOF returned. Data longer than the limit is
// ErrEventTooLarge. Errors are sticky: once Next fails it keeps failing.
func (s *SSEReader) Next() (*Event, error) {
	if s.err != nil {
		return nil, s.err
	}
	ev, err := s.next()
	if err != nil {
		s.err = err
	}
	return ev, err
}

// bom is the UTF-8 byte order mark a stream may start with.
const bom = "\xEF\xBB\xBF"

func (s *SSEReader) next() (*Event, error) {
	if !s.begun {
		s.begun = true
		if b, _ := s.r.Peek(len(bom)); string(b) == bom {
			_, _ = s.r.Discard(len(bom))
		}
	}
	var ev Event
	var data []byte
	hasData := false
	started := false
	for {
		// A line may carry a whole event's data plus its field name.
		line, err := s.readLine(s.max + len("data: "))
		if err != nil {
			if err == io.EOF && started {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				ev.Data = data
				return &ev, nil
			}
			ev, data, started = Event{}, nil, false
			continue
		}
		started = true
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
			if len(data) > s.max {
				return nil, ErrEventTooLarge
			}
		case "event":
			ev.Name = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = string(value)
			}
		case "retry":
			// Only ASCII digits count ("+5" and " 5" are ignored).
			if isDigits(value) {
				if n, err := strconv.Atoi(string(value)); err == nil {
					ev.Retry = n
				}
			}
		}
	}
}

// AppendEvent appends the wire form of an event. Data containing line
// breaks is split over several data lines, which a reader joins back with
// "\n" (CRLF and CR inside data are normalised to LF, as any reader would).
func AppendEvent(buf []byte, ev *Event) []byte {
	if ev.ID != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, stripBreaks(ev.ID)...)
		buf = append(buf, '\n')
	}
	if ev.Name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, stripBreaks(ev.Name)...)
		buf = append(buf, '\n')
	}
	if ev.Retry > 0 {
		buf = fmt.Appendf(buf, "retry: %d\n", ev.Retry)
	}
	data := ev.Data
	for {
		i := bytes.IndexAny(data, "\r\n")
		buf = append(buf, "data: "...)
		if i < 0 {
			buf = append(buf, data...)
			buf = append(buf, '\n')
			break
		}
		buf = append(buf, data[:i]...)
		buf = append(buf, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(buf, '\n')
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func stripBreaks(s string) string {
	if !bytes.ContainsAny([]byte(s), "\r\n") {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}
