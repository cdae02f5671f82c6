// Package fleet is mcpgate's fleet proof (issue 14, SPEC S15): one
// PostgreSQL database, one Redis and three replicas of the real binary
// with one shared config (store postgres, state redis, fleet.session_keys;
// each replica its own port and fleet.advertise), in front of the notes
// example and (for streaming, when Node is installed) server-everything
// over stdio, behind a test load balancer that sends every request
// to the next replica in turn.
//
// The tests drive it as clients and operators would: the official go-sdk
// and TypeScript SDK clients through the balancer, raw JSON-RPC for load,
// /readyz and /metrics of each replica, and PostgreSQL read afterwards.
// They kill replicas (SIGKILL), stop Redis, and restart replicas with a
// rotated key list, and assert what SPEC S15 promises: a session created
// on one replica continues on any other, rate limits hold across the
// fleet, a dead replica fails only what it had in flight, and a Redis
// outage degrades (visibly) instead of failing.
//
// PostgreSQL and Redis come from internal/store/postgres/pgtest and
// internal/state/redis/redistest: without them the tests skip, except with
// CI=true (or MCPGATE_REQUIRE_PG=1 / MCPGATE_REQUIRE_REDIS=1), where they
// fail.
//
// Scenarios are subtests of TestFleet, run in order on one fleet; each
// leaves it whole (every replica up, Redis up). The pieces a new scenario
// combines:
//
//   - Balancer.Route with pinByHeader and rawSession.Pin put a session's
//     next request on a chosen replica: an elicitation relayed by B and
//     answered on B, an MRTR retry sent to C;
//   - rawSession.Request sends any request on a session and reports the
//     serving replica (HeaderReplica), status and body; a header it must
//     carry (Last-Event-ID for a resumed stream) goes in rawSession.post;
//   - Replica.Admin calls one replica's admin API (a revocation on A),
//     statelessClient and rawSession then look from another (refused on B
//     within a second);
//   - Replica.Kill/Start/Restart/Stop, Fleet.RotateKeys, Redis.Stop/Restart
//     change the fleet; Replica.Ready and Replica.Metric observe it as an
//     operator would.
//
// It owns no production code and reaches into the gateway's packages only
// to read what an operator could (the audit table, a sealed id's key).
package fleet
