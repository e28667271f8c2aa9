# Shared by the bench scripts (sourced, not run): a work directory cleaned on exit, free ports,
# and a throwaway MariaDB with row binlog on a free port.
#   source bench/lib.sh; bench_init NAME; start_mariadb [extra my.cnf lines...]; db -e '...'
# After start_mariadb: $PORT is its port, db() runs the mariadb client on it as root.

bench_init() { # NAME: the work directory's prefix
  WORK=$(mktemp -d "/tmp/sluice-$1.XXXXXX")
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
}

cpu_seconds() { # PID: user + system CPU seconds it used so far (0 when gone)
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

db() { mariadb --defaults-file="$WORK/${DBNAME:-db}/my.cnf" -uroot "$@"; }

start_mariadb() { # extra my.cnf lines of [mariadbd]; DBNAME=name for a second server (default db)
  PORT=$(free_port)
  local d="$WORK/${DBNAME:-db}"
  mkdir -p "$d/data"
  {
    echo "[mariadbd]"
    echo "datadir=$d/data"
    echo "socket=$d/mysql.sock"
    echo "port=$PORT"
    echo "bind-address=127.0.0.1"
    echo "log-error=$d/error.log"
    echo "server_id=$PORT"
    echo "log_bin=$d/data/mysql-bin"
    echo "binlog_format=ROW"
    echo "binlog_row_image=FULL"
    echo "binlog_row_metadata=FULL"
    echo "innodb_buffer_pool_size=256M"
    for line in "$@"; do echo "$line"; done
    echo "[client]"
    echo "socket=$d/mysql.sock"
  } >"$d/my.cnf"
  mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=normal --skip-test-db >/dev/null 2>&1
  local user_opt=()
  [ "$(id -u)" = 0 ] && user_opt=(--user=root)
  /usr/sbin/mariadbd --defaults-file="$d/my.cnf" "${user_opt[@]}" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do db -e 'select 1' >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "MariaDB did not start; its log: $d/error.log" >&2
  return 1
}
