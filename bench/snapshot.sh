#!/usr/bin/env bash
# The initial snapshot side by side with what users do without it, in one run on one machine: a
# sysbench-shaped table of N rows (id, k, c CHAR(120), pad CHAR(60)) on an idle upstream,
#   1. `mariadb-dump --single-transaction` > /dev/null          (the read limit)
#   2. `mariadb-dump --single-transaction | mariadb` downstream (the user's alternative)
#   3. a changefeed with `snapshot = "initial"` to the MySQL sink (same downstream, table emptied)
#   4. the same to a file sink in csv
# each timed until done (3 and 4: until the snapshot reads `finished` and the checkpoint passed
# the position at creation), with the sluice server's peak RSS during 3 and 4. A measurement, not
# a test; upstream, downstream and Sluice share the machine's cores.
#   bench/snapshot.sh [rows] [chunk-rows]    # default 1000000 rows, 8192 rows per chunk
# SLUICE_BIN=path picks the binary (default: target/release/sluice, built if missing);
# FILE_PARAMS='&flush-interval=100ms' adds sink URI parameters to the file run (MYSQL_PARAMS='?worker-count=4'
# to the MySQL run); PERF_OUT=path
# records a `perf` profile of the server during the file run (PERF_ARGS='--call-graph dwarf'
# replaces `-g`; PERF_UP_OUT=path one of the upstream mariadbd); SKIP_MYSQL=1 leaves out the MySQL run; SERVER_LOG=path keeps its log
# (LOG_LEVEL=debug logs each chunk read with its timings); CF_EXTRA='[scheduler]\n…' appends
# to the changefeed's TOML (e.g. spans by region, so one table is copied by several dispatchers);
# SETTLE=seconds waits that long after the server started before the first run (its region scan
# of the table at start then does not overlap a SKIP_MYSQL=1 file run).
# FILE_URI=uri replaces the file run's sink (e.g. `blackhole://`, to tell the sink's own cost apart).
# FILE_DIR=dir puts the file sink's output there instead of the work directory (e.g. a tmpfs,
# to tell the page cache's cost apart; not removed afterwards); at 10M rows give SETTLE a minute: the upstream's own
# work after the bulk load otherwise runs during a SKIP_MYSQL=1 file run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
CHUNK=${2:-8192}
SLUICE=${SLUICE_BIN:-target/release/sluice}
[ -x "$SLUICE" ] || cargo build --release -p sluice
# The upstream's table and binlog, the downstream's copy and the csv files take about 1 KB per
# row (10M rows: about 9 GB): refuse to start rather than fail half-way with "table is full".
NEED=$((ROWS * 1100))
FREE=$(df -Pk /tmp | awk 'NR == 2 { print $4 * 1024 }')
if [ "$FREE" -lt "$NEED" ]; then
  echo "bench/snapshot.sh: $ROWS rows need about $((NEED >> 30)) GiB free in /tmp, only $((FREE >> 30)) GiB are: free some, or copy fewer rows" >&2
  exit 2
fi
source bench/lib.sh
bench_init snapshot-bench
DBNAME=up start_mariadb "innodb_flush_log_at_trx_commit=2" "innodb_buffer_pool_size=1G"
UP=$PORT
UP_PID=${PIDS[-1]}
DBNAME=down start_mariadb "innodb_flush_log_at_trx_commit=2" "innodb_buffer_pool_size=1G"
DOWN=$PORT
up() { DBNAME=up db "$@"; }
down() { DBNAME=down db "$@"; }
SCHEMA="CREATE DATABASE sb; CREATE TABLE sb.t (id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60), KEY k (k))"
for d in up down; do
  $d -e "CREATE USER sluice@'127.0.0.1' IDENTIFIED BY 'bench'; GRANT ALL ON *.* TO sluice@'127.0.0.1'; $SCHEMA"
done
echo "seeding $ROWS rows"
for ((i = 0; i < ROWS; i += 100000)); do
  n=$((ROWS - i < 100000 ? ROWS - i : 100000))
  echo "INSERT INTO sb.t SELECT seq, seq % 10007, REPEAT(CHAR(97 + seq % 26), 120), REPEAT('p', 60) FROM seq_$((i + 1))_to_$((i + n));"
done | up sb
elapsed() { python3 -c "print(f'{$(date +%s.%N) - $1:.2f}')"; }
DUMP=(mariadb-dump --host=127.0.0.1 --port="$UP" --user=sluice --password=bench --single-transaction --quick sb t)
load0=$(cut -d' ' -f1 /proc/loadavg)
u0=$(cpu_seconds "$UP_PID")
t0=$(date +%s.%N); "${DUMP[@]}" >/dev/null; T_READ=$(elapsed "$t0")
CPU_UP_READ=$(python3 -c "print(f'{$(cpu_seconds "$UP_PID") - $u0:.2f}')")
t0=$(date +%s.%N); "${DUMP[@]}" | mariadb --host=127.0.0.1 --port="$DOWN" --user=sluice --password=bench sb; T_LOAD=$(elapsed "$t0")
API=127.0.0.1:$(free_port)
printf 'log-level = "%s"\n' "${LOG_LEVEL:-info}" >"$WORK/server.toml"
"$SLUICE" server --config "$WORK/server.toml" --addr "$API" --data-dir "$WORK/data" --upstream "mysql://sluice:bench@127.0.0.1:$UP" \
  >"${SERVER_LOG:-$WORK/server.log}" 2>&1 &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 1 150); do curl -sf "http://$API/api/v2/health" >/dev/null && break; sleep 0.2; done
sleep "${SETTLE:-0}"
printf 'snapshot = "initial"\nsnapshot-chunk-rows = %s\n%b' "$CHUNK" "${CF_EXTRA:-}" >"$WORK/cf.toml"
run() { # name sink-uri -> "seconds peak-rss-MiB sluice-cpu-s upstream-cpu-s"
  local name=$1 uri=$2 t0 target c0 u0 secs peak
  target=$(up -N -e "SHOW MASTER STATUS" | awk '{ split($1, f, "."); printf "%d", (f[2] * 4294967296) + $2 }')
  t0=$(date +%s.%N) c0=$(cpu_seconds "$SERVER") u0=$(cpu_seconds "$UP_PID")
  "$SLUICE" cli --server "http://$API" changefeed create -c "$name" --sink-uri "$uri" --config "$WORK/cf.toml" >/dev/null
  # One process polls (every 50 ms) and samples the RSS: a shell loop of curl and python3 starts
  # took about a third of a core from what it measured.
  read -r secs peak _ <<<"$(python3 bench/wait_changefeed.py "$API" "$name" "$SERVER" "$t0" "${BENCH_TIMEOUT:-1800}" --snapshot --checkpoint "$target" || true)"
  echo "$secs $peak $(python3 -c "print(f'{$(cpu_seconds "$SERVER") - $c0:.2f} {$(cpu_seconds "$UP_PID") - $u0:.2f}')")"
  "$SLUICE" cli --server "http://$API" changefeed remove -c "$name" >/dev/null
}
down -e "TRUNCATE TABLE sb.t"
if [ -z "${SKIP_MYSQL:-}" ]; then
  read -r T_MYSQL RSS_MYSQL _ _ <<<"$(run tomysql "mysql://sluice:bench@127.0.0.1:$DOWN/${MYSQL_PARAMS:-}")"
else
  T_MYSQL=0 RSS_MYSQL=0
fi
N_DOWN=$(down -N -e "SELECT COUNT(*) FROM sb.t")
if [ -n "${PERF_OUT:-}" ]; then # a profile of the server during the file run
  perf record -F 499 ${PERF_ARGS:--g} -o "$PERF_OUT" -p "$SERVER" 2>/dev/null &
  PERF=$!
fi
if [ -n "${PERF_UP_OUT:-}" ]; then # and one of the upstream mariadbd
  perf record -F 499 -g -o "$PERF_UP_OUT" -p "$UP_PID" 2>/dev/null &
  PERF_UP=$!
fi
# The file copy's read limit is measured again right before and after it, under the same
# conditions: the first dump runs right after the seeding, while the upstream still purges and
# flushes what it was loaded with (1.31 s there against 0.7-0.8 s later, same table).
t0=$(date +%s.%N); "${DUMP[@]}" >/dev/null; T_READ_BEFORE=$(elapsed "$t0")
FILE_URI=${FILE_URI:-"file://${FILE_DIR:-$WORK}/out?protocol=csv${FILE_PARAMS:-}"}
read -r T_FILE RSS_FILE CPU_FILE CPU_UP_FILE <<<"$(run tofile "$FILE_URI")"
[ -n "${PERF_OUT:-}" ] && kill -INT "$PERF" && wait "$PERF" || true
[ -n "${PERF_UP_OUT:-}" ] && kill -INT "$PERF_UP" && wait "$PERF_UP" || true
t0=$(date +%s.%N); "${DUMP[@]}" >/dev/null; T_READ_AFTER=$(elapsed "$t0")
T_READ_FILE=$(python3 -c "print(f'{($T_READ_BEFORE + $T_READ_AFTER) / 2:.2f}')")
# Not the target's limit, a reference: the same dump written to a file beside the sink's output,
# so what writing that many bytes costs this machine (its page cache) shows in the same run.
DUMP_FILE="${FILE_DIR:-$WORK}/dump.sql"
t0=$(date +%s.%N); "${DUMP[@]}" >"$DUMP_FILE"; T_DUMP_FILE=$(elapsed "$t0")
DUMP_MIB=$(( $(stat -c %s "$DUMP_FILE") >> 20 ))
rm -f "$DUMP_FILE"
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
rate() { python3 -c "print(int($ROWS / $1) if $1 else '-')"; }
echo
echo "| run | rows | seconds | rows/s | ratio | peak RSS of sluice |"
echo "|---|---|---|---|---|---|"
echo "| mariadb-dump --single-transaction > /dev/null (read limit) | $ROWS | $T_READ | $(rate "$T_READ") | 1.00 | |"
echo "| mariadb-dump --single-transaction \| mariadb (dump and load) | $ROWS | $T_LOAD | $(rate "$T_LOAD") | $(ratio "$T_LOAD" "$T_READ") to the read | |"
echo "| snapshot to MySQL ($N_DOWN rows downstream) | $ROWS | $T_MYSQL | $(rate "$T_MYSQL") | $(ratio "$T_MYSQL" "$T_LOAD") to dump and load (target 1.25) | $RSS_MYSQL MiB |"
echo "| mariadb-dump > /dev/null right before and after the file copy (its read limit) | $ROWS | $T_READ_BEFORE, $T_READ_AFTER (mean $T_READ_FILE) | $(rate "$T_READ_FILE") | | |"
echo "| mariadb-dump > a file (reference: the read plus writing $DUMP_MIB MiB to the same disk) | $ROWS | $T_DUMP_FILE | $(rate "$T_DUMP_FILE") | $(ratio "$T_DUMP_FILE" "$T_READ_FILE") to the read around the copy | |"
echo "| snapshot to file csv | $ROWS | $T_FILE | $(rate "$T_FILE") | $(ratio "$T_FILE" "$T_READ_FILE") to the read around it (target 1.5); $(ratio "$T_FILE" "$T_READ") to the first | $RSS_FILE MiB |"
OUT_MIB=$(du -sm "${FILE_DIR:-$WORK}/out" 2>/dev/null | cut -f1 || true)
echo "CPU seconds: upstream mariadbd during the dump to /dev/null $CPU_UP_READ; during the file run sluice $CPU_FILE, upstream mariadbd $CPU_UP_FILE; sink output ${OUT_MIB:-0} MiB"
echo "chunk rows $CHUNK; load average before: $load0, after: $(cut -d' ' -f1 /proc/loadavg); $(nproc) cores; commit $(git rev-parse --short HEAD)"
