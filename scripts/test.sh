#!/usr/bin/env bash
# Installs what the tests need and runs the whole suite: Go vet and unit,
# end-to-end and race tests, the chaos suite (test/chaos), short fuzz runs,
# the TypeScript-SDK and server-everything interop test, the test IdP
# (oidc-provider) and test browser, and the MCP conformance suite against
# the conformance fixture directly and through the gateway (also with a JWT
# caller; its tasks scenarios with the gateway running the tasks), and its
# client scenarios with mcpgate's egress as the client.
#
# Steps that time nothing run side by side, each into its own log, printed
# whole when it ends: installing the test dependencies beside gofmt and go
# vet; the interop tests beside the conformance server runs. The fuzz runs,
# niced, go on beside every step from the Go tests to the interop tests,
# on the CPU time the others leave. The Go tests, the chaos suite, the race
# tests and the conformance client scenarios, which time faults and
# reconnections, run without other tests beside them. The packages with
# concurrency run under the race detector only. A failure anywhere fails
# the script; once the fuzz runs have started, every later step still runs
# and every output is shown first. The time of each step is printed at the
# end.
#
# Usage: bash scripts/test.sh        (the README's test command; .ci/run)
# Env:   FUZZ_BUDGET   seconds of fuzzing for all targets together (default
#                      180), split evenly between them, at least 2s each.
#        FUZZTIME      fuzz time per target instead (e.g. 30s or 1000x).
#        FUZZ_JOBS     fuzz runs at a time (default: the number of CPUs),
#                      each with one worker.
#        SKIP_INTEROP=1  a Go-only run while developing (CI never sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
# Without cgo, as the Dockerfile builds: deploy's static-binary test then
# reuses this build cache instead of compiling every package a second time
# (the race step turns cgo back on: -race needs it).
export CGO_ENABLED=0
export PATH="$ROOT/bin:$PATH" # helm (install-test-deps.sh)
logs="$(mktemp -d)"

start=$(date +%s)
timings=()
step_name=""
step_start=0
step_cpu=0
# cpu sets cpu_s to the CPU seconds (user + system) of this shell's
# children that have ended, all their descendants included: unlike the wall
# time, it hardly depends on what else the machine runs. It must run in
# this shell, not in a pipe or $(…): a fresh process has no children yet.
cpu_s=0
cpu() {
  times >"$logs/times"
  cpu_s=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); n += a[1] * 60 + a[2] } printf "%d", n }' "$logs/times")
}
# timing WALL CPU NAME adds a line to the table printed at the end.
timing() {
  timings+=("$(printf '%5ss %6ss  %s' "$1" "$2" "$3")")
}
# step NAME starts a step and ends the one before it.
step() {
  step_end
  step_name="$*"
  step_start=$(date +%s)
  cpu
  step_cpu=$cpu_s
  printf '\n=== %s (%ss)\n' "$*" "$((step_start - start))"
}
step_end() {
  if [[ -n "$step_name" ]]; then
    cpu
    timing "$(($(date +%s) - step_start))" "$((cpu_s - step_cpu))" "$step_name"
  fi
  step_name=""
}
report_timings() {
  step_end
  printf '\n=== step times (whole run %ss; wall, CPU; steps side by side indented)\n' "$(($(date +%s) - start))"
  printf '%s\n' "${timings[@]}"
  rm -rf "$logs"
}
trap report_timings EXIT

# side NAME CMD... runs CMD in the background, its output into its own log;
# sides_wait waits for every one, prints each log whole as it ends, and
# fails when any failed.
declare -A side_name=() side_log=() side_start=()
sides=0
side() {
  local name="$1"
  shift
  local log="$logs/side-$sides.log"
  sides=$((sides + 1))
  "$@" >"$log" 2>&1 &
  side_name[$!]="$name"
  side_log[$!]="$log"
  side_start[$!]=$(date +%s)
}
# niced runs its arguments at niceness 5 (a side runs in its own
# subshell, so only that subshell and its children are reniced).
niced() {
  renice -n 5 -p "$BASHPID" >/dev/null 2>&1 || true
  "$@"
}
sides_wait() {
  local failed=() pid rc took used was
  cpu
  was=$cpu_s
  while [[ ${#side_name[@]} -gt 0 ]]; do
    rc=0
    wait -n -p pid "${!side_name[@]}" || rc=$?
    took=$(($(date +%s) - side_start[$pid]))
    cpu
    used=$((cpu_s - was))
    was=$cpu_s
    if [[ $rc -eq 0 ]]; then
      printf '\n--- %s: ok (%ss)\n' "${side_name[$pid]}" "$took"
    else
      printf '\n--- %s: FAILED (exit %s, %ss)\n' "${side_name[$pid]}" "$rc" "$took"
      failed+=("${side_name[$pid]}")
    fi
    cat "${side_log[$pid]}"
    timing "$took" "$used" "  ${side_name[$pid]}"
    unset "side_name[$pid]" "side_log[$pid]" "side_start[$pid]"
  done
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo
    printf 'failed: %s\n' "${failed[@]}"
    return 1
  fi
}

install_deps() {
  bash scripts/install-test-deps.sh >/dev/null
}

# The binaries the test suites and the interop and conformance scripts run,
# built once into $bins: each would otherwise link its own mcpgate (about
# 6 CPU-seconds each) into a directory of its own, some twenty-five times a
# run (a conformance.sh run links the fixture and mcpgate every time). The
# suites and the conformance scripts still go build, into $bins
# (MCPGATE_TEST_BIN_DIR, CONFORMANCE_BIN_DIR), with the same flags: go
# build finds the binaries up to date and links nothing, and rebuilds one
# older than its source. The interop tests run $bins/mcpgate
# (INTEROP_GATEWAY_BIN). Built beside the dependencies' install, which
# mostly waits on the network and the disk.
bins="$logs/bin"
build_shared() {
  go build -o "$bins/" ./cmd/mcpgate ./examples/notes ./examples/calc ./examples/echo \
    ./test/fixtures/conformance ./test/fixtures/bearerproxy ./test/fixtures/conformance-client ./test/chaos/internal/chaosup
  go build -o "$bins/conformance-fixture" ./test/fixtures/conformance # conformance.sh's name for it
}
export MCPGATE_TEST_BIN_DIR="$bins" CONFORMANCE_BIN_DIR="$bins" INTEROP_GATEWAY_BIN="$bins/mcpgate"

vet() {
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './test/interop/node_modules/*'))
  if [[ -n "$unformatted" ]]; then
    echo "gofmt would change: $unformatted"
    return 1
  fi
  go vet ./...
  go vet -tags interop ./test/interop/eras/ ./test/interop/idp/ ./test/interop/identity/
}

# Fuzz targets are found, not listed: every func Fuzz... in a _test.go file,
# so a new one is never left out. Each package's test binary is built once
# and runs its targets one after another in the package's directory, as go
# test would, with the fuzz cache go test uses; FUZZ_JOBS packages at a
# time, largest first, each run with one worker. Niced: the steps beside it
# wait for messages within a second or so (a subscriptions/listen stream is
# read for 1 s), so they come first when they need a CPU.
#
# The binaries carry coverage counters in mcpgate's own packages only
# (-gcflags=<module>/...=-d=libfuzzer, the flag go test -fuzz gives every
# package), so the engine is guided by the code under test. go test -fuzz
# would instrument the whole dependency graph (the AWS signer, gRPC, SQLite,
# the standard library): a second compile of about 650 packages, some 400
# CPU-seconds on a cold cache, most of this step's cost, to guide seconds of
# fuzzing through code that is not ours. A long session on one target is
# still `go test -fuzz=FuzzX ./pkg` (docs/testing.md).
#
# A fuzz run fails for real when it records a failing input (testdata/fuzz/…),
# which then also fails every later plain `go test`. The fuzzing engine can
# also give up on its own on a loaded machine ("fuzzing process hung or
# terminated unexpectedly", a deadline) without any input: that run is
# retried once, and its output shown; when it did record an input for a
# dead worker, the input is rerun first (unreproduced_crash). Minimising a new interesting input
# may take up to a minute by default, beyond a short -fuzztime: it is
# bounded to 2s.
fuzz_all() {
  local -A targets=()
  local dir name n=0
  while read -r dir name; do
    targets[$dir]+="$name "
    n=$((n + 1))
  done < <(grep -r --include='*_test.go' --exclude-dir=node_modules --exclude-dir=testdata -o '^func Fuzz[A-Za-z0-9_]*' . |
    sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz.*)$#\1/ \2#' | sort -u)
  [[ $n -gt 0 ]] || { echo "no fuzz targets found"; return 1; }
  local per
  if [[ -n "${FUZZTIME:-}" ]]; then
    per="$FUZZTIME"
  else
    local ms=$((${FUZZ_BUDGET:-180} * 1000 / n))
    if [[ $ms -lt 2000 ]]; then ms=2000; fi
    per="${ms}ms"
  fi
  local jobs="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  echo "fuzz: $n targets in ${#targets[@]} packages, $per each, $jobs at a time"
  local pkgs=() failed=0 i=0 pid
  local -A running=()
  mapfile -t pkgs < <(for dir in "${!targets[@]}"; do
    set -- ${targets[$dir]}
    echo "$# $dir"
  done | sort -k1,1nr -k2 | cut -d' ' -f2)
  for dir in "${pkgs[@]}"; do
    if [[ ${#running[@]} -ge $jobs ]]; then
      wait -n -p pid "${!running[@]}" || failed=1
      unset "running[$pid]"
    fi
    fuzz_package "$dir" "$per" ${targets[$dir]} >"$logs/fuzz-$i.log" 2>&1 &
    running[$!]=1
    i=$((i + 1))
  done
  while [[ ${#running[@]} -gt 0 ]]; do
    wait -n -p pid "${!running[@]}" || failed=1
    unset "running[$pid]"
  done
  for ((i = 0; i < ${#pkgs[@]}; i++)); do cat "$logs/fuzz-$i.log"; done
  return "$failed"
}

# fuzz_package DIR FUZZTIME TARGET... builds DIR's test binary and fuzzes
# each target; it runs them all, and fails if any failed.
fuzz_package() {
  local dir="$1" per="$2"
  shift 2
  local bin cache out
  bin="$logs/$(echo "$dir" | tr -c 'a-zA-Z0-9\n' _).test"
  if ! out=$(nice -n 10 go test -c -gcflags="$(go list -m)/...=-d=libfuzzer" -o "$bin" "$dir" 2>&1); then
    echo "$out"
    echo "fuzz $dir: building the test binary failed"
    return 1
  fi
  cache="$(go env GOCACHE)/fuzz/$(go list "$dir")"
  local target failed=0
  for target in "$@"; do
    fuzz_one "$dir" "$bin" "$cache" "$per" "$target" || failed=1
  done
  return "$failed"
}

fuzz_one() {
  local dir="$1" bin="$2" cache="$3" per="$4" target="$5" out attempt t0
  for attempt in 1 2; do
    t0=$(date +%s)
    if out=$(cd "$dir" && nice -n 10 "$bin" -test.paniconexit0 -test.timeout=10m -test.run='^$' -test.fuzz="^$target\$" \
      -test.fuzztime="$per" -test.fuzzminimizetime=2s -test.parallel=1 -test.fuzzcachedir="$cache" 2>&1); then
      echo "fuzz $target ($dir): ok ($(($(date +%s) - t0))s)"
      return 0
    fi
    tail -25 <<<"$out"
    if grep -q "testdata/fuzz/$target/" <<<"$out"; then
      if ! unreproduced_crash "$dir" "$bin" "$target" "$out"; then
        echo "fuzz $target ($dir): found a failing input (see above; it is in ${dir%/}/testdata/fuzz/$target/)"
        return 1
      fi
      echo "fuzz $target ($dir): the engine recorded an input when its worker died (\"hung or terminated unexpectedly\"), and that input passes three reruns: not a failure of the target; input removed (attempt $attempt)"
      continue
    fi
    if grep -q "context deadline exceeded" <<<"$out" && ! grep -q "panic:" <<<"$out" &&
      grep -q "fuzz: elapsed: [0-9]*s, execs: [1-9]" <<<"$out"; then
      # The engine ran its whole -fuzztime, executing inputs, and then
      # lost a race ending its workers ("context deadline exceeded" at the
      # deadline, no failing input written): the run found nothing. Seen
      # on a loaded 2-core machine for targets that pass on every rerun.
      echo "fuzz $target ($dir): ok (ran its time; the engine's shutdown reported a deadline; no failing input)"
      return 0
    fi
    echo "fuzz $target ($dir): engine failure without a failing input (attempt $attempt)"
  done
  return 1
}

# unreproduced_crash DIR BIN TARGET OUTPUT succeeds when OUTPUT is a fuzz
# run whose worker process died or stopped answering ("fuzzing process hung
# or terminated unexpectedly": no failure or panic of the target itself)
# and the input the engine recorded for it passes three plain reruns, each
# bounded to a minute: a worker starved or killed on a loaded machine, not
# an input the target fails or hangs on. The recorded input, new in this
# run, is then removed. Anything else (the target failed, panicked, or the
# input fails or hangs on rerun) is a real failing input.
unreproduced_crash() {
  local dir="$1" bin="$2" target="$3" out="$4" file i
  grep -q "fuzzing process hung or terminated unexpectedly" <<<"$out" || return 1
  grep -qE "^panic:|--- FAIL: $target/" <<<"$out" && return 1
  file=$(grep -oE "testdata/fuzz/$target/[0-9a-f]+" <<<"$out" | head -1)
  [[ -n $file && -f "$dir/$file" ]] || return 1
  for i in 1 2 3; do
    (cd "$dir" && "$bin" -test.run="^$target/${file##*/}\$" -test.timeout=60s >/dev/null 2>&1) || return 1
  done
  rm -f "$dir/$file"
}

# The conformance suite's server scenarios, against the fixture directly and
# through mcpgate; every run goes ahead even if one fails, and the list
# fails at the end.
conformance_runs() {
  local failed=()
  run() {
    local what="$1" t0
    shift
    printf '\n=== %s\n' "$what"
    t0=$(date +%s)
    if env "$@"; then
      printf -- '--- ok (%ss): %s\n' "$(($(date +%s) - t0))" "$what"
    else
      printf -- '--- FAILED (%ss): %s\n' "$(($(date +%s) - t0))" "$what"
      failed+=("$what")
    fi
  }
  run "conformance suite against the fixture directly" \
    bash scripts/conformance.sh --fixture
  run "conformance suite through mcpgate (/mcp/<fixture>, stdio upstream)" \
    CONFORMANCE_UPSTREAM=stdio bash scripts/conformance.sh --gateway
  run "conformance suite through mcpgate (/mcp/<fixture>, streamable-HTTP upstream)" \
    CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway
  # The same, the caller authenticated: mcpgate with the test IdP as its
  # auth.oidc issuer, every request of the suite carrying a client
  # credentials JWT for the route (test/fixtures/bearerproxy adds it). Same
  # results as the run above; then the gateway without a token must say 401.
  run "conformance suite through mcpgate with a JWT caller (oidc-provider token)" \
    CONFORMANCE_CALLER=jwt CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway

  # The 2026-07-28 (stateless) server scenarios of the next suite
  # (conformance-next, 0.2.0-alpha.12): --spec-version 2026-07-28 --suite all
  # selects all 40 of them and none of the extension scenarios (tasks-*,
  # run below, and the sep-2640 skills, which mcpgate does not implement).
  # A few seconds each.
  local next=(--spec-version 2026-07-28 --suite all)
  run "conformance 2026-07-28 against the fixture directly (-stateless)" \
    CONFORMANCE_SUITE=next CONFORMANCE_FIXTURE_STATELESS=1 bash scripts/conformance.sh --fixture "${next[@]}"
  run "conformance 2026-07-28 through mcpgate, handshake-era streamable-HTTP upstream (bridged)" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=http bash scripts/conformance.sh --gateway "${next[@]}" \
    --expected-failures test/fixtures/conformance/expected-failures-2026-07-28-legacy-upstream.yml
  run "conformance 2026-07-28 through mcpgate, 2026-07-28 streamable-HTTP upstream (-stateless)" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=http CONFORMANCE_FIXTURE_STATELESS=1 bash scripts/conformance.sh --gateway "${next[@]}"
  # stdio at 2026-07-28: an handshake-era stdio upstream cannot tie a
  # server->client request to one of several calls in flight, and the suite
  # leaves MRTR calls waiting for retries that never come (SCENARIOS.md).
  run "conformance 2026-07-28 through mcpgate, 2026-07-28 stdio upstream" \
    CONFORMANCE_SUITE=next CONFORMANCE_UPSTREAM=stdio CONFORMANCE_UPSTREAM_PROTOCOL=2026-07-28 bash scripts/conformance.sh --gateway "${next[@]}"
  # The tasks extension's scenarios (io.modelcontextprotocol/tasks,
  # SEP-2663: every tasks-* scenario the pinned CLI lists, side by side):
  # the fixture has no tasks (go-sdk v1.8.0), so mcpgate runs its calls as
  # tasks (mode gateway, answering plainly what ends within 500 ms). A JWT
  # caller: the gateway binds a 2026-07-28 task to an identified caller,
  # and gives an anonymous one none. Twice: the upstream asks its questions
  # with requests during the call (old era) or with input_required results
  # (2026-07-28), which the gateway turns into the task's inputRequests
  # either way. Known failures, each with whose limit it is, are in the
  # baseline; any other fails the run. About 15 s each.
  local tasks=(CONFORMANCE_SUITE=next CONFORMANCE_CALLER=jwt CONFORMANCE_UPSTREAM=http CONFORMANCE_SCENARIOS='tasks-*'
    CONFORMANCE_SERVER_TASKS='{mode: gateway, ttl: 1h, max_per_caller: 100, answer_within: 500ms}')
  local baseline=test/fixtures/conformance/expected-failures-tasks.yml
  run "conformance tasks-* (2026-07-28 extension) through mcpgate running the tasks, handshake-era upstream, JWT caller" \
    "${tasks[@]}" bash scripts/conformance.sh --gateway --expected-failures "$baseline"
  run "conformance tasks-* (2026-07-28 extension) through mcpgate running the tasks, 2026-07-28 upstream (-stateless), JWT caller" \
    "${tasks[@]}" CONFORMANCE_FIXTURE_STATELESS=1 bash scripts/conformance.sh --gateway --expected-failures "$baseline"
  # The questions asked only after answer_within (the fixture's -ask-after
  # 1s), when the call is already a task, by a 2026-07-28 upstream (an
  # input_required result, which the gateway answers from the task and
  # retries): tasks-mrtr-input alone. (To a handshake-era upstream the late
  # questions take the path of the runs above: not repeated.)
  run "conformance tasks-mrtr-input through mcpgate, questions after answer_within, 2026-07-28 upstream (-stateless), JWT caller" \
    "${tasks[@]}" CONFORMANCE_FIXTURE_FLAGS='-ask-after 1s' CONFORMANCE_SCENARIOS='tasks-mrtr-input' CONFORMANCE_FIXTURE_STATELESS=1 \
    bash scripts/conformance.sh --gateway
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo
    printf 'failed: %s\n' "${failed[@]}"
    return 1
  fi
}

step "install test dependencies; gofmt and go vet; build the shared binaries"
side "install test dependencies" install_deps
side "gofmt and go vet" vet
side "build the binaries the suites and scripts share" build_shared
sides_wait

# The packages with concurrency run under the race detector only (their
# own step below), not twice; the other packages run without it. A test
# that skips itself under the race detector (`if raceEnabled`, e.g. a
# memory bound the detector would multiply) is found, not listed, and runs
# without it here, so no test is left unrun.
race_pkgs=(./internal/upstream/ ./internal/gateway/ ./internal/catalog/
  ./internal/callers/ ./internal/audit/ ./internal/metrics/ ./internal/policy/ ./internal/admin/
  ./internal/oauth/ ./internal/oauth/authserver/ ./internal/oauth/client/ ./internal/store/...
  ./internal/state/... ./internal/session/ ./internal/connect/ ./internal/guard/ ./internal/toolsearch/
  ./internal/relay/ ./internal/h1server/)
plain_pkgs=$(go list ./... | grep -v '/test/chaos$' | grep -vxF -f <(go list "${race_pkgs[@]}"))

# race_skipped prints "DIR ^(TestA|TestB)$" for every package with tests
# that skip under the race detector.
race_skipped() {
  grep -rlE --include='*_test.go' --exclude-dir=node_modules '^\s*if .*raceEnabled' . |
    while read -r f; do
      awk -v dir="$(dirname "$f")" '/^func Test/ { split($2, a, "("); fn = a[1] } /^[ \t]*if .*raceEnabled/ && fn != "" { print dir, fn }' "$f"
    done | sort -u | awk '{ names[$1] = names[$1] (names[$1] ? "|" : "") $2 } END { for (d in names) print d, "^(" names[d] ")$" }'
}

# From here on the fuzz runs go on beside every step until the interop
# tests end: they are niced, so a step that times things gets a CPU first
# when it wakes (the chaos suite's tightest bound is 100 ms), and fuzzing
# soaks up the time the steps spend waiting on child processes and sockets.
# Each target fuzzes for a fixed wall time, whatever CPU it gets: the
# earlier they start, the less of them is left to run alone at the end
# (started after the plain Go tests, they were the last thing running, a
# minute or more after everything else). Their builds instrument only
# mcpgate's packages, so they share no compile work with the plain tests'
# builds beside them, but for the dependencies: from the build cache, or
# on a cold cache compiled a second time, niced, beside the plain step's.
failed_steps=()
side "fuzz" fuzz_all

step "go test (all packages but the chaos suite and the race-tested ones)"
go test -count=1 -timeout 10m $plain_pkgs || failed_steps+=("go test")
while read -r dir pattern; do
  go test -count=1 -timeout 5m -run "$pattern" "$dir" || failed_steps+=("go test -run '$pattern' $dir (skipped under -race)")
done < <(race_skipped)

# Its own step: it times faults (a refused call must fail in under 100 ms),
# so it must not share the machine with the other packages' tests, which
# `go test ./...` runs in parallel (only with the niced fuzzing). About a
# minute on 2 cores.
step "chaos suite (test/chaos: the real binary, upstreams killed, hostile, a full disk)"
go test -count=1 -timeout 5m ./test/chaos/ || failed_steps+=("chaos suite")

if [[ "${SKIP_INTEROP:-0}" != "1" ]]; then
  # The interop tests and the conformance server runs mostly wait on child
  # processes and sockets and time nothing (their timeouts are tens of
  # seconds), so they run beside the race step and the fuzzing, each in its
  # own order. They are niced (5, between the race step's 0 and the fuzz
  # runs' 10): the race tests that time things get a CPU first, and these
  # take the time the race step leaves, instead of a step of their own
  # after it (about two minutes of the suite's wall time).
  side "interop: TypeScript SDK client + server-everything through mcpgate; the test IdP" niced bash scripts/interop-ts.sh
  side "conformance suite (server scenarios, 0.1.16 and 2026-07-28)" niced conformance_runs
fi

# -race also turns on checkptr (-d=checkptr), which checks every
# unsafe.Pointer conversion at run time. modernc.org's SQLite is C
# translated to Go, all unsafe.Pointer arithmetic: under checkptr a SQLite
# statement costs several times what the race detector itself adds (half
# the CPU of the sqlite store's tests went to runtime.checkptr*, measured
# with pprof). checkptr is off for modernc.org's packages only: mcpgate's
# packages and every other dependency keep it, and all code, modernc.org's
# included, stays instrumented for races.
race_gcflags='modernc.org/...=-d=checkptr=0'

step "go test -race (packages with concurrency)"
CGO_ENABLED=1 go test -count=1 -race -gcflags="$race_gcflags" -timeout 10m "${race_pkgs[@]}" || failed_steps+=("go test -race")

if [[ "${SKIP_INTEROP:-0}" == "1" ]]; then
  step "fuzz (short runs), the rest"
  sides_wait || failed_steps+=("fuzz")
else
  step "fuzz (short runs), interop, conformance server scenarios, to their end"
  sides_wait || failed_steps+=("fuzz, interop or conformance server scenarios (see above)")

  # The other direction: mcpgate's egress is the client under test of the
  # suite's client scenarios (0.1.16: core, auth suite, extensions), driven
  # by test/fixtures/conformance-client. Scenarios that need egress features
  # mcpgate lacks are in the baseline. About 10 s. Alone: sse-retry times
  # the client's reconnection (500 ms, -50/+200 ms).
  step "conformance suite, client scenarios, mcpgate's egress as the client"
  bash scripts/conformance-client.sh || failed_steps+=("conformance client scenarios")
fi

step_end
if [[ ${#failed_steps[@]} -gt 0 ]]; then
  echo
  printf 'FAILED: %s\n' "${failed_steps[@]}"
  exit 1
fi
printf '\n=== all tests passed (%ss)\n' "$(($(date +%s) - start))"
