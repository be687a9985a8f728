//! `cairn bench store`: benchmark one object store directly (no network, no
//! OSD, no cluster), with raw `fio` numbers for a file on the same disk
//! beside it.
//!
//! The store is made in `DIR/store` (as `cairn osd mkfs` would make it, from
//! the default configuration, `--conf` if given, and `--set` overrides) and
//! driven through a [`StoreVolume`]: the volume's bytes striped over 4 MiB
//! objects, every write one transaction per object piece, complete when
//! durable. The volume is written once sequentially (1 MiB writes, not
//! measured), so writes overwrite and reads hit real data, then each point
//! of the matrix (4 KiB, 64 KiB random and 1 MiB sequential, writes and
//! reads, at iodepth 1 and 32) runs with `cairn_bench::run`. The store's own
//! caches cannot be dropped, so read numbers include them.
//!
//! Then the same points run with raw `fio` on `DIR/fio.dat` (laid out first
//! with one sequential write pass), `direct=1`, io_uring, so the table shows
//! what the disk itself does. For a BlueStore the store's counters (deferred
//! vs direct writes, key-value commits, cache hits) follow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use cairn_bench::{
    fmt_bytes, fmt_duration, fmt_us, BenchSpec, DirStats, RwMode, StoreVolume, StoreVolumeOptions,
};
use cairn_bluestore::{BlueStore, PerfSnapshot};
use cairn_config::{Config, OsdConfig, StoreKind};
use cairn_store::ObjectStore;
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use crate::{admin, conf, osd_store, Context};

const MIB: u64 = 1 << 20;
/// Block size of the sequential pass that fills the volume (and lays out
/// the fio file) before the first point.
const FILL_BS: u64 = MIB;
/// Writes that pass keeps in flight.
const FILL_IODEPTH: u32 = 16;
/// Where in DIR the store goes.
const STORE_SUBDIR: &str = "store";
/// Where in DIR fio's file goes.
const FIO_FILE: &str = "fio.dat";
/// The configuration of this OSD id applies (`[osd.0]`, `--set osd.0.KEY=...`).
const OSD_ID: u32 = 0;
/// A BlueStore's block file is the volume size plus this share of it ...
const BLOCK_EXTRA_DIVISOR: u64 = 4;
/// ... plus this much, for metadata, allocation slack and deferred space.
const BLOCK_EXTRA_BYTES: u64 = 64 * MIB;

/// The workloads of the matrix, in the order they run; each at every depth
/// of [`DEPTHS`].
const WORKLOADS: [(RwMode, u64); 6] = [
    (RwMode::RandWrite, 4 << 10),
    (RwMode::RandRead, 4 << 10),
    (RwMode::RandWrite, 64 << 10),
    (RwMode::RandRead, 64 << 10),
    (RwMode::Write, MIB),
    (RwMode::Read, MIB),
];
const DEPTHS: [u32; 2] = [1, 32];

const CACHE_NOTE: &str = "store reads include the store's own caches (they cannot be dropped); \
                          fio reads are O_DIRECT";

#[derive(Args)]
pub struct StoreBenchArgs {
    /// Object store backend to benchmark.
    #[arg(
        long,
        default_value = "bluestore",
        value_name = "bluestore|filestore|memstore"
    )]
    store: String,
    /// Directory for the store (DIR/store) and fio's file (DIR/fio.dat); made if
    /// missing, must be empty unless --force. Both are removed at the end unless --keep.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Run in a non-empty DIR (a DIR/store or DIR/fio.dat already there is replaced).
    #[arg(long)]
    force: bool,
    /// Leave the store and fio's file in DIR at the end.
    #[arg(long)]
    keep: bool,
    /// Volume size, and the size of fio's file (e.g. 64M, 1G). A BlueStore's
    /// block file gets 25% + 64 MiB more.
    #[arg(long, default_value = "1G")]
    size: String,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 10)]
    runtime: u64,
    /// Seconds per point run before measuring starts.
    #[arg(long, default_value_t = 2)]
    ramp: u64,
    /// Override a configuration option, e.g. `--set osd.bluestore_csum_type=none` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Run only these points, as BS-RW-IODEPTH, comma-separated or repeated
    /// (e.g. 4k-randwrite-1,4k-randread-32). Default: all 12.
    #[arg(long, value_delimiter = ',', value_name = "POINT,...")]
    points: Vec<String>,
    /// Skip the raw fio comparison.
    #[arg(long)]
    no_fio: bool,
    /// Size of the objects the volume is striped over.
    #[arg(long, default_value = "4M")]
    object_size: String,
    /// Worker threads of the async runtime (default: `osd.worker_threads`, as an OSD).
    #[arg(long)]
    threads: Option<u32>,
}

/// One point of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    rw: RwMode,
    bs: u64,
    iodepth: u32,
}

impl Point {
    fn all() -> Vec<Point> {
        WORKLOADS
            .iter()
            .flat_map(|&(rw, bs)| DEPTHS.iter().map(move |&iodepth| Point { rw, bs, iodepth }))
            .collect()
    }

    /// `4k-randwrite-32`: what `--points` takes.
    fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            fmt_bytes(self.bs).to_ascii_lowercase(),
            self.rw,
            self.iodepth
        )
    }
}

/// The points `--points` selects, in matrix order.
fn select_points(filter: &[String]) -> Result<Vec<Point>> {
    let all = Point::all();
    if filter.is_empty() {
        return Ok(all);
    }
    let mut wanted = Vec::new();
    for word in filter {
        let word = word.trim().to_ascii_lowercase();
        if word.is_empty() {
            continue;
        }
        match all.iter().find(|p| p.name() == word) {
            Some(p) => wanted.push(*p),
            None => {
                let names: Vec<String> = all.iter().map(Point::name).collect();
                bail!(
                    "unknown point '{word}' in --points (points are {})",
                    names.join(", ")
                );
            }
        }
    }
    if wanted.is_empty() {
        bail!("--points selects no point");
    }
    Ok(all.into_iter().filter(|p| wanted.contains(p)).collect())
}

/// Everything the arguments say, checked before anything is touched.
struct Plan {
    kind: StoreKind,
    dir: PathBuf,
    size: u64,
    object_size: u64,
    runtime: Duration,
    ramp: Duration,
    threads: u32,
    points: Vec<Point>,
    fio: bool,
    osd_conf: OsdConfig,
    /// The BlueStore block file size, for a BlueStore.
    block_size: Option<u64>,
    set: Vec<String>,
    json: bool,
}

fn parse_kind(word: &str) -> Result<StoreKind> {
    let word = if word == "memory" { "memstore" } else { word };
    word.parse::<StoreKind>()
        .map_err(|_| anyhow!("unknown store '{word}': expected bluestore, filestore or memstore"))
}

impl Plan {
    fn new(ctx: &Context, args: &StoreBenchArgs) -> Result<Plan> {
        let kind = parse_kind(&args.store)?;
        let size = admin::size_arg(&args.size).context("--size")?;
        if size < MIB {
            bail!(
                "--size {} is too small: the volume must hold at least one 1M block",
                args.size
            );
        }
        if size % 4096 != 0 {
            bail!("--size {} is not a multiple of 4K", args.size);
        }
        let object_size = admin::size_arg(&args.object_size).context("--object-size")?;
        if object_size == 0 || object_size % 4096 != 0 || object_size > cairn_store::MAX_OBJECT_SIZE
        {
            bail!(
                "--object-size {} must be a positive multiple of 4K",
                args.object_size
            );
        }
        if args.runtime == 0 {
            bail!("--runtime must be at least 1 second");
        }
        let points = select_points(&args.points)?;

        // Defaults (or the file given with --conf: `cairn bench store` needs
        // no cluster), then the block size, then --set, then --store.
        let mut config = match &ctx.conf_path {
            Some(path) => conf::load_file(path)?,
            None => Config::default(),
        };
        let block_size = (kind == StoreKind::Bluestore).then(|| {
            let raw = size + size / BLOCK_EXTRA_DIVISOR + BLOCK_EXTRA_BYTES;
            raw.div_ceil(MIB) * MIB
        });
        if let Some(block) = block_size {
            config
                .set("osd.bluestore_block_size", &block.to_string())
                .context("osd.bluestore_block_size")?;
        }
        config.set_args(&args.set).context("--set")?;
        config
            .set(&format!("osd.{OSD_ID}.store"), &kind.to_string())
            .context("--store")?;
        let osd_conf = config.osd_for(OSD_ID);
        if kind == StoreKind::Bluestore {
            for (name, value) in [
                ("osd.bluestore_block_path", &osd_conf.bluestore_block_path),
                ("osd.bluestore_db_path", &osd_conf.bluestore_db_path),
                ("osd.bluestore_wal_path", &osd_conf.bluestore_wal_path),
            ] {
                if !value.is_empty() {
                    bail!("{name} is set to {value}: cairn bench store keeps its whole store in DIR (unset it)");
                }
            }
        }
        let block_size = block_size.map(|_| osd_conf.bluestore_block_size);
        let threads = args.threads.unwrap_or(osd_conf.worker_threads);
        if threads == 0 {
            bail!("--threads must be at least 1");
        }
        Ok(Plan {
            kind,
            dir: args.dir.clone(),
            size,
            object_size,
            runtime: Duration::from_secs(args.runtime),
            ramp: Duration::from_secs(args.ramp),
            threads,
            points,
            fio: !args.no_fio,
            osd_conf,
            block_size,
            set: args.set.clone(),
            json: ctx.json,
        })
    }

    fn store_dir(&self) -> PathBuf {
        self.dir.join(STORE_SUBDIR)
    }

    fn fio_file(&self) -> PathBuf {
        self.dir.join(FIO_FILE)
    }
}

/// DIR, made ready for a run, and how to tidy it afterwards.
struct Workspace {
    dir: PathBuf,
    /// Whether this run made DIR (then it is removed too, if left empty).
    created: bool,
}

impl Workspace {
    fn prepare(dir: &Path, force: bool) -> Result<Workspace> {
        let created = match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => bail!("{} is not a directory", dir.display()),
            Ok(_) => {
                let mut entries = std::fs::read_dir(dir)
                    .with_context(|| format!("cannot read {}", dir.display()))?;
                if entries.next().is_some() && !force {
                    bail!(
                        "{} is not empty (use --force to run in it anyway)",
                        dir.display()
                    );
                }
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                true
            }
            Err(e) => return Err(e).with_context(|| format!("cannot access {}", dir.display())),
        };
        let ws = Workspace {
            dir: dir.to_path_buf(),
            created,
        };
        // With --force, what an earlier run left is replaced.
        ws.remove_ours()?;
        Ok(ws)
    }

    /// Remove DIR/store and DIR/fio.dat if they exist.
    fn remove_ours(&self) -> Result<()> {
        for name in [STORE_SUBDIR, FIO_FILE] {
            let path = self.dir.join(name);
            let removed = match path.symlink_metadata() {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            removed.with_context(|| format!("cannot remove {}", path.display()))?;
        }
        Ok(())
    }

    /// Remove what the run made: the store, the fio file, and DIR itself if
    /// the run made it and nothing else is in it.
    fn remove(&self) -> Result<()> {
        self.remove_ours()?;
        if self.created {
            let _ = std::fs::remove_dir(&self.dir);
        }
        Ok(())
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
struct Row {
    /// `store` or `fio`.
    path: &'static str,
    /// The point's name, as `--points` takes it.
    point: String,
    rw: RwMode,
    bs: u64,
    iodepth: u32,
    iops: f64,
    mib_per_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    #[serde(rename = "p99.99_us")]
    p99_99_us: f64,
    /// Operations measured (store rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    ops: Option<u64>,
    /// The BlueStore's counters over this point.
    #[serde(skip_serializing_if = "Option::is_none")]
    perf: Option<PerfSummary>,
}

impl Row {
    fn new(path: &'static str, p: Point) -> Row {
        Row {
            path,
            point: p.name(),
            rw: p.rw,
            bs: p.bs,
            iodepth: p.iodepth,
            iops: 0.0,
            mib_per_s: 0.0,
            mean_us: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            p99_99_us: 0.0,
            ops: None,
            perf: None,
        }
    }

    fn from_stats(p: Point, d: &DirStats) -> Row {
        Row {
            iops: d.iops,
            mib_per_s: d.mib_per_s,
            mean_us: d.lat.mean_us,
            p50_us: d.lat.p50_us,
            p99_us: d.lat.p99_us,
            p99_99_us: d.lat.p99_99_us,
            ops: Some(d.ops),
            ..Row::new("store", p)
        }
    }

    fn line(&self) -> String {
        format!(
            "{:<5} {:<9} {:>4} {:>7} {:>10.0} {:>9.1} {:>9} {:>9} {:>9} {:>10}",
            self.path,
            self.rw.as_str(),
            fmt_bytes(self.bs),
            self.iodepth,
            self.iops,
            self.mib_per_s,
            fmt_us(self.mean_us),
            fmt_us(self.p50_us),
            fmt_us(self.p99_us),
            fmt_us(self.p99_99_us),
        )
    }
}

fn table_header() -> String {
    format!(
        "{:<5} {:<9} {:>4} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "path",
        "workload",
        "bs",
        "iodepth",
        "IOPS",
        "MiB/s",
        "mean(us)",
        "p50(us)",
        "p99(us)",
        "p99.99(us)"
    )
}

/// A BlueStore's counters over an interval.
#[derive(Debug, Clone, Default, Serialize)]
struct PerfSummary {
    transactions: u64,
    deferred_writes: u64,
    deferred_write_bytes: u64,
    direct_writes: u64,
    direct_write_bytes: u64,
    rmw_reads: u64,
    kv_commits: u64,
    kv_commit_mean_us: f64,
    device_flushes: u64,
    reads: u64,
    data_cache_hits: u64,
    data_cache_misses: u64,
    onode_cache_hits: u64,
    onode_cache_misses: u64,
    device_reads: u64,
    device_read_bytes: u64,
}

impl PerfSummary {
    fn between(a: &PerfSnapshot, b: &PerfSnapshot) -> PerfSummary {
        let d = |x: u64, y: u64| y.saturating_sub(x);
        let commits = d(a.kv_commits, b.kv_commits);
        let total_us = |p: &PerfSnapshot| p.kv_commit_mean_us * p.kv_commits as f64;
        PerfSummary {
            transactions: d(a.transactions, b.transactions),
            deferred_writes: d(a.deferred_writes, b.deferred_writes),
            deferred_write_bytes: d(a.deferred_write_bytes, b.deferred_write_bytes),
            direct_writes: d(a.direct_writes, b.direct_writes),
            direct_write_bytes: d(a.direct_write_bytes, b.direct_write_bytes),
            rmw_reads: d(a.rmw_reads, b.rmw_reads),
            kv_commits: commits,
            kv_commit_mean_us: if commits == 0 {
                0.0
            } else {
                ((total_us(b) - total_us(a)) / commits as f64).max(0.0)
            },
            device_flushes: d(a.device_flushes, b.device_flushes),
            reads: d(a.reads, b.reads),
            data_cache_hits: d(a.data_cache_hits, b.data_cache_hits),
            data_cache_misses: d(a.data_cache_misses, b.data_cache_misses),
            onode_cache_hits: d(a.onode_cache_hits, b.onode_cache_hits),
            onode_cache_misses: d(a.onode_cache_misses, b.onode_cache_misses),
            device_reads: d(a.device_reads, b.device_reads),
            device_read_bytes: d(a.device_read_bytes, b.device_read_bytes),
        }
    }

    fn text(&self) -> String {
        let pct = |hits: u64, misses: u64| {
            let all = hits + misses;
            if all == 0 {
                "no lookups".to_string()
            } else {
                format!(
                    "{:.1}% hits ({hits} of {all})",
                    hits as f64 * 100.0 / all as f64
                )
            }
        };
        format!(
            "  writes  {} deferred ({}), {} direct ({}), {} read-modify-write reads\n\
             \x20 kv      {} commits, mean {} us; {} transactions; {} device flushes\n\
             \x20 cache   data {}, onode {}\n\
             \x20 reads   {} store reads, {} device reads ({})",
            self.deferred_writes,
            human_bytes(self.deferred_write_bytes),
            self.direct_writes,
            human_bytes(self.direct_write_bytes),
            self.rmw_reads,
            self.kv_commits,
            fmt_us(self.kv_commit_mean_us),
            self.transactions,
            self.device_flushes,
            pct(self.data_cache_hits, self.data_cache_misses),
            pct(self.onode_cache_hits, self.onode_cache_misses),
            self.reads,
            self.device_reads,
            human_bytes(self.device_read_bytes),
        )
    }
}

fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS.iter().find(|(unit, _)| n >= *unit).map_or_else(
        || format!("{n} B"),
        |(unit, name)| format!("{:.1} {name}", n as f64 / *unit as f64),
    )
}

/// A sequential pass that wrote the whole volume or file.
#[derive(Debug, Clone, Serialize)]
struct Fill {
    bytes: u64,
    bs: u64,
    iodepth: u32,
    seconds: f64,
    mib_per_s: f64,
}

impl Fill {
    fn new(bytes: u64, took: Duration) -> Fill {
        let seconds = took.as_secs_f64();
        Fill {
            bytes,
            bs: FILL_BS,
            iodepth: FILL_IODEPTH,
            seconds,
            mib_per_s: if seconds > 0.0 {
                bytes as f64 / MIB as f64 / seconds
            } else {
                0.0
            },
        }
    }

    fn text(&self, what: &str) -> String {
        format!(
            "{what}: {} written sequentially ({} writes, {} in flight) in {:.1}s, {:.0} MiB/s; not measured",
            fmt_bytes(self.bytes),
            fmt_bytes(self.bs),
            self.iodepth,
            self.seconds,
            self.mib_per_s
        )
    }
}

/// What became of the fio comparison.
#[derive(Debug, Clone, Serialize)]
struct FioStatus {
    /// `ran`, `disabled` (--no-fio), `missing` (not installed) or `failed`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<Fill>,
}

/// store / fio for the headline points.
#[derive(Debug, Clone, Default, Serialize)]
struct Ratios {
    randwrite_4k_qd32_iops: Option<f64>,
    randread_4k_qd32_iops: Option<f64>,
    randwrite_4k_qd1_mean_latency: Option<f64>,
}

impl Ratios {
    fn new(rows: &[Row]) -> Ratios {
        let find = |path: &str, rw: RwMode, iodepth: u32| {
            rows.iter()
                .find(|r| r.path == path && r.rw == rw && r.bs == 4096 && r.iodepth == iodepth)
        };
        let ratio = |rw: RwMode, iodepth: u32, pick: fn(&Row) -> f64| {
            let store = pick(find("store", rw, iodepth)?);
            let fio = pick(find("fio", rw, iodepth)?);
            (fio > 0.0).then(|| store / fio)
        };
        Ratios {
            randwrite_4k_qd32_iops: ratio(RwMode::RandWrite, 32, |r| r.iops),
            randread_4k_qd32_iops: ratio(RwMode::RandRead, 32, |r| r.iops),
            randwrite_4k_qd1_mean_latency: ratio(RwMode::RandWrite, 1, |r| r.mean_us),
        }
    }

    fn text(&self) -> String {
        let show = |r: Option<f64>| r.map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}x"));
        format!(
            "store/fio: 4K randwrite QD32 IOPS {}, 4K randread QD32 IOPS {}, 4K randwrite QD1 mean latency {}",
            show(self.randwrite_4k_qd32_iops),
            show(self.randread_4k_qd32_iops),
            show(self.randwrite_4k_qd1_mean_latency)
        )
    }
}

/// The whole result (what `--json` prints).
#[derive(Debug, Serialize)]
struct Document {
    store: String,
    /// What mkfs made.
    made: String,
    dir: PathBuf,
    size: u64,
    object_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    bluestore_block_size: Option<u64>,
    runtime_s: u64,
    ramp_s: u64,
    threads: u32,
    set: Vec<String>,
    note: &'static str,
    precondition: Fill,
    points: Vec<Row>,
    fio: FioStatus,
    ratios: Ratios,
    /// The BlueStore's counters over the store run (precondition included).
    #[serde(skip_serializing_if = "Option::is_none")]
    perf: Option<PerfSummary>,
}

/// Prints as the run goes, unless the output is one JSON document at the end.
struct Out {
    json: bool,
}

impl Out {
    fn line(&self, text: impl AsRef<str>) {
        if !self.json {
            println!("{}", text.as_ref());
        }
    }
}

/// An opened store, with its BlueStore face if it is one.
struct Opened {
    store: Arc<dyn ObjectStore>,
    blue: Option<Arc<BlueStore>>,
    made: String,
}

fn open_store(plan: &Plan) -> Result<Opened> {
    let dir = plan.store_dir();
    let conf = &plan.osd_conf;
    if plan.kind == StoreKind::Memstore {
        return Ok(Opened {
            store: Arc::new(cairn_store::memstore::MemStore::new()),
            blue: None,
            made: "a memstore (nothing on disk)".to_string(),
        });
    }
    let made = osd_store::mkfs(&dir, plan.kind, conf, &osd_store::MkfsRequest::default())?;
    if plan.kind == StoreKind::Bluestore {
        let blue = osd_store::open_bluestore(&dir, conf)?;
        Ok(Opened {
            store: blue.clone(),
            blue: Some(blue),
            made,
        })
    } else {
        Ok(Opened {
            store: osd_store::open(&dir, conf)?,
            blue: None,
            made,
        })
    }
}

pub fn run(ctx: &Context, args: StoreBenchArgs) -> Result<()> {
    let plan = Plan::new(ctx, &args)?;
    let ws = Workspace::prepare(&plan.dir, args.force)?;
    conf::init_logging("warn");
    let result = crate::daemons::runtime(plan.threads).and_then(|rt| {
        let result = rt.block_on(async {
            tokio::select! {
                r = execute(&plan) => r,
                _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
            }
        });
        // Dropping the runtime drops every task, so the store is closed
        // before its files go.
        drop(rt);
        result
    });
    let tidy = if args.keep {
        if result.is_ok() && !plan.json {
            println!(
                "kept the store in {} and fio's file in {}",
                plan.store_dir().display(),
                plan.fio_file().display()
            );
        }
        Ok(())
    } else {
        ws.remove()
    };
    let doc = result?;
    tidy?;
    if doc.fio.state == "failed" {
        bail!(
            "fio failed: {}",
            doc.fio.detail.as_deref().unwrap_or("unknown error")
        );
    }
    Ok(())
}

/// Run the store points, then the fio points, printing as they finish;
/// print the end (or the JSON document) and return it.
async fn execute(plan: &Plan) -> Result<Document> {
    let out = Out { json: plan.json };
    let opened = open_store(plan)?;
    let made = opened.made.clone();
    let place = match plan.kind {
        StoreKind::Memstore => "in memory".to_string(),
        _ => format!("in {}", plan.store_dir().display()),
    };
    out.line(format!(
        "cairn bench store: {} {place}, volume {} in {} objects, runtime {}, ramp {}, {} thread{}",
        plan.kind,
        fmt_bytes(plan.size),
        fmt_bytes(plan.object_size),
        fmt_duration(plan.runtime),
        fmt_duration(plan.ramp),
        plan.threads,
        if plan.threads == 1 { "" } else { "s" }
    ));
    out.line(format!("made {made}"));
    out.line(format!("note: {CACHE_NOTE}"));

    let (precondition, mut rows, perf) = store_points(plan, opened, &out).await?;

    let mut fio = FioStatus {
        state: "disabled",
        version: None,
        detail: None,
        layout: None,
    };
    if plan.fio {
        fio = fio_points(plan, &out, &mut rows).await;
    }
    let ratios = Ratios::new(&rows);
    if fio.state == "ran" {
        out.line(ratios.text());
    }
    if let Some(perf) = &perf {
        out.line("bluestore counters over the store run (precondition included):");
        out.line(perf.text());
    }
    let doc = Document {
        store: plan.kind.to_string(),
        made,
        dir: plan.dir.clone(),
        size: plan.size,
        object_size: plan.object_size,
        bluestore_block_size: plan.block_size,
        runtime_s: plan.runtime.as_secs(),
        ramp_s: plan.ramp.as_secs(),
        threads: plan.threads,
        set: plan.set.clone(),
        note: CACHE_NOTE,
        precondition,
        points: rows,
        fio,
        ratios,
        perf,
    };
    if plan.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(doc)
}

/// Fill the volume, run every point on it, and close the store.
async fn store_points(
    plan: &Plan,
    opened: Opened,
    out: &Out,
) -> Result<(Fill, Vec<Row>, Option<PerfSummary>)> {
    let Opened { store, blue, .. } = opened;
    let perf = || blue.as_ref().map(|b| b.perf());
    let start_perf = perf();
    let opts = StoreVolumeOptions {
        object_size: plan.object_size,
        ..StoreVolumeOptions::default()
    };
    let volume = Arc::new(StoreVolume::with_options(store, plan.size, opts)?);

    let took = cairn_bench::fill(volume.clone(), plan.size, FILL_BS, FILL_IODEPTH, None)
        .await
        .context("precondition")?;
    let precondition = Fill::new(plan.size, took);
    out.line(precondition.text("precondition"));
    out.line(table_header());

    let mut rows = Vec::new();
    for &p in &plan.points {
        let spec = BenchSpec {
            rw: p.rw,
            bs: p.bs,
            iodepth: p.iodepth,
            numjobs: 1,
            runtime: plan.runtime,
            ramp: plan.ramp,
            precondition: false,
            size: None,
            seed: None,
            ..BenchSpec::default()
        };
        let before = perf();
        let report = cairn_bench::run(volume.clone(), &spec)
            .await
            .with_context(|| format!("store point {}", p.name()))?;
        let dir = if p.rw.writes() {
            &report.write
        } else {
            &report.read
        };
        let mut row = Row::from_stats(p, dir);
        if let (Some(a), Some(b)) = (&before, &perf()) {
            row.perf = Some(PerfSummary::between(a, b));
        }
        out.line(row.line());
        rows.push(row);
    }
    let summary = match (&start_perf, &perf()) {
        (Some(a), Some(b)) => Some(PerfSummary::between(a, b)),
        _ => None,
    };
    // Close the store (a BlueStore waits for its queued work and stops its
    // threads) so that nothing of it runs beside fio.
    drop(volume);
    drop(blue);
    Ok((precondition, rows, summary))
}

/// The fio comparison. Never fails: what went wrong is in the status.
async fn fio_points(plan: &Plan, out: &Out, rows: &mut Vec<Row>) -> FioStatus {
    let mut status = FioStatus {
        state: "ran",
        version: None,
        detail: None,
        layout: None,
    };
    match tokio::process::Command::new("fio")
        .arg("--version")
        .kill_on_drop(true)
        .output()
        .await
    {
        Ok(o) if o.status.success() => {
            status.version = Some(String::from_utf8_lossy(&o.stdout).trim().to_string());
        }
        Ok(o) => {
            status.state = "missing";
            status.detail = Some(format!(
                "fio --version failed: {}",
                first_line(&o.stderr).unwrap_or_else(|| o.status.to_string())
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            status.state = "missing";
            status.detail = Some("fio is not installed (not in PATH)".to_string());
        }
        Err(e) => {
            status.state = "missing";
            status.detail = Some(format!("cannot run fio: {e}"));
        }
    }
    if status.state == "missing" {
        out.line(format!(
            "fio: skipped, {}",
            status.detail.as_deref().unwrap_or("not available")
        ));
        return status;
    }
    let file = plan.fio_file();
    let started = Instant::now();
    let layout = fio_json(&[
        "--name=layout".to_string(),
        format!("--filename={}", file.display()),
        format!("--size={}", plan.size),
        "--rw=write".to_string(),
        format!("--bs={FILL_BS}"),
        format!("--iodepth={FILL_IODEPTH}"),
        "--direct=1".to_string(),
        "--ioengine=io_uring".to_string(),
        "--output-format=json".to_string(),
    ])
    .await;
    if let Err(e) = layout {
        status.state = "failed";
        status.detail = Some(format!("laying out {}: {e:#}", file.display()));
        return status;
    }
    let fill = Fill::new(plan.size, started.elapsed());
    out.line(fill.text(&format!("fio layout of {}", file.display())));
    status.layout = Some(fill);
    for &p in &plan.points {
        let args = vec![
            "--name=raw".to_string(),
            format!("--filename={}", file.display()),
            format!("--size={}", plan.size),
            format!("--rw={}", p.rw),
            format!("--bs={}", p.bs),
            format!("--iodepth={}", p.iodepth),
            "--direct=1".to_string(),
            "--ioengine=io_uring".to_string(),
            "--randrepeat=0".to_string(),
            "--norandommap".to_string(),
            format!("--runtime={}", plan.runtime.as_secs()),
            format!("--ramp_time={}", plan.ramp.as_secs()),
            "--time_based".to_string(),
            "--output-format=json".to_string(),
        ];
        let row = match fio_json(&args).await.and_then(|v| fio_row(&v, p)) {
            Ok(row) => row,
            Err(e) => {
                status.state = "failed";
                status.detail = Some(format!("point {}: {e:#}", p.name()));
                return status;
            }
        };
        out.line(row.line());
        rows.push(row);
    }
    status
}

fn first_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Run fio with `args` and parse its JSON output.
async fn fio_json(args: &[String]) -> Result<Value> {
    let output = tokio::process::Command::new("fio")
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("cannot run fio")?;
    if !output.status.success() {
        bail!(
            "{}",
            first_line(&output.stderr)
                .or_else(|| first_line(&output.stdout))
                .unwrap_or_else(|| format!("fio exited with {}", output.status))
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // fio may print notes before the document.
    let start = text.find('{').context("fio printed no JSON")?;
    let value: Value =
        serde_json::from_str(&text[start..]).context("cannot parse fio's JSON output")?;
    let error = value["jobs"][0]["error"].as_i64().unwrap_or(0);
    if error != 0 {
        bail!("fio job failed with error {error}");
    }
    Ok(value)
}

/// A row from fio's JSON: `iops`, `bw_bytes`, `lat_ns.mean` and the
/// `clat_ns` percentiles of the job's direction.
fn fio_row(value: &Value, p: Point) -> Result<Row> {
    let dir = if p.rw.writes() { "write" } else { "read" };
    let d = &value["jobs"][0][dir];
    if d.is_null() {
        bail!("fio's JSON has no jobs[0].{dir}");
    }
    let num = |v: &Value, what: &str| -> Result<f64> {
        v.as_f64()
            .with_context(|| format!("fio's JSON has no number {dir}.{what}"))
    };
    let pct = &d["clat_ns"]["percentile"];
    let us = |key: &str| -> Result<f64> { Ok(num(&pct[key], key)? / 1000.0) };
    let bw = match d["bw_bytes"].as_f64() {
        Some(b) => b,
        None => num(&d["bw"], "bw")? * 1024.0,
    };
    Ok(Row {
        iops: num(&d["iops"], "iops")?,
        mib_per_s: bw / MIB as f64,
        mean_us: num(&d["lat_ns"]["mean"], "lat_ns.mean")? / 1000.0,
        p50_us: us("50.000000")?,
        p99_us: us("99.000000")?,
        p99_99_us: us("99.990000")?,
        ..Row::new("fio", p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_has_twelve_named_points() {
        let names: Vec<String> = Point::all().iter().map(Point::name).collect();
        assert_eq!(
            names,
            [
                "4k-randwrite-1",
                "4k-randwrite-32",
                "4k-randread-1",
                "4k-randread-32",
                "64k-randwrite-1",
                "64k-randwrite-32",
                "64k-randread-1",
                "64k-randread-32",
                "1m-write-1",
                "1m-write-32",
                "1m-read-1",
                "1m-read-32",
            ]
        );
    }

    #[test]
    fn points_filter_keeps_matrix_order() {
        let f = |words: &[&str]| {
            let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            select_points(&words).map(|ps| ps.iter().map(Point::name).collect::<Vec<_>>())
        };
        assert_eq!(f(&[]).map(|v| v.len()).ok(), Some(12));
        assert_eq!(
            f(&["1M-read-32", "4k-randwrite-1", " 4k-randwrite-1 "]).ok(),
            Some(vec!["4k-randwrite-1".to_string(), "1m-read-32".to_string()])
        );
        let err = f(&["4k-randwrite-16"]).map(|_| ()).unwrap_err().to_string();
        assert!(
            err.contains("4k-randwrite-16") && err.contains("1m-read-32"),
            "{err}"
        );
        assert!(f(&[""]).is_err());
    }

    #[test]
    fn fio_json_is_read_like_foundation_py() {
        let json = serde_json::json!({
            "jobs": [{
                "error": 0,
                "write": {
                    "iops": 2000.5,
                    "bw_bytes": 8_194_048,
                    "lat_ns": { "mean": 480_000.0 },
                    "clat_ns": { "percentile": {
                        "50.000000": 450_000, "99.000000": 900_000, "99.990000": 2_000_000
                    } }
                },
                "read": { "iops": 0.0 }
            }]
        });
        let p = Point {
            rw: RwMode::RandWrite,
            bs: 4096,
            iodepth: 1,
        };
        let row = fio_row(&json, p).expect("row");
        assert_eq!(row.path, "fio");
        assert_eq!(row.iops, 2000.5);
        assert!((row.mib_per_s - 8_194_048.0 / MIB as f64).abs() < 1e-9);
        assert_eq!(
            (row.mean_us, row.p50_us, row.p99_us, row.p99_99_us),
            (480.0, 450.0, 900.0, 2000.0)
        );
        let read = Point {
            rw: RwMode::RandRead,
            ..p
        };
        assert!(fio_row(&json, read).is_err());
    }

    #[test]
    fn ratios_need_both_paths() {
        let p = |rw, iodepth| Point {
            rw,
            bs: 4096,
            iodepth,
        };
        let row = |path, pt: Point, iops: f64, mean_us: f64| Row {
            path,
            iops,
            mean_us,
            ..Row::new(path, pt)
        };
        let rows = vec![
            row("store", p(RwMode::RandWrite, 32), 500.0, 0.0),
            row("fio", p(RwMode::RandWrite, 32), 1000.0, 0.0),
            row("store", p(RwMode::RandWrite, 1), 0.0, 300.0),
            row("fio", p(RwMode::RandWrite, 1), 0.0, 100.0),
            row("store", p(RwMode::RandRead, 32), 10.0, 0.0),
        ];
        let r = Ratios::new(&rows);
        assert_eq!(r.randwrite_4k_qd32_iops, Some(0.5));
        assert_eq!(r.randwrite_4k_qd1_mean_latency, Some(3.0));
        assert_eq!(r.randread_4k_qd32_iops, None);
        assert!(r.text().contains("0.50x") && r.text().contains("n/a"));
    }

    #[test]
    fn perf_summary_is_the_difference() {
        let a = PerfSnapshot {
            kv_commits: 10,
            kv_commit_mean_us: 100.0,
            deferred_writes: 5,
            data_cache_hits: 7,
            ..PerfSnapshot::default()
        };
        let b = PerfSnapshot {
            kv_commits: 30,
            kv_commit_mean_us: 200.0,
            deferred_writes: 8,
            data_cache_hits: 17,
            data_cache_misses: 10,
            ..PerfSnapshot::default()
        };
        let s = PerfSummary::between(&a, &b);
        assert_eq!((s.kv_commits, s.deferred_writes), (20, 3));
        // (30*200 - 10*100) / 20
        assert!((s.kv_commit_mean_us - 250.0).abs() < 1e-9);
        assert!(s.text().contains("50.0% hits (10 of 20)"), "{}", s.text());
    }

    #[test]
    fn sizes_print_readably() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
