#!/usr/bin/env bash
# Where the gateway's peak RSS goes, beside net/http/httputil.ReverseProxy's
# (issue 25's memory goal: mcpgate's peak RSS under c=64 at most 2x the
# reverse proxy's).
#
#   bash bench/rss.sh
#
# Builds examples/echo, cmd/mcpgate, bench/revproxy and cmd/mcpgate-bench
# into a temp dir, starts echo, the gateway (one http server "echo", every
# other setting default: audit in SQLite, metrics) and the reverse proxy on
# free loopback ports, and for each round drives the gateway, then the
# proxy, with mcpgate-bench at RSS_CONCURRENCY for RSS_DURATION. It prints,
# from /proc, each process's VmHWM, RssAnon and RssFile idle and after each
# round, and the gateway's resident memory per mapping of its executable:
# text (r-xp), read-only data (r--p: rodata, pclntab) and data (rw-p), so
# the file-backed half of the RSS can be read apart from the heap, and
# each process's minor page faults so far (what faulting the executable's
# pages back in after the gateway's start-up trim costs shows there).
#
# Environment:
#   RSS_ROUNDS       gateway+proxy rounds (default 3)
#   RSS_DURATION     measured duration per run (default 5s)
#   RSS_CONCURRENCY  workers (default 64)
#   RSS_GOFLAGS      extra go build flags for mcpgate and revproxy (e.g.
#                    "-trimpath -ldflags=-s -w"; CGO_ENABLED is the
#                    caller's environment's)
#   RSS_GW_ENV       environment for the gateway (e.g. "GOGC=100", or
#                    "MCPGATE_EXE_PAGES=keep" to keep the executable's
#                    start-up pages mapped, as before issue 25's trim)
#   RSS_COLD         1: drop the page cache of the two executables before
#                    starting them (dd iflag=nocache, these files only), to
#                    measure a start from disk. The executable's RssFile is
#                    the part of it the load faults in after the start's
#                    trim (the start too with MCPGATE_EXE_PAGES=keep), in
#                    64 KiB fault-around windows of what is cached: one run of this
#                    script measured the gateway's RssFile at 35.5 MiB
#                    idle instead of the usual 26.6-28.6, not reproduced
#                    since (warm or cold alike), so watch the text and
#                    rodata+pclntab columns for such outliers.
#
# Linux only (/proc). RSS is far less noisy than CPU on a shared machine,
# but repeat rounds and quote the spread.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${RSS_ROUNDS:-3}
D=${RSS_DURATION:-5s}
C=${RSS_CONCURRENCY:-64}
read -r -a GOFLAGS_EXTRA <<<"${RSS_GOFLAGS:-}"
read -r -a GW_ENV <<<"${RSS_GW_ENV:-}"

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

source bench/lib.sh # log, wait_log
log "building into $tmp ..."
go build -o "$tmp/echo" ./examples/echo
go build "${GOFLAGS_EXTRA[@]}" -o "$tmp/mcpgate" ./cmd/mcpgate
go build "${GOFLAGS_EXTRA[@]}" -o "$tmp/revproxy" ./bench/revproxy
go build -o "$tmp/mcpgate-bench" ./cmd/mcpgate-bench
# A binary just written is dirty in the page cache until written back, and
# the kernel drops only clean pages: write them now, so that mcpgate's
# start-up trim (internal/exepages) behaves as it does on an installed
# binary.
sync "$tmp/mcpgate"
if [[ ${RSS_COLD:-0} == 1 ]]; then
  for f in "$tmp/mcpgate" "$tmp/revproxy"; do
    sync "$f"
    dd if="$f" iflag=nocache count=0 status=none # posix_fadvise DONTNEED: this file only
  done
fi

addr() { grep -E "$2" "$1" | grep -oE '127\.0\.0\.1:[0-9]+' | head -1; }

# status PID: VmHWM, RssAnon and RssFile in MiB, and the minor page faults
# so far (a page mapped from the page cache or a fresh anonymous page).
status() {
  awk '/^(VmHWM|RssAnon|RssFile):/ { printf "%s %.1f  ", $1, $2 / 1024 }' "/proc/$1/status"
  awk '{ sub(/^.*\) /, ""); printf "minflt %d  ", $8 }' "/proc/$1/stat"
}

# mappings PID EXE: resident MiB of EXE's text, read-only data and data.
mappings() {
  awk -v exe="$2" '
    /^[0-9a-f]+-[0-9a-f]+ / { cur = ($6 == exe) ? $2 : "" ; next }
    cur != "" && /^Rss:/ { r[cur] += $2 }
    END { printf "text %.1f  rodata+pclntab %.1f  data %.1f", r["r-xp"] / 1024, r["r--p"] / 1024, r["rw-p"] / 1024 }
  ' "/proc/$1/smaps"
}

cd "$tmp"
./echo -listen 127.0.0.1:0 2>echo.log &
pids+=($!)
wait_log echo.log 'listening on http://'
ECHO=$(addr echo.log 'listening on')
printf 'servers:\n  echo:\n    transport: http\n    url: http://%s/mcp\n' "$ECHO" >mcpgate.yaml
env "${GW_ENV[@]}" ./mcpgate serve --config mcpgate.yaml --listen 127.0.0.1:0 2>mcpgate.log &
gw=$!
pids+=("$gw")
wait_log mcpgate.log 'mcpgate serving'
GW=$(addr mcpgate.log 'mcpgate serving')
./revproxy -listen 127.0.0.1:0 -target "http://$ECHO" 2>revproxy.log &
rp=$!
pids+=("$rp")
wait_log revproxy.log 'listening on http://'
RP=$(addr revproxy.log 'listening on')
sleep 1

echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); c=$C, $D per run"
echo "idle     mcpgate   $(status "$gw") | $(mappings "$gw" "$tmp/mcpgate")"
echo "idle     revproxy  $(status "$rp")"
for i in $(seq "$ROUNDS"); do
  ./mcpgate-bench -url "http://$GW/mcp/echo" -c "$C" -d "$D" >/dev/null
  g=$(awk '/^VmHWM:/ { print $2 }' "/proc/$gw/status")
  echo "round $i  mcpgate   $(status "$gw") | $(mappings "$gw" "$tmp/mcpgate")"
  ./mcpgate-bench -url "http://$RP/mcp" -c "$C" -d "$D" >/dev/null
  r=$(awk '/^VmHWM:/ { print $2 }' "/proc/$rp/status")
  echo "round $i  revproxy  $(status "$rp")  peak ratio $(awk -v g="$g" -v r="$r" 'BEGIN { printf "%.2f", g / r }')"
done
