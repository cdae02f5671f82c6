#!/usr/bin/env bash
# Memory per idle session and per idle GET stream of the real gateway.
#
#   bash bench/sessions.sh
#
# Builds examples/echo, cmd/mcpgate and bench/sessions into a temp dir,
# starts echo and `mcpgate serve` (route /mcp/echo) on free loopback ports,
# then bench/sessions opens SESSIONS_N stateful sessions (initialize +
# notifications/initialized) and one idle GET stream on each, and reports
# the gateway's VmRSS and RssAnon (/proc) and the live heap its last GC
# left (GODEBUG=gctrace=1) before, after the sessions and after the
# streams: bytes per session and per stream. Nothing is written to docs.
#
# Environment:
#   SESSIONS_N        sessions, and streams (default 10000)
#   SESSIONS_GOGC     the gateway's GOGC ("" default: the binary's own)
#   SESSIONS_AUTH     1: the gateway requires an API key (one declarative
#                     key, which the sessions and streams use), so every
#                     stream is also watched for its key being revoked
#   SESSIONS_STREAMS  0: sessions only
#   SESSIONS_GATEWAY  a prebuilt mcpgate binary to measure instead of
#                     building this checkout's (e.g. an older build)
#
# Linux only (/proc). Needs go and a file descriptor limit above
# SESSIONS_N + a few hundred (ulimit -n) for both the gateway and the client.
set -euo pipefail
CALLER_DIR=$PWD
cd "$(dirname "$0")/.."

N=${SESSIONS_N:-10000}
GOGC_SET=${SESSIONS_GOGC:-}
AUTH=${SESSIONS_AUTH:-0}
STREAMS=${SESSIONS_STREAMS:-1}
GATEWAY=${SESSIONS_GATEWAY:-}

need=$((N + 256))
if (($(ulimit -n) < need)); then
  ulimit -n "$need" 2>/dev/null || { echo "sessions.sh: ulimit -n is $(ulimit -n), need $need" >&2; exit 2; }
fi

tmp=$(mktemp -d)
echo_pid= gw_pid=
cleanup() {
  for p in $gw_pid $echo_pid; do kill "$p" 2>/dev/null || true; done
  for p in $gw_pid $echo_pid; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
source bench/lib.sh # log, wait_log

log "building into $tmp ..."
go build -o "$tmp/echo" ./examples/echo
go build -o "$tmp/sessions" ./bench/sessions
if [[ -n $GATEWAY ]]; then
  [[ $GATEWAY == /* ]] || GATEWAY=$CALLER_DIR/$GATEWAY
  cp "$GATEWAY" "$tmp/mcpgate"
else
  go build -o "$tmp/mcpgate" ./cmd/mcpgate
fi
# Written back before it runs, as an installed binary is: the start-up
# trim (internal/exepages) drops only clean pages from the page cache.
sync "$tmp/mcpgate"

"$tmp/echo" -listen 127.0.0.1:0 2>"$tmp/echo.log" &
echo_pid=$!
wait_log "$tmp/echo.log" 'listening on http://'
ECHO_ADDR=$(grep -oE '127\.0\.0\.1:[0-9]+' "$tmp/echo.log" | head -1)

hdr=()
{
  echo "data_dir: $tmp/data"
  echo "sessions: {max_per_owner: $((N * 2)), idle_timeout: 1h}"
  echo "limits: {max_streams: $((N * 2))}"
  if [[ $AUTH == 1 ]]; then
    key=mcpg_sessionsbench$RANDOM$RANDOM$RANDOM
    echo "auth:"
    echo "  master_key: master-$RANDOM$RANDOM$RANDOM$RANDOM"
    echo "  keys:"
    echo "    - alias: sessions-bench"
    echo "      key: $key"
    hdr=(-H "X-Mcpgate-Api-Key: $key")
  fi
  echo "servers:"
  echo "  echo:"
  echo "    transport: http"
  echo "    url: http://$ECHO_ADDR/mcp"
} >"$tmp/mcpgate.yaml"

env ${GOGC_SET:+GOGC=$GOGC_SET} GODEBUG=gctrace=1 \
  "$tmp/mcpgate" serve --config "$tmp/mcpgate.yaml" --listen 127.0.0.1:0 2>"$tmp/mcpgate.log" &
gw_pid=$!
wait_log "$tmp/mcpgate.log" 'mcpgate serving'
GW_ADDR=$(grep 'mcpgate serving' "$tmp/mcpgate.log" | grep -oE '127\.0\.0\.1:[0-9]+' | head -1)
log "mcpgate http://$GW_ADDR/mcp/echo (pid $gw_pid) GOGC=${GOGC_SET:-binary default} auth=$AUTH"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
streams=true
[[ $STREAMS == 0 ]] && streams=false
"$tmp/sessions" -url "http://$GW_ADDR/mcp/echo" -pid "$gw_pid" -n "$N" -streams="$streams" \
  -gclog "$tmp/mcpgate.log" "${hdr[@]}"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs; load average before / after: $LOAD_BEFORE / $LOAD_AFTER"
echo "- gateway: ${SESSIONS_GATEWAY:-this checkout}; GOGC=${GOGC_SET:-binary default}; auth=$AUTH; $(go version | sed 's/^go version //')"
