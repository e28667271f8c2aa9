#!/usr/bin/env bash
# The main job, on a fresh Debian machine: a throwaway MariaDB with row binlog, a single-node
# Sluice on the embedded meta store, a changefeed to a local directory in canal-json, a short
# sample workload with DDL, progress while it runs; then what was written and how to read it
# (table version directories, raw checkpoints), and the proof that it is right: the output is
# applied to a second MariaDB with `sluice consume` and compared with the first by `sluice check`.
# Everything lives in one temp dir. On exit the servers stop and their data dirs are removed;
# the changefeed's output, the consumed copy's report and the logs stay, and the last lines say
# where (KEEP=1 keeps everything, CLEAN=1 removes everything).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d /tmp/sluice-demo.XXXXXX)"
DB_PASS="demo-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
PIDS=()
DONE=0

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$@"; }
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if [ "${CLEAN:-0}" = 1 ]; then rm -rf "$WORK"; return; fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK/upstream" "$WORK/downstream" "$WORK/sluice-data"
  echo
  [ "$DONE" = 1 ] || echo "the demo stopped early; what it had so far is kept:"
  echo "kept in $WORK:"
  (cd "$WORK" && ls -1 | sed 's/^/  /')
  echo "remove it with: rm -rf $WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_mariadb NAME PORT: a MariaDB in $WORK/NAME with row binlog (what Sluice needs upstream).
start_mariadb() {
  local dir="$WORK/$1"
  mkdir -p "$dir/data"
  cat >"$dir/my.cnf" <<CNF
[mariadbd]
datadir=$dir/data
socket=$dir/mysql.sock
port=$2
bind-address=127.0.0.1
pid-file=$dir/mariadbd.pid
log-error=$dir/error.log
server_id=$2
log_bin=$dir/data/mysql-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
binlog_checksum=CRC32
skip-name-resolve
innodb_buffer_pool_size=64M
[client]
socket=$dir/mysql.sock
CNF
  mariadb-install-db --defaults-file="$dir/my.cnf" --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
    || { cat "$dir/install.log"; exit 1; }
  local user_opt=(); [ "$(id -u)" = 0 ] && user_opt=(--user=root)
  /usr/sbin/mariadbd --defaults-file="$dir/my.cnf" "${user_opt[@]}" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do mariadb --defaults-file="$dir/my.cnf" -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  mariadb --defaults-file="$dir/my.cnf" -uroot -e 'select 1' >/dev/null || { tail -20 "$dir/error.log"; exit 1; }
}
up() { mariadb --defaults-file="$WORK/upstream/my.cnf" -uroot "$@"; }
down() { mariadb --defaults-file="$WORK/downstream/my.cnf" -uroot "$@"; }
# ts_text TS: a commit ts is (binlog file index << 32) | end position of the transaction.
ts_text() { printf 'binlog file mysql-bin.%06d, position %d' $(($1 >> 32)) $(($1 & 0xFFFFFFFF)); }

SEED="CREATE DATABASE shop;
      CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64), email VARCHAR(128));
      INSERT INTO shop.customers VALUES (1,'Ada','ada@example.com'),(2,'Linus','linus@example.com');"

say "1/8 MariaDB: an upstream, and a second server to apply the output to"
# What the demo needs (MariaDB, curl, python3, and protoc to build), installed when missing.
if [ -n "${SLUICE_BIN:-}" ]; then "$ROOT/scripts/install-deps.sh" run; else "$ROOT/scripts/install-deps.sh" demo; fi
UP_PORT="$(free_port)"; DOWN_PORT="$(free_port)"
start_mariadb upstream "$UP_PORT"
start_mariadb downstream "$DOWN_PORT"
up -e "CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
       GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'sluice'@'127.0.0.1';
       $SEED"
down -e "CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
         GRANT ALL PRIVILEGES ON *.* TO 'sluice'@'127.0.0.1';
         $SEED"
note "upstream   MariaDB $(up -N -e 'select version()') on 127.0.0.1:$UP_PORT, row binlog on, user sluice (password masked below)" \
     "downstream MariaDB on 127.0.0.1:$DOWN_PORT, seeded with the same shop.customers (a changefeed carries changes" \
     "           from its start on; tables that exist before it must exist downstream too)"

if [ -n "${SLUICE_BIN:-}" ]; then
  say "2/8 using $SLUICE_BIN"
  SLUICE="$SLUICE_BIN"
else
  say "2/8 building sluice (cargo build --release -p sluice)"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
  (cd "$ROOT" && cargo build --release -q -p sluice)
  SLUICE="$CARGO_TARGET_DIR/release/sluice"
fi

say "3/8 single-node sluice server (embedded meta store)"
API_PORT="$(free_port)"
UPSTREAM="mysql://sluice:$DB_PASS@127.0.0.1:$UP_PORT"
DOWNSTREAM="mysql://sluice:$DB_PASS@127.0.0.1:$DOWN_PORT/"
"$SLUICE" server --addr "127.0.0.1:$API_PORT" --data-dir "$WORK/sluice-data" --upstream "$UPSTREAM" >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!; PIDS=("$SLUICE_PID" "${PIDS[@]}")
API="http://127.0.0.1:$API_PORT"
for _ in $(seq 1 150); do curl -sf "$API/api/v2/health" >/dev/null 2>&1 && break; kill -0 $SLUICE_PID 2>/dev/null || break; sleep 0.2; done
curl -sf "$API/api/v2/health" >/dev/null || { echo "server did not start:"; tail -20 "$WORK/sluice.log"; exit 1; }
cli() { "$SLUICE" cli --server "$API" "$@"; }
cli capture list

say "4/8 changefeed 'demo' to $WORK/output (canal-json)"
SINK="file://$WORK/output?protocol=canal-json&flush-interval=1s"
cli changefeed create -c demo --sink-uri "$SINK"

say "5/8 sample workload with DDL"
up shop -e "INSERT INTO customers VALUES (3,'Grace','grace@example.com');
            CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, customer_id INT, amount DECIMAL(10,2), created DATETIME(3),
                                 status ENUM('new','paid') DEFAULT 'new');"
for i in $(seq 1 20); do
  up shop -e "INSERT INTO orders (customer_id, amount, created) VALUES ($((i % 3 + 1)), $i.50, NOW(3)), ($((i % 2 + 1)), $((i * 2)).25, NOW(3));
              UPDATE customers SET email = CONCAT('c$i-', email) WHERE id = $((i % 3 + 1));
              UPDATE orders SET status = 'paid' WHERE id = $((i * 2 - 1));"
  if [ "$i" = 10 ]; then up shop -e "ALTER TABLE orders ADD COLUMN note VARCHAR(32) DEFAULT 'n/a'"; note "(ALTER TABLE orders ADD COLUMN note)"; fi
  if [ $((i % 5)) = 0 ]; then
    printf '   %2d/20 transactions  ' "$i"
    cli --output json changefeed query -c demo | python3 -c 'import json,sys; v=json.load(sys.stdin); print("state", v["state"], "checkpoint", v["checkpoint_ts"], "=", v["checkpoint_time"])'
  fi
  sleep 0.2
done
up shop -e "DELETE FROM orders WHERE amount < 5; UPDATE orders SET note='big' WHERE amount > 30;"
read -r FILE POS < <(up -N -e 'SHOW MASTER STATUS' | awk '{print $1, $2}')
TARGET_TS=$(( (10#${FILE##*.} << 32) | POS ))
note "waiting for the checkpoint to reach the upstream's position ($FILE:$POS = ts $TARGET_TS)"
for _ in $(seq 1 120); do
  CP=$(curl -sf "$API/api/v2/changefeeds/demo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint_ts"])')
  printf '\r   checkpoint %s / %s' "$CP" "$TARGET_TS"
  [ "$CP" -ge "$TARGET_TS" ] && break
  sleep 0.5
done
echo
[ "$CP" -ge "$TARGET_TS" ] || { echo "the checkpoint did not reach the upstream's position:"; cli changefeed query -c demo; tail -20 "$WORK/sluice.log"; exit 1; }
cli changefeed query -c demo
cli changefeed tables -c demo

say "6/8 how to read a checkpoint"
CP_TIME=$(curl -sf "$API/api/v2/changefeeds/demo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint_time"])')
note "checkpoint_ts $CP is a position in the upstream's binlog, not a clock: (file index << 32) | end position," \
     "here $(ts_text "$CP"). Everything committed up to it is in the output." \
     "checkpoint_time $CP_TIME is when the upstream committed that transaction (UTC)." \
     "The output's own checkpoint, for its readers: $WORK/output/metadata = $(cat "$WORK/output/metadata")"

say "7/8 what was written, and where: $WORK/output"
(cd "$WORK/output" && find . -type f | sort | sed 's/^/  /')
note "" \
     "<db>/<table>/<version>/<date>/CDC<n>.json  the rows, one canal-json message per line, files in commit order;" \
     "<version> is a table version: the commit ts of the DDL that gave the table that shape (0: it existed" \
     "before the changefeed started). orders has two: its CREATE, and the ALTER that added 'note' mid-run;" \
     "rows written after the ALTER are under the second one. A reader applies versions in order." \
     "<date> is the commit day (UTC; date-separator=day, the default; none, year and month also exist)." \
     "<db>/<table>/meta/schema_<version>_<checksum>.json  the table's columns for that version (TiCDC's layout);" \
     "<version>/<date>/meta/CDC.index  the last data file written there; metadata  the checkpoint above."
for f in $(cd "$WORK/output" && find . -name 'CDC*.json' -path '*orders*' | sort | head -1); do
  echo; echo "first line of $f:"; head -1 "$WORK/output/$f" | cut -c1-400; echo " …"
done

say "8/8 is it right? apply the output to the second MariaDB and compare"
echo "\$ sluice consume --storage '$SINK' --downstream 'mysql://sluice:******@127.0.0.1:$DOWN_PORT/'"
"$SLUICE" consume --storage "$SINK" --downstream "$DOWNSTREAM" | tee "$WORK/consume.txt"
note "(the files it ignores are the $(find "$WORK/output" -name CDC.index | wc -l) CDC.index files: a reader that lists the directory does not need them)"
echo "\$ sluice check --upstream '$UPSTREAM' --downstream … --tables 'shop.*'" | sed "s/$DB_PASS/******/"
set +e
"$SLUICE" check --upstream "$UPSTREAM" --downstream "$DOWNSTREAM" --tables 'shop.*' | tee "$WORK/check.txt"
CHECK=${PIPESTATUS[0]}
set -e
echo "rows upstream: customers=$(up -N -e 'select count(*) from shop.customers') orders=$(up -N -e 'select count(*) from shop.orders');" \
     "downstream: customers=$(down -N -e 'select count(*) from shop.customers') orders=$(down -N -e 'select count(*) from shop.orders')"
if grep -rq "$DB_PASS" "$WORK/sluice.log" "$WORK/consume.txt" "$WORK/check.txt"; then echo "BUG: the password appears in the output"; exit 1; fi
echo "server log: no password in it ($(wc -l <"$WORK/sluice.log") lines)"
[ "$CHECK" = 0 ] || { echo "sluice check found differences (exit $CHECK): see above"; exit 1; }
echo "the downstream equals the upstream: every change, DDL included, is in the output, in order."

say "done. Next steps"
cat <<NEXT
  * Your own MariaDB: it needs binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL
    and a user with REPLICATION SLAVE, BINLOG MONITOR, SELECT (the server checks and says what is
    missing). Start \`sluice server --data-dir DIR --upstream mysql://user:pass@host:port\`.
  * Other sinks: --sink-uri mysql://user:pass@host:port/ replicates straight into MySQL/MariaDB;
    s3://bucket/prefix?protocol=csv writes the same layout to S3 (docs/sinks.md).
  * Choose tables and events with a changefeed TOML ([filter], [scheduler]; docs/configuration.md).
  * Watch it: sluice cli changefeed list | query -c ID, and /metrics (docs/api.md).
  * Several nodes with etcd, failover, and what to do when a sink fails: docs/operations.md.
NEXT
DONE=1
