package gateway

import (
	"strconv"
	"testing"
)

// contentLength says what strconv.Itoa says, and a length seen before
// costs nothing (its value is shared; header values are replaced, never
// written in place).
func TestContentLengthShared(t *testing.T) {
	for _, n := range []int{0, 1, 99, 100, 4095, 4096, 1 << 20} {
		for range 2 {
			if v := contentLength(n); len(v) != 1 || cap(v) != 1 || v[0] != strconv.Itoa(n) {
				t.Errorf("contentLength(%d) = %q (cap %d)", n, v, cap(v))
			}
		}
	}
	if n := testing.AllocsPerRun(50, func() { _ = contentLength(1234) }); n != 0 {
		t.Errorf("a known length: %v allocations, want none", n)
	}
}
