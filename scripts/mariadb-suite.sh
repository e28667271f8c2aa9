#!/usr/bin/env bash
# Replays MariaDB's whole regression suite (every main/*.test, suite/*/t/*.test, suite/*/*.test
# of Debian's mariadb-test-data) through capture and writes the counts and every failure to
# target/mariadb-suite-report.txt (or $1). About 30 minutes on 2 cores for the whole corpus; the
# test command replays a selection (crates/sluice-capture/tests/mariadb_suite.rs, SELECTION) in
# a few minutes. MINUTES=n stops after the file that passes n minutes (the report says how many
# files ran); FROM=i starts at file i. The corpus can also run in parts, e.g.
#   FROM=0 MINUTES=120 scripts/mariadb-suite.sh target/suite-1.txt   # first line: next part FROM=…
#   FROM=<that> MINUTES=120 scripts/mariadb-suite.sh target/suite-2.txt
#   scripts/mariadb-suite-sum.py target/suite-*.txt                  # the parts added up
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
report=$(realpath -m "${1:-target/mariadb-suite-report.txt}")
mkdir -p "$(dirname "$report")"
SLUICE_MARIADB_SUITE=full SLUICE_MARIADB_SUITE_REPORT="$report" SLUICE_MARIADB_SUITE_MINUTES="${MINUTES:-}" \
  SLUICE_MARIADB_SUITE_FROM="${FROM:-0}" \
  cargo nextest run -p sluice-capture --test mariadb_suite --no-capture \
  -E 'test(mariadb_regression_suite)'
echo "report: $report"
