#!/usr/bin/env bash
# Many tables in one changefeed on one node (issue 14's "many tables" case): N tables (default
# 10000) exist before the changefeed; timed from `changefeed create` until every span is
# replicating, then one row into each table and timed until the checkpoint passes the last;
# then the node sits idle for IDLE seconds (default 30) and its CPU use is measured. Reports
# peak RSS (VmHWM) and CPU seconds. A measurement, not a test; upstream and Sluice share the
# machine's cores.
#   bench/many_tables.sh [tables]     # SINK=blackhole:// (default) or any sink URI;
#                                     # PERF_OUT=perf.data records the idle window under perf;
#                                     # HEARTBEAT_MS=n sets the server's heartbeat-interval-ms
# SLUICE_BIN=path picks the binary (default: target/release/sluice, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
IDLE=${IDLE:-30}
SLUICE=${SLUICE_BIN:-target/release/sluice}
[ -x "$SLUICE" ] || cargo build --release -p sluice
source bench/lib.sh
bench_init many-tables
start_mariadb "innodb_flush_log_at_trx_commit=2" "table_open_cache=20000" "table_definition_cache=20000" "innodb_file_per_table=OFF"
db -e "CREATE USER sluice@'127.0.0.1' IDENTIFIED BY 'bench'; GRANT ALL ON *.* TO sluice@'127.0.0.1'; CREATE DATABASE mt"
echo "creating $N tables"
t0=$(date +%s.%N)
for ((i = 1; i <= N; i++)); do echo "CREATE TABLE mt.t$i (id INT PRIMARY KEY, v INT);"; done | db mt
echo "created in $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s"
API=127.0.0.1:$(free_port)
echo "heartbeat-interval-ms = ${HEARTBEAT_MS:-100}" >"$WORK/server.toml"
"$SLUICE" server --addr "$API" --data-dir "$WORK/data" --upstream "mysql://sluice:bench@127.0.0.1:$PORT" \
  --config "$WORK/server.toml" >"$WORK/server.log" 2>&1 &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 1 300); do curl -sf "http://$API/api/v2/health" >/dev/null && break; sleep 0.2; done
elapsed() { python3 -c "print(f'{$(date +%s.%N) - $1:.1f}')"; }
replicating() {
  curl -s "http://$API/api/v2/changefeeds/many/spans" |
    python3 -c 'import json,sys; v=json.load(sys.stdin); print(sum(1 for s in v.get("items", []) if s["state"] == "replicating"))' 2>/dev/null || echo 0
}
c0=$(cpu_seconds "$SERVER")
t0=$(date +%s.%N)
"$SLUICE" cli --server "http://$API" changefeed create -c many --sink-uri "${SINK:-blackhole://}" >/dev/null
while [ "$(replicating)" -lt "$N" ]; do
  if python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $t0 > ${BENCH_TIMEOUT:-900} else 1)"; then
    echo "gave up: $(replicating) of $N replicating after ${BENCH_TIMEOUT:-900} s" >&2; break
  fi
  sleep 1
done
T_REPL=$(elapsed "$t0")
C_REPL=$(python3 -c "print(f'{$(cpu_seconds "$SERVER") - $c0:.1f}')")
t0=$(date +%s.%N)
for ((i = 1; i <= N; i++)); do echo "INSERT INTO mt.t$i VALUES (1, $i);"; done | db mt
TARGET=$(db -N -e "SHOW MASTER STATUS" | awk '{ split($1, f, "."); printf "%d", (f[2] * 4294967296) + $2 }')
T_WRITE=$(elapsed "$t0")
while :; do
  cp=$(curl -s "http://$API/api/v2/changefeeds/many" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("checkpoint_ts", 0))' 2>/dev/null || echo 0)
  [ "$cp" -ge "$TARGET" ] && break
  sleep 0.5
done
T_ROWS=$(elapsed "$t0")
load_before_idle=$(cut -d' ' -f1 /proc/loadavg)
c0=$(cpu_seconds "$SERVER")
if [ -n "${PERF_OUT:-}" ]; then
  perf record -F 999 --call-graph "${PERF_CALLGRAPH:-fp}" -p "$SERVER" -o "$PERF_OUT" -- sleep "$IDLE" >/dev/null 2>&1
else
  sleep "$IDLE"
fi
IDLE_CPU=$(python3 -c "print(f'{($(cpu_seconds "$SERVER") - $c0) / $IDLE * 100:.1f}')")
RSS=$(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$SERVER/status")
echo "| what | measured |"
echo "|---|---|"
echo "| tables | $N |"
echo "| create until every span replicating | $T_REPL s ($C_REPL CPU s) |"
echo "| one row into each table, written upstream in | $T_WRITE s |"
echo "| until the checkpoint passed the last row (from the first write) | $T_ROWS s |"
echo "| idle CPU over $IDLE s | $IDLE_CPU % of a core |"
echo "| peak RSS | $RSS MiB |"
echo "sink ${SINK:-blackhole://}; heartbeat-interval-ms ${HEARTBEAT_MS:-100}; load average before idle: $load_before_idle; $(nproc) cores; commit $(git rev-parse --short HEAD)"
