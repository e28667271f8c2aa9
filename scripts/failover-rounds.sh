#!/usr/bin/env bash
# Operators in flight across a kill -9 of the maintainer's node, N rounds in a row on one
# three-node cluster (issue 9's reproduction 3; the test suite runs one round). Usage:
#   scripts/failover-rounds.sh [ROUNDS]      (default 20)
# Prints each round's convergence time and "N passed, M failed, K not run" (a failed round ends
# the run); the figures go to docs/figures/failover-rounds-<commit>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
rounds=${1:-20}
out="docs/figures/failover-rounds-$(git rev-parse --short HEAD).txt"
{
  echo "# scripts/failover-rounds.sh $rounds at $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores"
  SLUICE_FAILOVER_ROUNDS=$rounds cargo nextest run -p sluice --test failover_operators --no-capture 2>&1 \
    | grep -E "^round|PASS|FAIL|panicked|not reached|Summary"
} | tee "$out" || true
# A failed round ends the run (the rounds share one cluster): the rest did not run.
passed=$(grep -c '^round .*converged' "$out" || true)
if grep -q "FAIL \[" "$out"; then failed=1; else failed=0; fi
echo "$passed passed, $failed failed, $((rounds - passed - failed)) not run" | tee -a "$out"
[ "$failed" -eq 0 ] && [ "$passed" -eq "$rounds" ]
