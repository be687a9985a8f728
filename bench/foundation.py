#!/usr/bin/env python3
"""Foundation benchmark: Cairn vs raw disk, all in one run.

Runs, on this machine and disk, in this order:
  1. raw fio on a file (direct=1): 4 KiB randwrite / randread at iodepth 1 and 32;
  2. for each store in --stores (default bluestore, then filestore): a fresh
     local 3-OSD Cairn cluster (size 3) and `cairn bench` for the same points;
  3. fio's nbd engine through `cairn nbd` for the same points (first store only).
Prints a markdown table with the exact commands, OSD CPU seconds and RSS, and
the BlueStore-vs-FileStore differences (the source documents' experiment).

Usage: python3 bench/foundation.py [--runtime 15] [--dir /tmp/cairn-bench] [--stores bluestore,filestore]
Needs a release build (cargo build --release) and fio.
"""
import argparse, json, os, platform, shutil, signal, socket, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN = os.path.join(ROOT, "target", "release", "cairn")
POINTS = [("randwrite", 1), ("randwrite", 32), ("randread", 1), ("randread", 32)]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def fio_json(args):
    out = run(["fio", "--output-format=json"] + args)
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job


def fio_point(job, rw):
    d = job["write" if "write" in rw else "read"]
    lat = d["clat_ns"]
    pct = lat.get("percentile", {})
    return {
        "iops": d["iops"],
        "mean_us": d["lat_ns"]["mean"] / 1000,
        "p99_us": pct.get("99.000000", 0) / 1000,
        "p9999_us": pct.get("99.990000", 0) / 1000,
    }


def daemon_pids(cluster_dir):
    with open(os.path.join(cluster_dir, "cluster.json")) as f:
        return {d["name"]: d["pid"] for d in json.load(f)["daemons"]}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def cluster_points(args, store, rt, nbd):
    rows, cmds = [], []
    cdir = os.path.join(args.dir, "cluster-" + store)
    block = size_bytes(args.size) * 3 // 2 + (1 << 30)
    run([CAIRN, "cluster", "up", "--osds", "3", "--dir", cdir, "--store", store,
         "--set", f"osd.bluestore_block_size={block}"])
    env = dict(os.environ, CAIRN_CONF=os.path.join(cdir, "cairn.toml"))
    label = f"cairn bench ({store})"
    try:
        run([CAIRN, "image", "create", "rbd/bench", "--size", args.size], env=env)
        # Precondition: write the whole image once (not measured), so reads
        # hit written data and writes overwrite existing objects.
        run([CAIRN, "bench", "--image", "rbd/bench", "--rw", "write", "--bs", "4M", "--iodepth",
             "8", "--runtime", "1", "--ramp", "0", "--precondition"], env=env)
        pids = daemon_pids(cdir)
        osds = [p for n, p in pids.items() if n.startswith("osd.")]
        for rw, qd in POINTS:
            cmd = [CAIRN, "--json", "bench", "--image", "rbd/bench", "--rw", rw, "--bs", "4k",
                   "--iodepth", str(qd), "--runtime", str(args.runtime), "--ramp", str(args.ramp)]
            cpu0 = sum(cpu_seconds(p) for p in osds)
            rep = json.loads(run(cmd, env=env))
            cpu1 = sum(cpu_seconds(p) for p in osds)
            d = rep["write" if "write" in rw else "read"]
            point = {"iops": d["iops"], "mean_us": d["lat"]["mean_us"], "p99_us": d["lat"]["p99_us"],
                     "p9999_us": d["lat"]["p99.99_us"],
                     "cpu": cpu1 - cpu0}
            rows.append((label, rw, qd, point))
            if qd == 32 and rw == "randwrite":
                cmds.append("CAIRN_CONF=... " + " ".join(cmd[cmd.index("bench"):]).replace(CAIRN, "cairn"))
        if nbd:
            sock = os.path.join(args.dir, "nbd.sock")
            gw = subprocess.Popen([CAIRN, "nbd", "--image", "rbd/bench", "--socket", sock], env=env,
                                  stderr=subprocess.PIPE, text=True)
            gw.stderr.readline()
            uri = f"nbd+unix:///bench?socket={sock}"
            try:
                for rw, qd in POINTS:
                    cmd = ["fio", "--name=nbd", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
                           f"--iodepth={qd}", f"--size={args.size}", "--randrepeat=0", "--norandommap"] + rt
                    rows.append((f"fio nbd engine via cairn nbd ({store})", rw, qd,
                                 fio_point(fio_json(cmd[1:]), rw)))
                    if qd == 32 and rw == "randwrite":
                        cmds.append(" ".join(cmd))
            finally:
                gw.send_signal(signal.SIGTERM)
                gw.wait()
        rss = {n: rss_mib(p) for n, p in pids.items()}
    finally:
        run([CAIRN, "cluster", "down", "--dir", cdir])
    return rows, cmds, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--ramp", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/cairn-bench")
    ap.add_argument("--size", default="4G")
    ap.add_argument("--stores", default="bluestore,filestore")
    args = ap.parse_args()
    if not os.path.exists(CAIRN):
        sys.exit("build first: cargo build --release")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    rows, cmds = [], []
    rt = ["--runtime=%d" % args.runtime, "--ramp_time=%d" % args.ramp, "--time_based"]

    # 1. Raw fio on a file of the same disk.
    raw_file = os.path.join(args.dir, "raw.dat")
    run(["fio", "--name=fill", f"--filename={raw_file}", f"--size={args.size}", "--rw=write",
         "--bs=4M", "--direct=1", "--ioengine=libaio", "--iodepth=8"])
    for rw, qd in POINTS:
        cmd = ["fio", "--name=raw", f"--filename={raw_file}", f"--size={args.size}", f"--rw={rw}",
               "--bs=4k", f"--iodepth={qd}", "--direct=1", "--ioengine=io_uring",
               "--randrepeat=0", "--norandommap"] + rt
        rows.append(("raw fio (file, direct=1, io_uring)", rw, qd, fio_point(fio_json(cmd[1:]), rw)))
        if qd == 32 and rw == "randwrite":
            cmds.append(" ".join(cmd))
    os.unlink(raw_file)

    # 2./3. A local Cairn cluster per store; `cairn bench`, and fio over NBD for the first.
    rss = {}
    stores = args.stores.split(",")
    for i, store in enumerate(stores):
        rows_store, cmds_store, rss_store = cluster_points(args, store, rt, nbd=(i == 0))
        rows += rows_store
        if i == 0:
            cmds += cmds_store
        rss[store] = rss_store

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.platform()}; "
          f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; runtime {args.runtime}s, "
          f"ramp {args.ramp}s, image/file {args.size}")
    print()
    print("| path | workload | iodepth | IOPS | mean (µs) | p99 (µs) | p99.99 (µs) | OSD CPU-s | IOPS per OSD CPU-s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for path, rw, qd, p in rows:
        cpu = p.get("cpu")
        per_cpu = f"{p['iops'] * args.runtime / cpu:,.0f}" if cpu else ""
        cpu_txt = f"{cpu:.1f}" if cpu else ""
        print(f"| {path} | 4K {rw} | {qd} | {p['iops']:,.0f} | {p['mean_us']:,.0f} | {p['p99_us']:,.0f} "
              f"| {p['p9999_us']:,.0f} | {cpu_txt} | {per_cpu} |")
    print()
    for store, r in rss.items():
        print(f"Peak RSS (MiB), {store}: " + ", ".join(f"{n} {v:.0f}" for n, v in sorted(r.items())))
    if len(stores) >= 2:
        a, b = stores[0], stores[1]
        print()
        print(f"{a} vs {b} (cairn bench, same run): difference of {a} relative to {b}")
        print()
        print("| workload | iodepth | IOPS | mean latency | p99.99 latency |")
        print("|---|---:|---:|---:|---:|")
        by = {(p, rw, qd): pt for p, rw, qd, pt in rows}
        for rw, qd in POINTS:
            x, y = by[(f"cairn bench ({a})", rw, qd)], by[(f"cairn bench ({b})", rw, qd)]
            pct = lambda k: (x[k] - y[k]) / y[k] * 100 if y[k] else 0
            print(f"| 4K {rw} | {qd} | {pct('iops'):+.0f}% | {pct('mean_us'):+.0f}% | {pct('p9999_us'):+.0f}% |")
    print()
    print("Commands (iodepth 32 randwrite shown; the other points change --rw/--iodepth):")
    for c in cmds:
        print(f"    {c}")


if __name__ == "__main__":
    main()
