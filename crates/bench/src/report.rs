//! Results of a run: raw counters and latency histograms, and the summary
//! ([`BenchReport`]) printed as a table or serialised as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

use crate::spec::{BenchSpec, RwMode};
use crate::{BenchError, OpKind};

/// Lowest latency the histograms tell apart: 1 ns.
pub const HIST_LOW_NS: u64 = 1;
/// Highest latency the histograms track: 60 s. Longer ones count as 60 s.
pub const HIST_HIGH_NS: u64 = 60_000_000_000;
/// Significant decimal digits the histograms keep.
pub const HIST_SIGFIG: u8 = 3;

/// An empty latency histogram in nanoseconds with the bounds every run uses.
pub fn new_histogram() -> Result<Histogram<u64>, BenchError> {
    Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, HIST_SIGFIG)
        .map_err(|e| BenchError::Histogram(format!("{e:?}")))
}

fn add_histogram(into: &mut Histogram<u64>, from: &Histogram<u64>) -> Result<(), BenchError> {
    into.add(from)
        .map_err(|e| BenchError::Histogram(format!("{e:?}")))
}

/// Raw counters of one direction.
#[derive(Debug, Clone)]
pub(crate) struct DirMeasure {
    pub ops: u64,
    pub bytes: u64,
    /// Latencies in nanoseconds.
    pub hist: Histogram<u64>,
}

impl DirMeasure {
    fn new() -> Result<Self, BenchError> {
        Ok(Self {
            ops: 0,
            bytes: 0,
            hist: new_histogram()?,
        })
    }

    fn add(&mut self, other: &DirMeasure) -> Result<(), BenchError> {
        self.ops += other.ops;
        self.bytes += other.bytes;
        add_histogram(&mut self.hist, &other.hist)
    }
}

/// Raw counters of a job, or of several merged.
#[derive(Debug, Clone)]
pub(crate) struct Measurement {
    pub read: DirMeasure,
    pub write: DirMeasure,
}

impl Measurement {
    pub fn new() -> Result<Self, BenchError> {
        Ok(Self {
            read: DirMeasure::new()?,
            write: DirMeasure::new()?,
        })
    }

    /// Count one completed operation.
    pub fn record(&mut self, kind: OpKind, bytes: u64, latency: Duration) {
        let dir = match kind {
            OpKind::Read => &mut self.read,
            OpKind::Write | OpKind::PreconditionWrite => &mut self.write,
        };
        dir.ops += 1;
        dir.bytes += bytes;
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        dir.hist.saturating_record(ns);
    }

    pub fn add(&mut self, other: &Measurement) -> Result<(), BenchError> {
        self.read.add(&other.read)?;
        self.write.add(&other.write)
    }
}

/// Latency percentiles of one direction, in microseconds. All zero without
/// operations.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct LatencyStats {
    /// The fastest operation.
    pub min_us: f64,
    /// The average.
    pub mean_us: f64,
    /// The median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile (`p99.9_us` in JSON).
    #[serde(rename = "p99.9_us")]
    pub p99_9_us: f64,
    /// 99.99th percentile (`p99.99_us` in JSON).
    #[serde(rename = "p99.99_us")]
    pub p99_99_us: f64,
    /// The slowest operation.
    pub max_us: f64,
}

impl LatencyStats {
    /// Summarise a histogram of nanosecond latencies. Percentiles are the
    /// highest value equivalent (within 3 significant digits) to the sample at
    /// that rank.
    pub fn from_histogram(hist: &Histogram<u64>) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Self {
            min_us: us(hist.min()),
            mean_us: hist.mean() / 1000.0,
            p50_us: us(hist.value_at_quantile(0.5)),
            p99_us: us(hist.value_at_quantile(0.99)),
            p99_9_us: us(hist.value_at_quantile(0.999)),
            p99_99_us: us(hist.value_at_quantile(0.9999)),
            max_us: us(hist.max()),
        }
    }
}

/// Throughput and latency of one direction (reads, writes, or both).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct DirStats {
    /// Operations completed in the measured window.
    pub ops: u64,
    /// Bytes they transferred.
    pub bytes: u64,
    /// Operations per second.
    pub iops: f64,
    /// Throughput in MiB (2^20 bytes) per second.
    pub mib_per_s: f64,
    /// Latency from issue to completion.
    pub lat: LatencyStats,
}

impl DirStats {
    fn new(ops: u64, bytes: u64, hist: &Histogram<u64>, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        let rate = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        Self {
            ops,
            bytes,
            iops: rate(ops as f64),
            mib_per_s: rate(bytes as f64 / (1u64 << 20) as f64),
            lat: LatencyStats::from_histogram(hist),
        }
    }
}

/// The parameters a report was produced with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecSummary {
    /// The access pattern.
    pub rw: RwMode,
    /// Present for [`RwMode::RandRw`] only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rwmixread: Option<u32>,
    /// Bytes per operation.
    pub bs: u64,
    /// Operations in flight per job.
    pub iodepth: u32,
    /// Jobs per volume.
    pub numjobs: u32,
    /// Volumes driven at once.
    pub volumes: u32,
    /// Measured time (`runtime_s`, in seconds, in JSON).
    #[serde(rename = "runtime_s", serialize_with = "ser_secs")]
    pub runtime: Duration,
    /// Unmeasured warm-up before it (`ramp_s` in JSON).
    #[serde(rename = "ramp_s", serialize_with = "ser_secs")]
    pub ramp: Duration,
    /// Whether the region was written before the run.
    pub precondition: bool,
    /// Bytes of each volume that were used (the smallest, if they differ).
    pub region: u64,
    /// The seed actually used; pass it as `seed` to repeat the offsets.
    pub seed: u64,
}

impl SpecSummary {
    pub(crate) fn new(spec: &BenchSpec, region: u64, seed: u64, volumes: u32) -> Self {
        Self {
            rw: spec.rw,
            rwmixread: (spec.rw == RwMode::RandRw).then_some(spec.rwmixread),
            bs: spec.bs,
            iodepth: spec.iodepth,
            numjobs: spec.numjobs,
            volumes,
            runtime: spec.runtime,
            ramp: spec.ramp,
            precondition: spec.precondition,
            region,
            seed,
        }
    }
}

fn ser_secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The result of a run: what was run, for how long, and per direction the
/// operation counts, rates and latency percentiles. Serialises (for
/// `--json`) without the histograms.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// What was run.
    pub spec: SpecSummary,
    /// Length of the measured window (the ramp excluded).
    #[serde(rename = "elapsed_s", serialize_with = "ser_secs")]
    pub elapsed: Duration,
    /// Reads.
    pub read: DirStats,
    /// Writes.
    pub write: DirStats,
    /// Reads and writes together.
    pub total: DirStats,
    #[serde(skip)]
    raw: Measurement,
}

impl BenchReport {
    pub(crate) fn new(
        spec: SpecSummary,
        elapsed: Duration,
        raw: Measurement,
    ) -> Result<Self, BenchError> {
        let mut both = raw.read.hist.clone();
        add_histogram(&mut both, &raw.write.hist)?;
        Ok(Self {
            spec,
            elapsed,
            read: DirStats::new(raw.read.ops, raw.read.bytes, &raw.read.hist, elapsed),
            write: DirStats::new(raw.write.ops, raw.write.bytes, &raw.write.hist, elapsed),
            total: DirStats::new(
                raw.read.ops + raw.write.ops,
                raw.read.bytes + raw.write.bytes,
                &both,
                elapsed,
            ),
            raw,
        })
    }

    /// The report as pretty-printed JSON (what `--json` prints).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The writes' (or reads') latency distribution: `[µs, count]` per
    /// recorded histogram bucket (its highest equivalent value), fastest
    /// first. Runs' bins add up, so percentiles over several runs are exact
    /// to the histograms' precision (fio's `json+` bins).
    pub fn latency_bins(&self, writes: bool) -> Vec<[u64; 2]> {
        let dir = if writes {
            &self.raw.write
        } else {
            &self.raw.read
        };
        dir.hist
            .iter_recorded()
            .map(|v| {
                let us = dir.hist.highest_equivalent(v.value_iterated_to()) / 1000;
                [us, v.count_at_value()]
            })
            .collect()
    }

    /// Read latencies in nanoseconds.
    pub fn read_histogram(&self) -> &Histogram<u64> {
        &self.raw.read.hist
    }

    /// Write latencies in nanoseconds.
    pub fn write_histogram(&self) -> &Histogram<u64> {
        &self.raw.write.hist
    }

    /// Combine reports of runs that ran at the same time (e.g. one per
    /// client): operation counts add up, rates (IOPS, MiB/s) are summed,
    /// latency histograms are merged, `elapsed` is the longest, and the spec
    /// is the first report's with the volumes counted up.
    pub fn merge(reports: &[BenchReport]) -> Result<BenchReport, BenchError> {
        let (first, rest) = reports.split_first().ok_or(BenchError::NoVolumes)?;
        let mut raw = first.raw.clone();
        let mut spec = first.spec.clone();
        let mut elapsed = first.elapsed;
        for r in rest {
            raw.add(&r.raw)?;
            spec.volumes += r.spec.volumes;
            elapsed = elapsed.max(r.elapsed);
        }
        let mut merged = BenchReport::new(spec, elapsed, raw)?;
        for (dir, pick) in [
            (
                &mut merged.read,
                (|r: &BenchReport| r.read) as fn(&BenchReport) -> DirStats,
            ),
            (&mut merged.write, |r| r.write),
            (&mut merged.total, |r| r.total),
        ] {
            dir.iops = reports.iter().map(|r| pick(r).iops).sum();
            dir.mib_per_s = reports.iter().map(|r| pick(r).mib_per_s).sum();
        }
        Ok(merged)
    }

    /// A compact fio-like table: a line with the parameters, a header, and a
    /// row per direction the mode uses (plus `total` for mixed runs).
    pub fn table(&self) -> String {
        let s = &self.spec;
        let mut out = format!(
            "rw={} bs={} iodepth={} numjobs={}",
            s.rw,
            fmt_bytes(s.bs),
            s.iodepth,
            s.numjobs
        );
        if let Some(mix) = s.rwmixread {
            let _ = write!(out, " rwmixread={mix}");
        }
        if s.volumes > 1 {
            let _ = write!(out, " volumes={}", s.volumes);
        }
        let _ = write!(out, " runtime={}", fmt_duration(s.runtime));
        if !s.ramp.is_zero() {
            let _ = write!(out, " ramp={}", fmt_duration(s.ramp));
        }
        if s.precondition {
            out.push_str(" precondition");
        }
        let _ = writeln!(out, " region={}", fmt_bytes(s.region));
        let _ = writeln!(
            out,
            "{:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11} {:>9}",
            "",
            "IOPS",
            "MiB/s",
            "mean(us)",
            "p50(us)",
            "p99(us)",
            "p99.9(us)",
            "p99.99(us)",
            "max(us)"
        );
        let mut rows = Vec::new();
        if s.rw.reads() {
            rows.push(("read", &self.read));
        }
        if s.rw.writes() {
            rows.push(("write", &self.write));
        }
        if s.rw.reads() && s.rw.writes() {
            rows.push(("total", &self.total));
        }
        for (name, d) in rows {
            let l = &d.lat;
            let _ = writeln!(
                out,
                "{:<6} {:>10.0} {:>9.1} {:>9} {:>9} {:>9} {:>10} {:>11} {:>9}",
                name,
                d.iops,
                d.mib_per_s,
                fmt_us(l.mean_us),
                fmt_us(l.p50_us),
                fmt_us(l.p99_us),
                fmt_us(l.p99_9_us),
                fmt_us(l.p99_99_us),
                fmt_us(l.max_us),
            );
        }
        out
    }
}

/// Sizes as fio writes them: `512`, `4K`, `1M`, `2G` when exact, else bytes.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| n >= *unit && n % unit == 0)
        .map_or_else(
            || n.to_string(),
            |(unit, name)| format!("{}{name}", n / unit),
        )
}

/// Durations as `10s`, `1.5s` or `250ms`.
pub fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) && d.subsec_nanos() % 1_000_000 == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

/// Microseconds with more decimals the smaller they are.
pub fn fmt_us(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement(read_ms: &[u64], write_ms: &[u64]) -> Measurement {
        let mut m = Measurement::new().expect("histogram");
        for &ms in read_ms {
            m.record(OpKind::Read, 4096, Duration::from_millis(ms));
        }
        for &ms in write_ms {
            m.record(OpKind::Write, 4096, Duration::from_millis(ms));
        }
        m
    }

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= want.abs() * 0.001 + 1e-9
    }

    fn report(spec: &BenchSpec, m: Measurement, secs: u64) -> BenchReport {
        let summary = SpecSummary::new(spec, 1 << 20, 1, 1);
        BenchReport::new(summary, Duration::from_secs(secs), m).expect("report")
    }

    #[test]
    fn latency_bins_count_every_op_and_pool_across_runs() {
        let a = report(&BenchSpec::default(), measurement(&[], &[1, 1, 5]), 1);
        let b = report(&BenchSpec::default(), measurement(&[7], &[5, 900]), 1);
        let bins_a = a.latency_bins(true);
        assert_eq!(bins_a.iter().map(|b| b[1]).sum::<u64>(), 3);
        assert_eq!(bins_a.len(), 2, "{bins_a:?}");
        assert!(bins_a[0][0] >= 1000 && bins_a[0][0] < 1002, "{bins_a:?}");
        let mut pooled = bins_a;
        pooled.extend(b.latency_bins(true));
        pooled.sort();
        let total: u64 = pooled.iter().map(|b| b[1]).sum();
        assert_eq!(total, 5, "the read is not among the writes");
        let slowest = pooled.last().unwrap()[0];
        assert!((900_000..900_500).contains(&slowest), "{pooled:?}");
        assert_eq!(b.latency_bins(false).len(), 1);
    }

    #[test]
    fn percentiles_match_hand_computed_ranks() {
        // 1..=1000 ms: the p-th percentile is the sample of rank ceil(p*1000).
        let ms: Vec<u64> = (1..=1000).collect();
        let r = report(&BenchSpec::default(), measurement(&ms, &[]), 2);
        let l = r.read.lat;
        assert!(close(l.min_us, 1_000.0), "{l:?}");
        assert!(close(l.p50_us, 500_000.0), "{l:?}");
        assert!(close(l.p99_us, 990_000.0), "{l:?}");
        assert!(close(l.p99_9_us, 999_000.0), "{l:?}");
        assert!(close(l.p99_99_us, 1_000_000.0), "{l:?}");
        assert!(close(l.max_us, 1_000_000.0), "{l:?}");
        assert!(close(l.mean_us, 500_500.0), "{l:?}");
        assert_eq!((r.read.ops, r.read.bytes), (1000, 4096 * 1000));
        assert!(close(r.read.iops, 500.0));
        assert!(close(r.read.mib_per_s, 4096.0 * 500.0 / 1048576.0));
        assert_eq!(r.write, DirStats::default());
        assert_eq!(r.total.ops, 1000);
    }

    #[test]
    fn total_merges_both_directions() {
        let spec = BenchSpec {
            rw: RwMode::RandRw,
            ..BenchSpec::default()
        };
        let r = report(&spec, measurement(&[1, 1, 1], &[5]), 1);
        assert_eq!((r.read.ops, r.write.ops, r.total.ops), (3, 1, 4));
        assert!(close(r.total.lat.mean_us, 2_000.0), "{:?}", r.total.lat);
        assert!(close(r.total.lat.p50_us, 1_000.0));
        assert!(close(r.total.lat.max_us, 5_000.0));
        assert!(close(r.total.iops, 4.0));
    }

    #[test]
    fn merge_sums_rates_and_merges_histograms() {
        let spec = BenchSpec::default();
        let a = report(&spec, measurement(&[1; 90], &[]), 1);
        let b = report(&spec, measurement(&[10; 10], &[]), 2);
        let m = BenchReport::merge(&[a, b]).expect("merge");
        assert_eq!(m.read.ops, 100);
        assert!(close(m.read.iops, 90.0 + 5.0), "{}", m.read.iops);
        assert!(close(m.read.lat.p50_us, 1_000.0));
        assert!(close(m.read.lat.p99_us, 10_000.0));
        assert_eq!(m.elapsed, Duration::from_secs(2));
        assert_eq!(m.spec.volumes, 2);
        assert_eq!(m.read_histogram().len(), 100);
        assert!(matches!(
            BenchReport::merge(&[]),
            Err(BenchError::NoVolumes)
        ));
    }

    #[test]
    fn table_and_json_show_the_used_directions() {
        let spec = BenchSpec {
            rw: RwMode::RandWrite,
            iodepth: 32,
            ..BenchSpec::default()
        };
        let t = report(&spec, measurement(&[], &[2, 3]), 10).table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("rw=randwrite bs=4K iodepth=32 numjobs=1 runtime=10s"));
        assert!(lines[1].contains("IOPS") && lines[1].contains("p99.99(us)"));
        assert!(lines[2].starts_with("write"), "{t}");
        let json = serde_json::to_value(report(&spec, measurement(&[], &[2]), 1)).expect("json");
        assert_eq!(json["spec"]["rw"], "randwrite");
        assert_eq!(json["write"]["ops"], 1);
        assert_eq!(json["elapsed_s"], 1.0);
        assert!(json["write"]["lat"]["p99.9_us"].as_f64().is_some());
        assert!(json["spec"].get("rwmixread").is_none());
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(512), "512");
        assert_eq!(fmt_bytes(4096), "4K");
        assert_eq!(fmt_bytes(1536), "1536");
        assert_eq!(fmt_bytes(4 << 20), "4M");
        assert_eq!(fmt_bytes(3 << 30), "3G");
        assert_eq!(fmt_duration(Duration::from_secs(10)), "10s");
        assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(fmt_us(2.5), "2.50");
        assert_eq!(fmt_us(25.25), "25.2");
        assert_eq!(fmt_us(2592.4), "2592");
    }
}
