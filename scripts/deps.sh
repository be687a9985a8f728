#!/usr/bin/env bash
# Install what building and testing Cairn needs (Debian). Idempotent.
set -euo pipefail
need=()
command -v fio >/dev/null 2>&1 || need+=(fio)
command -v qemu-io >/dev/null 2>&1 || need+=(qemu-utils)
command -v nbdcopy >/dev/null 2>&1 || need+=(libnbd-bin)
[ -e /usr/lib/python3/dist-packages/nbd.py ] || need+=(python3-libnbd)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# Network namespaces for `cairn cluster up --netns` and its tests.
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# RocksDB (metadata of the BlueStore-class store), linked from Debian's
# package (see .cargo/config.toml); bindgen needs libclang.
[ -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] || need+=(librocksdb-dev)
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
