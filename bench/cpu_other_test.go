//go:build !unix

package bench_test

import "time"

// processCPU has no source on this platform (no /proc); cpu-µs/call is omitted.
func processCPU() time.Duration { return 0 }
