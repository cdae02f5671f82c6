package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadLine checks the stdio framing against the obvious definition:
// lines split on '\n', those longer than max skipped with errLineTooLong.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("{}\n{\"a\":1}\n"), 4)
	f.Add([]byte("no newline at end"), 100)
	f.Add(bytes.Repeat([]byte("x"), 70), 40)
	f.Add([]byte("\n\n\n"), 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 0 || max > 1<<10 {
			return
		}
		// A small buffer exercises the multi-fragment path.
		br := bufio.NewReaderSize(bytes.NewReader(data), 16)
		want := bytes.Split(data, []byte("\n"))
		for i, w := range want {
			last := i == len(want)-1
			if last && len(w) == 0 {
				break // data ended with a newline
			}
			got, err := readLine(br, max)
			if len(w) > max && !last {
				if !errors.Is(err, errLineTooLong) {
					t.Fatalf("line %d (%d bytes, max %d): err = %v, want errLineTooLong", i, len(w), max, err)
				}
				continue
			}
			if last {
				// The unterminated tail comes with io.EOF.
				if !errors.Is(err, io.EOF) || (len(w) <= max && !bytes.Equal(got, w)) {
					t.Fatalf("tail: got %q, %v; want %q, EOF", got, err, w)
				}
				return
			}
			if err != nil || !bytes.Equal(got, w) {
				t.Fatalf("line %d: got %q, %v; want %q", i, got, err, w)
			}
		}
		if _, err := readLine(br, max); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last line: err = %v, want EOF", err)
		}
	})
}
