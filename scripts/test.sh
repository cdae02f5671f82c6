#!/usr/bin/env bash
# Installs what the tests need and runs the whole suite: Go vet and unit,
# end-to-end and race tests, the chaos suite (test/chaos), short fuzz runs,
# the TypeScript-SDK and server-everything interop test, the test IdP
# (oidc-provider) and test browser, and the MCP conformance suite against
# the conformance fixture directly and through the gateway (also with a JWT
# caller), and its client scenarios with mcpgate's egress as the client.
#
# Usage: bash scripts/test.sh        (the README's test command; .ci/run)
# Env:   FUZZTIME (default 8s per fuzz target), SKIP_INTEROP=1 for a
#        Go-only run while developing (CI never sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
start=$(date +%s)
step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

step "install test dependencies"
bash scripts/install-test-deps.sh >/dev/null
export PATH="$ROOT/bin:$PATH" # helm (install-test-deps.sh)

step "gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './test/interop/node_modules/*'))
if [[ -n "$unformatted" ]]; then echo "gofmt would change: $unformatted"; exit 1; fi
go vet ./...
go vet -tags interop ./test/interop/modern/ ./test/interop/idp/ ./test/interop/identity/

step "go test (all packages but the chaos suite)"
go test -count=1 -timeout 10m $(go list ./... | grep -v '/test/chaos$')

# Its own step: it times faults (a refused call must fail in under 100 ms),
# so it must not share the machine with the other packages' tests, which
# `go test ./...` runs in parallel. About a minute on 2 cores.
step "chaos suite (test/chaos: the real binary, upstreams killed, hostile, a full disk)"
go test -count=1 -timeout 5m ./test/chaos/

step "go test -race (packages with concurrency)"
go test -count=1 -race -timeout 10m ./internal/upstream/ ./internal/gateway/ ./internal/catalog/ \
  ./internal/callers/ ./internal/audit/ ./internal/metrics/ ./internal/policy/ ./internal/admin/ ./internal/oauth/ ./internal/oauth/authserver/ ./internal/oauth/client/ ./internal/store/... ./internal/state/...

step "fuzz (short runs)"
FUZZTIME="${FUZZTIME:-8s}"
# A fuzz run fails for real when it records a failing input (testdata/fuzz/…),
# which then also fails every later plain `go test`. The fuzzing engine can
# also give up on its own on a loaded machine ("fuzzing process hung or
# terminated unexpectedly", a deadline) without any input: that run is
# retried once, and its output shown. Minimising a new interesting input
# may take up to a minute by default, beyond a short -fuzztime: it is
# bounded to 2s.
fuzz() {
  local out
  for attempt in 1 2; do
    if out=$(go test -run='^$' -fuzz="^$2\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=2s "$1" 2>&1); then
      echo "fuzz $2: ok"
      return 0
    fi
    echo "$out" | tail -25
    if echo "$out" | grep -q "testdata/fuzz/$2/"; then
      echo "fuzz $2: found a failing input (see above)"
      return 1
    fi
    if echo "$out" | grep -q "context deadline exceeded" && ! echo "$out" | grep -q "panic:" &&
      echo "$out" | grep -q "fuzz: elapsed: [0-9]*s, execs: [1-9]"; then
      # The engine ran its whole -fuzztime, executing inputs, and then
      # lost a race ending its workers ("context deadline exceeded" at the
      # deadline, no failing input written): the run found nothing. Seen
      # on a loaded 2-core machine for targets that pass on every rerun.
      echo "fuzz $2: ok (ran its time; the engine's shutdown reported a deadline; no failing input)"
      return 0
    fi
    echo "fuzz $2: engine failure without a failing input (attempt $attempt)"
  done
  return 1
}
fuzz ./internal/jsonrpc/ FuzzDecode
fuzz ./internal/jsonrpc/ FuzzRaw
fuzz ./internal/jsonrpc/ FuzzSSEReader
fuzz ./internal/jsonrpc/ FuzzSSERoundTrip
fuzz ./internal/upstream/ FuzzReadLine
fuzz ./internal/catalog/ FuzzTemplateRegexp
fuzz ./internal/toolsearch/ FuzzTokenize
fuzz ./internal/gateway/ FuzzParseServersInPath
fuzz ./internal/gateway/ FuzzExposedNames
fuzz ./internal/gateway/ FuzzClassifyBody
fuzz ./internal/gateway/ FuzzAskReplica
fuzz ./internal/mcpwire/ FuzzParamHeaders
fuzz ./internal/tracing/ FuzzMeta
fuzz ./internal/config/ FuzzParse
fuzz ./internal/config/ FuzzClientMetadataPath
fuzz ./internal/upstream/ FuzzCredentialValue
fuzz ./internal/callers/ FuzzBearerToken
fuzz ./internal/upstream/ FuzzOversizedEnds
fuzz ./internal/mcpwire/ FuzzRequestMeta
fuzz ./internal/fleet/ FuzzOpenSessionID
fuzz ./internal/fleet/ FuzzParsePeerAuth
fuzz ./internal/mcpwire/ FuzzCheckHeaders
fuzz ./internal/oauth/ FuzzVerify
fuzz ./internal/upstream/ FuzzExchangeResponse
fuzz ./cmd/mcpgate/ FuzzTermSafe
fuzz ./internal/oauth/ FuzzChallenge
fuzz ./internal/oauth/ FuzzParseChallenges
fuzz ./internal/oauth/authserver/ FuzzRegister
fuzz ./internal/openapi/ FuzzParse
fuzz ./internal/guard/ FuzzRedact
fuzz ./internal/guard/ FuzzPostResult
fuzz ./internal/oauth/authserver/ FuzzAuthorize
fuzz ./internal/oauth/ FuzzCanonicalResource
fuzz ./internal/oauth/ FuzzDiscoveryDocument
fuzz ./internal/oauth/ FuzzJWKS
fuzz ./internal/oauth/authserver/ FuzzMetadataDocument
fuzz ./internal/oauth/client/ FuzzBearerChallenge
fuzz ./internal/oauth/client/ FuzzTokenResponse
fuzz ./internal/netaddr/ FuzzHostHeader
fuzz ./internal/oauth/client/ FuzzResourceFor
fuzz ./internal/vault/ FuzzDecodeRecord
fuzz ./internal/state/ FuzzParseEventID
fuzz ./internal/config/ FuzzRedisURL
fuzz ./internal/clientconf/ FuzzImportClientConfig

if [[ "${SKIP_INTEROP:-0}" != "1" ]]; then
  step "interop: TypeScript SDK client + server-everything through mcpgate; the test IdP"
  bash scripts/interop-ts.sh

  step "conformance suite against the fixture directly"
  bash scripts/conformance.sh --fixture

  step "conformance suite through mcpgate (/mcp/<fixture>, stdio upstream)"
  CONFORMANCE_UPSTREAM=stdio bash scripts/conformance.sh --gateway

  step "conformance suite through mcpgate (/mcp/<fixture>, streamable-HTTP upstream)"
  CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway

  # The same, the caller authenticated: mcpgate with the test IdP as its
  # auth.oidc issuer, every request of the suite carrying a client
  # credentials JWT for the route (test/fixtures/bearerproxy adds it). Same
  # results as the run above; then the gateway without a token must say 401.
  step "conformance suite through mcpgate with a JWT caller (oidc-provider token)"
  CONFORMANCE_CALLER=jwt CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway

  # The 2026-07-28 (stateless) server scenarios of the next suite
  # (conformance-next, 0.2.0-alpha.12): --spec-version 2026-07-28 --suite all
  # selects all 40 of them and none of the extension scenarios (tasks-*,
  # sep-2640 skills), which mcpgate does not implement. A few seconds each.
  # All four runs go ahead even if one fails; the step fails at the end.
  next=(--spec-version 2026-07-28 --suite all)
  next_failed=()
  next_run() { local what="$1"; shift; step "$what"; env "$@" || next_failed+=("$what"); }
  next_run "conformance 2026-07-28 against the fixture directly (-stateless)" \
    CONFORMANCE_SUITE=next CONFORMANCE_FIXTURE_STATELESS=1 bash scripts/conformance.sh --fixture "${next[@]}"
  next_run "conformance 2026-07-28 through mcpgate, old-era streamable-HTTP upstream (bridged)" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway "${next[@]}" \
    --expected-failures test/fixtures/conformance/expected-failures-2026-07-28-legacy-upstream.yml
  next_run "conformance 2026-07-28 through mcpgate, 2026-07-28 streamable-HTTP upstream (-stateless)" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=http CONFORMANCE_FIXTURE_STATELESS=1 bash scripts/conformance.sh --gateway "${next[@]}"
  # stdio at 2026-07-28: an old-era stdio upstream cannot tie a
  # server->client request to one of several calls in flight, and the suite
  # leaves MRTR calls waiting for retries that never come (SCENARIOS.md).
  next_run "conformance 2026-07-28 through mcpgate, 2026-07-28 stdio upstream" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=stdio CONFORMANCE_UPSTREAM_PROTOCOL=2026-07-28 bash scripts/conformance.sh --gateway "${next[@]}"
  if [[ ${#next_failed[@]} -gt 0 ]]; then
    printf 'failed: %s\n' "${next_failed[@]}"
    exit 1
  fi

  # The other direction: mcpgate's egress is the client under test of the
  # suite's client scenarios (0.1.16: core, auth suite, extensions), driven
  # by test/fixtures/conformance-client. Scenarios that need egress features
  # mcpgate lacks are in the baseline. About 10 s.
  step "conformance suite, client scenarios, mcpgate's egress as the client"
  bash scripts/conformance-client.sh
fi

step "all tests passed"
