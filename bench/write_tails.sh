#!/usr/bin/env bash
# 4 KiB random writes on a fresh 3-OSD BlueStore cluster, with every write
# slower than SLOW ms logged by the OSDs (their slow-write report: held,
# local commit, last member), then a count of those slow writes per 100 ms
# so that bursts (every write in flight held at once) stand out.
#
#   bash bench/write_tails.sh [--cairn BIN] [--iodepth 32] [--runtime 20]
#                             [--slow 15] [--keep] [-- --set osd.KEY=VALUE ...]
#
# --keep leaves the cluster's files in $DIR (default /tmp/cairn-write-tails)
# for a look at the OSD logs and RocksDB's LOG files (flushes and
# compactions, with their times).
set -euo pipefail
cairn=target/release/cairn; qd=32; runtime=20; slow=15; keep=; extra=()
dir=${DIR:-/tmp/cairn-write-tails}
while [ $# -gt 0 ]; do
  case $1 in
  --cairn) cairn=$2; shift 2 ;;
  --iodepth) qd=$2; shift 2 ;;
  --runtime) runtime=$2; shift 2 ;;
  --slow) slow=$2; shift 2 ;;
  --keep) keep=1; shift ;;
  --) shift; extra=("$@"); break ;;
  *) echo "$0: unknown argument $1" >&2; exit 2 ;;
  esac
done
"$cairn" cluster down --dir "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
"$cairn" cluster up --osds 3 --pg-num 32 --store bluestore --timeout 120 --dir "$dir" \
  --set osd.bluestore_block_size=2147483648 --set "osd.op_complaint_time_ms=$slow" \
  "${extra[@]}" >/dev/null
conf=(--conf "$dir/cairn.toml")
"$cairn" "${conf[@]}" image create rbd/tails --size 1G >/dev/null
"$cairn" "${conf[@]}" bench --image rbd/tails --rw write --bs 1M --iodepth 8 --runtime 1 \
  --ramp 0 --precondition >/dev/null
start=$(date -u +%Y-%m-%dT%H:%M:%S.%N)
"$cairn" "${conf[@]}" bench --image rbd/tails --rw randwrite --bs 4k --iodepth "$qd" \
  --runtime "$runtime" --ramp 0
echo "writes slower than $slow ms, per 100 ms (time UTC, count):"
{ grep -h "slow write" "$dir"/osd.*.log || true; } | awk -v s="$start" '$1 > s { print substr($1, 12, 10) }' \
  | sort | uniq -c | awk '{ print "  " $2 "  " $1 }'
[ -n "$keep" ] || { "$cairn" cluster down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
