//! What `cairn bench store` is asked to do: its command-line arguments, the
//! matrix of points (`--points` picks some), and the [`Plan`] those
//! arguments make, checked (with the store's configuration resolved) before
//! anything is touched.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use cairn_bench::{fmt_bytes, RwMode};
use cairn_config::{Config, OsdConfig, StoreKind};
use clap::Args;

use super::{FIO_FILE, MIB, STORE_SUBDIR};
use crate::{admin, conf, Context};

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
    pub(super) force: bool,
    /// Leave the store and fio's file in DIR at the end.
    #[arg(long)]
    pub(super) keep: bool,
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
    /// (e.g. 4k-randwrite-1,4k-randread-32; any queue depth from 1 to 1024
    /// of the matrix's workloads). Default: all 12.
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
pub(super) struct Point {
    pub(super) rw: RwMode,
    pub(super) bs: u64,
    pub(super) iodepth: u32,
}

impl Point {
    fn all() -> Vec<Point> {
        WORKLOADS
            .iter()
            .flat_map(|&(rw, bs)| DEPTHS.iter().map(move |&iodepth| Point { rw, bs, iodepth }))
            .collect()
    }

    /// `4k-randwrite-32`: what `--points` takes.
    pub(super) fn name(&self) -> String {
        format!(
            "{}-{}-{}",
            fmt_bytes(self.bs).to_ascii_lowercase(),
            self.rw,
            self.iodepth
        )
    }
}

/// Deepest queue a `--points` entry may ask for.
const MAX_POINT_DEPTH: u32 = 1024;

/// The points `--points` selects, in matrix order (workload, then queue
/// depth). A point names one of the matrix's workloads at any queue depth
/// from 1 to [`MAX_POINT_DEPTH`], e.g. `64k-randwrite-8`.
fn select_points(filter: &[String]) -> Result<Vec<Point>> {
    let all = Point::all();
    if filter.is_empty() {
        return Ok(all);
    }
    let mut wanted: Vec<(usize, Point)> = Vec::new();
    for word in filter {
        let word = word.trim().to_ascii_lowercase();
        if word.is_empty() {
            continue;
        }
        let point = parse_point(&word).ok_or_else(|| {
            let names: Vec<String> = all.iter().map(Point::name).collect();
            anyhow!(
                "unknown point '{word}' in --points (points are {}, or any of their \
                 workloads at a queue depth from 1 to {MAX_POINT_DEPTH})",
                names.join(", ")
            )
        })?;
        if !wanted.iter().any(|(_, p)| *p == point.1) {
            wanted.push(point);
        }
    }
    if wanted.is_empty() {
        bail!("--points selects no point");
    }
    wanted.sort_by_key(|&(w, p)| (w, p.iodepth));
    Ok(wanted.into_iter().map(|(_, p)| p).collect())
}

/// `BS-RW-IODEPTH` as a point, with the index of its workload.
fn parse_point(word: &str) -> Option<(usize, Point)> {
    let (workload, depth) = word.rsplit_once('-')?;
    let iodepth: u32 = depth.parse().ok()?;
    if !(1..=MAX_POINT_DEPTH).contains(&iodepth) {
        return None;
    }
    WORKLOADS.iter().enumerate().find_map(|(i, &(rw, bs))| {
        let p = Point { rw, bs, iodepth };
        let name = p.name();
        (name.rsplit_once('-')?.0 == workload).then_some((i, p))
    })
}

/// Everything the arguments say, checked before anything is touched.
pub(super) struct Plan {
    pub(super) kind: StoreKind,
    pub(super) dir: PathBuf,
    pub(super) size: u64,
    pub(super) object_size: u64,
    pub(super) runtime: Duration,
    pub(super) ramp: Duration,
    pub(super) threads: u32,
    pub(super) points: Vec<Point>,
    pub(super) fio: bool,
    pub(super) osd_conf: OsdConfig,
    /// The BlueStore block file size, for a BlueStore.
    pub(super) block_size: Option<u64>,
    pub(super) set: Vec<String>,
    pub(super) json: bool,
}

fn parse_kind(word: &str) -> Result<StoreKind> {
    let word = if word == "memory" { "memstore" } else { word };
    word.parse::<StoreKind>()
        .map_err(|_| anyhow!("unknown store '{word}': expected bluestore, filestore or memstore"))
}

impl Plan {
    pub(super) fn new(ctx: &Context, args: &StoreBenchArgs) -> Result<Plan> {
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

    pub(super) fn store_dir(&self) -> PathBuf {
        self.dir.join(STORE_SUBDIR)
    }

    pub(super) fn fio_file(&self) -> PathBuf {
        self.dir.join(FIO_FILE)
    }
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
        // Any depth of a matrix workload, sorted in with the others.
        assert_eq!(
            f(&["64k-randwrite-8", "4k-randread-32", "64k-randwrite-2"]).ok(),
            Some(vec![
                "4k-randread-32".to_string(),
                "64k-randwrite-2".to_string(),
                "64k-randwrite-8".to_string(),
            ])
        );
        for bad in [
            "4k-randwrite-0",
            "4k-randwrite-1025",
            "8k-randwrite-1",
            "4k-randwrite",
        ] {
            let err = f(&[bad]).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(bad) && err.contains("1m-read-32"), "{err}");
        }
        assert!(f(&[""]).is_err());
    }
}
