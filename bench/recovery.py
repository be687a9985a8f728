#!/usr/bin/env python3
"""Recovery benchmark: one OSD down under a 4 KiB random-write load, then
back; how long until every PG is clean, how much it moved, and what the
client saw meanwhile against the healthy cluster.

Phases, on a fresh local 3-OSD cluster (pool size 3) with an image written
through first:
  1. healthy: `cairn bench` 4 KiB randwrite for --healthy seconds;
  2. osd.2 killed (SIGKILL) and marked down; the load runs --down seconds;
  3. osd.2 restarted while the load runs in --slice second windows (the
     first begun a second before the restart) until every PG is
     active+clean: the returning OSD's peering counts.
Reports: time from restart to clean; bytes the monitor's recovery counters
report moved (this commit; absent on older ones), and bytes the restarted
OSD wrote to its disk meanwhile (/proc/PID/io, comparable across commits);
client IOPS and p99.99 latency healthy, degraded and during recovery (over
every write of the recovery's windows pooled, from `cairn bench --lat-bins`),
and the ratio of the last to the first.

  --mode log       pg_log_max_entries large enough to cover the outage:
                   only the objects written meanwhile are recovered;
  --mode backfill  a short log: the returning OSD is backfilled (every
                   object compared, the changed ones copied).

Usage: python3 bench/recovery.py --mode log [--cairn target/release/cairn]
       [--down 60] [--healthy 30] [--settle 20] [--size 1G] [--iodepth 16] [--dir DIR]
       [--set osd.recovery_sleep_busy_ms=200 ...] [--runs 3] [--logs DIR]
Needs a release build. Prints one markdown table row per run, and JSON with
--json. The row's last column is the return's peering, from the daemons'
logs: the slowest PG's activation after the restart, and the log entries
the returning OSD took as a member (the catch-up that blocks every PG
until it is durable).
"""
import argparse, datetime, json, os, platform, re, shutil, signal, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"recovery.py: {' '.join(cmd)} failed: {p.stderr.strip()}")
    return p.stdout


class Cluster:
    def __init__(self, cairn, path, log_entries, settings=()):
        self.cairn, self.path = cairn, path
        shutil.rmtree(path, ignore_errors=True)
        extra = [a for kv in settings for a in ("--set", kv)]
        run([cairn, "cluster", "up", "--osds", "3", "--dir", path, "--pg-num", "32",
             "--set", f"osd.pg_log_max_entries={log_entries}", "--timeout", "120"] + extra)
        self.conf = os.path.join(path, "cairn.toml")

    def cli(self, *args, check=True):
        return run([self.cairn, "--conf", self.conf] + list(args), check=check)

    def json(self, *args):
        return json.loads(self.cli("--json", *args))

    def pid(self, name):
        state = json.load(open(os.path.join(self.path, "cluster.json")))
        return next(d["pid"] for d in state["daemons"] if d["name"] == name)

    def bench(self, seconds, iodepth, size):
        cmd = [self.cairn, "--conf", self.conf, "--json", "bench", "--image", "rbd/bench",
               "--rw", "randwrite", "--bs", "4k", "--iodepth", str(iodepth),
               "--runtime", str(seconds), "--ramp", "0", "--size", size, "--lat-bins"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        # The client's slow-op reports, kept with the daemons' logs.
        with open(os.path.join(self.path, "client.log"), "a") as log:
            log.write(p.stderr)
        if p.returncode != 0:
            sys.exit(f"recovery.py: {' '.join(cmd)} failed: {p.stderr.strip()}")
        return json.loads(p.stdout)

    def clean(self):
        st = self.json("status")
        pgs = st["pgs"]
        return pgs["total"] > 0 and pgs["clean"] == pgs["total"], st

    def down(self):
        run([self.cairn, "cluster", "down", "--dir", self.path], check=False)


def point(report):
    """IOPS and latencies (µs) of the writes of a `cairn bench --json` report,
    with their latency bins ([µs, count]) for pooling."""
    w = report["write"]
    return {"iops": w["iops"], "p9999_us": w["lat"]["p99.99_us"], "mean_us": w["lat"]["mean_us"],
            "ops": w["ops"], "bins": w["lat_bins"]}


def pooled(windows, q):
    """The q-quantile latency (µs) over every write of several runs."""
    return quantile([b for w in windows for b in w["bins"]], q)


def quantile(bins, q):
    """The q-quantile latency (µs) of latency bins ([µs, count])."""
    bins = sorted(bins)
    total = sum(n for _, n in bins)
    rank, seen = max(1, -(-total * q // 1)), 0
    for us, n in bins:
        seen += n
        if seen >= rank:
            return us
    return 0


def summary(p):
    """A point without its bins (for the JSON output)."""
    return {k: v for k, v in p.items() if k != "bins"}


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_lines(path, since):
    """Lines of a daemon's log stamped at or after `since` (Unix seconds)."""
    start = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    try:
        with open(path) as f:
            for line in f:
                line = ANSI.sub("", line)
                if line[:26] >= start:
                    yield line
    except FileNotFoundError:
        return


def return_peering(path, since):
    """What the returning OSD's peering cost, from the daemons' logs: the
    slowest PG activation at the primaries after the restart (ms), and the
    log entries osd.2 took as a member and its slowest activation (ms)."""
    slowest, entries, member_ms = 0, 0, 0
    for name in ("osd.0.log", "osd.1.log", "osd.2.log"):
        for line in log_lines(os.path.join(path, name), since):
            m = re.search(r"active in interval \S+ with \S.* after (\d+) ms", line)
            if m:
                slowest = max(slowest, int(m.group(1)))
            m = re.search(r"durable after (\d+) ms.*\((\d+) log entries taken", line)
            if m and name == "osd.2.log":
                member_ms = max(member_ms, int(m.group(1)))
                entries += int(m.group(2))
    return {"slowest_activation_ms": slowest, "member_entries_taken": entries,
            "member_slowest_durable_ms": member_ms}


def write_bytes(pid):
    for line in open(f"/proc/{pid}/io"):
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["log", "backfill"], required=True)
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target", "release", "cairn"))
    ap.add_argument("--down", type=int, default=60)
    ap.add_argument("--healthy", type=int, default=30)
    ap.add_argument("--slice", type=int, default=5)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--dir", default="/tmp/cairn-recovery-bench")
    ap.add_argument("--settle", type=int, default=20,
                    help="seconds to wait after writing the image, before the healthy run "
                         "(the disk is still absorbing the fill meanwhile)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--logs", metavar="DIR",
                    help="copy the daemons' logs here at the end (for slow-write reports)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a configuration setting for the cluster (repeatable)")
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the whole run on fresh clusters and pool every run's writes "
                         "for the p99.99 healthy and during recovery (one disk stall sets a "
                         "single run's p99.99)")
    args = ap.parse_args()
    runs = [run_once(args, i) for i in range(1, args.runs + 1)]
    healthy = quantile([b for _, h, _ in runs for b in h], 0.9999)
    during = quantile([b for _, _, d in runs for b in d], 0.9999)
    ratio = during / healthy if healthy else float("inf")
    if args.runs > 1:
        print(f"| {args.mode}, {args.runs} runs pooled | | | | | p99.99 {healthy / 1000:.1f} ms | "
              f"| p99.99 {during / 1000:.1f} ms | {ratio:.1f}x |")
    if args.json:
        print(json.dumps({"runs": [out for out, _, _ in runs],
                          "pooled": {"healthy_p9999_us": healthy, "during_recovery_p9999_us": during,
                                     "p9999_ratio": round(ratio, 2)}}, indent=1))


def run_once(args, index):
    log_entries = 1_000_000 if args.mode == "log" else 50
    c = Cluster(args.cairn, args.dir, log_entries, args.set)
    try:
        c.cli("image", "create", "rbd/bench", "--size", args.size)
        c.cli("bench", "--image", "rbd/bench", "--rw", "write", "--bs", "1M", "--iodepth", "8",
              "--runtime", "1", "--ramp", "0", "--precondition")
        time.sleep(args.settle)
        healthy = point(c.bench(args.healthy, args.iodepth, args.size))
        os.kill(c.pid("osd.2"), signal.SIGKILL)
        c.cli("osd", "down", "2")
        degraded = point(c.bench(args.down, args.iodepth, args.size))
        before = c.json("status").get("recovery", {})
        # The load runs in back-to-back windows from before the restart until
        # every PG is clean, so what clients see while the returning OSD
        # peers (before any PG is active again) counts too.
        windows, stop = [], threading.Event()

        def load():
            while not stop.is_set():
                windows.append(point(c.bench(args.slice, args.iodepth, args.size)))

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(1)
        restarted = time.time()
        run([args.cairn, "cluster", "up", "--osds", "3", "--dir", args.dir, "--timeout", "120"])
        pid = c.pid("osd.2")
        written0 = write_bytes(pid)
        # Time to clean (from the restart), to the poll's resolution.
        while not c.clean()[0] and time.time() - restarted < 900:
            time.sleep(0.2)
        to_clean = time.time() - restarted
        stop.set()
        loader.join()
        moved = write_bytes(pid) - written0
        after = c.json("status").get("recovery", {})
        rec = {k: after.get(k, 0) - before.get(k, 0) for k in ("recovered_objects", "backfilled_objects", "bytes")}
        # The p99.99 of every write made while recovery ran (all windows
        # pooled): the worst window's would favour a recovery that is over
        # in one window over one spread across many.
        during = {"iops": sum(w["iops"] for w in windows) / len(windows),
                  "p9999_us": pooled(windows, 0.9999),
                  "p99_us": pooled(windows, 0.99),
                  "ops": sum(w["ops"] for w in windows),
                  "worst_window_p9999_us": max(w["p9999_us"] for w in windows),
                  "windows": len(windows)}
        ratio = during["p9999_us"] / healthy["p9999_us"] if healthy["p9999_us"] else float("inf")
        peering = return_peering(args.dir, restarted)
        out = {"mode": args.mode, "cairn": args.cairn, "settings": args.set, "down_s": args.down,
               "to_clean_s": round(to_clean, 1),
               "restarted_osd_disk_written": moved, "recovery": rec,
               "healthy": summary(healthy), "degraded": summary(degraded), "during_recovery": during,
               "p9999_ratio": round(ratio, 2), "return_peering": peering,
               "machine": f"{platform.node()} {os.cpu_count()} CPUs", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        print(f"| {args.mode} | {out['to_clean_s']} s | {rec['recovered_objects']} / {rec['backfilled_objects']} "
              f"| {rec['bytes'] / 2**20:.0f} MiB | {moved / 2**20:.0f} MiB "
              f"| {healthy['iops']:.0f} / {healthy['p9999_us'] / 1000:.1f} ms "
              f"| {degraded['iops']:.0f} / {degraded['p9999_us'] / 1000:.1f} ms "
              f"| {during['iops']:.0f} / {during['p9999_us'] / 1000:.1f} ms | {ratio:.1f}x "
              f"| {peering['slowest_activation_ms']} ms / {peering['member_entries_taken']} |", flush=True)
        return out, healthy["bins"], [b for w in windows for b in w["bins"]]
    finally:
        c.down()
        if args.logs:
            logs = os.path.join(args.logs, f"run{index}")
            os.makedirs(logs, exist_ok=True)
            for name in os.listdir(args.dir):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(args.dir, name), logs)


if __name__ == "__main__":
    main()
