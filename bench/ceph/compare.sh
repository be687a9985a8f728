#!/usr/bin/env bash
# Cairn and Ceph side by side on this machine, one spec:
#
#   bash bench/ceph/compare.sh SPEC.toml OUT [--ssd] [--rbd-cache]
#
# 1. checks the spec (nothing runs if it is bad);
# 2. installs Ceph from Debian's packages if needed (install.sh);
# 3. starts a throwaway Ceph cluster with the spec's OSD and PG counts
#    (cluster.sh up OUT/ceph-cluster), runs the spec against it through
#    fio's rbd engine (cairn bench matrix --ceph), stops exactly the
#    daemons it started and removes their files;
# 4. runs the same spec on a fresh Cairn cluster (OUT/cairn);
# 5. measures raw fio on a file of the same disk (OUT/raw-fio.txt);
# 6. prints cairn bench compare of Ceph (A) against Cairn (B) and writes it
#    to OUT/compare.md.
#
# --ssd makes Ceph apply its SSD settings (bluestore debug enforce settings
# = ssd); the virtio disk here reports rotational=1, so by default Ceph
# uses its HDD defaults. Which one was used is in the report.
#
# Ceph runs with librbd's cache off (rbd cache = false), so both sides
# acknowledge a write only once it is durable on every replica.
# --rbd-cache turns it on; Ceph's writes are then acknowledged from the
# client's memory, and its description in the report says they were not
# durable at acknowledgement.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 SPEC.toml OUT [--ssd] [--rbd-cache]" >&2
  exit 2
fi
spec=$(realpath "$1")
out=$(realpath -m "$2")
ceph_opts=()
for opt in "${@:3}"; do
  case $opt in
  --ssd | --rbd-cache) ceph_opts+=("$opt") ;;
  *) echo "$0: unknown option $opt (want --ssd or --rbd-cache)" >&2; exit 2 ;;
  esac
done
cairn=${CAIRN:-$root/target/release/cairn}
if [ ! -x "$cairn" ]; then
  (cd "$root" && cargo build --release)
fi
"$cairn" bench matrix --spec "$spec" --out "$out/cairn" --dry-run >/dev/null
# The Ceph cluster gets the spec's OSD and PG counts and Cairn's BlueStore
# block size (what the spec's capacity check used).
read -r osds pg_num osd_size < <(/usr/bin/python3 - "$spec" <<'PY'
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb")).get("cluster", {})
size = 4 << 30
for kv in c.get("set", []):
    key, _, value = kv.partition("=")
    if key.strip() == "osd.bluestore_block_size":
        size = int(value)
print(c.get("osds", 3), c.get("pg_num", 32), size)
PY
)
mkdir -p "$out"

bash "$here/install.sh"
cluster="$out/ceph-cluster"
trap 'bash "$here/cluster.sh" down "$cluster" >/dev/null 2>&1 || true' EXIT
bash "$here/cluster.sh" up "$cluster" --osds "$osds" --pg-num "$pg_num" --osd-size "$osd_size" "${ceph_opts[@]}"
"$cairn" bench matrix --spec "$spec" --out "$out/ceph" --ceph "$cluster" --force
bash "$here/cluster.sh" down "$cluster"
trap - EXIT
rm -rf "$cluster"

"$cairn" bench matrix --spec "$spec" --out "$out/cairn" --force

summarize='
import json, sys
job = json.load(sys.stdin)["jobs"][0]
d = job["read"] if job["read"]["total_ios"] else job["write"]
clat = d["clat_ns"]
print("%s 4K qd16: %.0f IOPS, mean %.0f us, p99.99 %.0f us"
      % (sys.argv[1], d["iops"], clat["mean"] / 1000, clat["percentile"]["99.990000"] / 1000))
'
{
  echo "raw fio on $out/raw.dat (1 GiB file on the same disk), direct=1, io_uring, 20 s"
  for rw in randread randwrite; do
    fio --name=raw --filename="$out/raw.dat" --size=1G --rw=$rw --bs=4k --iodepth=16 \
      --direct=1 --ioengine=io_uring --randrepeat=0 --norandommap --ramp_time=5 \
      --runtime=20 --time_based --output-format=json | /usr/bin/python3 -c "$summarize" $rw \
      || echo "$rw: raw fio failed"
  done
} | tee "$out/raw-fio.txt"
rm -f "$out/raw.dat"

"$cairn" bench compare "$out/ceph/results.json" "$out/cairn/results.json" --out "$out/compare.md"
echo "tables: $out/ceph/report.md $out/cairn/report.md $out/compare.md"
