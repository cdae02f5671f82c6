// Package security is mcpgate's adversarial suite (issue 22): the real
// binary, run as a child process on loopback with a temporary config, in
// front of real MCP servers (the official go-sdk over streamable HTTP),
// attacked from outside the way a hostile caller, a hostile upstream and a
// hostile web page would: another caller's relayed requests, tokens for
// another resource, forged Host and Origin headers, names that collide,
// documents that point elsewhere, paths to host files.
//
// Each case asserts the exact refusal the attacker gets and that the
// victim's work was untouched (the victim's pending request still waits
// and completes with the victim's own answer; the victim's upstream
// received nothing of the attacker's). docs/security.md maps each
// invariant of the threat model to the test here that holds it.
//
// It owns no production code and must not reach into the gateway's
// packages: everything it knows it learns from outside (HTTP, the admin
// API, /metrics, the gateway's log, the upstreams it runs itself).
package security
