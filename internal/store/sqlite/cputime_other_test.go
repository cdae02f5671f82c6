//go:build !unix

package sqlite

import (
	"testing"
	"time"
)

// cpuTime is not measured here: the benchmarks report 0 CPU per row.
func cpuTime(*testing.B) time.Duration { return 0 }
