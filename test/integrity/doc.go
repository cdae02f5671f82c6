// Package integrity holds tests of tool integrity (internal/integrity)
// against real servers: the definition scanner's false positives on the
// tool definitions of every server the project tests against.
package integrity
