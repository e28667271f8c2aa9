#!/usr/bin/env bash
# The whole test suite: unit, contract and integration tests (they start their own MariaDB,
# S3 and etcd where needed) plus every simulator scenario. This is the README's test command
# and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi
