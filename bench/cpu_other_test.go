//go:build !unix

package bench_test

import "time"

// processCPU is not implemented on this platform; cpu-µs/call is omitted.
func processCPU() time.Duration { return 0 }
