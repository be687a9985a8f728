#!/usr/bin/env python3
"""What the NBD gateway costs: the same 4 KiB random load through the client
library (`cairn bench`) and through `cairn nbd` (fio's nbd engine on its Unix
socket), alternating on one cluster, so the disk's drift hits both sides.

On a fresh local 3-OSD cluster (pool size 3, 32 PGs) with a 1 GiB image
written through first (created without the exclusive lock, which would
hold one leg's writes until the other closes the image), `cairn nbd` exports the image and each run is a pair:
`cairn bench --rw RW --iodepth QD` for --runtime seconds, then fio with the
same spec on the export. Per leg: IOPS, mean / p50 / p99.99 latency, OSD CPU
µs per op (utime+stime of the OSDs over the leg, /proc/PID/stat) and, for
the NBD leg, the gateway's CPU µs per op. Per pair: the NBD leg's mean over
the library's ("gap"). The median pair is the number to quote.

With --floor, each run adds a third leg: the same fio job on nbdkit's
`memory` plugin (an NBD server that keeps the disk in RAM, on a Unix socket
of its own), which measures what the NBD transport alone costs on this
machine: fio's nbd engine, two socket hops and a server's wake-ups, with no
storage behind them. A gap at or under that floor is the transport's, not
the gateway's. Needs nbdkit (apt-get install -y nbdkit).

Usage: python3 bench/nbd_gateway.py [--cairn target/release/cairn]
       [--dir /tmp/cairn-nbd-bench] [--runs 3] [--runtime 20] [--iodepth 1]
       [--rw randwrite] [--set osd.key=value ...] [--floor] [--json]
Needs a release build and fio with the nbd engine.
"""
import argparse, json, os, shutil, signal, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def wait_for_socket(path, server):
    """Up to 10 s for `server` to create its socket at `path`."""
    for _ in range(100):
        if os.path.exists(path):
            return
        time.sleep(0.1)
    sys.exit(f"{server} did not create its socket")


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def leg(name, cmd, parse, osds, gateway):
    hz = os.sysconf("SC_CLK_TCK")
    o0, g0 = cpu_ticks(osds), cpu_ticks([gateway])
    out = run(cmd)
    o1, g1 = cpu_ticks(osds), cpu_ticks([gateway])
    r = parse(out)
    ops = r["ops"]
    r["path"] = name
    r["osd_cpu_us_per_op"] = (o1 - o0) / hz * 1e6 / ops if ops else None
    r["gateway_cpu_us_per_op"] = (g1 - g0) / hz * 1e6 / ops if ops else None
    return r


def parse_bench(rw, ramp, runtime):
    def parse(out):
        d = json.loads(out)["write" if "write" in rw else "read"]
        lat = d["lat"]
        # ops over ramp + runtime: the CPU reading covers both
        return {
            "iops": d["iops"],
            "ops": d["iops"] * (ramp + runtime),
            "mean_us": lat["mean_us"],
            "p50_us": lat["p50_us"],
            "p9999_us": lat["p99.99_us"],
        }

    return parse


def parse_fio(rw, ramp, runtime):
    def parse(out):
        # fio may print notes before its JSON
        job = json.loads(out[out.index("{"):])["jobs"][0]
        d = job["write" if "write" in rw else "read"]
        pct = d["clat_ns"].get("percentile", {})
        return {
            "iops": d["iops"],
            "ops": d["iops"] * (ramp + runtime),
            "mean_us": d["lat_ns"]["mean"] / 1e3,
            "p50_us": pct.get("50.000000", 0) / 1e3,
            "p9999_us": pct.get("99.990000", 0) / 1e3,
        }

    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target/release/cairn"))
    ap.add_argument("--dir", default="/tmp/cairn-nbd-bench")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=20)
    ap.add_argument("--ramp", type=int, default=2)
    ap.add_argument("--iodepth", type=int, default=1)
    ap.add_argument("--rw", default="randwrite", choices=["randwrite", "randread"])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--floor", action="store_true",
                    help="also run the fio job on nbdkit's memory plugin each run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio is not installed (apt-get install -y fio)")
    if a.floor and not shutil.which("nbdkit"):
        sys.exit("--floor needs nbdkit (apt-get install -y nbdkit)")
    c = a.cairn
    run([c, "cluster", "down", "--dir", a.dir], check=False)
    shutil.rmtree(a.dir, ignore_errors=True)
    up = [c, "cluster", "up", "--osds", "3", "--pg-num", "32", "--timeout", "120", "--dir", a.dir]
    for s in a.set:
        up += ["--set", s]
    run(up)
    conf = ["--conf", os.path.join(a.dir, "cairn.toml")]
    gateway = None
    floor_server = None
    try:
        # Both legs write the image in turn while the gateway keeps it open:
        # with the exclusive lock (one live writer at a time), the library's
        # second leg would wait for the gateway to close it.
        run([c, *conf, "image", "create", "rbd/b", "--size", "1G", "--image-feature", "none"])
        run([c, *conf, "bench", "--image", "rbd/b", "--rw", "write", "--bs", "1M",
             "--iodepth", "8", "--runtime", "3", "--ramp", "0", "--precondition"])
        with open(os.path.join(a.dir, "cluster.json")) as f:
            osds = [d["pid"] for d in json.load(f)["daemons"] if d["name"].startswith("osd")]
        sock = os.path.join(a.dir, "nbd.sock")
        log = open(os.path.join(a.dir, "nbd.log"), "w")
        gw = subprocess.Popen([c, *conf, "nbd", "--image", "rbd/b", "--socket", sock],
                              stdout=log, stderr=log)
        gateway = gw.pid
        wait_for_socket(sock, "cairn nbd")
        time.sleep(3)
        bench = [c, *conf, "--json", "bench", "--image", "rbd/b", "--rw", a.rw, "--bs", "4k",
                 "--iodepth", str(a.iodepth), "--runtime", str(a.runtime),
                 "--ramp", str(a.ramp)]
        fio = ["fio", "--name=nbd", "--ioengine=nbd", f"--uri=nbd+unix:///b?socket={sock}",
               f"--rw={a.rw}", "--bs=4k", f"--iodepth={a.iodepth}", "--size=1G",
               f"--runtime={a.runtime}", f"--ramp_time={a.ramp}", "--time_based",
               "--randrepeat=0", "--norandommap", "--output-format=json"]
        if a.floor:
            floor_sock = os.path.join(a.dir, "floor.sock")
            floor_server = subprocess.Popen(
                ["nbdkit", "-f", "--exit-with-parent", "--unix", floor_sock, "memory", "1G"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_socket(floor_sock, "nbdkit")
            floor_fio = [f"--uri=nbd+unix:///?socket={floor_sock}" if x.startswith("--uri=")
                         else x for x in fio]
        pairs = []
        for i in range(a.runs):
            lib = leg("library", bench, parse_bench(a.rw, a.ramp, a.runtime), osds, gateway)
            nbd = leg("nbd", fio, parse_fio(a.rw, a.ramp, a.runtime), osds, gateway)
            lib["gateway_cpu_us_per_op"] = None
            pair = {"run": i + 1, "library": lib, "nbd": nbd,
                    "gap": nbd["mean_us"] / lib["mean_us"] - 1}
            legs = [lib, nbd]
            if a.floor:
                # Its "gateway CPU" is nbdkit's.
                floor = leg("floor", floor_fio, parse_fio(a.rw, a.ramp, a.runtime), [],
                            floor_server.pid)
                floor["osd_cpu_us_per_op"] = None  # no OSD behind it
                pair["floor"] = floor
                pair["gap_us"] = nbd["mean_us"] - lib["mean_us"]
                legs.append(floor)
            pairs.append(pair)
            if not a.json:
                for r in legs:
                    g = r["gateway_cpu_us_per_op"]
                    print(f"run {i+1} {r['path']:8} {r['iops']:8.0f} IOPS  mean {r['mean_us']:7.0f} µs"
                          f"  p50 {r['p50_us']:7.0f}  p99.99 {r['p9999_us']:8.0f}"
                          + (f"  OSD CPU {r['osd_cpu_us_per_op']:5.0f} µs/op"
                             if r["osd_cpu_us_per_op"] is not None else "")
                          + (f"  {'server' if r['path'] == 'floor' else 'gateway'} CPU"
                             f" {g:4.0f} µs/op" if g is not None else ""), flush=True)
        gaps = sorted(p["gap"] for p in pairs)
        median = gaps[len(gaps) // 2]
        if a.json:
            print(json.dumps({"rw": a.rw, "iodepth": a.iodepth, "pairs": pairs,
                              "median_gap": median}, indent=1))
        else:
            print(f"NBD mean over library mean: {', '.join(f'{g*100:+.0f}%' for g in gaps)}"
                  f" (median {median*100:+.0f}%)")
            if a.floor:
                print("NBD minus library, against a round trip to nbdkit memory (µs): "
                      + ", ".join(f"{p['gap_us']:.0f} vs {p['floor']['mean_us']:.0f}"
                                  for p in pairs))
    finally:
        if gateway:
            os.kill(gateway, signal.SIGTERM)
        if floor_server:
            floor_server.terminate()
            floor_server.wait()
        run([c, "cluster", "down", "--dir", a.dir], check=False)
        shutil.rmtree(a.dir, ignore_errors=True)  # block files of GiBs each


if __name__ == "__main__":
    main()
