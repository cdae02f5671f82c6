#!/usr/bin/env bash
# Measures the 'direct' baseline: mcpgate-bench straight against the echo
# server (no gateway), at several concurrencies.
#
#   bash bench/direct.sh                 # c=1,8,64 for 5s each
#   C="1 8" D=10s bash bench/direct.sh
#
# Prints one JSON result per concurrency (see bench/loadgen.Result).
set -euo pipefail
cd "$(dirname "$0")/.."

C=${C:-"1 8 64"}
D=${D:-5s}
WARMUP=${WARMUP:-1s}
ADDR=${ADDR:-127.0.0.1:4299}

tmp=$(mktemp -d)
trap 'kill "$echo_pid" 2>/dev/null || true; wait "$echo_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/echo" ./examples/echo
go build -o "$tmp/mcpgate-bench" ./cmd/mcpgate-bench

"$tmp/echo" -listen "$ADDR" 2>"$tmp/echo.log" &
echo_pid=$!
for _ in $(seq 50); do
  grep -q listening "$tmp/echo.log" 2>/dev/null && break
  sleep 0.1
done

for c in $C; do
  "$tmp/mcpgate-bench" -url "http://$ADDR/mcp" -c "$c" -d "$D" -warmup "$WARMUP" -json
done
