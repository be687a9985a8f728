#!/usr/bin/env bash
# From a brand-new machine to numbers: install dependencies, build, start a
# local 3-OSD cluster, create an image and run a 4 KiB random write and read
# bench against it. The cluster keeps running; stop it with
#   target/release/cairn cluster down --dir cairn-cluster
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release
CAIRN=target/release/cairn
DIR=${CAIRN_DIR:-cairn-cluster}
$CAIRN cluster up --osds 3 --dir "$DIR"
export CAIRN_CONF="$DIR/cairn.toml"
$CAIRN image info rbd/bench0 >/dev/null 2>&1 || $CAIRN image create rbd/bench0 --size 2G
$CAIRN status
echo "== 4 KiB random write, iodepth 32 =="
$CAIRN bench --image rbd/bench0 --rw randwrite --bs 4k --iodepth 32 --runtime 10 --ramp 2 --precondition
echo "== 4 KiB random read, iodepth 32 =="
$CAIRN bench --image rbd/bench0 --rw randread --bs 4k --iodepth 32 --runtime 10 --ramp 2
