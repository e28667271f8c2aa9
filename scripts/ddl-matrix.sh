#!/usr/bin/env bash
# The whole DDL matrix (issue 12, item 2): all 12 cells of crates/sluice/tests/ddl_matrix.rs
# (the test suite runs three, chosen by the commit). Usage:
#   scripts/ddl-matrix.sh [CELLS]      (default all; or a list such as 1,5,9)
# Prints each cell's result and time; the figures go to docs/figures/ddl-matrix-<commit>.txt.
# Exits non-zero if a cell failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cells=${1:-all}
out="docs/figures/ddl-matrix-$(git rev-parse --short HEAD).txt"
log=$(mktemp)
status=0
SLUICE_DDL_MATRIX=$cells cargo nextest run -p sluice --test ddl_matrix --no-fail-fast \
  --success-output immediate >"$log" 2>&1 || status=$?
{
  echo "# scripts/ddl-matrix.sh $cells at $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores"
  grep -E "^ *ddl matrix cell [0-9]+ \(|^ +(PASS|FAIL) \[|panicked at|not reached within|Summary" "$log" || true
} | tee "$out"
rm -f "$log"
exit $status
