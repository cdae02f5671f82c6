#!/usr/bin/env bash
# Regenerates the console's screenshots in docs/console/: every page at
# 1280 and 390 px, taken by the console's Chromium tests (test/console)
# against the real binary with real calls recorded in SQLite. Needs
# Debian's chromium (scripts/install-test-deps.sh installs it).
#
# Usage: bash scripts/console-screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/docs/console"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# TestConsole takes the sign-in page, TestConsoleLogin a person's own
# connections, TestConsoleQuickstart (run last) every admin page.
MCPGATE_SCREENSHOTS="$tmp" go test -count=1 -run '^TestConsole(|Login|Quickstart)$' ./test/console/
mkdir -p "$out"
rm -f "$out"/console-*.png
cp "$tmp"/console-*.png "$out"/
ls -l "$out"
