#!/usr/bin/env bash
# Alternating runs of one store point and the same raw fio job on the same
# disk: `cairn bench store` measures the store, then fio measures a file in
# the same directory, ROUNDS times. On a disk whose raw rate swings from run
# to run, the ratio of neighbouring runs is what to compare.
#
# usage: bench/store_vs_fio.sh [ROUNDS] [POINT] [CAIRN]
#   ROUNDS  pairs to run (default 5)
#   POINT   a `cairn bench store --points` name (default 4k-randwrite-32)
#   CAIRN   the cairn binary (default target/release/cairn)
# environment: DIR (default /tmp/cairn-store-vs-fio), SIZE (default 1G),
#   RUNTIME (default 10), RAMP (default 2), FIO_EXTRA (more fio options, e.g.
#   --fdatasync=10 to give raw fio the store's flush rate: one journal
#   record, so one device flush, per ~10 transactions at QD32)
set -euo pipefail
rounds=${1:-5}
point=${2:-4k-randwrite-32}
cairn=${3:-target/release/cairn}
dir=${DIR:-/tmp/cairn-store-vs-fio}
size=${SIZE:-1G}
runtime=${RUNTIME:-10}
ramp=${RAMP:-2}
IFS=- read -r bs rw depth <<<"$point"
bs=${bs^^}

mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
fio --name=layout --filename="$dir/fio.dat" --size="$size" --rw=write --bs=1M \
    --direct=1 --ioengine=io_uring --iodepth=16 >/dev/null
echo "time      point            store IOPS  fio IOPS  store/fio"
for _ in $(seq 1 "$rounds"); do
    rm -rf "$dir/store"
    store=$("$cairn" bench store --dir "$dir/store" --size "$size" --runtime "$runtime" \
        --ramp "$ramp" --points "$point" --no-fio --json |
        python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["points"][0]["iops"])')
    raw=$(fio --name=raw --filename="$dir/fio.dat" --size="$size" --rw="$rw" --bs="$bs" \
        --iodepth="$depth" --direct=1 --ioengine=io_uring --randrepeat=0 --norandommap \
        --runtime="$runtime" --ramp_time="$ramp" --time_based --output-format=json \
        ${FIO_EXTRA:-} |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("%.0f" % (j["write"]["iops"] + j["read"]["iops"]))')
    printf '%s  %-15s  %10s  %8s  %9s\n' "$(date -u +%H:%M:%S)" "$point" "$store" "$raw" \
        "$(python3 -c "print('%.2f' % ($store / $raw))")"
done
