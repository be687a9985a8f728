//! A fio-like load generator for any [`Volume`], used by `cairn bench`.
//!
//! A [`BenchSpec`] says what to run (access pattern, block size, `iodepth`,
//! `numjobs`, duration, warm-up). [`run`] drives one volume and [`run_many`]
//! several at once; both return a [`BenchReport`] with IOPS, throughput and
//! latency percentiles per direction, printable with [`BenchReport::table`]
//! or serialisable with serde for `--json`. [`fill`] writes a volume once,
//! sequentially, for callers that precondition once and run several specs.
//! [`StoreVolume`] is a volume straight on one object store (no network, no
//! OSD), for `cairn bench store`.
//!
//! How a run proceeds:
//!
//! 1. The spec is checked against every volume ([`BenchSpec::validate`]).
//! 2. If `precondition` is set, the region of each volume is written once,
//!    sequentially, in 4 MiB blocks with 16 in flight. This is not measured.
//! 3. `numjobs` jobs per volume start together, each a tokio task on the
//!    current runtime keeping `iodepth` operations in flight for
//!    `ramp + runtime`. Operations completing during the ramp, or after the
//!    window has ended (while the last ones drain), are not counted.
//! 4. Each job records latencies (issue to completion, in nanoseconds) in its
//!    own HdrHistograms (1 ns..60 s, 3 significant digits); they are merged
//!    when the jobs end, so jobs share no lock.
//!
//! Random modes choose block-aligned offsets uniformly over the region with a
//! per-job `SmallRng`; sequential modes give each job
//! its own slice of the region, walked in order and wrapping. Writes reuse one
//! buffer of random (non-zero) bytes per job. The first failing operation
//! stops the run, and its error names the operation and offset.

#![warn(missing_docs)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cairn_volume::{Volume, VolumeError};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod job;
mod report;
mod spec;
pub mod store_volume;

pub use job::{PRECONDITION_BS, PRECONDITION_IODEPTH};
pub use report::{
    fmt_bytes, fmt_duration, fmt_us, new_histogram, BenchReport, DirStats, LatencyStats,
    SpecSummary, HIST_HIGH_NS, HIST_LOW_NS, HIST_SIGFIG,
};
pub use spec::{BenchSpec, RwMode, MAX_IODEPTH, SECTOR};
pub use store_volume::{StoreVolume, StoreVolumeError, StoreVolumeOptions};

use job::{fill as fill_volume, job_seed, precondition, run_job, OpGen, Window};
use report::Measurement;

/// The kind of a benchmark operation, as named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A measured read.
    Read,
    /// A measured write.
    Write,
    /// A write of the precondition pass.
    PreconditionWrite,
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::PreconditionWrite => "precondition write",
        })
    }
}

/// Why a benchmark could not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A parameter of the spec is out of range for the volume.
    #[error("invalid {param}: {reason}")]
    InvalidSpec {
        /// The parameter's name, as in [`BenchSpec`] (`"bs"`, `"iodepth"`, ...).
        param: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An `rw` mode name that [`RwMode`] does not know.
    #[error("unknown rw mode {0:?}; valid modes are read, write, randread, randwrite, randrw")]
    UnknownRwMode(String),
    /// [`run_many`] or [`BenchReport::merge`] was given nothing.
    #[error("no volumes to benchmark")]
    NoVolumes,
    /// An operation failed; the run was stopped.
    #[error("{op} of {len} bytes at offset {offset} failed: {source}")]
    Io {
        /// The kind of operation.
        op: OpKind,
        /// Its byte offset in the volume.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The volume's error.
        #[source]
        source: VolumeError,
    },
    /// A job or operation task panicked or was cancelled.
    #[error("benchmark task failed: {0}")]
    Task(String),
    /// A latency histogram could not be created or merged.
    #[error("latency histogram: {0}")]
    Histogram(String),
}

/// Write the first `region` bytes of `volume` once, sequentially, in blocks
/// of `bs` bytes with `iodepth` in flight (random non-zero data, drawn from
/// `seed` or a random seed), and return how long it took. This is the
/// precondition pass of a [`BenchSpec`] with another block size and depth,
/// for callers that precondition once and then run several specs.
pub async fn fill<V: Volume>(
    volume: Arc<V>,
    region: u64,
    bs: u64,
    iodepth: u32,
    seed: Option<u64>,
) -> Result<std::time::Duration, BenchError> {
    let invalid = |param: &'static str, reason: String| BenchError::InvalidSpec { param, reason };
    if bs == 0 || bs % SECTOR != 0 {
        return Err(invalid(
            "bs",
            format!("{bs} is not a positive multiple of {SECTOR}"),
        ));
    }
    if iodepth == 0 || iodepth > MAX_IODEPTH {
        return Err(invalid(
            "iodepth",
            format!("{iodepth} is not in 1..={MAX_IODEPTH}"),
        ));
    }
    let size = volume.size();
    if region == 0 || region > size {
        return Err(invalid(
            "size",
            format!("{region} is not in 1..={size} (the volume's size)"),
        ));
    }
    let start = Instant::now();
    let seed = seed.unwrap_or_else(rand::random);
    fill_volume(volume, region, bs, iodepth as usize, seed).await?;
    Ok(start.elapsed())
}

/// Benchmark one volume as `spec` says. See the [crate docs](crate) for how
/// the run proceeds. Must be called inside a tokio runtime.
pub async fn run<V: Volume>(volume: Arc<V>, spec: &BenchSpec) -> Result<BenchReport, BenchError> {
    run_many(vec![volume], spec).await
}

/// Benchmark several volumes at once: each gets `spec.numjobs` jobs, all
/// sharing one measured window, and the report sums their operations (so
/// IOPS add up) and merges their latency histograms. Each volume's region is
/// chosen (and validated) from its own size.
pub async fn run_many<V: Volume>(
    volumes: Vec<Arc<V>>,
    spec: &BenchSpec,
) -> Result<BenchReport, BenchError> {
    let reports = run_each(volumes, spec).await?;
    let mut merged = BenchReport::merge(&reports)?;
    merged.spec.region = reports.iter().map(|r| r.spec.region).min().unwrap_or(0);
    Ok(merged)
}

/// Like [`run_many`], but one report per volume (in the order given), all
/// measured over the same window: what a matrix with one client per volume
/// needs to keep per-client results.
pub async fn run_each<V: Volume>(
    volumes: Vec<Arc<V>>,
    spec: &BenchSpec,
) -> Result<Vec<BenchReport>, BenchError> {
    if volumes.is_empty() {
        return Err(BenchError::NoVolumes);
    }
    let mut regions = Vec::with_capacity(volumes.len());
    for v in &volumes {
        let size = v.size();
        spec.validate(size)?;
        regions.push(spec.region(size));
    }
    let too_long = || BenchError::InvalidSpec {
        param: "runtime",
        reason: "ramp + runtime is too long".into(),
    };
    let fits = |now: Instant| now.checked_add(spec.ramp)?.checked_add(spec.runtime);
    fits(Instant::now()).ok_or_else(too_long)?;
    let seed = spec.seed.unwrap_or_else(rand::random);
    let numjobs = u64::from(spec.numjobs);

    if spec.precondition {
        let mut passes = JoinSet::new();
        for (i, (v, &region)) in (0u64..).zip(volumes.iter().zip(&regions)) {
            let pass_seed = job_seed(seed, u64::MAX - i);
            passes.spawn(precondition(v.clone(), region, pass_seed));
        }
        while let Some(joined) = passes.join_next().await {
            joined.map_err(|e| BenchError::Task(e.to_string()))??;
        }
    }

    let now = Instant::now();
    let start = now.checked_add(spec.ramp).ok_or_else(too_long)?;
    let end = fits(now).ok_or_else(too_long)?;
    let window = Window { start, end };
    let stop = Arc::new(AtomicBool::new(false));
    let mut jobs = JoinSet::new();
    for (vi, (v, &region)) in (0u64..).zip(volumes.iter().zip(&regions)) {
        for j in 0..numjobs {
            let rng = SmallRng::seed_from_u64(job_seed(seed, vi * numjobs + j));
            let gen = OpGen::new(spec, region, j, numjobs, rng);
            let job = run_job(v.clone(), spec.clone(), gen, window, stop.clone());
            let vi = vi as usize;
            jobs.spawn(async move { (vi, job.await) });
        }
    }
    let mut per_volume = Vec::with_capacity(volumes.len());
    for _ in &volumes {
        per_volume.push(Measurement::new()?);
    }
    // Jobs finish in the order they end: the first error is the first failure.
    while let Some(joined) = jobs.join_next().await {
        let (vi, measured) = joined.map_err(|e| BenchError::Task(e.to_string()))?;
        per_volume[vi].add(&measured?)?;
    }
    let mut reports = Vec::with_capacity(volumes.len());
    for (measured, &region) in per_volume.into_iter().zip(&regions) {
        let summary = SpecSummary::new(spec, region, seed, 1);
        reports.push(BenchReport::new(summary, spec.runtime, measured)?);
    }
    Ok(reports)
}
