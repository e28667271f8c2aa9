#!/usr/bin/env bash
# One large transaction through a single-node server (the embedded default) to a csv file sink:
# `INSERT INTO big.t SELECT seq, REPEAT(...) FROM seq_1_to_N` (N rows of ~1 KiB; 1,000,000 rows is
# about 1 GiB of binlog). Reports how long until the changefeed's checkpoint passes the
# transaction and every row is in the files, the server's peak RSS, how often the maintainer was
# bootstrapped (1 is right), and the changefeed's state meanwhile. A measurement, not a test.
#   bench/bigtxn.sh [rows] [minutes]    # defaults: 1000000 rows, give up after 20 minutes
#   SINK=mysql bench/bigtxn.sh ...      # to a second MariaDB instead of the csv files
#   MYSQL_PARAMS='transaction-atomicity=table' adds parameters to that sink's URI
# SLUICE_BIN=path picks the binary (default: target/release/sluice, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
MINUTES=${2:-20}
SLUICE=${SLUICE_BIN:-target/release/sluice}
[ -x "$SLUICE" ] || cargo build --release -p sluice
source bench/lib.sh
bench_init bigtxn
start_mariadb "max_binlog_size=1G"
db -e "CREATE USER sluice@'127.0.0.1' IDENTIFIED BY 'bigtxn'; GRANT ALL ON *.* TO sluice@'127.0.0.1';
       CREATE DATABASE big; CREATE TABLE big.t (id INT PRIMARY KEY, pad VARCHAR(1000))"
SINK=${SINK:-file}
if [ "$SINK" = mysql ]; then
  UP_PORT=$PORT
  DBNAME=down start_mariadb
  DOWN_PORT=$PORT
  PORT=$UP_PORT
  DBNAME=down db -e "CREATE DATABASE big; CREATE TABLE big.t (id INT PRIMARY KEY, pad VARCHAR(1000))"
  SINK_URI="mysql://root@127.0.0.1:$DOWN_PORT/?${MYSQL_PARAMS:-}"
else
  SINK_URI="file://$WORK/out?protocol=csv&flush-interval=1s"
fi
API=127.0.0.1:$(free_port)
"$SLUICE" server --addr "$API" --data-dir "$WORK/data" --upstream "mysql://sluice:bigtxn@127.0.0.1:$PORT" \
  >"$WORK/server.log" 2>&1 &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 1 100); do curl -sf "http://$API/api/v2/health" >/dev/null && break; sleep 0.2; done
"$SLUICE" cli --server "http://$API" changefeed create -c big \
  --sink-uri "$SINK_URI" >/dev/null
echo "writing one transaction of $ROWS rows"
db -e "INSERT INTO big.t SELECT seq, REPEAT('x', 1000) FROM big.seq_1_to_$ROWS"
TARGET=$(db -N -e "SHOW MASTER STATUS" | awk '{ split($1, f, "."); printf "%d", (f[2] * 4294967296) + $2 }')
start=$(date +%s)
peak=0
states=""
while :; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$SERVER/status" 2>/dev/null || echo 0)
  [ "$rss" -gt "$peak" ] && peak=$rss
  v=$(curl -s "http://$API/api/v2/changefeeds/big" || true)
  cp=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("checkpoint_ts", 0))' "$v" 2>/dev/null || echo 0)
  st=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("state", "?"))' "$v" 2>/dev/null || echo "?")
  case " $states " in *" $st "*) ;; *) states="$states $st" ;; esac
  elapsed=$(( $(date +%s) - start ))
  if [ "$cp" -ge "$TARGET" ]; then break; fi
  if [ "$elapsed" -ge $((MINUTES * 60)) ]; then echo "gave up after $MINUTES minutes"; break; fi
  sleep 1
done
if [ "$SINK" = mysql ]; then
  rows=$(DBNAME=down db -N -e "SELECT COUNT(*) FROM big.t")
else
  rows=$(find "$WORK/out" -name '*.csv' -exec cat {} + 2>/dev/null | wc -l)
fi
boots=$(grep -c "maintainer bootstrapped" "$WORK/server.log" || true)
echo "rows $ROWS: checkpoint passed the transaction: $([ "$cp" -ge "$TARGET" ] && echo yes || echo no) after ${elapsed} s"
echo "rows in the $SINK sink: $rows; peak RSS: $((peak / 1024)) MiB; maintainer bootstraps: $boots; states seen:$states"
