#!/usr/bin/env bash
# Long exploration (default 30 minutes): runs `sluice-sim explore` in chunks of seeds until the
# time is up, appending each chunk's report to OUT, and ends with a summary line. Any failing seed
# is listed with the command that replays it.
#   bench/explore-soak.sh [MINUTES] [OUT]
# Environment: CHUNK (seeds per chunk, 2000), START (first seed, 0; a soak continued after a fix
# starts where the previous one stopped).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
out=${2:-docs/figures/explore-soak.txt}
chunk=${CHUNK:-2000}
mkdir -p "$(dirname "$out")"
cargo build --release -q -p sluice-sim
# A private copy, so rebuilding the workspace meanwhile does not change what runs.
bin=$(mktemp -d)/sluice-sim
cp "${CARGO_TARGET_DIR:-target}/release/sluice-sim" "$bin"
end=$(( $(date +%s) + minutes * 60 ))
start=${START:-0}
{
  echo "# sluice-sim exploration soak: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $(nproc) cores, ${minutes} min budget"
} > "$out"
t0=$(date +%s)
seeds=0; failed=0
while [ "$(date +%s)" -lt "$end" ]; do
  rep=$("$bin" explore --start "$start" --seeds "$chunk" 2>&1 || true)
  echo "## seeds $start..$((start + chunk - 1))" >> "$out"
  echo "$rep" >> "$out"
  f=$(echo "$rep" | tail -1 | awk '{print $3}')
  failed=$((failed + ${f:-0}))
  seeds=$((seeds + chunk))
  start=$((start + chunk))
done
t1=$(date +%s)
echo "# total: $seeds seeds in $((t1 - t0)) s ($(( seeds * 60 / (t1 - t0 + 1) )) seeds/min), $failed failed" >> "$out"
tail -1 "$out"
