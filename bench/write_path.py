#!/usr/bin/env python3
"""Where a replicated 4 KiB write's time and CPU go: the store alone, the
cluster with no disk work (MemStore OSDs), and the cluster on BlueStore, in
one run, alternating, so the disk's and the VM's drift hits every leg.

Per round, each leg on its own fresh setup:
  store      `cairn bench store` (one BlueStore, no network, no OSD) at
             4k-randwrite-1 and 4k-randwrite-32; CPU per op is the whole
             process (store threads and load generator).
  memstore   3 MemStore OSDs (pool size 3, 32 PGs), `cairn bench` 4K
             randwrite at QD1 and QD32: the network, the OSDs' event loops,
             PG logic and the client, with nothing durable. This is the
             floor the cluster pays on top of its stores.
  bluestore  the same on 3 BlueStore OSDs.
Both clusters get a 1 GiB image written through first.
OSD CPU per op is the three OSDs' CPU over the measured window divided by
client writes (what `cairn bench` reports). Summary per point: medians over
the rounds, the cluster's mean over the store's (issue 19's QD1 target is
2.0x), and the floor's share of the cluster's latency and CPU.

With --against OLD, a before/after run instead: each round runs the store
alone, then the BlueStore cluster with OLD and with --cairn, in turns (ABBA
over the rounds), and prints each side's medians and their ratios to the
store alone measured in the same rounds.

With --nbd-floor, also the NBD hop alone: fio's nbd engine at QD1 and QD32
4K randread against nbdkit's null plugin (no storage, no network behind
it), the least any NBD gateway process adds to a client library's latency
on this machine (issue 19's NBD target is +15%).

--rw randread measures 4K random reads on every leg instead (the image and
the store's file are written first), for changes on the read path.

Usage: python3 bench/write_path.py [--cairn target/release/cairn]
       [--dir /tmp/cairn-write-path] [--rounds 3] [--runtime 15] [--rw randread]
       [--nbd-floor] [--against OLD_BINARY] [--json]
Needs a release build; --nbd-floor needs fio and nbdkit.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QDS = (1, 32)


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def store_leg(a):
    d = os.path.join(a.dir, "store")
    points = ",".join(f"4k-{a.rw}-{qd}" for qd in QDS)
    out = run([a.cairn, "--json", "bench", "store", "--dir", d, "--force", "--size", "1G",
               "--runtime", str(a.runtime), "--ramp", "2", "--points", points, "--no-fio"])
    shutil.rmtree(d, ignore_errors=True)
    res = {}
    for row in json.loads(out)["points"]:
        res[row["iodepth"]] = {
            "iops": row["iops"],
            "mean_us": row["mean_us"],
            "p9999_us": row["p99.99_us"],
            "cpu_us_per_op": row.get("cpu_us_per_op"),
            "csw_per_op": row.get("context_switches_per_op"),
        }
    return res


def cluster_leg(a, store, cairn=None):
    cairn = cairn or a.cairn
    d = os.path.join(a.dir, store)
    run([cairn, "cluster", "down", "--dir", d], check=False)
    shutil.rmtree(d, ignore_errors=True)
    up = [cairn, "cluster", "up", "--osds", "3", "--pg-num", "32", "--store", store,
          "--timeout", "120", "--dir", d]
    if store == "bluestore":
        up += ["--set", "osd.bluestore_block_size=2147483648"]
    run(up)
    conf = ["--conf", os.path.join(d, "cairn.toml")]
    res = {}
    try:
        run([cairn, *conf, "image", "create", "rbd/b", "--size", "1G"])
        # Written through first on both: every write then lands on an
        # existing object and block, as in the store leg.
        run([cairn, *conf, "bench", "--image", "rbd/b", "--rw", "write", "--bs", "1M",
            "--iodepth", "8", "--runtime", "1", "--ramp", "0", "--precondition"])
        for qd in QDS:
            out = run([cairn, *conf, "--json", "bench", "--image", "rbd/b", "--rw",
                       a.rw, "--bs", "4k", "--iodepth", str(qd), "--runtime",
                       str(a.runtime), "--ramp", "2"])
            v = json.loads(out)
            w, cpu = v["read" if a.rw == "randread" else "write"], v.get("cpu", {})
            res[qd] = {
                "iops": w["iops"],
                "mean_us": w["lat"]["mean_us"],
                "p9999_us": w["lat"]["p99.99_us"],
                "cpu_us_per_op": cpu.get("osd_cpu_us_per_op"),
                "csw_per_op": cpu.get("osd_context_switches_per_op"),
                "client_cpu_us_per_op": cpu.get("client_cpu_us_per_op"),
            }
    finally:
        run([cairn, "cluster", "down", "--dir", d], check=False)
        shutil.rmtree(d, ignore_errors=True)  # block files of GiBs each
    return res


def nbd_floor_leg(a):
    sock = os.path.join(a.dir, "null.sock")
    os.makedirs(a.dir, exist_ok=True)
    if os.path.exists(sock):
        os.unlink(sock)  # a leftover: waiting for it below would not wait
    srv = subprocess.Popen(["nbdkit", "--foreground", "-U", sock, "null", "size=1G"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = {}
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        else:
            sys.exit("nbdkit did not create its socket")
        for qd in QDS:
            out = run(["fio", "--name=floor", "--ioengine=nbd",
                       f"--uri=nbd+unix:///?socket={sock}", "--rw=randread", "--bs=4k",
                       f"--iodepth={qd}", "--size=1G", f"--runtime={a.runtime}",
                       "--ramp_time=2", "--time_based", "--output-format=json"])
            r = json.loads(out[out.index("{"):])["jobs"][0]["read"]
            res[qd] = {"iops": r["iops"], "mean_us": r["lat_ns"]["mean"] / 1e3}
    finally:
        srv.terminate()
        srv.wait()
    return res


def med(rounds, leg, qd, key):
    vals = [r[leg][qd][key] for r in rounds if r[leg][qd].get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, unit=""):
    return "-" if v is None else f"{v:,.0f}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target/release/cairn"))
    ap.add_argument("--dir", default="/tmp/cairn-write-path")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--nbd-floor", action="store_true")
    ap.add_argument("--against", metavar="OLD_BINARY",
                    help="before/after: the BlueStore cluster with OLD_BINARY and --cairn")
    ap.add_argument("--rw", choices=("randwrite", "randread"), default="randwrite",
                    help="the 4K op measured on every leg (the image is written first)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.nbd_floor and not (shutil.which("fio") and shutil.which("nbdkit")):
        sys.exit("--nbd-floor needs fio and nbdkit (apt-get install -y fio nbdkit)")
    if a.against:
        if a.nbd_floor:
            sys.exit("--against compares two binaries on the BlueStore cluster; run"
                     " --nbd-floor on its own")
        if not os.access(a.against, os.X_OK):
            sys.exit(f"--against {a.against}: not an executable file")
        return against(a)
    rounds = []
    for i in range(a.rounds):
        r = {"store": store_leg(a), "memstore": cluster_leg(a, "memstore"),
             "bluestore": cluster_leg(a, "bluestore")}
        if a.nbd_floor:
            r["nbd_floor"] = nbd_floor_leg(a)
        rounds.append(r)
        if not a.json:
            for leg in ("store", "memstore", "bluestore"):
                for qd in QDS:
                    show(f"round {i+1} {leg:9} QD{qd:<2}", r[leg][qd])
            for qd in QDS if a.nbd_floor else ():
                x = r["nbd_floor"][qd]
                print(f"round {i+1} nbd floor QD{qd:<2} {x['iops']:8.0f} IOPS"
                      f"  mean {x['mean_us']:7.1f} µs", flush=True)
    summary = {}
    for qd in QDS:
        s = {leg: {k: med(rounds, leg, qd, k) for k in ("iops", "mean_us", "cpu_us_per_op")}
             for leg in ("store", "memstore", "bluestore")}
        blue, store, floor = s["bluestore"], s["store"], s["memstore"]
        s["cluster_over_store_latency"] = blue["mean_us"] / store["mean_us"]
        s["floor_over_store_latency"] = floor["mean_us"] / store["mean_us"]
        if blue["cpu_us_per_op"]:
            s["writes_per_osd_cpu_second"] = 1e6 / blue["cpu_us_per_op"]
            if floor["cpu_us_per_op"] and store["cpu_us_per_op"]:
                s["floor_plus_three_stores_cpu_us"] = (
                    floor["cpu_us_per_op"] + 3 * store["cpu_us_per_op"])
        if a.nbd_floor:
            s["nbd_floor_mean_us"] = med(rounds, "nbd_floor", qd, "mean_us")
        summary[qd] = s
    if a.json:
        print(json.dumps({"rounds": rounds, "summary": summary}, indent=1))
        return
    print("\nmedians over the rounds")
    for qd, s in summary.items():
        b, st, fl = s["bluestore"], s["store"], s["memstore"]
        print(f"QD{qd}: cluster {fmt(b['mean_us'], ' µs')} = {s['cluster_over_store_latency']:.2f}x"
              f" the store alone ({fmt(st['mean_us'], ' µs')}); no-disk floor"
              f" {fmt(fl['mean_us'], ' µs')} = {s['floor_over_store_latency']:.2f}x")
        if "writes_per_osd_cpu_second" in s:
            print(f"      OSD CPU {fmt(b['cpu_us_per_op'], ' µs')}/write"
                  f" ({s['writes_per_osd_cpu_second']:,.0f} writes per OSD CPU-s);"
                  f" floor {fmt(fl['cpu_us_per_op'], ' µs')} + 3 x store"
                  f" {fmt(st['cpu_us_per_op'], ' µs')}"
                  + (f" = {s['floor_plus_three_stores_cpu_us']:,.0f} µs"
                     if "floor_plus_three_stores_cpu_us" in s else ""))
        if s.get("nbd_floor_mean_us") is not None:
            print(f"      NBD hop alone (fio nbd -> nbdkit null, randread):"
                  f" {s['nbd_floor_mean_us']:.1f} µs mean")


def show(label, x):
    print(f"{label:22} {x['iops']:8.0f} IOPS  mean {x['mean_us']:7.0f} µs"
          f"  p99.99 {x['p9999_us']:8.0f}  CPU {fmt(x['cpu_us_per_op'])} µs/op"
          f"  csw {x['csw_per_op'] or 0:.2f}/op", flush=True)


def against(a):
    """Old and new binary on the BlueStore cluster, alternating (ABBA), with
    the store alone (new binary) in every round as the yardstick."""
    sides = {"old": a.against, "new": a.cairn}
    rounds = []
    for i in range(a.rounds):
        r = {"store": store_leg(a)}
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for side in order:
            r[side] = cluster_leg(a, "bluestore", sides[side])
        rounds.append(r)
        for leg in () if a.json else ("store",) + order:
            for qd in QDS:
                show(f"round {i+1} {leg} QD{qd}", r[leg][qd])
    keys = ("iops", "mean_us", "p9999_us", "cpu_us_per_op", "csw_per_op")
    summary = {qd: {leg: {k: med(rounds, leg, qd, k) for k in keys}
                    for leg in ("store", "old", "new")} for qd in QDS}
    if a.json:
        print(json.dumps({"rounds": rounds, "summary": summary}, indent=1))
        return
    print("\nmedians over the rounds")
    for qd, s in summary.items():
        st = s["store"]["mean_us"]
        for leg in ("old", "new"):
            x = s[leg]
            cpu, csw = x["cpu_us_per_op"], x["csw_per_op"]
            print(f"QD{qd} {leg}: mean {fmt(x['mean_us'], ' µs')} = {x['mean_us'] / st:.2f}x the"
                  f" store ({fmt(st, ' µs')}), {fmt(x['iops'])} IOPS, OSD CPU"
                  f" {fmt(cpu, ' µs')}/op"
                  + (f" ({1e6 / cpu:,.0f} per OSD CPU-s)" if cpu else "")
                  + (f", {csw:.2f} switches/op" if csw is not None else ""))


if __name__ == "__main__":
    main()
