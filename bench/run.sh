#!/usr/bin/env bash
# Direct-vs-gateway benchmark: echo server alone, then echo behind mcpgate.
#
#   bash bench/run.sh
#
# Builds examples/echo, cmd/mcpgate and cmd/mcpgate-bench into a temp dir,
# starts echo and the gateway on free loopback ports (port 0, address read
# back from their logs), and for each concurrency runs the load generator
# first DIRECTLY against echo (/mcp, tool echo), then THROUGH mcpgate
# (/mcp/echo, tool echo: the single-server route, like for like). While a run
# is going it samples, from /proc, the CPU time (utime+stime) of the gateway,
# echo and the load generator over the measured window, the gateway's VmRSS
# every 200ms (max reported) and its VmHWM, and the machine's total busy CPU
# (to show interference from other processes). Finally one run through the
# merged endpoint (/mcp, tool echo__echo) at the highest concurrency.
#
# Results go to stdout and to docs/benchmarks.md (between the RESULTS
# markers, so the hand-written parts of that file survive).
#
# Environment:
#   BENCH_DURATION     measured seconds per run (default 10)
#   BENCH_WARMUP       warmup seconds per run (default 2)
#   BENCH_CONCURRENCY  concurrencies (default "1 8 64")
#   BENCH_REPEATS      direct+gateway pairs per concurrency (default 3);
#                      the main table shows medians, the raw table every run
#   BENCH_PIN          1: pin the load generator to CPU 0 and echo + gateway
#                      to CPU 1 with taskset (default: no pinning)
#   BENCH_REFPROXY     1: also run through net/http/httputil.ReverseProxy
#                      (bench/revproxy) after each gateway run, as a
#                      reference for the cost of any net/http proxy hop
#   BENCH_PEERS        side-by-side mode: also runs the reference proxy
#                      (as BENCH_REFPROXY=1) and every peer gateway listed,
#                      each in the same interleaved rounds as direct and
#                      mcpgate, and prints one table per concurrency with
#                      throughput, latency, CPU per call and peak RSS of
#                      each, and their ratios to the reverse proxy and to
#                      mcpgate. A list of peers separated by ";":
#                        NAME[/PATH][#TOOL]=BINARY:ARGS
#                      NAME labels the rows; PATH is the peer's MCP
#                      endpoint (default /mcp); TOOL the tool name it
#                      exposes echo's tool under (default echo); BINARY a
#                      path to the peer's executable; ARGS its arguments,
#                      split on spaces after these placeholders are filled:
#                        {port}          a free loopback port it must listen on
#                        {upstream}      echo's MCP URL (http://127.0.0.1:P/mcp)
#                        {upstream_base} echo's base URL (http://127.0.0.1:P)
#                        {tmp}           the run's temp dir
#                        {otlp}          an OTLP/HTTP trace receiver's URL
#                                        (bench/otlpsink: answers, discards)
#                        {config:FILE}   FILE (a template with the same
#                                        placeholders) filled in and written
#                                        to {tmp}; replaced by its path
#                      "none": only mcpgate and the reverse proxy.
#   BENCH_PEER_HEADERS request headers the load generator sends to a peer:
#                      "NAME=Header: value;NAME=Header: value" (repeat a
#                      NAME for more headers). bench/features.sh uses it
#                      for the key of mcpgate variants that require one.
#   BENCH_PEER_SETUP   a command run once a peer listens, before its smoke
#                      test: "NAME=BINARY ARGS;NAME=..." (ARGS split on
#                      spaces, the peer placeholders filled in; {port} is
#                      that peer's). bench/features.sh stores a person's
#                      credential with it for the percred variant.
#   BENCH_OUT          markdown file to update (default docs/benchmarks.md;
#                      "-" to only print)
#
# Linux only (/proc). Needs go, awk, sed.
set -euo pipefail
CALLER_DIR=$PWD # peers' binaries and config templates may be relative to it
cd "$(dirname "$0")/.."
ROOT=$PWD

D=${BENCH_DURATION:-10}
D=${D%s}
WARMUP=${BENCH_WARMUP:-2}
WARMUP=${WARMUP%s}
CS=${BENCH_CONCURRENCY:-"1 8 64"}
REPEATS=${BENCH_REPEATS:-3}
PIN=${BENCH_PIN:-0}
REFPROXY=${BENCH_REFPROXY:-0}
PEERS=${BENCH_PEERS:-}
[[ -n $PEERS ]] && REFPROXY=1
OUT=${BENCH_OUT:-docs/benchmarks.md}
CMDLINE="bash bench/run.sh"
for v in BENCH_DURATION BENCH_WARMUP BENCH_CONCURRENCY BENCH_REPEATS BENCH_PIN BENCH_REFPROXY BENCH_PEERS; do
  [[ -n ${!v:-} ]] && CMDLINE="$v=\"${!v}\" $CMDLINE"
done

TICK=$(getconf CLK_TCK)
NPROC=$(nproc)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

tmp=$(mktemp -d)
echo_pid= gw_pid= proxy_pid= bench_pid= sampler_pid= sink_pid=
peer_pids=()
cleanup() {
  for p in $sampler_pid $bench_pid "${peer_pids[@]}" $proxy_pid $gw_pid $echo_pid $sink_pid; do
    kill "$p" 2>/dev/null || true
  done
  for p in $sampler_pid $bench_pid "${peer_pids[@]}" $proxy_pid $gw_pid $echo_pid $sink_pid; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

source bench/lib.sh # log, wait_log

log "building into $tmp ..."
go build -o "$tmp/echo" ./examples/echo
go build -o "$tmp/mcpgate" ./cmd/mcpgate
go build -o "$tmp/mcpgate-bench" ./cmd/mcpgate-bench
[[ $REFPROXY == 1 ]] && go build -o "$tmp/revproxy" ./bench/revproxy
[[ -n $PEERS && $PEERS != none ]] && go build -o "$tmp/otlpsink" ./bench/otlpsink
# A binary just written is dirty in the page cache until written back, and
# the kernel drops only clean pages: write them now, so that mcpgate's
# start-up trim (internal/exepages) behaves as it does on an installed
# binary.
sync "$tmp/mcpgate"

PIN_LOADGEN=() PIN_SERVER=()
if [[ $PIN == 1 ]]; then
  PIN_LOADGEN=(taskset -c 0)
  PIN_SERVER=(taskset -c 1)
fi


"${PIN_SERVER[@]}" "$tmp/echo" -listen 127.0.0.1:0 2>"$tmp/echo.log" &
echo_pid=$!
wait_log "$tmp/echo.log" 'listening on http://'
ECHO_ADDR=$(grep -oE '127\.0\.0\.1:[0-9]+' "$tmp/echo.log" | head -1)
cat >"$tmp/mcpgate.yaml" <<EOF
servers:
  echo:
    transport: http
    url: http://$ECHO_ADDR/mcp
EOF
"${PIN_SERVER[@]}" "$tmp/mcpgate" serve --config "$tmp/mcpgate.yaml" --listen 127.0.0.1:0 2>"$tmp/mcpgate.log" &
gw_pid=$!
wait_log "$tmp/mcpgate.log" 'mcpgate serving'
GW_ADDR=$(grep 'mcpgate serving' "$tmp/mcpgate.log" | grep -oE '127\.0\.0\.1:[0-9]+' | head -1)
DIRECT_URL=http://$ECHO_ADDR/mcp
GW_URL=http://$GW_ADDR/mcp/echo
GW_MERGED_URL=http://$GW_ADDR/mcp
log "echo    $DIRECT_URL (pid $echo_pid)"
log "mcpgate $GW_URL (pid $gw_pid)"
if [[ $REFPROXY == 1 ]]; then
  "${PIN_SERVER[@]}" "$tmp/revproxy" -listen 127.0.0.1:0 -target "http://$ECHO_ADDR" 2>"$tmp/revproxy.log" &
  proxy_pid=$!
  wait_log "$tmp/revproxy.log" 'listening on http://'
  PROXY_URL=http://$(grep -oE '127\.0\.0\.1:[0-9]+' "$tmp/revproxy.log" | head -1)/mcp
  log "revproxy $PROXY_URL (pid $proxy_pid)"
fi
# The trace receiver a peer's config may name ({otlp}); idle unless one does.
OTLP_URL= # templates are filled only in peer mode
if [[ -n $PEERS && $PEERS != none ]]; then
  "$tmp/otlpsink" -listen 127.0.0.1:0 2>"$tmp/otlpsink.log" &
  sink_pid=$!
  wait_log "$tmp/otlpsink.log" 'listening on http://'
  OTLP_URL=http://$(grep -oE '127\.0\.0\.1:[0-9]+' "$tmp/otlpsink.log" | head -1)
  log "otlpsink $OTLP_URL (pid $sink_pid)"
fi
# free_port: a loopback port nothing listens on now (a peer must bind it
# itself: most gateways cannot be told to use port 0 and report it).
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  log "no free port found"; return 1
}
# fill TEXT PORT: TEXT with the peer placeholders filled in.
fill() {
  local t=$1
  t=${t//\{port\}/$2}
  t=${t//\{upstream_base\}/http://$ECHO_ADDR}
  t=${t//\{upstream\}/http://$ECHO_ADDR/mcp}
  t=${t//\{tmp\}/$tmp}
  t=${t//\{otlp\}/$OTLP_URL}
  printf '%s' "$t"
}
# Peers: PEER_NAMES[i] is started as PEER_PIDS, reached at PEER_URLS[i]
# with tool PEER_TOOLS[i].
PEER_NAMES=() PEER_URLS=() PEER_TOOLS=() PEER_DESCS=()
# PEER_HDRS[NAME]: "-H\tHeader: value\t-H\t..." for the load generator.
declare -A PEER_HDRS=()
if [[ -n ${BENCH_PEER_HEADERS:-} ]]; then
  IFS=';' read -ra hspecs <<<"$BENCH_PEER_HEADERS"
  for hs in "${hspecs[@]}"; do
    [[ $hs == *=*:* ]] || { log "BENCH_PEER_HEADERS: bad entry '$hs' (want NAME=Header: value)"; exit 2; }
    hn=${hs%%=*} hv=${hs#*=}
    PEER_HDRS[$hn]+="-H"$'\t'"$hv"$'\t'
  done
fi
# peer_hdr_args NAME: sets HDR_ARGS to the -H arguments for peer NAME.
peer_hdr_args() {
  HDR_ARGS=()
  [[ -n ${PEER_HDRS[$1]:-} ]] && IFS=$'\t' read -ra HDR_ARGS <<<"${PEER_HDRS[$1]%$'\t'}"
  return 0
}
# PEER_SETUP[NAME]: the command BENCH_PEER_SETUP gives for peer NAME.
declare -A PEER_SETUP=()
if [[ -n ${BENCH_PEER_SETUP:-} ]]; then
  IFS=';' read -ra sspecs <<<"$BENCH_PEER_SETUP"
  for ss in "${sspecs[@]}"; do
    [[ $ss == *=* ]] || { log "BENCH_PEER_SETUP: bad entry '$ss' (want NAME=BINARY ARGS)"; exit 2; }
    PEER_SETUP[${ss%%=*}]=${ss#*=}
  done
fi
if [[ -n $PEERS && $PEERS != none ]]; then
  IFS=';' read -ra specs <<<"$PEERS"
  for spec in "${specs[@]}"; do
    spec=${spec#"${spec%%[![:space:]]*}"}
    [[ -z $spec ]] && continue
    if [[ $spec != *=*:* ]]; then
      log "BENCH_PEERS: bad peer spec '$spec' (want NAME[/PATH][#TOOL]=BINARY:ARGS)"; exit 2
    fi
    head=${spec%%=*} rest=${spec#*=}
    bin=${rest%%:*} pargs=${rest#*:}
    [[ $bin == /* ]] || bin=$CALLER_DIR/$bin
    ptool=echo
    if [[ $head == *'#'* ]]; then ptool=${head#*#}; head=${head%%#*}; fi
    ppath=/mcp
    if [[ $head == */* ]]; then ppath=/${head#*/}; head=${head%%/*}; fi
    pname=$head
    if [[ ! $pname =~ ^[A-Za-z0-9._-]+$ ]]; then
      log "BENCH_PEERS: peer name '$pname' must be letters, digits, . _ -"; exit 2
    fi
    [[ -x $bin ]] || { log "BENCH_PEERS: $pname: $bin is not an executable"; exit 2; }
    port=$(free_port)
    PEER_DESCS+=("$(basename "$bin") $pargs, endpoint $ppath, tool $ptool")
    pargs=$(fill "$pargs" "$port")
    # {config:FILE}: the filled-in copy of FILE, in $tmp.
    while [[ $pargs =~ \{config:([^}]+)\} ]]; do
      src=${BASH_REMATCH[1]}
      srcpath=$src
      [[ $srcpath == /* ]] || srcpath=$CALLER_DIR/$src
      [[ -f $srcpath ]] || { log "BENCH_PEERS: $pname: no config template $src"; exit 2; }
      dst=$tmp/peer-$pname-$(basename "$src")
      fill "$(cat "$srcpath")" "$port" >"$dst"
      pargs=${pargs//"{config:$src}"/$dst}
    done
    read -ra argv <<<"$pargs"
    "${PIN_SERVER[@]}" "$bin" "${argv[@]}" >"$tmp/peer-$pname.log" 2>&1 &
    peer_pids+=($!)
    up=0
    for _ in $(seq 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
      kill -0 "${peer_pids[-1]}" 2>/dev/null || break
      sleep 0.1
    done
    if ((!up)); then log "peer $pname did not listen on $port:"; cat "$tmp/peer-$pname.log" >&2; exit 1; fi
    PEER_NAMES+=("$pname") PEER_URLS+=("http://127.0.0.1:$port$ppath") PEER_TOOLS+=("$ptool")
    if [[ -n ${PEER_SETUP[$pname]:-} ]]; then
      read -ra sargv <<<"$(fill "${PEER_SETUP[$pname]}" "$port")"
      [[ ${sargv[0]} == /* ]] || sargv[0]=$CALLER_DIR/${sargv[0]}
      if ! "${sargv[@]}" >"$tmp/peer-$pname-setup.log" 2>&1; then
        log "peer $pname: setup failed:"; cat "$tmp/peer-$pname-setup.log" >&2; exit 1
      fi
    fi
    log "peer $pname http://127.0.0.1:$port$ppath tool $ptool (pid ${peer_pids[-1]})"
  done
fi
for i in "${!PEER_NAMES[@]}"; do
  targs=()
  [[ ${PEER_TOOLS[i]} != echo ]] && targs=(-args '{"text":"hello"}')
  peer_hdr_args "${PEER_NAMES[i]}"
  if ! "$tmp/mcpgate-bench" -url "${PEER_URLS[i]}" -tool "${PEER_TOOLS[i]}" "${targs[@]}" "${HDR_ARGS[@]}" -n 20 -warmup 0 -json >"$tmp/peer-smoke.json"; then
    log "peer ${PEER_NAMES[i]}: smoke test failed:"; cat "$tmp/peer-smoke.json" "$tmp/peer-${PEER_NAMES[i]}.log" >&2; exit 1
  fi
done
# Smoke test (also opens the upstream session and fills the catalog).
"$tmp/mcpgate-bench" -url "$GW_URL" -n 20 -warmup 0 -json >/dev/null
"$tmp/mcpgate-bench" -url "$GW_MERGED_URL" -tool echo__echo -args '{"text":"hello"}' -n 20 -warmup 0 -json >/dev/null

# cpu_ticks PID: utime+stime of PID in clock ticks (fields after the comm).
cpu_ticks() {
  local s
  read -r s <"/proc/$1/stat" || { echo 0; return; }
  s=${s##*) }
  local a=($s)
  echo $((a[11] + a[12]))
}
# sys_busy: busy ticks of all CPUs (user nice system irq softirq steal).
sys_busy() {
  local cpu u n s i w q sq st rest
  read -r cpu u n s i w q sq st rest </proc/stat
  echo $((u + n + s + q + sq + st))
}
status_kb() { # status_kb PID FIELD
  local k v rest
  while read -r k v rest; do
    [[ $k == "$2:" ]] && { echo "$v"; return; }
  done <"/proc/$1/status"
  echo 0
}
json_val() { # json_val FILE KEY
  sed -n "s/^ *\"$2\": *\([^,]*\),\{0,1\}$/\1/p" "$1" | head -1
}

# measure NAME URL TOOL C [PID]: one run; PID is the process in the middle
# (default the gateway) whose CPU and RSS are sampled. Prints a result line
#   name c calls_per_sec p50_ms p99_ms errors calls gw_cpu_us echo_cpu_us
#   lg_cpu_us other_cpu_pct gw_rss_max_kb gw_hwm_kb
measure() {
  local name=$1 url=$2 tool=$3 c=$4 mid=${5:-$gw_pid}
  local out="$tmp/$name-c$c-$RANDOM.json"
  local args=()
  [[ $tool != echo ]] && args=(-args '{"text":"hello"}')
  peer_hdr_args "${name#peer:}"
  args+=("${HDR_ARGS[@]}")
  local rssf="$tmp/rss.max"
  echo 0 >"$rssf"
  (
    max=0
    while :; do
      v=$(status_kb "$mid" VmRSS)
      if ((v > max)); then max=$v; echo "$max" >"$rssf"; fi
      sleep 0.2
    done
  ) &
  sampler_pid=$!
  "${PIN_LOADGEN[@]}" "$tmp/mcpgate-bench" -url "$url" -tool "$tool" "${args[@]}" -c "$c" \
    -d "${D}s" -warmup "${WARMUP}s" -json >"$out" &
  bench_pid=$!
  sleep "$WARMUP"
  local t0=$EPOCHREALTIME g0 e0 l0 s0
  g0=$(cpu_ticks $mid) e0=$(cpu_ticks $echo_pid) l0=$(cpu_ticks $bench_pid) s0=$(sys_busy)
  # End the CPU window a little before the load generator's, so it lies
  # within the loaded period even if sleep overshoots.
  sleep "$(awk -v d="$D" 'BEGIN{printf "%.3f", (d > 1 ? d - 0.3 : d * 0.7)}')"
  local t1=$EPOCHREALTIME g1 e1 l1 s1
  g1=$(cpu_ticks $mid) e1=$(cpu_ticks $echo_pid) l1=$(cpu_ticks $bench_pid) s1=$(sys_busy)
  local rc=0
  wait "$bench_pid" || rc=$?
  bench_pid=
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=
  # One more sample now: on a short run the sampler may not have taken one.
  local rssmax now
  rssmax=$(cat "$rssf") now=$(status_kb "$mid" VmRSS)
  ((now > rssmax)) && rssmax=$now
  if ! grep -q calls_per_sec "$out"; then
    log "load generator failed (exit $rc):"; cat "$out" >&2; exit 1
  fi
  local cps p50 p99 errs calls
  cps=$(json_val "$out" calls_per_sec) p50=$(json_val "$out" p50_ms) p99=$(json_val "$out" p99_ms)
  errs=$(json_val "$out" errors) calls=$(json_val "$out" calls)
  awk -v name="$name" -v c="$c" -v cps="$cps" -v p50="$p50" -v p99="$p99" -v errs="$errs" -v calls="$calls" \
    -v t0="$t0" -v t1="$t1" -v tick="$TICK" -v ncpu="$NPROC" \
    -v g="$((g1 - g0))" -v e="$((e1 - e0))" -v l="$((l1 - l0))" -v s="$((s1 - s0))" \
    -v rss="$rssmax" -v hwm="$(status_kb "$mid" VmHWM)" 'BEGIN {
      wall = t1 - t0; n = cps * wall             # calls in the CPU window
      us = 1e6 / tick / (n > 0 ? n : 1)           # µs per tick per call
      other = (s - g - e - l) / tick / wall / ncpu * 100
      if (other < 0) other = 0                    # tick rounding
      if (name == "direct") { g = -1; rss = -1; hwm = -1 }
      printf "%s %d %.1f %.3f %.3f %d %d %.1f %.1f %.1f %.1f %d %d\n",
        name, c, cps, p50, p99, errs, calls, g * us, e * us, l * us, other, rss, hwm
    }'
}

RES=$tmp/results.txt
: >"$RES"
log "D=${D}s warmup=${WARMUP}s c=($CS) repeats=$REPEATS pin=$PIN load before: $LOAD_BEFORE"
for c in $CS; do
  for r in $(seq "$REPEATS"); do
    log "c=$c repeat $r/$REPEATS: direct ..."
    measure direct "$DIRECT_URL" echo "$c" | tee -a "$RES" >&2
    log "c=$c repeat $r/$REPEATS: gateway ..."
    measure gateway "$GW_URL" echo "$c" | tee -a "$RES" >&2
    if [[ $REFPROXY == 1 ]]; then
      log "c=$c repeat $r/$REPEATS: revproxy ..."
      measure proxy "$PROXY_URL" echo "$c" "$proxy_pid" | tee -a "$RES" >&2
    fi
    for i in "${!PEER_NAMES[@]}"; do
      log "c=$c repeat $r/$REPEATS: peer ${PEER_NAMES[i]} ..."
      measure "peer:${PEER_NAMES[i]}" "${PEER_URLS[i]}" "${PEER_TOOLS[i]}" "$c" "${peer_pids[i]}" | tee -a "$RES" >&2
    done
  done
done
CMAX=$(tr ' ' '\n' <<<"$CS" | grep . | sort -n | tail -1)
log "c=$CMAX: gateway, merged endpoint /mcp, tool echo__echo ..."
measure merged "$GW_MERGED_URL" echo__echo "$CMAX" | tee -a "$RES" >&2
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ -n $sink_pid ]]; then
  # What the trace receiver got: a traced peer that exported nothing
  # would have measured tracing without its exports.
  hp=${OTLP_URL#http://}
  got=$( (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}" && printf 'GET /stats HTTP/1.0\r\nHost: sink\r\n\r\n' >&3 && tail -n 1 <&3) 2>/dev/null || true)
  log "otlpsink received: ${got:-nothing (its /stats did not answer)}"
fi

# ---- report ----
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
GO_VERSION=$(go version | sed 's/^go version //')
KERNEL=$(uname -sr)
report=$tmp/report.md
{
  echo "Generated by \`$CMDLINE\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "- Machine: $NPROC CPUs ($CPU_MODEL), $KERNEL, loopback only"
  echo "- Go: $GO_VERSION"
  echo "- Load average before / after: $LOAD_BEFORE / $LOAD_AFTER"
  echo "- Per run: ${WARMUP}s warmup + ${D}s measured; $REPEATS direct+gateway pair(s) per concurrency, interleaved"
  if [[ $PIN == 1 ]]; then
    echo "- Pinning: load generator on CPU 0, echo, mcpgate (and revproxy) on CPU 1 (taskset)"
  else
    echo "- Pinning: none (all processes share all CPUs); no nice"
  fi
  echo
  awk -v repeats="$REPEATS" '
    function median(arr, n,   i, j, t, tmp) {
      for (i = 1; i <= n; i++) tmp[i] = arr[i]
      for (i = 2; i <= n; i++) { t = tmp[i]; for (j = i - 1; j >= 1 && tmp[j] > t; j--) tmp[j+1] = tmp[j]; tmp[j+1] = t }
      return (n % 2) ? tmp[(n+1)/2] : (tmp[n/2] + tmp[n/2+1]) / 2
    }
    function mn(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] < m) m = arr[i]; return m }
    function mx(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] > m) m = arr[i]; return m }
    function put(key, c, v) { k = key SUBSEP c; cnt[k]++; val[k, cnt[k]] = v }
    function get(key, c, out,   i, k) { k = key SUBSEP c; for (i = 1; i <= cnt[k]; i++) out[i] = val[k, i]; return cnt[k] + 0 }
    function stat(key, c, fmt,   a, n) {   # "median (min–max)"
      n = get(key, c, a); if (n == 0) return "–"
      if (n == 1) return sprintf(fmt, a[1])
      return sprintf(fmt " (" fmt "–" fmt ")", median(a, n), mn(a, n), mx(a, n))
    }
    function med(key, c,   a, n) { n = get(key, c, a); return n ? median(a, n) : 0 }
    function sum(key, c,   a, n, i, s) { n = get(key, c, a); s = 0; for (i = 1; i <= n; i++) s += a[i]; return s }
    {
      name = $1; c = $2; runs[NR] = $0
      if ($11 > maxother) maxother = $11
      if (name == "merged") { merged = $0; next }
      if (name ~ /^peer:/) next          # side by side, below
      if (name == "proxy") {
        put("px_cps", c, $3); put("px_p50", c, $4); put("px_p99", c, $5); put("px_err", c, $6)
        put("px_cpu", c, $8); put("px_rss", c, $12 / 1024)
        put("px_ratio", c, $3 / lastd_cps * 100); put("px_added", c, $4 - lastd_p50)
        # The gateway run of the same round, just before: the speed of the host
        # drifts by 15% and more over tens of seconds, for every process
        # alike, so the ratio of the pair is steadier than a ratio of medians
        # taken from different rounds.
        if ($8 > 0) put("cpu_pair", c, lastg_cpu / $8)
        if ($12 > 0) put("rss_pair", c, lastg_rss / ($12 / 1024))
        haveproxy = 1
        next
      }
      if (!(c in seen)) { seen[c] = 1; order[++nc] = c }
      put(name "_cps", c, $3); put(name "_p50", c, $4); put(name "_p99", c, $5); put(name "_err", c, $6)
      if (name == "direct") { put("echo_cpu", c, $9) }
      else { put("gw_cpu", c, $8); put("gw_rss", c, $12 / 1024); put("gw_hwm", c, $13 / 1024); lastg_cpu = $8; lastg_rss = $12 / 1024 }
      # pair direct and gateway runs of the same repeat for ratio / added p50
      if (name == "direct") { lastd_cps = $3; lastd_p50 = $4 }
      else { put("ratio", c, $3 / lastd_cps * 100); put("added", c, $4 - lastd_p50) }
    }
    END {
      print "| c | direct calls/s | gateway calls/s | ratio % | direct p50 / p99 ms | gateway p50 / p99 ms | added p50 ms | gateway CPU µs/call | gateway max RSS MiB | errors (direct/gateway) | echo CPU µs/call (direct) |"
      print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 1; i <= nc; i++) {
        c = order[i]
        printf "| %d | %s | %s | %s | %.3f / %.3f | %.3f / %.3f | %s | %s | %s | %d / %d | %s |\n", c,
          stat("direct_cps", c, "%.0f"), stat("gateway_cps", c, "%.0f"), stat("ratio", c, "%.0f"),
          med("direct_p50", c), med("direct_p99", c), med("gateway_p50", c), med("gateway_p99", c),
          stat("added", c, "%.3f"), stat("gw_cpu", c, "%.0f"), stat("gw_rss", c, "%.1f"),
          sum("direct_err", c), sum("gateway_err", c), stat("echo_cpu", c, "%.0f")
      }
      print ""
      if (maxother > 10) printf "**Warning: other processes used up to %.0f%% of the machine during a run (see \"other CPU %%\" below); treat the numbers as noisy.**\n\n", maxother
      print "Cells are the median over the repeats, with (min–max) when there is more than one; p50/p99 are medians. Ratio and added p50 pair each gateway run with the direct run just before it. Max RSS is the largest VmRSS sampled every 200 ms during the run (warmup included)."
      if (haveproxy) {
        print ""
        print "Reference, not mcpgate: the same load through `net/http/httputil.ReverseProxy` (`bench/revproxy`, BENCH_REFPROXY=1), i.e. one net/http server hop plus one net/http client hop with no MCP logic."
        print ""
        print "| c | revproxy calls/s | ratio % of direct | p50 / p99 ms | added p50 ms | revproxy CPU µs/call | max RSS MiB | errors |"
        print "|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nc; i++) {
          c = order[i]
          printf "| %d | %s | %s | %.3f / %.3f | %s | %s | %s | %d |\n", c,
            stat("px_cps", c, "%.0f"), stat("px_ratio", c, "%.0f"), med("px_p50", c), med("px_p99", c),
            stat("px_added", c, "%.3f"), stat("px_cpu", c, "%.0f"), stat("px_rss", c, "%.1f"), sum("px_err", c)
        }
      }
      if (merged != "") {
        split(merged, m, " ")
        print ""
        printf "Merged endpoint (`/mcp`, tool `echo__echo`), c=%d, one run: %.0f calls/s, p50 %.3f / p99 %.3f ms, gateway CPU %.0f µs/call, max RSS %.1f MiB, %d errors.\n", m[2], m[3], m[4], m[5], m[8], m[12] / 1024, m[6]
      }
      # targets
      print ""
      print "### Targets"
      print ""
      print "| target | measured (median, spread) | result |"
      print "|---|---|---|"
      if ("64" in seen) {
        r = med("ratio", 64)
        printf "| through mcpgate >= 50%% of direct calls/s at c=64 | %s %% | %s |\n", stat("ratio", 64, "%.0f"), (r >= 50 ? "PASS" : "MISS")
      }
      worst = 0; cpus = ""
      for (i = 1; i <= nc; i++) {
        v = med("gw_cpu", order[i]); if (v > worst) worst = v
        cpus = cpus (i > 1 ? "; " : "") sprintf("c=%d: %s", order[i], stat("gw_cpu", order[i], "%.0f"))
      }
      printf "| gateway CPU <= 100 µs per call (every c) | %s µs | %s |\n", cpus, (worst <= 100 ? "PASS" : "MISS")
      if ("1" in seen) {
        a = med("added", 1)
        printf "| added p50 <= 0.3 ms at c=1 | %s ms | %s |\n", stat("added", 1, "%.3f"), (a <= 0.3 ? "PASS" : "MISS")
      }
      if ("64" in seen) {
        n = get("gw_rss", 64, arr); worstrss = mx(arr, n)
        printf "| RSS <= 40 MiB under c=64 | max %.1f MiB (VmHWM %.1f MiB at the end of the c=64 runs) | %s |\n", worstrss, med("gw_hwm", 64), (worstrss <= 40 ? "PASS" : "MISS")
      }
      # The goals of issue 25 are ratios to the reverse proxy, run in the
      # same rounds: judged on the median of the ratios of the rounds (each
      # gateway run and the reverse proxy run right after it); the ratio of
      # the medians is shown beside it.
      if (("64" in seen) && get("px_cpu", 64, arr) > 0) {
        r = med("cpu_pair", 64)
        printf "| gateway CPU per call at c=64 <= 0.6x the reverse proxy (issue 25) | round by round %s; medians %s vs %s µs: %.2fx | %s |\n", stat("cpu_pair", 64, "%.2fx"), stat("gw_cpu", 64, "%.0f"), stat("px_cpu", 64, "%.0f"), med("gw_cpu", 64) / med("px_cpu", 64), (r <= 0.6 ? "PASS" : "MISS")
        r = med("rss_pair", 64)
        printf "| max RSS under c=64 <= 2x the reverse proxy (issue 25) | round by round %s; medians %s vs %s MiB: %.2fx | %s |\n", stat("rss_pair", 64, "%.2fx"), stat("gw_rss", 64, "%.1f"), stat("px_rss", 64, "%.1f"), med("gw_rss", 64) / med("px_rss", 64), (r <= 2 ? "PASS" : "MISS")
      }
      if (("1" in seen) && get("px_added", 1, arr) > 0) {
        printf "| added p50 at c=1 <= the reverse proxy (issue 25) | %s vs %s ms | %s |\n", stat("added", 1, "%.3f"), stat("px_added", 1, "%.3f"), (med("added", 1) <= med("px_added", 1) ? "PASS" : "MISS")
      }
      print ""
      print "<details><summary>Every run</summary>"
      print ""
      print "| run | c | calls/s | p50 ms | p99 ms | errors | gateway (or revproxy) CPU µs/call | echo CPU µs/call | loadgen CPU µs/call | other CPU % | gateway (or revproxy) max RSS MiB | VmHWM MiB |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 1; i <= NR; i++) {
        split(runs[i], f, " ")
        gcpu = (f[8] < 0 ? "–" : sprintf("%.0f", f[8]))
        grss = (f[12] < 0 ? "–" : sprintf("%.1f", f[12] / 1024))
        ghwm = (f[13] < 0 ? "–" : sprintf("%.1f", f[13] / 1024))
        printf "| %s | %d | %.0f | %.3f | %.3f | %d | %s | %.0f | %.0f | %.0f | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], gcpu, f[9], f[10], f[11], grss, ghwm
      }
      print ""
      print "\"other CPU %\" is the machine busy time not used by the three benchmark processes, as % of all CPUs: interference from anything else running (other tests, builds)."
      print ""
      print "</details>"
    }' "$RES"
  if [[ -n $PEERS ]]; then
    echo
    echo "### Side by side (BENCH_PEERS)"
    echo
    for i in "${!PEER_NAMES[@]}"; do
      printf -- '- peer `%s`: `%s`\n' "${PEER_NAMES[i]}" "${PEER_DESCS[i]}"
    done
    echo
    awk '
      function median(arr, n,   i, j, t, tmp) {
        for (i = 1; i <= n; i++) tmp[i] = arr[i]
        for (i = 2; i <= n; i++) { t = tmp[i]; for (j = i - 1; j >= 1 && tmp[j] > t; j--) tmp[j+1] = tmp[j]; tmp[j+1] = t }
        return (n % 2) ? tmp[(n+1)/2] : (tmp[n/2] + tmp[n/2+1]) / 2
      }
      function put(key, v,   k) { cnt[key]++; val[key, cnt[key]] = v }
      function med(key,   a, n, i) { n = cnt[key] + 0; if (!n) return -1; for (i = 1; i <= n; i++) a[i] = val[key, i]; return median(a, n) }
      function spread(key, fmt,   n, i, lo, hi, v) {
        n = cnt[key] + 0; if (n < 2) return ""
        lo = hi = val[key, 1]
        for (i = 2; i <= n; i++) { v = val[key, i]; if (v < lo) lo = v; if (v > hi) hi = v }
        return sprintf(" (" fmt "–" fmt ")", lo, hi)
      }
      # pratio: the median over the rounds of f (cpu, rss) of contestant a
      # over that of b in the same round, as the Targets table judges it.
      function pratio(c, a, b, f,   r, n, x) {
        n = 0
        for (r = 1; r <= rounds[c]; r++)
          if (((c, a, r, f) in byround) && ((c, b, r, f) in byround) && byround[c, b, r, f] > 0)
            x[++n] = byround[c, a, r, f] / byround[c, b, r, f]
        return n ? sprintf("%.2fx", median(x, n)) : "–"
      }
      $1 == "merged" { next }
      {
        name = $1; c = $2
        if (name == "gateway") name = "mcpgate"
        else if (name == "proxy") name = "revproxy"
        else sub(/^peer:/, "", name)
        if (!((c, name) in seen)) { seen[c, name] = 1; names[c, ++nn[c]] = name }
        if (!(c in cseen)) { cseen[c] = 1; corder[++nc] = c }
        k = c SUBSEP name
        put(k SUBSEP "cps", $3); put(k SUBSEP "p50", $4); put(k SUBSEP "p99", $5)
        errs[k] += $6
        if (name == "direct") { lastd_cps = $3; lastd_p50 = $4; rounds[c]++ }
        else {
          put(k SUBSEP "ratio", $3 / lastd_cps * 100); put(k SUBSEP "added", $4 - lastd_p50)
          put(k SUBSEP "cpu", $8); put(k SUBSEP "rss", $12 / 1024)
          byround[c, name, rounds[c], "cpu"] = $8; byround[c, name, rounds[c], "rss"] = $12 / 1024
        }
      }
      END {
        for (ci = 1; ci <= nc; ci++) {
          c = corder[ci]
          printf "c=%d:\n\n", c
          print "| contestant | calls/s | % of direct | p50 / p99 ms | added p50 ms | CPU µs/call | CPU vs revproxy | CPU vs mcpgate | max RSS MiB | RSS vs revproxy | errors |"
          print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          for (i = 1; i <= nn[c]; i++) {
            name = names[c, i]; k = c SUBSEP name
            if (name == "direct") {
              printf "| direct (echo alone) | %.0f%s | 100 | %.3f / %.3f | – | – | – | – | – | – | %d |\n",
                med(k SUBSEP "cps"), spread(k SUBSEP "cps", "%.0f"), med(k SUBSEP "p50"), med(k SUBSEP "p99"), errs[k]
              continue
            }
            cpu = med(k SUBSEP "cpu"); rss = med(k SUBSEP "rss")
            printf "| %s | %.0f%s | %.0f%s | %.3f / %.3f | %.3f | %.0f%s | %s | %s | %.1f%s | %s | %d |\n", name,
              med(k SUBSEP "cps"), spread(k SUBSEP "cps", "%.0f"), med(k SUBSEP "ratio"), spread(k SUBSEP "ratio", "%.0f"),
              med(k SUBSEP "p50"), med(k SUBSEP "p99"), med(k SUBSEP "added"),
              cpu, spread(k SUBSEP "cpu", "%.0f"), pratio(c, name, "revproxy", "cpu"), pratio(c, name, "mcpgate", "cpu"),
              rss, spread(k SUBSEP "rss", "%.1f"), pratio(c, name, "revproxy", "rss"), errs[k]
          }
          print ""
        }
        print "Medians over the repeats, (min–max) when there is more than one. Every contestant ran in each round right after the direct run it is paired with (% of direct, added p50). CPU is the contestant process alone (utime+stime over the measured window, per call); max RSS is its largest VmRSS sampled every 200 ms. Ratios are round by round: the median of each round'"'"'s own ratio (a contestant over the reverse proxy, or mcpgate, of the same round)."
      }' "$RES"
  fi
} >"$report"

echo
cat "$report"

if [[ $OUT != - ]]; then
  begin='<!-- BEGIN RESULTS (bench/run.sh rewrites this section) -->'
  end='<!-- END RESULTS -->'
  if [[ -f $OUT ]] && grep -qF "$begin" "$OUT" && grep -qF "$end" "$OUT"; then
    awk -v begin="$begin" -v end="$end" -v report="$report" '
      $0 == begin { print; while ((getline line < report) > 0) print line; skip = 1; next }
      $0 == end { skip = 0 }
      !skip { print }' "$OUT" >"$tmp/out.md"
    cat "$tmp/out.md" >"$OUT"
  else
    mkdir -p "$(dirname "$OUT")"
    {
      echo "# Benchmarks"
      echo
      echo "## Latest results"
      echo
      echo "$begin"
      cat "$report"
      echo "$end"
    } >"$OUT"
  fi
  log "wrote $OUT"
fi
