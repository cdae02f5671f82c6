#!/usr/bin/env bash
# Runs the TypeScript-SDK interop tests (test/interop/*.test.mjs) with Node 22
# from test/interop: the MCP TypeScript SDK client talks through a freshly
# built mcpgate to the reference "everything" server, which the gateway
# reaches over stdio and over streamable HTTP; idp.test.mjs proves the test
# IdP (idp.mjs, oidc-provider) and the test browser (browser.mjs);
# apps.test.mjs runs MCP Apps views (the ext-apps server helpers, its App view
# behind its AppBridge host, the SDK client) through /mcp and /mcp/<server>;
# oauth.test.mjs signs the SDK's own OAuth client in through mcpgate's
# authorization server (auth.login) with a browser login at that IdP, by
# registration (DCR) and as a client ID metadata document client (https on
# loopback with a throwaway certificate from openssl); clients.test.mjs runs
# the real client binaries: mcp-remote (its own OAuth flow through
# auth.login, the browser driven by browser.mjs, then MCP over its stdio) on
# /sse, /mcp and /mcp/<server>, and the MCP Inspector CLI with a key on the
# same endpoints.
#
# Usage:
#   scripts/interop-ts.sh [node --test options...]
#   e.g. scripts/interop-ts.sh --test-name-pattern='^gateway'
#        scripts/interop-ts.sh --test-reporter=spec
#
# Needs go (the tests run `go build ./cmd/mcpgate`), openssl (oauth.test.mjs
# makes a self-signed certificate), and the npm registry the
# first time (scripts/install-test-deps.sh installs test/interop/node_modules).
#
# Env:
#   INTEROP_TIMEOUT      seconds for the whole node --test run (default 300;
#                        includes building the gateway on a cold cache).
#   INTEROP_SKIP_DIRECT=1  skip the direct (no gateway) control tests.
#   INTEROP_GATEWAY_BIN  test this mcpgate binary instead of building one.
#   INTEROP_VERBOSE=1    stream gateway and upstream stderr.
#
# Then runs the Go interop tests (`go test -tags interop`): test/interop/eras
# (go-sdk client speaking 2026-07-28 through mcpgate to server-everything) and
# test/interop/idp (the Go helper that starts idp.mjs: machine tokens, key
# rotation, JWKS fetch counts).
#
# Exit status: node's (0 when every test passed, 1 when any failed), 124/137
# on timeout, 2 on setup errors; 1 if node passed but the Go test failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TIMEOUT="${INTEROP_TIMEOUT:-300}"

die() { echo "interop-ts.sh: $*" >&2; exit 2; }

command -v go >/dev/null 2>&1 || die "go not found in PATH"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) not found"

node22="$(bash "$ROOT/scripts/install-test-deps.sh" | tail -n1)" || die "installing test deps failed"
[[ -x "$node22" ]] || die "install-test-deps.sh did not report a node binary (got '$node22')"
"$node22" --version | grep -q '^v22\.' || die "$node22 is not Node 22"

shopt -s nullglob
tests=("$ROOT"/test/interop/*.test.mjs)
[[ ${#tests[@]} -gt 0 ]] || die "no test/interop/*.test.mjs files"

cd "$ROOT"
set +e
timeout --kill-after=15 "$TIMEOUT" "$node22" --test --test-concurrency=1 "$@" "${tests[@]}"
rc=$?
set -e
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "interop-ts.sh: timed out after ${TIMEOUT}s" >&2
fi

# The go-sdk client in the stateless revision 2026-07-28 through mcpgate to
# the same server-everything (test/interop/eras, build tag interop). Runs
# whatever node's result; the script fails if either part failed.
echo "interop-ts.sh: go test -tags interop ./test/interop/eras/" >&2
gw_bin=""
if [[ -n "${INTEROP_GATEWAY_BIN:-}" ]]; then
  gw_bin="$(realpath -m "$INTEROP_GATEWAY_BIN")" # relative to $ROOT, as for node
fi
set +e
MCPGATE_NODE="$node22" \
MCPGATE_EVERYTHING="$ROOT/test/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js" \
MCPGATE_GATEWAY_BIN="$gw_bin" \
  go test -tags interop -count=1 -timeout 300s ./test/interop/eras/
go_rc=$?
set -e
if [[ $go_rc -ne 0 ]]; then
  echo "interop-ts.sh: go-sdk 2026-07-28 interop test failed (exit $go_rc)" >&2
  if [[ $rc -eq 0 ]]; then rc=1; fi
fi

# The Go test IdP helper (test/interop/idp) against the real idp.mjs, and
# mcpgate's identity features against that IdP (test/interop/identity). A
# few seconds each.
echo "interop-ts.sh: go test -tags interop ./test/interop/idp/ ./test/interop/identity/" >&2
set +e
MCPGATE_NODE="$node22" go test -tags interop -count=1 -timeout 240s ./test/interop/idp/ ./test/interop/identity/
idp_rc=$?
set -e
if [[ $idp_rc -ne 0 ]]; then
  echo "interop-ts.sh: test IdP Go test failed (exit $idp_rc)" >&2
  if [[ $rc -eq 0 ]]; then rc=1; fi
fi
exit "$rc"
