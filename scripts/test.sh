#!/usr/bin/env bash
# The whole test suite: formatting and lints, unit, contract and integration tests (they start
# their own MariaDB, S3 and etcd where needed) plus every simulator scenario. This is the README's test command
# and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh test

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# The DDL matrix runs three of its cells, chosen by the commit (SLUICE_DDL_MATRIX=all: every cell).
export GIT_COMMIT=${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
status=0
# Style first: formatting and lints are part of the suite (rustfmt and clippy ship with rustup).
echo "== cargo fmt --check"
cargo fmt --all --check || { echo "formatting differs: run cargo fmt --all"; status=1; }
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings || status=1
# Production functions stay under 100 lines of code (clippy.toml; tests may be longer).
echo "== cargo clippy -D clippy::too_many_lines (libraries and binaries)"
cargo clippy --workspace --lib --bins -- -D clippy::too_many_lines || status=1
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast || status=1
  # Every simulator invariant must fire under its named mutation (feature off everywhere else).
  cargo nextest run -p sluice-sim --features mutations --test mutations --no-fail-fast || status=1
else
  cargo test --workspace --no-fail-fast || status=1
  cargo test -p sluice-sim --features mutations --test mutations --no-fail-fast || status=1
fi
exit $status
