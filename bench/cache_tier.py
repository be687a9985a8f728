#!/usr/bin/env python3
"""Cache-tier benchmark (source document 004): an NVMe pool as a writeback
cache over an HDD pool, 4 KiB random writes from 1..N clients, and how the
result depends on what the cache holds.

Each repetition, on a fresh local cluster (`cairn cluster up --hosts H
--hdd-osds-per-host N --nvme-osds-per-host M`: emulated spinning disks of
class hdd, plain OSDs of class nvme, rules hdd_rule / nvme_rule):
  0. pools `slow` (hdd_rule) and `fast` (nvme_rule), images slow/img0..,
     written through once (spec [images] precondition);
  1. slow-alone:   the client sweep (c concurrent `cairn bench`, one image
                   each, IOPS summed) on the HDD pool alone;
  2. tiered-fill:  `osd tier add slow fast`, cache-mode, every [cache]
                   setting with `pool set fast`, `osd tier set-overlay`;
                   the sweep again while the empty cache fills;
  3. past-full:    every image written at once, in chunks, until `pool
                   stats fast` shows objects or bytes past
                   cache_target_full_ratio of the target; the sweep again;
  4. tiered-rerun: idle for [idle] seconds (the agent flushes and evicts),
                   then the sweep again.
Meanwhile a thread samples `cairn --json pool stats` every [stats]
interval: client op/s per pool and the cache's promote/flush/evict op/s,
PGs flushing/evicting/full, objects and dirty objects.

Writes to --out: results.json (every point's clients, the samples, the
events), report.md (per-repetition IOPS, mean and p99.99 latency and their
spread across repetitions) and timeline.svg (op/s against time, phase
boundaries marked, one panel per repetition), plus each repetition's
client stderr (slow-op warnings) in clients-repN.log.

Usage: python3 bench/cache_tier.py [--spec bench/specs/cache-tier.toml]
       [--cairn target/release/cairn] [--dir /tmp/cairn-cache-tier-PID]
       [--out /tmp/cache-tier-DATE] [--quick] [--repetitions N] [--keep-logs]
Needs a release build and Python 3.11+ (tomllib). `--quick` merges the
spec's [quick] tables over it: a smoke run of a few minutes.
"""
import argparse, json, math, os, platform, re, shutil, subprocess, sys, threading, time, tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("slow-alone", "tiered-fill", "past-full", "tiered-rerun")
CACHE_FIELDS = ("promote_op_per_sec", "flush_op_per_sec", "evict_op_per_sec",
                "proxy_write_op_per_sec", "proxy_read_op_per_sec", "pgs_flushing",
                "pgs_evicting", "pgs_full", "dirty_objects", "whiteouts", "promotes",
                "flushes", "evicts", "partial_writes", "proxied_writes")


def fail(msg):
    sys.exit(f"cache_tier.py: {msg}")


def run(cmd, check=True, timeout=300):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        if check:
            fail(f"{' '.join(cmd)} did not finish in {timeout} s")
        return None
    if check and p.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return p


# ---------------------------------------------------------------- the spec

def merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v
    return base


def load_spec(path, quick):
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    quick_over = spec.pop("quick", {})
    if quick:
        merge(spec, quick_over)
    need = {"cluster": ("hosts", "hdd_osds_per_host", "nvme_osds_per_host"),
            "pools": ("slow", "fast"), "images": ("count", "size"),
            "workload": ("rw", "bs", "iodepth", "clients", "runtime_s", "phases", "repetitions"),
            "cache": ("mode", "cache_target_full_ratio"), "fill": ("chunk_s", "max_s"),
            "idle": ("seconds",), "stats": ("interval_s",)}
    for table, keys in need.items():
        for k in keys:
            if k not in spec.get(table, {}):
                fail(f"{path}: [{table}] needs `{k}`")
    w = spec["workload"]
    bad = [p for p in w["phases"] if p not in PHASES]
    if bad:
        fail(f"{path}: unknown phases {bad} (known: {', '.join(PHASES)})")
    if max(w["clients"]) > spec["images"]["count"]:
        fail(f"{path}: [images] count {spec['images']['count']} < the largest client count")
    c = spec["cache"]
    if "target_max_objects" not in c and "target_max_bytes" not in c:
        fail(f"{path}: [cache] needs target_max_objects or target_max_bytes")
    return spec


# ---------------------------------------------------------------- the cluster

class Cluster:
    def __init__(self, cairn, path, spec):
        self.cairn, self.path, self.spec = cairn, path, spec
        self.conf = os.path.join(path, "cairn.toml")

    def up(self):
        cl = self.spec["cluster"]
        run([self.cairn, "cluster", "down", "--dir", self.path], check=False)
        shutil.rmtree(self.path, ignore_errors=True)
        osds = cl["hosts"] * (cl["hdd_osds_per_host"] + cl["nvme_osds_per_host"])
        block = next((int(kv.split("=", 1)[1]) for kv in cl.get("set", [])
                      if kv.startswith("osd.bluestore_block_size=")), 4 << 30)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        free = shutil.disk_usage(parent).free
        if free < osds * block + (1 << 30):
            fail(f"{parent} has {free / 2**30:.1f} GiB free; {osds} OSDs preallocate "
                 f"{osds * block / 2**30:.1f} GiB (+1 GiB margin)")
        cmd = [self.cairn, "cluster", "up", "--hosts", str(cl["hosts"]),
               "--hdd-osds-per-host", str(cl["hdd_osds_per_host"]),
               "--nvme-osds-per-host", str(cl["nvme_osds_per_host"]), "--dir", self.path,
               "--store", cl.get("store", "bluestore"), "--pg-num", str(cl.get("rbd_pg_num", 8)),
               "--timeout", str(cl.get("up_timeout_s", 120))]
        for kv in cl.get("set", []):
            cmd += ["--set", kv]
        run(cmd, timeout=cl.get("up_timeout_s", 120) + 60)

    def cli(self, *args, check=True, timeout=120):
        return run([self.cairn, "--conf", self.conf] + [str(a) for a in args],
                   check=check, timeout=timeout)

    def json(self, *args, timeout=60):
        p = self.cli("--json", *args, check=False, timeout=timeout)
        if p is None:
            raise RuntimeError(f"`{' '.join(map(str, args))}` timed out after {timeout} s")
        if p.returncode != 0:
            raise RuntimeError(f"`{' '.join(map(str, args))}`: {p.stderr.strip()}")
        return json.loads(p.stdout)

    def down(self):
        run([self.cairn, "cluster", "down", "--dir", self.path], check=False, timeout=120)


def cache_state(cluster):
    """Objects, dirty objects, bytes and full PGs of the cache pool now."""
    try:
        pools = cluster.json("pool", "stats", "fast", timeout=30)
    except (RuntimeError, json.JSONDecodeError) as e:
        return {"error": str(e)}
    p = next((p for p in pools if p.get("pool") == "fast"), None)
    if p is None:
        return {"error": "pool fast missing from pool stats"}
    ci = p.get("cache_io", {})
    return {"objects": p.get("objects"), "bytes": p.get("bytes"),
            "dirty_objects": ci.get("dirty_objects"), "pgs_full": ci.get("pgs_full"),
            "pgs_flushing": ci.get("pgs_flushing"), "pgs_evicting": ci.get("pgs_evicting")}


def health(cluster):
    try:
        h = cluster.json("health", timeout=30)
        return {"health": h.get("health"), "checks": h.get("checks")}
    except (RuntimeError, json.JSONDecodeError) as e:
        return {"error": str(e)}


# ---------------------------------------------------------------- sampling

class Sampler(threading.Thread):
    """`cairn --json pool stats` every interval; each sample keeps the time
    since t0, the phase then running and, per pool, client op/s and (for a
    cache) its agent's rates and counts."""

    def __init__(self, cluster, interval, t0):
        super().__init__(daemon=True)
        self.cluster, self.interval, self.t0 = cluster, interval, t0
        self.phase, self.samples, self.errors = "setup", [], []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            started = time.time()
            try:
                pools = self.cluster.json("pool", "stats", timeout=max(10, 5 * self.interval))
                self.samples.append({"t": round(started - self.t0, 2), "phase": self.phase,
                                     "load1": os.getloadavg()[0],
                                     "pools": {p["pool"]: flatten(p) for p in pools}})
            except (RuntimeError, json.JSONDecodeError, KeyError) as e:
                self.errors.append({"t": round(started - self.t0, 2), "phase": self.phase,
                                    "error": str(e)[:300]})
            self.stop.wait(max(0.0, self.interval - (time.time() - started)))


def flatten(p):
    io = p.get("client_io", {})
    out = {"write_op_s": io.get("write_op_per_sec", 0.0), "read_op_s": io.get("read_op_per_sec", 0.0),
           "write_bytes_s": io.get("write_bytes_sec", 0.0), "objects": p.get("objects"),
           "bytes": p.get("bytes")}
    if "cache_io" in p:
        out.update({k: p["cache_io"].get(k) for k in CACHE_FIELDS})
    return out


# ---------------------------------------------------------------- the load

def start_bench(cluster, image, wl, runtime, ramp, iodepth):
    cmd = [cluster.cairn, "--conf", cluster.conf, "--json", "bench", "--image", image,
           "--rw", wl["rw"], "--bs", wl["bs"], "--iodepth", str(iodepth),
           "--runtime", str(runtime), "--ramp", str(ramp), "--lat-bins"]
    return cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_clients(cluster, images, wl, runtime, ramp, iodepth, log):
    """One `cairn bench` per image at once; each one's report or error."""
    procs = [(img,) + start_bench(cluster, img, wl, runtime, ramp, iodepth) for img in images]
    deadline = time.time() + runtime + ramp + wl.get("point_timeout_s", 180)
    results = []
    for img, cmd, p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            results.append({"image": img, "error": f"hung: killed {wl.get('point_timeout_s', 180)} s "
                                                   f"after its runtime", "stderr_tail": err[-2000:]})
            log.write(f"### {img}: HUNG\n{err}\n")
            continue
        log.write(f"### {img} ({' '.join(cmd[3:])}) exit {p.returncode}\n{err}\n")
        if p.returncode != 0:
            results.append({"image": img, "error": f"exit {p.returncode}: {err.strip()[-500:]}"})
            continue
        try:
            rep = json.loads(out)
        except json.JSONDecodeError:
            results.append({"image": img, "error": f"unparsable output: {out[:200]!r}"})
            continue
        rep["image"], rep["slow_op_warnings"] = img, err.count("slow op")
        rep["slow_op_max_ms"] = max((int(m) for m in SLOW_OP.findall(err)), default=0)
        results.append(rep)
    return results


# The client's report of an op outstanding past client.op_complaint_time_ms.
SLOW_OP = re.compile(r"slow op on \S+: (\d+) ms;")
# An OSD's report of a slow replicated write (pool id, total, held, local commit).
SLOW_WRITE = re.compile(r"pg (\d+)\.[0-9a-f]+: slow write to \S+ at \S+: (\d+) ms in all; "
                        r"held (\d+) ms before it ran, local commit (\d+) ms")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def osd_slow_writes(path, pool_ids):
    """Per pool, from every OSD's log: slow writes and the longest total,
    held-before-running and local-commit times (ms)."""
    out = {}
    for name in sorted(os.listdir(path)):
        if not (name.startswith("osd.") and name.endswith(".log")):
            continue
        with open(os.path.join(path, name), errors="replace") as f:
            for line in f:
                line = ANSI.sub("", line)
                if " ERROR " in line or "panicked" in line:
                    errors = out.setdefault("errors", {})
                    errors.setdefault(name[:-4], []).append(line.strip()[:300])
                m = SLOW_WRITE.search(line)
                if not m:
                    continue
                pool = pool_ids.get(int(m.group(1)), m.group(1))
                total, held, commit = (int(m.group(i)) for i in (2, 3, 4))
                o = out.setdefault(pool, {"count": 0, "max_ms": 0, "max_held_ms": 0,
                                          "max_local_commit_ms": 0, "max_local_commit_osd": None})
                o["count"] += 1
                o["max_ms"], o["max_held_ms"] = max(o["max_ms"], total), max(o["max_held_ms"], held)
                if commit > o["max_local_commit_ms"]:
                    o["max_local_commit_ms"], o["max_local_commit_osd"] = commit, name[:-4]
    return out


def quantile(bins, q):
    """The q-quantile (µs) of latency bins ([µs, count])."""
    bins = sorted(bins)
    total = sum(n for _, n in bins)
    if total == 0:
        return 0.0
    rank, seen = max(1, math.ceil(total * q)), 0
    for us, n in bins:
        seen += n
        if seen >= rank:
            return us
    return bins[-1][0]


def reduce_point(results):
    """Summed IOPS, ops-weighted mean and pooled percentiles of the writes."""
    ok = [r for r in results if "error" not in r]
    out = {"clients_ok": len(ok), "errors": [r for r in results if "error" in r]}
    if not ok:
        return out
    dirn = "write" if any(r["write"]["ops"] for r in ok) else "read"
    ops = sum(r[dirn]["ops"] for r in ok)
    bins = [b for r in ok for b in r[dirn].get("lat_bins", [])]
    out.update({
        "iops": sum(r[dirn]["iops"] for r in ok), "ops": ops,
        "mean_us": sum(r[dirn]["lat"]["mean_us"] * r[dirn]["ops"] for r in ok) / ops if ops else 0.0,
        "p99_us": quantile(bins, 0.99), "p9999_us": quantile(bins, 0.9999),
        "max_us": max(r[dirn]["lat"]["max_us"] for r in ok),
        "slow_op_warnings": sum(r["slow_op_warnings"] for r in ok),
        "slow_op_max_ms": max(r["slow_op_max_ms"] for r in ok),
        # None when a client completed no op in its window (a stall longer than it).
        "osd_cpu_us_per_op": [None if (r.get("cpu") or {}).get("osd_cpu_us_per_op") is None
                              else round(r["cpu"]["osd_cpu_us_per_op"], 1) for r in ok],
        "clients_without_ops": [r["image"] for r in ok if r[dirn]["ops"] == 0],
        "per_client": [{"image": r["image"], "iops": r[dirn]["iops"],
                        "mean_us": r[dirn]["lat"]["mean_us"], "p9999_us": r[dirn]["lat"]["p99.99_us"]}
                       for r in ok]})
    return out


# ---------------------------------------------------------------- one repetition

class Rep:
    def __init__(self, args, spec, index):
        self.args, self.spec, self.index = args, spec, index
        self.cluster = Cluster(args.cairn, args.dir, spec)
        self.points, self.events, self.notes = [], [], []
        self.t0 = time.time()
        self.log = open(os.path.join(args.out, f"clients-rep{index}.log"), "w")
        self.sampler = None

    def event(self, what, **kw):
        e = {"t": round(time.time() - self.t0, 2), "event": what, **kw}
        self.events.append(e)
        short = {k: (v.get("health") if k == "health" else v) for k, v in kw.items()
                 if k != "pool_get_fast"}
        print(f"  [rep {self.index} t={e['t']:7.1f}s] {what} "
              f"{' '.join(f'{k}={v}' for k, v in short.items())}", flush=True)

    def phase(self, name):
        self.sampler.phase = name
        self.event("phase", phase=name, cache=cache_state(self.cluster), health=health(self.cluster))

    def setup(self):
        sp = self.spec
        self.cluster.up()
        self.sampler = Sampler(self.cluster, sp["stats"]["interval_s"], self.t0)
        self.sampler.start()
        self.event("cluster up")
        for name in ("slow", "fast"):
            p = sp["pools"][name]
            self.cluster.cli("pool", "create", name, "--pg-num", p["pg_num"], "--size", p["size"],
                             "--min-size", p["min_size"], "--rule", p["rule"])
        im = sp["images"]
        for k in range(im["count"]):
            self.cluster.cli("image", "create", f"slow/img{k}", "--size", im["size"])
            if im.get("precondition", True):
                self.cluster.cli("bench", "--image", f"slow/img{k}", "--rw", "write", "--bs", "1M",
                                 "--iodepth", "8", "--runtime", "1", "--ramp", "0",
                                 "--precondition", timeout=600)
        self.event("images ready", count=im["count"], size=im["size"])

    def tier(self):
        c = self.cluster
        c.cli("osd", "tier", "add", "slow", "fast")
        c.cli("osd", "tier", "cache-mode", "fast", self.spec["cache"]["mode"])
        for k, v in self.spec["cache"].items():
            if k != "mode":
                c.cli("pool", "set", "fast", k, v)
        c.cli("osd", "tier", "set-overlay", "slow", "fast")
        got = c.cli("pool", "get", "fast").stdout
        self.event("tier set", pool_get_fast=got.strip().splitlines())

    def sweep(self, phase):
        wl = self.spec["workload"]
        for n in wl["clients"]:
            time.sleep(wl.get("settle_s", 0))
            before = cache_state(self.cluster)
            t_start = time.time() - self.t0
            results = run_clients(self.cluster, [f"slow/img{k}" for k in range(n)], wl,
                                  wl["runtime_s"], wl.get("ramp_s", 2), wl["iodepth"], self.log)
            t_end = time.time() - self.t0
            point = {"rep": self.index, "phase": phase, "clients": n,
                     "t_start": round(t_start, 2), "t_end": round(t_end, 2),
                     "wall_s": round(t_end - t_start, 1),
                     "cache_before": before, "cache_after": cache_state(self.cluster),
                     **reduce_point(results)}
            if point.get("clients_without_ops"):
                self.notes.append(f"rep {self.index} {phase} c={n}: no write completed in the "
                                  f"measured window by {', '.join(point['clients_without_ops'])}")
            self.points.append(point)
            if point["errors"]:
                self.notes.append(f"rep {self.index} {phase} c={n}: {point['errors']}")
            print(f"  [rep {self.index}] {phase:12s} c={n}: "
                  + (f"{point['iops']:8.0f} IOPS, mean {point['mean_us'] / 1000:7.1f} ms, "
                     f"p99.99 {point['p9999_us'] / 1000:8.1f} ms, slowest op "
                     f"{point['slow_op_max_ms'] / 1000:.1f} s, wall {point['wall_s']} s"
                     if "iops" in point else "FAILED")
                  + f"; cache after {point['cache_after']}", flush=True)

    def past_full(self):
        """Every image written at once, in chunks, until the cache is past
        its full ratio (objects or bytes against the targets)."""
        sp, c = self.spec, self.spec["cache"]
        ratio, margin = c["cache_target_full_ratio"], sp["fill"].get("margin", 0.98)
        start, chunks = time.time(), 0
        images = [f"slow/img{k}" for k in range(sp["images"]["count"])]
        while True:
            st = cache_state(self.cluster)
            obj_past = ("target_max_objects" in c and st.get("objects") is not None
                        and st["objects"] >= margin * ratio * c["target_max_objects"])
            bytes_past = ("target_max_bytes" in c and st.get("bytes") is not None
                          and st["bytes"] >= margin * ratio * c["target_max_bytes"])
            if obj_past or bytes_past:
                self.event("past full", after_s=round(time.time() - start, 1), chunks=chunks, cache=st)
                return True
            if time.time() - start > sp["fill"]["max_s"]:
                self.event("fill gave up", after_s=round(time.time() - start, 1), cache=st)
                self.notes.append(f"rep {self.index}: cache not past full after "
                                  f"{sp['fill']['max_s']} s of writing: {st}")
                return False
            res = run_clients(self.cluster, images, sp["workload"], sp["fill"]["chunk_s"], 0,
                              sp["fill"].get("iodepth", 16), self.log)
            chunks += 1
            errs = [r["error"] for r in res if "error" in r]
            if errs:
                self.notes.append(f"rep {self.index} fill chunk {chunks}: {errs}")

    def run(self):
        wl = self.spec["workload"]
        try:
            self.setup()
            tiered = False
            for ph in wl["phases"]:
                if ph != "slow-alone" and not tiered:
                    self.tier()
                    tiered = True
                if ph == "past-full":
                    self.sampler.phase = "fill"
                    self.event("fill")
                    self.past_full()
                if ph == "tiered-rerun":
                    self.sampler.phase = "idle"
                    self.event("idle", seconds=self.spec["idle"]["seconds"])
                    time.sleep(self.spec["idle"]["seconds"])
                self.phase(ph)
                self.sweep(ph)
            self.sampler.phase = "end"
            self.event("end", cache=cache_state(self.cluster), health=health(self.cluster))
        finally:
            if self.sampler:
                self.sampler.stop.set()
                self.sampler.join(timeout=30)
            self.cluster.down()
            self.log.close()
            if os.path.isdir(self.args.dir):
                self.slow_writes = osd_slow_writes(self.args.dir, {2: "slow", 3: "fast"})
                if self.args.keep_logs:
                    dest = os.path.join(self.args.out, f"daemon-logs-rep{self.index}")
                    os.makedirs(dest, exist_ok=True)
                    for name in os.listdir(self.args.dir):
                        if name.endswith(".log"):
                            shutil.copy(os.path.join(self.args.dir, name), dest)
                if not self.args.keep_cluster:
                    shutil.rmtree(self.args.dir, ignore_errors=True)  # 6 preallocated block files
        return {"rep": self.index, "points": self.points, "events": self.events,
                "osd_slow_writes": getattr(self, "slow_writes", {}),
                "samples": self.sampler.samples if self.sampler else [],
                "sample_errors": self.sampler.errors if self.sampler else [],
                "notes": self.notes}


# ---------------------------------------------------------------- the report

def fmt_ms(us):
    return "–" if us is None else (f"{us / 1000:.1f}" if us >= 1000 else f"{us / 1000:.2f}")


def spread(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None, None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return min(vals), max(vals), (sd / mean * 100 if mean else 0.0)


def markdown(meta, reps, spec):
    wl = spec["workload"]
    lines = [f"# Cache tier (document 004): {spec.get('name', '')}{' (quick)' if meta['quick'] else ''}",
             "", f"{meta['date']}, {meta['machine']}; source tree {meta['commit']}, binary "
             f"{meta['cairn']} built {meta['cairn_built']}.", "",
             f"`{meta['command']}`", "",
             f"{wl['rw']} {wl['bs']}, iodepth {wl['iodepth']} per client, {wl['runtime_s']} s per point "
             f"(+{wl.get('ramp_s', 2)} s ramp), one image of {spec['images']['size']} per client; "
             f"cache target {spec['cache'].get('target_max_objects', '–')} objects / "
             f"{spec['cache'].get('target_max_bytes', 0) / 2**20:.0f} MiB, full ratio "
             f"{spec['cache']['cache_target_full_ratio']}; idle {spec['idle']['seconds']} s before the "
             f"rerun. IOPS summed over clients; mean over every write; p99.99 over every client's "
             f"writes pooled. `cairn bench` counts only ops completed inside its window, so a "
             f"stall at its end is missing from IOPS and latency: *slowest op* is the longest the "
             f"clients' slow-op warnings report, *wall* the point's duration (runtime + ramp + "
             f"draining). Per repetition r1 / r2 / …; spread = min–max and coefficient of variation.",
             "", "| phase | clients | IOPS per rep | IOPS min–max (CV) | mean ms per rep | "
                 "p99.99 ms per rep | p99.99 min–max ms | slowest op s per rep | wall s per rep |",
             "|---|---|---|---|---|---|---|---|---|"]
    for ph in wl["phases"]:
        for n in wl["clients"]:
            pts = [next((p for p in r["points"] if p["phase"] == ph and p["clients"] == n), None)
                   for r in reps]
            iops = [p.get("iops") if p else None for p in pts]
            p9999 = [p.get("p9999_us") if p else None for p in pts]
            lo, hi, cv = spread(iops)
            plo, phi, _ = spread(p9999)
            lines.append(
                f"| {ph} | {n} | {' / '.join('–' if v is None else f'{v:,.0f}' for v in iops)} | "
                + (f"{lo:,.0f}–{hi:,.0f} ({cv:.0f}%)" if lo is not None else "–") + " | "
                + " / ".join(fmt_ms(p.get("mean_us")) if p else "–" for p in pts) + " | "
                + " / ".join(fmt_ms(v) for v in p9999) + " | "
                + (f"{fmt_ms(plo)}–{fmt_ms(phi)}" if plo is not None else "–") + " | "
                + " / ".join(("<1" if not p["slow_op_max_ms"] else f"{p['slow_op_max_ms'] / 1000:.1f}")
                             if p and "slow_op_max_ms" in p else "–" for p in pts) + " | "
                + " / ".join(f"{p['wall_s']:.0f}" if p else "–" for p in pts) + " |")
    lines += ["", "Cache (`pool stats fast`) before each point: objects / dirty / PGs full, per rep.", "",
              "| phase | clients | " + " | ".join(f"rep {r['rep']}" for r in reps) + " |",
              "|---|---|" + "---|" * len(reps)]
    for ph in wl["phases"]:
        if ph == "slow-alone":
            continue
        for n in wl["clients"]:
            cells = []
            for r in reps:
                p = next((p for p in r["points"] if p["phase"] == ph and p["clients"] == n), None)
                cb = p["cache_before"] if p else {}
                cells.append("–" if not cb or "error" in cb else
                             f"{cb['objects']} / {cb['dirty_objects']} / {cb['pgs_full']}")
            lines.append(f"| {ph} | {n} | " + " | ".join(cells) + " |")
    fills = [e for r in reps for e in r["events"] if e["event"] in ("past full", "fill gave up")]
    if fills:
        lines += ["", "Fill to past full: " + "; ".join(
            f"{e['event']} after {e['after_s']} s ({e.get('chunks', '?')} chunks, cache {e['cache']})"
            for e in fills) + "."]
    sw = [(r["rep"], pool, o) for r in reps for pool, o in sorted(r.get("osd_slow_writes", {}).items())
          if pool != "errors"]
    errs = [(r["rep"], osd, lines) for r in reps
            for osd, lines in sorted(r.get("osd_slow_writes", {}).get("errors", {}).items())]
    if errs:
        lines += ["", "OSD errors (daemons' logs): " + "; ".join(
            f"rep {n} {osd}: {len(ls)}, first `{ls[0]}`" for n, osd, ls in errs) + "."]
    if sw:
        lines += ["", "OSD slow-write reports (daemons' logs): " + "; ".join(
            f"rep {n} pool {pool}: {o['count']}, longest {o['max_ms'] / 1000:.1f} s, held before "
            f"running up to {o['max_held_ms'] / 1000:.1f} s, local commit up to "
            f"{o['max_local_commit_ms'] / 1000:.1f} s ({o['max_local_commit_osd']})"
            for n, pool, o in sw) + "."]
    notes = [n for r in reps for n in r["notes"]] + [
        f"rep {r['rep']}: {len(r['sample_errors'])} pool-stats samples failed, first: "
        f"{r['sample_errors'][0]}" for r in reps if r["sample_errors"]]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines += ["", "Timeline: `timeline.svg` (client op/s on each pool and the cache's promote/flush/"
                  "evict op/s, log scale; cache objects and dirty objects below).", ""]
    return "\n".join(lines)


SERIES = [("slow", "write_op_s", "base pool client write op/s", "#1f77b4"),
          ("fast", "write_op_s", "cache pool client write op/s", "#7f7f7f"),
          ("fast", "promote_op_per_sec", "promote op/s", "#2ca02c"),
          ("fast", "flush_op_per_sec", "flush op/s", "#d62728"),
          ("fast", "evict_op_per_sec", "evict op/s", "#9467bd")]
COUNTS = [("objects", "cache objects", "#ff7f0e"), ("dirty_objects", "dirty objects", "#8c564b")]
PHASE_FILL = {"slow-alone": "#fde0dd", "tiered-fill": "#e0f3db", "fill": "#fff7bc",
              "past-full": "#fee6ce", "idle": "#f0f0f0", "tiered-rerun": "#deebf7"}


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_panel(r, spec, y0, width, h_rate, h_count):
    """One repetition: op/s (log scale) above, cache object counts below."""
    left, right = 70, 20
    samples = r["samples"]
    t_max = max([s["t"] for s in samples] + [e["t"] for e in r["events"]] + [1])
    x = lambda t: left + (width - left - right) * t / t_max
    out = [f'<text x="{left}" y="{y0 + 14}" font-size="14" font-weight="bold">repetition {r["rep"]}</text>']
    top, bottom = y0 + 24, y0 + 24 + h_rate
    ctop, cbottom = bottom + 30, bottom + 30 + h_count
    # Phase bands from the events (each phase until the next marker).
    marks = [(e["t"], e.get("phase") or e["event"]) for e in r["events"]
             if e["event"] in ("phase", "fill", "idle", "end")]
    for (t1, name), (t2, _) in zip(marks, marks[1:] + [(t_max, None)]):
        fill = PHASE_FILL.get(name, "#ffffff")
        for a, b in ((top, bottom), (ctop, cbottom)):
            out.append(f'<rect x="{x(t1):.1f}" y="{a}" width="{max(0, x(t2) - x(t1)):.1f}" '
                       f'height="{b - a}" fill="{fill}"/>')
        out.append(f'<line x1="{x(t1):.1f}" y1="{top}" x2="{x(t1):.1f}" y2="{cbottom}" '
                   f'stroke="#555" stroke-dasharray="4,3"/>')
        out.append(f'<text x="{x(t1) + 3:.1f}" y="{top + 12}" font-size="11">{esc(name)}</text>')
    # Rates, log10(1 + v).
    vmax = max([s["pools"].get(p, {}).get(k) or 0 for s in samples for p, k, _, _ in SERIES] + [10])
    lmax = math.log10(1 + vmax)
    yr = lambda v: bottom - (bottom - top) * math.log10(1 + max(0.0, v)) / lmax
    for tick in (0, 1, 10, 100, 1000, 10000, 100000):
        if tick <= vmax * 1.01:
            out.append(f'<line x1="{left}" y1="{yr(tick):.1f}" x2="{width - right}" y2="{yr(tick):.1f}" '
                       f'stroke="#ccc" stroke-width="0.5"/>')
            out.append(f'<text x="{left - 5}" y="{yr(tick) + 4:.1f}" font-size="10" '
                       f'text-anchor="end">{tick}</text>')
    out.append(f'<text x="14" y="{(top + bottom) / 2}" font-size="11" '
               f'transform="rotate(-90 14 {(top + bottom) / 2})" text-anchor="middle">op/s (log)</text>')
    for pool, key, _, colour in SERIES:
        pts = [(s["t"], s["pools"][pool].get(key)) for s in samples if pool in s["pools"]]
        pts = " ".join(f"{x(t):.1f},{yr(v):.1f}" for t, v in pts if v is not None)
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
    # Cache object counts, linear, with the dirty and full targets.
    c = spec["cache"]
    tgt = c.get("target_max_objects")
    cmax = max([s["pools"].get("fast", {}).get(k) or 0 for s in samples for k, _, _ in COUNTS]
               + [tgt or 1])
    yc = lambda v: cbottom - (cbottom - ctop) * v / cmax
    if tgt:
        for ratio, label in ((c.get("cache_target_dirty_ratio"), "dirty ratio"),
                             (c.get("cache_target_full_ratio"), "full ratio"), (1.0, "target")):
            if ratio:
                out.append(f'<line x1="{left}" y1="{yc(ratio * tgt):.1f}" x2="{width - right}" '
                           f'y2="{yc(ratio * tgt):.1f}" stroke="#999" stroke-dasharray="2,2"/>')
                out.append(f'<text x="{width - right - 2}" y="{yc(ratio * tgt) - 2:.1f}" font-size="9" '
                           f'text-anchor="end">{label} ({ratio * tgt:.0f})</text>')
    for tick in (0, cmax):
        out.append(f'<text x="{left - 5}" y="{yc(tick) + 4:.1f}" font-size="10" text-anchor="end">'
                   f'{tick:.0f}</text>')
    out.append(f'<text x="14" y="{(ctop + cbottom) / 2}" font-size="11" '
               f'transform="rotate(-90 14 {(ctop + cbottom) / 2})" text-anchor="middle">objects</text>')
    for key, _, colour in COUNTS:
        pts = [(s["t"], s["pools"]["fast"].get(key)) for s in samples if "fast" in s["pools"]]
        pts = " ".join(f"{x(t):.1f},{yc(v):.1f}" for t, v in pts if v is not None)
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
    for a, b in ((top, bottom), (ctop, cbottom)):
        out.append(f'<rect x="{left}" y="{a}" width="{width - left - right}" height="{b - a}" '
                   f'fill="none" stroke="#000"/>')
    step = 10 ** math.floor(math.log10(max(t_max / 8, 1)))
    step *= 5 if t_max / step > 40 else 2 if t_max / step > 16 else 1
    t = 0.0
    while t <= t_max:
        out.append(f'<text x="{x(t):.1f}" y="{cbottom + 14}" font-size="10" text-anchor="middle">{t:.0f}</text>')
        t += step
    out.append(f'<text x="{(left + width) / 2}" y="{cbottom + 28}" font-size="11" '
               f'text-anchor="middle">seconds since the cluster started</text>')
    return out, cbottom + 40


def svg(reps, spec, title):
    width, h_rate, h_count = 1100, 260, 110
    body, y = [], 50
    for r in reps:
        part, y = svg_panel(r, spec, y, width, h_rate, h_count)
        body += part
    legend, lx = [], 70
    for label, colour in [(s[2], s[3]) for s in SERIES] + [(c[1], c[2]) for c in COUNTS]:
        legend.append(f'<line x1="{lx}" y1="36" x2="{lx + 18}" y2="36" stroke="{colour}" stroke-width="2"/>'
                      f'<text x="{lx + 22}" y="40" font-size="11">{esc(label)}</text>')
        lx += 30 + 6.2 * len(label)
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" '
            f'font-family="sans-serif">', f'<rect width="100%" height="100%" fill="white"/>',
            f'<text x="70" y="20" font-size="15" font-weight="bold">{esc(title)}</text>']
    return "\n".join(head + legend + body + ["</svg>"]) + "\n"


# ---------------------------------------------------------------- main

def git_commit():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "crates"],
                               capture_output=True, text=True).stdout.strip()
        return c + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target", "release", "cairn"))
    ap.add_argument("--spec", default=os.path.join(ROOT, "bench", "specs", "cache-tier.toml"))
    ap.add_argument("--dir", default=f"/tmp/cairn-cache-tier-{os.getpid()}",
                    help="the cluster's directory, wiped before and removed after each repetition "
                         "(default: one per run, so runs side by side never share it)")
    ap.add_argument("--out", default=None, help="results directory (default /tmp/cache-tier-DATE)")
    ap.add_argument("--quick", action="store_true", help="merge the spec's [quick] tables: a smoke run")
    ap.add_argument("--repetitions", type=int, help="override the spec's repetitions")
    ap.add_argument("--keep-logs", action="store_true", help="copy the daemons' logs into --out")
    ap.add_argument("--keep-cluster", action="store_true",
                    help="leave the stopped cluster's directory (block files and logs) in --dir")
    args = ap.parse_args()
    spec = load_spec(args.spec, args.quick)
    if args.repetitions:
        spec["workload"]["repetitions"] = args.repetitions
    if not os.access(args.cairn, os.X_OK):
        fail(f"{args.cairn} is not an executable (cargo build --release -p cairn)")
    args.out = args.out or time.strftime("/tmp/cache-tier-%Y%m%d-%H%M%S")
    os.makedirs(args.out, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}",
            "commit": git_commit(), "cairn": os.path.abspath(args.cairn), "quick": args.quick,
            "cairn_built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(args.cairn))),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "spec_path": args.spec}
    print(f"cache_tier.py: {meta['date']}, {meta['machine']}, cairn {meta['commit']}; out {args.out}",
          flush=True)
    reps, started = [], time.time()

    def write_outputs():
        meta["elapsed_s"] = round(time.time() - started, 1)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"meta": meta, "spec": spec, "repetitions": reps}, f, indent=1)
        if reps:
            with open(os.path.join(args.out, "report.md"), "w") as f:
                f.write(markdown(meta, reps, spec))
            with open(os.path.join(args.out, "timeline.svg"), "w") as f:
                f.write(svg(reps, spec, f"Cache tier (document 004): {meta['date']}, {meta['commit']}"
                            f"{', quick' if args.quick else ''}"))

    try:
        for i in range(1, spec["workload"]["repetitions"] + 1):
            print(f"repetition {i}", flush=True)
            reps.append(Rep(args, spec, i).run())
            write_outputs()
    except KeyboardInterrupt:
        print("cache_tier.py: interrupted; finished repetitions kept", file=sys.stderr)
    write_outputs()
    if reps:
        print(open(os.path.join(args.out, "report.md")).read())
    print(f"cache_tier.py: {args.out}/results.json, report.md, timeline.svg "
          f"({meta['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
