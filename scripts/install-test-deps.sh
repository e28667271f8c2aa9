#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine, and nothing when it is already there.
set -euo pipefail
need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server mariadb-client)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server etcd-client)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)   # etcd-client's build script
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v moto_server >/dev/null 2>&1; then
  echo "installing moto_server (local S3) from PyPI"
  python3 -m pip install -q 'moto[server]==5.2.5' || echo "warning: moto_server could not be installed; S3 tests will fail" >&2
fi
