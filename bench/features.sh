#!/usr/bin/env bash
# What each configured feature costs per call: mcpgate with the feature on,
# measured by bench/run.sh in the same interleaved rounds as the default
# gateway, the reverse proxy and the direct upstream (issue 25: "each
# configured feature quotes its cost from the same harness").
#
#   bash bench/features.sh
#
# Every variant is `mcpgate serve` from this tree with one template of
# bench/features/ (the default config plus one feature), run as a
# BENCH_PEERS peer on its single-server route /mcp/echo:
#   key          one virtual key, sent as Authorization: Bearer
#   ratelimit    that key with a rate limit (never reached)
#   budget       that key with a budget and a cost per call
#   guardrails   deny + redact (arguments) before, redact + max_bytes after
#   debug        telemetry.debug_header on and x-mcpgate-debug: true sent
#   noaccesslog  access_log off (the access line's cost is the difference)
#   durable      audit.durable: each answer waits for its record's commit
#   tracing      OpenTelemetry tracing at sample_ratio 1, exported over
#                OTLP/HTTP to bench/otlpsink ({otlp})
#   percred      the key's own credential for echo (user_api_key: read
#                from the vault per request, sent as X-Api-Key), stored
#                with mcpgate credentials set once the variant listens
# A feature's cost is its row's CPU per call minus mcpgate's (the default
# gateway) in the same run; the ratios column gives it against the proxy.
#
# Environment: FEATURES (default "key ratelimit budget guardrails debug
# noaccesslog durable tracing percred"), and bench/run.sh's own (BENCH_CONCURRENCY defaults to 64
# here, BENCH_OUT to "-": the results are printed, docs/benchmarks.md is
# left alone).
set -euo pipefail
cd "$(dirname "$0")/.."

FEATURES=${FEATURES:-key ratelimit budget guardrails debug noaccesslog durable tracing percred}
KEY=bench-key-0123456789abcdef # the key in key.yaml, ratelimit.yaml, budget.yaml and percred.yaml

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/mcpgate" ./cmd/mcpgate
# A binary just written is dirty in the page cache until written back, and
# the kernel drops only clean pages: write them now, so that mcpgate's
# start-up trim (internal/exepages) behaves as it does on an installed
# binary.
sync "$bin/mcpgate"

peers=() headers=() setups=()
for f in $FEATURES; do
  [[ -f bench/features/$f.yaml ]] || { echo "features.sh: no bench/features/$f.yaml" >&2; exit 2; }
  peers+=("$f/mcp/echo=$bin/mcpgate:serve --config {config:bench/features/$f.yaml} --listen 127.0.0.1:{port}")
  case $f in
  key | ratelimit | budget | percred) headers+=("$f=Authorization: Bearer $KEY") ;;
  debug) headers+=("$f=X-Mcpgate-Debug: true") ;;
  esac
  [[ $f == percred ]] && setups+=("$f=$bin/mcpgate credentials set echo --value bench-upstream-credential --url http://127.0.0.1:{port} --admin-key $KEY")
done

BENCH_PEERS=$(IFS=';'; echo "${peers[*]}") \
BENCH_PEER_HEADERS=$(IFS=';'; echo "${headers[*]}") \
BENCH_PEER_SETUP=$(IFS=';'; echo "${setups[*]}") \
BENCH_CONCURRENCY=${BENCH_CONCURRENCY:-64} \
BENCH_OUT=${BENCH_OUT:--} \
  bash bench/run.sh
