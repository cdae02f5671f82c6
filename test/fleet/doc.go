// Package fleet is mcpgate's fleet proof (issue 14, SPEC S15): one
// PostgreSQL database, one Redis and three replicas of the real binary
// with one shared config (store postgres, state redis, fleet.session_keys;
// each replica its own port and fleet.advertise), in front of the notes
// example over stdio, behind a test load balancer that sends every request
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
// It owns no production code and reaches into the gateway's packages only
// to read what an operator could (the audit table, a sealed id's key).
package fleet
