#!/usr/bin/env bash
# The chaos case of the failover suite (issue 12, item 2) at any length, for one sink:
# crates/sluice/tests/chaos.rs (the test suite runs the MySQL sink for 120 s). Usage:
#   scripts/chaos.sh [SECONDS] [mysql|storage]      (default 1800 mysql)
# SLUICE_CHAOS_SEED=N replays a seed's choices. The report (every nemesis action as it happens,
# then the summary: actions by kind, failover times, rows verified) is written as it goes to
# docs/figures/chaos-<commit>-<sink>-<SECONDS>s.txt, followed by the test's result and, on a
# failure, what failed. Exits non-zero if the run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-1800}
sink=${2:-mysql}
case $sink in
  mysql | storage) ;;
  *) echo "usage: scripts/chaos.sh [SECONDS] [mysql|storage]" >&2; exit 2 ;;
esac
[[ $secs =~ ^[0-9]+$ ]] || { echo "SECONDS must be a number, got $secs" >&2; exit 2; }
scripts/install-deps.sh test
commit=$(git rev-parse --short HEAD)
out="docs/figures/chaos-$commit-$sink-${secs}s.txt"
log=$(mktemp)
echo "# scripts/chaos.sh $secs $sink at $commit, $(date -u +%FT%TZ), $(nproc) cores" | tee "$out"
status=0
SLUICE_CHAOS_SECS=$secs SLUICE_CHAOS_SINKS=$sink SLUICE_CHAOS_REPORT="$PWD/$out" \
  cargo nextest run -p sluice --test chaos "chaos_${sink}_sink" --no-capture >"$log" 2>&1 || status=$?
{
  grep -E "^ +(PASS|FAIL) \[|Summary" "$log" || true
  if [ $status -ne 0 ]; then
    echo "# failed (log: $log):"
    sed -n '/chaos run failed\|panicked at/,/^$/p' "$log" | head -60
  fi
} | tee -a "$out"
[ $status -ne 0 ] || rm -f "$log"
exit $status
