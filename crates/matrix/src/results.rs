//! What a matrix run records, and how it is reduced the way the source
//! documents' reports reduce it.
//!
//! Raw data is kept per client and per repetition: operations, bytes and
//! the latency histogram as its non-empty buckets (value, count), so that
//! histograms can be merged exactly later, by this run or by `compare`.
//!
//! Reduction, per repetition: IOPS and bandwidth are summed over clients
//! (each client's operations over the measured window); latency statistics
//! come from the clients' histograms merged into one, never from averaging
//! their percentiles. Per point: each statistic is the median over the
//! repetitions, and IOPS also keeps its minimum and maximum (the spread).
//! CPU seconds are those every daemon used during the repetition's
//! measured window, read from /proc; IOPS per CPU-second divides the
//! point's operations by the cluster's daemons' sum (the NBD gateways,
//! `nbd.I`, are not in it). CPU µs per op is given per role: the OSDs
//! (`osd.*`) and the gateways; context switches per op, over every thread
//! of the OSDs, from /proc too. Results written before these were measured
//! have none (`None`), never zero.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::spec::{MatrixSpec, Point};

/// Why results cannot be reduced.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("latency histogram: {0}")]
    Histogram(String),
}

/// An empty latency histogram with the bounds every result uses (those of
/// `cairn bench`: 1 ns to 60 s, 3 significant digits).
pub fn new_histogram() -> Result<Histogram<u64>, ResultsError> {
    cairn_bench::new_histogram().map_err(|e| ResultsError::Histogram(e.to_string()))
}

/// One direction (reads or writes) of one client in one repetition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirRaw {
    pub ops: u64,
    pub bytes: u64,
    /// Latency histogram in nanoseconds: `(value, count)` of each
    /// non-empty bucket, values ascending.
    pub lat_ns: Vec<(u64, u64)>,
}

impl DirRaw {
    /// Buckets of `hist` (nanoseconds).
    pub fn buckets(hist: &Histogram<u64>) -> Vec<(u64, u64)> {
        hist.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    /// Add this direction's latencies to `hist`.
    pub fn record_into(&self, hist: &mut Histogram<u64>) -> Result<(), ResultsError> {
        for &(value, count) in &self.lat_ns {
            let value = value.clamp(cairn_bench::HIST_LOW_NS, cairn_bench::HIST_HIGH_NS);
            hist.record_n(value, count)
                .map_err(|e| ResultsError::Histogram(e.to_string()))?;
        }
        Ok(())
    }
}

/// One client's measurement in one repetition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientRaw {
    pub client: u32,
    pub read: DirRaw,
    pub write: DirRaw,
}

/// One repetition of a point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RepRaw {
    /// Length of the measured window, in seconds.
    pub seconds: f64,
    pub clients: Vec<ClientRaw>,
    /// CPU seconds each daemon (`mon`, `osd.0`, ..., gateways `nbd.0`,
    /// ...) used in the window.
    pub cpu_s: BTreeMap<String, f64>,
    /// Context switches each daemon made in the window (`None`: not
    /// measured, as in results of older versions).
    #[serde(default)]
    pub csw: Option<BTreeMap<String, u64>>,
}

/// A process's role, from its name.
fn is_osd(name: &str) -> bool {
    name.starts_with("osd.")
}

fn is_gateway(name: &str) -> bool {
    name.starts_with("nbd.")
}

/// Latency statistics, in microseconds (`cairn bench`'s).
pub type Latency = cairn_bench::LatencyStats;

/// One repetition reduced: sums over clients, merged latencies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RepSummary {
    pub iops: f64,
    pub read_iops: f64,
    pub write_iops: f64,
    pub mib_s: f64,
    /// Reads and writes together.
    pub lat: Latency,
    pub read_lat: Latency,
    pub write_lat: Latency,
    /// CPU seconds of all daemons together (0 if unknown).
    pub cpu_s: f64,
    /// Operations per daemon CPU-second (0 if unknown).
    pub iops_per_cpu_s: f64,
    /// OSD CPU microseconds per operation (all OSDs together).
    #[serde(default)]
    pub osd_cpu_us_per_op: Option<f64>,
    /// NBD gateway CPU microseconds per operation.
    #[serde(default)]
    pub gateway_cpu_us_per_op: Option<f64>,
    /// Context switches of all OSD threads per operation.
    #[serde(default)]
    pub osd_csw_per_op: Option<f64>,
}

impl RepRaw {
    /// Reduce this repetition. See the module docs.
    pub fn summary(&self) -> Result<RepSummary, ResultsError> {
        let mut read = new_histogram()?;
        let mut write = new_histogram()?;
        let (mut read_ops, mut write_ops, mut bytes) = (0u64, 0u64, 0u64);
        for c in &self.clients {
            c.read.record_into(&mut read)?;
            c.write.record_into(&mut write)?;
            read_ops += c.read.ops;
            write_ops += c.write.ops;
            bytes += c.read.bytes + c.write.bytes;
        }
        let mut all = new_histogram()?;
        all.add(&read)
            .and_then(|()| all.add(&write))
            .map_err(|e| ResultsError::Histogram(e.to_string()))?;
        let per_s = |n: u64| {
            if self.seconds > 0.0 {
                n as f64 / self.seconds
            } else {
                0.0
            }
        };
        let cpu_s: f64 = self
            .cpu_s
            .iter()
            .filter(|(name, _)| !is_gateway(name))
            .map(|(_, s)| s)
            .sum();
        let ops = read_ops + write_ops;
        let per_op = |total: f64, any: bool| (any && ops > 0).then(|| total / ops as f64);
        let role_us = |role: fn(&str) -> bool| {
            let mut seen = false;
            let mut total = 0.0;
            for (_, s) in self.cpu_s.iter().filter(|(name, _)| role(name)) {
                seen = true;
                total += s * 1e6;
            }
            per_op(total, seen)
        };
        let osd_csw = self.csw.as_ref().and_then(|csw| {
            let osds: Vec<u64> = csw
                .iter()
                .filter(|(name, _)| is_osd(name))
                .map(|(_, n)| *n)
                .collect();
            per_op(osds.iter().sum::<u64>() as f64, !osds.is_empty())
        });
        Ok(RepSummary {
            iops: per_s(ops),
            read_iops: per_s(read_ops),
            write_iops: per_s(write_ops),
            mib_s: per_s(bytes) / (1 << 20) as f64,
            lat: Latency::from_histogram(&all),
            read_lat: Latency::from_histogram(&read),
            write_lat: Latency::from_histogram(&write),
            cpu_s,
            iops_per_cpu_s: if cpu_s > 0.0 { ops as f64 / cpu_s } else { 0.0 },
            osd_cpu_us_per_op: role_us(is_osd),
            gateway_cpu_us_per_op: role_us(is_gateway),
            osd_csw_per_op: osd_csw,
        })
    }
}

/// A point reduced over its repetitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// Field by field, the median over repetitions.
    pub median: RepSummary,
    /// Lowest and highest IOPS of the repetitions.
    pub iops_min: f64,
    pub iops_max: f64,
    pub repetitions: u32,
}

/// The median of `values` (mean of the middle two for an even count); 0
/// for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl PointSummary {
    /// Reduce repetitions. See the module docs.
    pub fn of(reps: &[RepSummary]) -> PointSummary {
        let m = |f: &dyn Fn(&RepSummary) -> f64| median(&reps.iter().map(f).collect::<Vec<_>>());
        // The median of the repetitions that measured it; `None` if none did.
        let some = |f: &dyn Fn(&RepSummary) -> Option<f64>| {
            let v: Vec<f64> = reps.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let lat = |f: &dyn Fn(&RepSummary) -> Latency| Latency {
            min_us: m(&|r| f(r).min_us),
            mean_us: m(&|r| f(r).mean_us),
            p50_us: m(&|r| f(r).p50_us),
            p99_us: m(&|r| f(r).p99_us),
            p99_9_us: m(&|r| f(r).p99_9_us),
            p99_99_us: m(&|r| f(r).p99_99_us),
            max_us: m(&|r| f(r).max_us),
        };
        let iops: Vec<f64> = reps.iter().map(|r| r.iops).collect();
        PointSummary {
            median: RepSummary {
                iops: m(&|r| r.iops),
                read_iops: m(&|r| r.read_iops),
                write_iops: m(&|r| r.write_iops),
                mib_s: m(&|r| r.mib_s),
                lat: lat(&|r| r.lat),
                read_lat: lat(&|r| r.read_lat),
                write_lat: lat(&|r| r.write_lat),
                cpu_s: m(&|r| r.cpu_s),
                iops_per_cpu_s: m(&|r| r.iops_per_cpu_s),
                osd_cpu_us_per_op: some(&|r| r.osd_cpu_us_per_op),
                gateway_cpu_us_per_op: some(&|r| r.gateway_cpu_us_per_op),
                osd_csw_per_op: some(&|r| r.osd_csw_per_op),
            },
            iops_min: iops.iter().copied().reduce(f64::min).unwrap_or(0.0),
            iops_max: iops.iter().copied().fold(0.0, f64::max),
            repetitions: reps.len() as u32,
        }
    }
}

/// One point's record: its raw repetitions and their reduction, or the
/// error that stopped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub id: String,
    pub point: Point,
    pub reps: Vec<RepRaw>,
    pub summary: Option<PointSummary>,
    /// Why the point failed (a daemon died, fio failed, ...); the
    /// repetitions finished before it are kept.
    pub error: Option<String>,
}

impl PointResult {
    /// A point's record from its repetitions (reduced here) and error.
    pub fn new(
        point: Point,
        reps: Vec<RepRaw>,
        error: Option<String>,
    ) -> Result<Self, ResultsError> {
        let summaries = reps
            .iter()
            .map(RepRaw::summary)
            .collect::<Result<Vec<_>, _>>()?;
        let summary =
            (error.is_none() && !summaries.is_empty()).then(|| PointSummary::of(&summaries));
        Ok(PointResult {
            id: point.id(),
            point,
            reps,
            summary,
            error,
        })
    }
}

/// What was measured against: the system and its configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// `cairn` or `ceph`.
    pub system: String,
    /// Its version.
    pub version: String,
    /// How it was set up, in words (store, OSDs, PGs, options).
    pub config: String,
}

/// A whole run: `DIR/results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Format version of this file.
    pub format: u32,
    pub spec: MatrixSpec,
    pub target: Target,
    /// The machine: host name, CPUs, memory, kernel.
    pub machine: String,
    /// UTC start time, RFC 3339.
    pub started: String,
    pub points: Vec<PointResult>,
    /// The run was interrupted (Ctrl-C) before every point ran.
    pub interrupted: bool,
}

/// The `format` this code writes.
pub const FORMAT: u32 = 1;
