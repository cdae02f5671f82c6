# Shared by the bench scripts (sourced from the repository root).

# log MESSAGE...: to stderr.
log() { printf '%s\n' "$*" >&2; }

# wait_log FILE REGEX: wait up to 10s for a line matching REGEX in FILE.
wait_log() {
  for _ in $(seq 100); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  log "timed out waiting for /$2/ in $1:"; cat "$1" >&2; return 1
}
