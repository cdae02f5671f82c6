// Package chaos is mcpgate's chaos suite (issue 10): the real binary, run
// as a child process with a temporary config and data directory, in front
// of real upstream processes (internal/chaosup, over streamable HTTP and
// stdio) that are killed, restarted and made to misbehave, driven over
// loopback by a small MCP client.
//
// Each test asserts the exact outcome of the fault (fault class, time to
// fail, time to recover), that other upstreams and callers were unaffected
// while it lasted, and afterwards that the gateway's goroutines and open
// file descriptors are back at their baseline. Every loop is bounded in
// count and time; the suite runs in `go test ./test/chaos/` in well under
// three minutes on two cores. The soak benchmark (soak_test.go, build tag
// soak, bench/soak.sh) reuses the same harness.
//
// It owns no production code and must not reach into the gateway's
// packages: everything it knows it learns from outside, as an operator
// would (HTTP, /metrics, /readyz, /proc, the SQLite file after exit).
package chaos
