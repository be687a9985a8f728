//! What `cairn bench store` shows: a table [`Row`] per point and path, the
//! sequential passes ([`Fill`]), the store/fio [`Ratios`], and the whole
//! [`Document`] that `--json` prints; [`Out`] prints the text as it goes.

use std::path::PathBuf;
use std::time::Duration;

use cairn_bench::{fmt_bytes, fmt_us, DirStats, RwMode};
use cairn_osd::ProcessUsage;
use serde::Serialize;

use super::fio::{FioStatus, SYNC_PATH};
use super::plan::Point;
use super::store::PerfSummary;
use super::{FILL_BS, FILL_IODEPTH, MIB};

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Row {
    /// `store`, `fio`, or `fio+sync` (fio's 4K random write at iodepth 1
    /// with an fdatasync after every write).
    pub(super) path: &'static str,
    /// The point's name, as `--points` takes it.
    pub(super) point: String,
    pub(super) rw: RwMode,
    pub(super) bs: u64,
    pub(super) iodepth: u32,
    pub(super) iops: f64,
    pub(super) mib_per_s: f64,
    pub(super) mean_us: f64,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    #[serde(rename = "p99.99_us")]
    pub(super) p99_99_us: f64,
    /// Operations measured (store rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ops: Option<u64>,
    /// The BlueStore's counters over this point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) perf: Option<PerfSummary>,
    /// This process's CPU time (the store's threads and the load
    /// generator) over the measured window, per operation (store rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cpu_us_per_op: Option<f64>,
    /// This process's context switches over the measured window, per
    /// operation (store rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) context_switches_per_op: Option<f64>,
}

impl Row {
    pub(super) fn new(path: &'static str, p: Point) -> Row {
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
            cpu_us_per_op: None,
            context_switches_per_op: None,
        }
    }

    pub(super) fn from_stats(p: Point, d: &DirStats) -> Row {
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

    /// Set the CPU time and context switches per operation from this
    /// process's usage at the start and the end of the measured window.
    pub(super) fn set_usage(&mut self, before: ProcessUsage, after: ProcessUsage) {
        let Some(ops) = self.ops.filter(|&n| n > 0) else {
            return;
        };
        let per_op = |a: u64, b: u64| b.checked_sub(a).map(|d| d as f64 / ops as f64);
        self.cpu_us_per_op = per_op(before.cpu_us, after.cpu_us);
        self.context_switches_per_op = per_op(before.context_switches, after.context_switches);
    }

    pub(super) fn line(&self) -> String {
        let opt = |v: Option<f64>, digits: usize| match v {
            Some(v) => format!("{v:.digits$}"),
            None => "-".to_string(),
        };
        format!(
            "{:<8} {:<9} {:>4} {:>7} {:>10.0} {:>9.1} {:>9} {:>9} {:>9} {:>10} {:>10} {:>7}",
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
            opt(self.cpu_us_per_op, 1),
            opt(self.context_switches_per_op, 2),
        )
    }
}

pub(super) fn table_header() -> String {
    format!(
        "{:<8} {:<9} {:>4} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>7}",
        "path",
        "workload",
        "bs",
        "iodepth",
        "IOPS",
        "MiB/s",
        "mean(us)",
        "p50(us)",
        "p99(us)",
        "p99.99(us)",
        "cpu/op(us)",
        "csw/op"
    )
}

/// A sequential pass that wrote the whole volume or file.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Fill {
    bytes: u64,
    bs: u64,
    iodepth: u32,
    seconds: f64,
    mib_per_s: f64,
}

impl Fill {
    pub(super) fn new(bytes: u64, took: Duration) -> Fill {
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

    pub(super) fn text(&self, what: &str) -> String {
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

/// store / fio for the headline points.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Ratios {
    randwrite_4k_qd32_iops: Option<f64>,
    randread_4k_qd32_iops: Option<f64>,
    randwrite_4k_qd1_mean_latency: Option<f64>,
    /// The latency target's ratio (target: at most 2): the store's 4K random
    /// write mean latency at iodepth 1 over raw fio's write + fdatasync.
    randwrite_4k_qd1_latency_vs_fio_fdatasync: Option<f64>,
}

impl Ratios {
    pub(super) fn new(rows: &[Row]) -> Ratios {
        let find = |path: &str, rw: RwMode, iodepth: u32| {
            rows.iter()
                .find(|r| r.path == path && r.rw == rw && r.bs == 4096 && r.iodepth == iodepth)
        };
        let ratio = |base: &str, rw: RwMode, iodepth: u32, pick: fn(&Row) -> f64| {
            let store = pick(find("store", rw, iodepth)?);
            let fio = pick(find(base, rw, iodepth)?);
            (fio > 0.0).then(|| store / fio)
        };
        Ratios {
            randwrite_4k_qd32_iops: ratio("fio", RwMode::RandWrite, 32, |r| r.iops),
            randread_4k_qd32_iops: ratio("fio", RwMode::RandRead, 32, |r| r.iops),
            randwrite_4k_qd1_mean_latency: ratio("fio", RwMode::RandWrite, 1, |r| r.mean_us),
            randwrite_4k_qd1_latency_vs_fio_fdatasync: ratio(
                SYNC_PATH,
                RwMode::RandWrite,
                1,
                |r| r.mean_us,
            ),
        }
    }

    pub(super) fn text(&self) -> String {
        let show = |r: Option<f64>| r.map_or_else(|| "n/a".to_string(), |r| format!("{r:.2}x"));
        format!(
            "store/fio: 4K randwrite QD32 IOPS {}, 4K randread QD32 IOPS {}, 4K randwrite QD1 mean latency {}; \
             target <= 2x: 4K randwrite QD1 mean latency vs fio write+fdatasync {}",
            show(self.randwrite_4k_qd32_iops),
            show(self.randread_4k_qd32_iops),
            show(self.randwrite_4k_qd1_mean_latency),
            show(self.randwrite_4k_qd1_latency_vs_fio_fdatasync)
        )
    }
}

/// The whole result (what `--json` prints).
#[derive(Debug, Serialize)]
pub(super) struct Document {
    pub(super) store: String,
    /// What mkfs made.
    pub(super) made: String,
    pub(super) dir: PathBuf,
    pub(super) size: u64,
    pub(super) object_size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bluestore_block_size: Option<u64>,
    pub(super) runtime_s: u64,
    pub(super) ramp_s: u64,
    pub(super) threads: u32,
    pub(super) set: Vec<String>,
    pub(super) note: &'static str,
    pub(super) precondition: Fill,
    pub(super) points: Vec<Row>,
    pub(super) fio: FioStatus,
    pub(super) ratios: Ratios,
    /// The BlueStore's counters over the store run (precondition included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) perf: Option<PerfSummary>,
    /// The process's peak memory over the store run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) memory: Option<Memory>,
}

/// The process's peak resident memory over the store run (the bench's own
/// buffers included; fio runs as a separate process), against the memory
/// the store was told it may use.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Memory {
    pub(super) peak_rss_bytes: u64,
    /// BlueStore's `cache_size`, or its `memory_target` when autotuned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) budget_bytes: Option<u64>,
    /// What the budget is: `cache_size` or `memory_target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) budget: Option<&'static str>,
}

impl Memory {
    /// This process's peak so far, if the system says.
    pub(super) fn measure(budget: Option<(&'static str, u64)>) -> Option<Self> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        Some(Self {
            peak_rss_bytes: peak_rss(&status)?,
            budget_bytes: budget.map(|(_, b)| b),
            budget: budget.map(|(n, _)| n),
        })
    }

    pub(super) fn text(&self) -> String {
        let peak = self.peak_rss_bytes as f64 / MIB as f64;
        match (self.budget, self.budget_bytes) {
            (Some(name), Some(b)) if b > 0 => format!(
                "memory: peak RSS {peak:.1} MiB over the store run = {:.2}x {name} \
                 ({:.1} MiB; bench buffers included)",
                self.peak_rss_bytes as f64 / b as f64,
                b as f64 / MIB as f64
            ),
            _ => format!("memory: peak RSS {peak:.1} MiB over the store run"),
        }
    }
}

/// `VmHWM` (peak resident set) from a `/proc/PID/status` text, in bytes.
fn peak_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next()? == "kB").then_some(kib * 1024)
}

/// Prints as the run goes, unless the output is one JSON document at the end.
pub(super) struct Out {
    pub(super) json: bool,
}

impl Out {
    pub(super) fn line(&self, text: impl AsRef<str>) {
        if !self.json {
            println!("{}", text.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_per_op_over_the_measured_ops() {
        let p = Point {
            rw: RwMode::RandWrite,
            bs: 4096,
            iodepth: 1,
        };
        let mut row = Row::new("store", p);
        let at = |cpu_us, context_switches| ProcessUsage {
            cpu_us,
            context_switches,
        };
        row.set_usage(at(1_000, 10), at(5_000, 50));
        assert_eq!(row.cpu_us_per_op, None, "no ops counted: nothing per op");
        row.ops = Some(200);
        row.set_usage(at(1_000, 10), at(5_000, 50));
        assert_eq!(row.cpu_us_per_op, Some(20.0));
        assert_eq!(row.context_switches_per_op, Some(0.2));
        assert!(row.line().ends_with("20.0    0.20"), "{}", row.line());
        assert_eq!(
            row.line().split_whitespace().count(),
            table_header().split_whitespace().count()
        );
    }

    #[test]
    fn peak_rss_reads_vmhwm() {
        let status = "Name:\tcairn\nVmPeak:\t  999 kB\nVmHWM:\t  163496 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(peak_rss(status), Some(163_496 * 1024));
        assert_eq!(peak_rss("VmRSS:\t 1 kB\n"), None);
        assert_eq!(peak_rss("VmHWM:\t 12 MB\n"), None);
        let m = Memory {
            peak_rss_bytes: 160 << 20,
            budget_bytes: Some(128 << 20),
            budget: Some("cache_size"),
        };
        assert!(m.text().contains("160.0 MiB"), "{}", m.text());
        assert!(
            m.text().contains("1.25x cache_size (128.0 MiB"),
            "{}",
            m.text()
        );
        let own = Memory::measure(None).map(|m| m.peak_rss_bytes);
        assert!(own.is_some_and(|b| b > 1 << 20), "{own:?}");
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
        let mut rows = vec![
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
        assert_eq!(r.randwrite_4k_qd1_latency_vs_fio_fdatasync, None);

        // The target's ratio is against the fio+sync row, not the fio one.
        rows.push(row(SYNC_PATH, p(RwMode::RandWrite, 1), 0.0, 200.0));
        let r = Ratios::new(&rows);
        assert_eq!(r.randwrite_4k_qd1_mean_latency, Some(3.0));
        assert_eq!(r.randwrite_4k_qd1_latency_vs_fio_fdatasync, Some(1.5));
        assert!(
            r.text().contains("vs fio write+fdatasync 1.50x"),
            "{}",
            r.text()
        );
    }
}
