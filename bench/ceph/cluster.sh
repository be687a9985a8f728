#!/usr/bin/env bash
# Throwaway single-host Ceph cluster for side-by-side benchmarks against Cairn.
#
#   cluster.sh up DIR [--osds N] [--pg-num P] [--osd-size BYTES]
#                     [--memory-target BYTES] [--ssd] [--rbd-cache]
#   cluster.sh down DIR
#
# Everything (config, mon/mgr/osd data, sparse BlueStore files, logs, admin
# sockets) lives inside DIR. No systemd, no cephadm: 1 mon, 1 mgr, N OSDs are
# started directly in the background and recorded in DIR/pids as "NAME PID"
# (NAME = mon, mgr, osd.0, osd.1, ...; PID = the daemon process itself).
# Auth is disabled; the mon listens on 127.0.0.1 only.
#
# librbd's client cache is off by default (rbd cache = false), so a write is
# acknowledged only once every replica's OSD has committed it, as Cairn's
# are. --rbd-cache turns it on (Ceph's own default): writes are then
# acknowledged from the client's memory, not durable at acknowledgement, and
# the cluster's description says so.
set -euo pipefail

PROG=$(basename "$0")
PY=/usr/bin/python3 # the system python that ceph-common depends on

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

usage() {
    cat >&2 <<EOF
usage: $PROG up DIR [--osds N] [--pg-num P] [--osd-size BYTES] [--memory-target BYTES] [--ssd] [--rbd-cache]
       $PROG down DIR
EOF
    exit 2
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- pid bookkeeping -------------------------------------------------------

# pid_is_ours PID DIR: true iff PID is alive and its cmdline mentions DIR
# (every daemon we start gets "-c DIR/ceph.conf"), so a reused pid never matches.
pid_is_ours() {
    local pid=$1 dir=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ "$cmd" == *"$dir/"* ]]
}

live_pids() { # DIR -> "NAME PID" lines of daemons still alive
    local dir=$1 name pid
    [[ -f $dir/pids ]] || return 0
    while read -r name pid; do
        [[ -n ${name:-} ]] || continue
        if pid_is_ours "$pid" "$dir"; then echo "$name $pid"; fi
    done < "$dir/pids"
}

do_down() {
    local dir=$1 name pid left i n=0 phase
    if [[ ! -f $dir/pids ]]; then
        log "no $dir/pids; nothing to stop"
        return 0
    fi
    # OSDs first (while the mon is still there to hear they are going down;
    # with the mon gone each OSD waits osd_mon_shutdown_timeout = 5 s), then
    # mgr and mon. 30 s budget in total, then SIGKILL whatever is left.
    local deadline=$(($(date +%s) + 30))
    for phase in osd other; do
        while read -r name pid; do
            if [[ $phase == osd && $name != osd.* ]] || [[ $phase == other && $name == osd.* ]]; then
                continue
            fi
            log "SIGTERM $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            n=$((n + 1))
        done < <(live_pids "$dir")
        while (($(date +%s) < deadline)); do
            left=$(live_pids "$dir" | awk -v p="$phase" '(p == "osd") == ($1 ~ /^osd\./)')
            [[ -z $left ]] && break
            sleep 0.1
        done
    done
    left=$(live_pids "$dir")
    if [[ -n $left ]]; then
        while read -r name pid; do
            log "still alive after 30 s: SIGKILL $name (pid $pid)"
            kill -KILL "$pid" 2>/dev/null || true
        done <<< "$left"
        sleep 1
        left=$(live_pids "$dir")
        [[ -z $left ]] || die "could not stop: $left"
    fi
    rm -f "$dir/pids"
    log "stopped $n daemon(s)"
}

# --- up ----------------------------------------------------------------------

OSDS=3
PGNUM=32
OSDSIZE=$((8 << 30))
MEMTARGET=2684354560
SSD=0
RBD_CACHE=0
DIR=
CONF=

ceph_() { timeout 60 ceph -c "$CONF" --connect-timeout 30 "$@"; }

# quiet CMD...: run CMD, show its output only if it fails.
quiet() {
    local out
    if ! out=$("$@" 2>&1); then
        echo "$out" >&2
        return 1
    fi
}

# start_daemon NAME CMD...: run CMD in the foreground mode (-f) in a new
# session, detached from our stdio; record its pid in DIR/pids.
start_daemon() {
    local name=$1; shift
    local out="$DIR/$name.out" pid
    setsid "$@" -f < /dev/null >> "$out" 2>&1 &
    pid=$!
    # setsid(1) execs in place when we are not a process-group leader (the
    # usual case for a script), but fork()s otherwise: resolve to the real
    # daemon pid, i.e. the process whose exe is the daemon binary.
    local bin
    bin=$(basename "$1")
    local i comm
    for ((i = 0; i < 50; i++)); do
        comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
        if [[ $comm == "$bin"* ]]; then break; fi
        local child
        child=$(pgrep -P "$pid" -x "$bin" 2>/dev/null | head -n1 || true)
        if [[ -n $child ]]; then pid=$child; break; fi
        sleep 0.1
    done
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    [[ $comm == "$bin"* ]] || die "$name did not start (see $out and $DIR/$name.log)"
    echo "$name $pid" >> "$DIR/pids"
    log "started $name pid $pid"
}

UP_OK=0
cleanup_on_failure() {
    local rc=$?
    if [[ $UP_OK -ne 1 && -n $DIR ]]; then
        log "up failed (exit $rc); tearing down what was started"
        do_down "$DIR" || true
    fi
}

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

human_bytes() { # 2684354560 -> 2.5 GiB
    awk -v b="$1" 'BEGIN {
        split("B KiB MiB GiB TiB", u, " "); i = 1;
        while (b >= 1024 && i < 5) { b /= 1024; i++ }
        s = sprintf("%.1f", b); sub(/\.0$/, "", s); print s " " u[i] }'
}

# all PGs active+clean? prints a status line to stdout; returns 0 when done.
pgs_clean() {
    local want=$1 json
    json=$(ceph_ pg stat -f json 2>/dev/null) || { echo "pg stat failed"; return 1; }
    "$PY" - "$want" "$json" <<'PYEOF'
import json, sys
want = int(sys.argv[1])
d = json.loads(sys.argv[2])
d = d.get("pg_summary", d)
states = {s["name"]: s["num"] for s in d.get("num_pg_by_state", [])}
total = d.get("num_pgs", 0)
clean = states.get("active+clean", 0)
print(f"{clean}/{total} PGs active+clean (want >= {want}); states: {states}")
sys.exit(0 if total >= want and clean == total else 1)
PYEOF
}

do_up() {
    local t0 t_start
    t0=$(now)
    [[ $OSDS =~ ^[1-9][0-9]*$ ]] || die "--osds must be a positive integer"
    [[ $PGNUM =~ ^[1-9][0-9]*$ ]] || die "--pg-num must be a positive integer"
    [[ $OSDSIZE =~ ^[1-9][0-9]*$ ]] || die "--osd-size must be a positive integer (bytes)"
    [[ $MEMTARGET =~ ^[1-9][0-9]*$ ]] || die "--memory-target must be a positive integer (bytes)"
    for b in ceph ceph-mon ceph-mgr ceph-osd monmaptool rbd uuidgen setsid; do
        command -v "$b" > /dev/null || die "$b not found (run bench/ceph/install.sh)"
    done
    [[ -x $PY ]] || die "$PY not found"

    if [[ -e $DIR ]]; then
        [[ -d $DIR ]] || die "$DIR exists and is not a directory"
        if [[ -n $(live_pids "$DIR") ]]; then
            die "$DIR/pids lists live daemons; run '$PROG down $DIR' first"
        fi
        if [[ -n $(ls -A "$DIR") ]]; then
            # Only wipe something that is recognisably one of our cluster dirs.
            grep -qs "^# Generated by bench/ceph/cluster.sh" "$DIR/ceph.conf" ||
                die "$DIR is not empty and does not look like a cluster dir from this script; refusing to wipe it"
            log "wiping previous cluster in $DIR"
            rm -rf "${DIR:?}"/*
        fi
    fi
    mkdir -p "$DIR" "$DIR/run"
    trap cleanup_on_failure EXIT

    local size=$((OSDS < 3 ? OSDS : 3))
    local min_size=$((OSDS < 2 ? OSDS : 2))
    local fsid port version
    fsid=$(uuidgen)
    port=$(free_port)
    version=$(ceph --version | awk '{print $3}')
    local media_conf media_desc
    if [[ $SSD -eq 1 ]]; then
        # bluestore_debug_enforce_settings only switches BlueStore's own
        # *_hdd/*_ssd choices (deferred writes, throttle cost, alloc sizes,
        # cache ratios). The OSD op queue sharding is chosen from the
        # device's rotational flag separately, so pin the SSD values too.
        media_conf="bluestore debug enforce settings = ssd
osd op num shards = 8
osd op num threads per shard = 2"
        media_desc="SSD settings enforced (bluestore_debug_enforce_settings=ssd, 8 op shards x 2 threads; disk reports rotational)"
    else
        media_conf="# HDD defaults apply: the virtio disk reports rotational=1"
        media_desc="HDD defaults (rotational virtio disk)"
    fi
    local cache_conf cache_desc
    if [[ $RBD_CACHE -eq 1 ]]; then
        cache_conf="rbd cache = true"
        cache_desc="rbd cache on (writes acknowledged from the client's cache: NOT durable at acknowledgement)"
    else
        cache_conf="rbd cache = false"
        cache_desc="rbd cache off (writes acknowledged once durable on every replica)"
    fi
    CONF=$DIR/ceph.conf
    cat > "$CONF" <<EOF
# Generated by bench/ceph/cluster.sh for a throwaway benchmark cluster.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false

auth cluster required = none
auth service required = none
auth client required = none
# auth is off, so the Pacific global_id reclaim warning is noise
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
keyring = $DIR/keyring

run dir = $DIR/run
log file = $DIR/\$name.log
mon cluster log file = $DIR/cluster.log
log to stderr = false
err to stderr = true
crash dir = $DIR/crash

osd crush chooseleaf type = 0
osd pool default size = $size
osd pool default min size = $min_size
osd pool default pg autoscale mode = off
mon allow pool delete = true
mon warn on pool no redundancy = false

osd objectstore = bluestore
bluestore block create = true
bluestore block size = $OSDSIZE
osd memory target = $MEMTARGET
$media_conf

debug none = 0/0
debug lockdep = 0/0
debug context = 0/0
debug crush = 0/0
debug mds = 0/0
debug buffer = 0/0
debug timer = 0/0
debug filer = 0/0
debug striper = 0/0
debug objecter = 0/0
debug rados = 0/0
debug rbd = 0/0
debug rbd mirror = 0/0
debug rbd replay = 0/0
debug journaler = 0/0
debug objectcacher = 0/0
debug client = 0/0
debug osd = 0/0
debug optracker = 0/0
debug objclass = 0/0
debug filestore = 0/0
debug journal = 0/0
debug ms = 0/0
debug mon = 0/0
debug monc = 0/0
debug paxos = 0/0
debug tp = 0/0
debug auth = 0/0
debug crypto = 0/0
debug finisher = 0/0
debug reserver = 0/0
debug heartbeatmap = 0/0
debug perfcounter = 0/0
debug rgw = 0/0
debug asok = 0/0
debug throttle = 0/0
debug refs = 0/0
debug compressor = 0/0
debug bluestore = 0/0
debug bluefs = 0/0
debug bdev = 0/0
debug kstore = 0/0
debug rocksdb = 0/0
debug leveldb = 0/0
debug memdb = 0/0
debug fuse = 0/0
debug mgr = 0/0
debug mgrc = 0/0
debug dpdk = 0/0
debug prioritycache = 0/0

[mon]
mon data = $DIR/mon.\$id
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid
mon data avail warn = 1
mon data avail crit = 0

[mgr]
mgr data = $DIR/mgr.\$id
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid

[osd]
osd data = $DIR/osd.\$id
admin socket = $DIR/\$name.asok
pid file = $DIR/\$name.pid

[client]
log file = $DIR/client.log
$cache_conf
EOF
    : > "$DIR/pids"
    log "config: $CONF (mon on 127.0.0.1:$port, fsid $fsid)"

    # --- mon
    t_start=$(now)
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$DIR/monmap" > /dev/null ||
        die "monmaptool failed"
    ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" > "$DIR/mon.mkfs.out" 2>&1 ||
        die "ceph-mon --mkfs failed: $(tail -n 5 "$DIR/mon.mkfs.out")"
    start_daemon mon ceph-mon -c "$CONF" -i a
    local i
    for ((i = 0; i < 60; i++)); do
        if timeout 10 ceph -c "$CONF" --connect-timeout 5 mon stat > /dev/null 2>&1; then break; fi
        pid_is_ours "$(awk '$1=="mon"{print $2}' "$DIR/pids")" "$DIR" || die "mon died (see $DIR/mon.a.log, $DIR/mon.out)"
        sleep 0.5
    done
    ((i < 60)) || die "mon did not answer within 30 s (see $DIR/mon.a.log)"
    log "mon up after $(elapsed "$t_start") s"

    # The devicehealth mgr module would create an extra 1-PG pool
    # (device_health_metrics) and scrape SMART data; keep the cluster minimal.
    quiet ceph_ config set mgr mgr/devicehealth/enable_monitoring false --force ||
        die "ceph config set failed"

    # --- mgr
    mkdir -p "$DIR/mgr.x"
    start_daemon mgr ceph-mgr -c "$CONF" -i x

    # --- osds
    local id uuid
    for ((n = 0; n < OSDS; n++)); do
        t_start=$(now)
        uuid=$(uuidgen)
        id=$(ceph_ osd create "$uuid") || die "ceph osd create failed"
        [[ $id == "$n" ]] || die "expected osd id $n, got '$id' (fresh cluster?)"
        mkdir -p "$DIR/osd.$id"
        ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" > "$DIR/osd.$id.mkfs.out" 2>&1 ||
            die "ceph-osd --mkfs for osd.$id failed: $(tail -n 5 "$DIR/osd.$id.mkfs.out")"
        start_daemon "osd.$id" ceph-osd -c "$CONF" -i "$id"
        log "osd.$id created and started in $(elapsed "$t_start") s"
    done

    # wait for all OSDs up+in and the mgr available
    t_start=$(now)
    local st
    for ((i = 0; i < 240; i++)); do
        st=$(ceph_ osd stat -f json 2>/dev/null || true)
        if [[ -n $st ]] && "$PY" -c '
import json,sys
d=json.loads(sys.argv[1]); d=d.get("osdmap",d); n=int(sys.argv[2])
sys.exit(0 if d["num_up_osds"]>=n and d["num_in_osds"]>=n else 1)' "$st" "$OSDS"; then
            break
        fi
        while read -r name pid; do
            pid_is_ours "$pid" "$DIR" || die "$name (pid $pid) died; see $DIR/$name.log and $DIR/$name.out"
        done < "$DIR/pids"
        sleep 0.5
    done
    ((i < 240)) || die "OSDs not all up+in after 120 s: $st"
    for ((i = 0; i < 120; i++)); do
        if ceph_ mgr stat -f json 2>/dev/null | grep -q '"available": *true'; then break; fi
        sleep 0.5
    done
    ((i < 120)) || die "mgr not available after 60 s (see $DIR/mgr.x.log, $DIR/mgr.out)"
    log "$OSDS OSD(s) up+in, mgr available after $(elapsed "$t_start") s"

    # --- pool
    quiet ceph_ osd pool create rbd "$PGNUM" "$PGNUM" replicated || die "pool create failed"
    quiet ceph_ osd pool set rbd pg_autoscale_mode off || die "pool set pg_autoscale_mode failed"
    quiet ceph_ osd pool application enable rbd rbd || die "pool application enable failed"

    t_start=$(now)
    local msg deadline
    deadline=$(($(date +%s) + 300))
    while :; do
        if msg=$(pgs_clean "$PGNUM"); then break; fi
        if (($(date +%s) >= deadline)); then
            die "timeout (300 s) waiting for PGs active+clean: $msg"
        fi
        while read -r name pid; do
            pid_is_ours "$pid" "$DIR" || die "$name (pid $pid) died; see $DIR/$name.log and $DIR/$name.out"
        done < "$DIR/pids"
        sleep 1
    done
    log "$msg after $(elapsed "$t_start") s"
    timeout 120 rbd -c "$CONF" pool init rbd || die "rbd pool init failed/timed out"

    local desc
    local plural=s; ((OSDS == 1)) && plural=
    desc="Ceph $version (pacific), $OSDS BlueStore OSD$plural on sparse $(human_bytes "$OSDSIZE") file$plural, 1 mon + 1 mgr, pool rbd size $size min_size $min_size, $PGNUM PGs, auth none, osd_memory_target $(human_bytes "$MEMTARGET"), $media_desc, $cache_desc"
    echo "$desc" > "$DIR/description.txt"
    UP_OK=1
    echo "$desc"
    echo "cluster ready in $(elapsed "$t0") s; conf: $CONF; pids: $DIR/pids"
}

# --- main --------------------------------------------------------------------

[[ $# -ge 2 ]] || usage
cmd=$1
DIR=$(realpath -m -- "$2")
shift 2
[[ $DIR != / ]] || die "refusing to use / as DIR"

case $cmd in
up)
    while [[ $# -gt 0 ]]; do
        case $1 in
        --osds) OSDS=${2:?}; shift 2 ;;
        --pg-num) PGNUM=${2:?}; shift 2 ;;
        --osd-size) OSDSIZE=${2:?}; shift 2 ;;
        --memory-target) MEMTARGET=${2:?}; shift 2 ;;
        --ssd) SSD=1; shift ;;
        --rbd-cache) RBD_CACHE=1; shift ;;
        *) usage ;;
        esac
    done
    do_up
    ;;
down)
    [[ $# -eq 0 ]] || usage
    do_down "$DIR"
    ;;
*) usage ;;
esac
