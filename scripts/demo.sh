#!/usr/bin/env bash
# The main job, on a fresh Debian machine: a throwaway MariaDB with row binlog, a single-node
# Sluice on the embedded meta store, a changefeed to a local directory in canal-json, a short
# sample workload with DDL, progress while it runs, then what was captured and where.
# Everything lives in one temp dir and is cleaned up on exit (set KEEP=1 to keep it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d /tmp/sluice-demo.XXXXXX)"
DB_PASS="demo-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
MARIADB_PID=""; SLUICE_PID=""

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
  set +e
  [ -n "$SLUICE_PID" ] && kill "$SLUICE_PID" 2>/dev/null && wait "$SLUICE_PID" 2>/dev/null
  [ -n "$MARIADB_PID" ] && kill "$MARIADB_PID" 2>/dev/null && wait "$MARIADB_PID" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "1/6 MariaDB"
# What the demo needs (MariaDB, curl, python3, and protoc to build), installed when missing.
if [ -n "${SLUICE_BIN:-}" ]; then "$ROOT/scripts/install-deps.sh" run; else "$ROOT/scripts/install-deps.sh" demo; fi
DB_PORT="$(free_port)"
mkdir -p "$WORK/mariadb/data"
cat >"$WORK/mariadb/my.cnf" <<CNF
[mariadbd]
datadir=$WORK/mariadb/data
socket=$WORK/mariadb/mysql.sock
port=$DB_PORT
bind-address=127.0.0.1
pid-file=$WORK/mariadb/mariadbd.pid
log-error=$WORK/mariadb/error.log
server_id=1
log_bin=$WORK/mariadb/data/mysql-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
binlog_checksum=CRC32
skip-name-resolve
innodb_buffer_pool_size=64M
[client]
socket=$WORK/mariadb/mysql.sock
CNF
mariadb-install-db --defaults-file="$WORK/mariadb/my.cnf" --auth-root-authentication-method=normal --skip-test-db >"$WORK/mariadb/install.log" 2>&1 \
  || { cat "$WORK/mariadb/install.log"; exit 1; }
USER_OPT=(); [ "$(id -u)" = 0 ] && USER_OPT=(--user=root)
/usr/sbin/mariadbd --defaults-file="$WORK/mariadb/my.cnf" "${USER_OPT[@]}" >/dev/null 2>&1 &
MARIADB_PID=$!
sql() { mariadb --defaults-file="$WORK/mariadb/my.cnf" -uroot "$@"; }
for _ in $(seq 1 100); do sql -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
sql -e 'select 1' >/dev/null || { tail -20 "$WORK/mariadb/error.log"; exit 1; }
sql -e "CREATE USER 'sluice'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'sluice'@'127.0.0.1';
        CREATE DATABASE shop;
        CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64), email VARCHAR(128));
        INSERT INTO shop.customers VALUES (1,'Ada','ada@example.com'),(2,'Linus','linus@example.com');"
echo "MariaDB $(sql -N -e 'select version()') on 127.0.0.1:$DB_PORT, row binlog on, user sluice (password masked below)"

if [ -n "${SLUICE_BIN:-}" ]; then
  say "2/6 using $SLUICE_BIN"
  SLUICE="$SLUICE_BIN"
else
  say "2/6 building sluice (cargo build --release -p sluice)"
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
  (cd "$ROOT" && cargo build --release -q -p sluice)
  SLUICE="$CARGO_TARGET_DIR/release/sluice"
fi

say "3/6 single-node sluice server (embedded meta store)"
API_PORT="$(free_port)"
UPSTREAM="mysql://sluice:$DB_PASS@127.0.0.1:$DB_PORT"
"$SLUICE" server --addr "127.0.0.1:$API_PORT" --data-dir "$WORK/sluice-data" --upstream "$UPSTREAM" >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
API="http://127.0.0.1:$API_PORT"
for _ in $(seq 1 150); do curl -sf "$API/api/v2/health" >/dev/null 2>&1 && break; kill -0 $SLUICE_PID 2>/dev/null || break; sleep 0.2; done
curl -sf "$API/api/v2/health" >/dev/null || { echo "server did not start:"; tail -20 "$WORK/sluice.log"; exit 1; }
"$SLUICE" cli --server "$API" capture list

say "4/6 changefeed 'demo' to $WORK/output (canal-json)"
SINK="file://$WORK/output?protocol=canal-json&flush-interval=1s"
"$SLUICE" cli --server "$API" changefeed create -c demo --sink-uri "$SINK"

say "5/6 sample workload with DDL"
sql shop -e "INSERT INTO customers VALUES (3,'Grace','grace@example.com');
             CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, customer_id INT, amount DECIMAL(10,2), created DATETIME(3));"
for i in $(seq 1 20); do
  sql shop -e "INSERT INTO orders (customer_id, amount, created) VALUES ($((i % 3 + 1)), $i.50, NOW(3)), ($((i % 2 + 1)), $((i * 2)).25, NOW(3));
               UPDATE customers SET email = CONCAT('c$i-', email) WHERE id = $((i % 3 + 1));"
  if [ "$i" = 10 ]; then sql shop -e "ALTER TABLE orders ADD COLUMN note VARCHAR(32) DEFAULT 'n/a'"; echo "  (ALTER TABLE orders ADD COLUMN note)"; fi
  if [ $((i % 5)) = 0 ]; then
    printf '  %2d/20 transactions  ' "$i"; "$SLUICE" cli --server "$API" changefeed query -c demo | sed -n 2p | awk '{print "state", $2, "checkpoint", $3}'
  fi
  sleep 0.2
done
sql shop -e "DELETE FROM orders WHERE amount < 5; UPDATE orders SET note='big' WHERE amount > 30;"
TARGET=$(sql -N -e 'SHOW MASTER STATUS' | awk '{print $1" "$2}')
FILE_INDEX=$((10#$(echo "$TARGET" | awk '{print $1}' | sed 's/.*\.//')))
TARGET_TS=$(( (FILE_INDEX << 32) | $(echo "$TARGET" | awk '{print $2}') ))
echo "  waiting for the checkpoint to reach the upstream's position ($TARGET = ts $TARGET_TS)"
for _ in $(seq 1 120); do
  CP=$(curl -sf "$API/api/v2/changefeeds/demo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint_ts"])')
  printf '\r  checkpoint %s / %s' "$CP" "$TARGET_TS"
  [ "$CP" -ge "$TARGET_TS" ] && break
  sleep 0.5
done
echo
"$SLUICE" cli --server "$API" changefeed query -c demo
"$SLUICE" cli --server "$API" changefeed tables -c demo

say "6/6 what was captured, and where"
echo "output directory: $WORK/output"
(cd "$WORK/output" && find . -type f | sort | sed 's/^/  /')
echo
for f in $(cd "$WORK/output" && find . -name '*.json' -path '*orders*' | sort | head -1); do
  echo "first lines of $f:"; head -c 1200 "$WORK/output/$f" | head -3; echo
done
echo "rows upstream: customers=$(sql -N -e 'select count(*) from shop.customers') orders=$(sql -N -e 'select count(*) from shop.orders')"
echo "events in the output: $(cat $(find "$WORK/output" -name '*.json' -path '*shop*') 2>/dev/null | grep -c '"type"') canal-json messages"
if grep -q "$DB_PASS" "$WORK/sluice.log"; then echo "BUG: the password appears in the server log"; exit 1; fi
echo "server log: no password in it ($(wc -l <"$WORK/sluice.log") lines)"
say "done"
