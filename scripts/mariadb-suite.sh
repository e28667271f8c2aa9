#!/usr/bin/env bash
# Replays MariaDB's whole regression suite (every main/*.test, suite/*/t/*.test, suite/*/*.test
# of Debian's mariadb-test-data) and writes the counts and every failure to a report:
#   scripts/mariadb-suite.sh [report]        # through capture: the schema history after every
#                                            # DDL against information_schema (about 30 minutes)
#   scripts/mariadb-suite.sh sink [report]   # through a sluice server and the MySQL sink: every
#                                            # table's schema and rows downstream (hours: run it
#                                            # in parts)
# The test command replays a selection of each (crates/sluice-capture/tests/mariadb_suite.rs and
# crates/sluice/tests/mariadb_suite_sink.rs, SELECTION). MINUTES=n stops after the file that
# passes n minutes (the report says how many files ran); FROM=i starts at file i. The corpus can
# run in parts, e.g.
#   FROM=0 MINUTES=120 scripts/mariadb-suite.sh target/suite-1.txt   # first line: next part FROM=…
#   FROM=<that> MINUTES=120 scripts/mariadb-suite.sh target/suite-2.txt
#   scripts/mariadb-suite-sum.py target/suite-*.txt                  # the parts added up
set -euo pipefail
cd "$(dirname "$0")/.."
mode=capture
if [ "${1:-}" = sink ]; then mode=sink; shift; fi
scripts/install-deps.sh test
report=$(realpath -m "${1:-target/mariadb-suite-$mode-report.txt}")
mkdir -p "$(dirname "$report")"
export SLUICE_MARIADB_SUITE_REPORT="$report" SLUICE_MARIADB_SUITE_MINUTES="${MINUTES:-}" \
  SLUICE_MARIADB_SUITE_FROM="${FROM:-0}"
if [ "$mode" = sink ]; then
  SLUICE_MARIADB_SINK_SUITE=full cargo nextest run -p sluice --test mariadb_suite_sink \
    --no-capture -E 'test(mariadb_regression_suite)'
else
  SLUICE_MARIADB_SUITE=full cargo nextest run -p sluice-capture --test mariadb_suite \
    --no-capture -E 'test(mariadb_regression_suite)'
fi
echo "report: $report"
