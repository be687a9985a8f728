//! The store side of `cairn bench store`: make and open the store, fill the
//! volume striped over it, run the selected points on it, and read a
//! BlueStore's counters over the run ([`PerfSummary`]).

use std::sync::Arc;

use anyhow::{Context as _, Result};
use cairn_bench::{fmt_us, BenchSpec, StoreVolume, StoreVolumeOptions};
use cairn_bluestore::{BlueStore, PerfSnapshot};
use cairn_config::StoreKind;
use cairn_osd::ProcessUsage;
use cairn_store::ObjectStore;
use serde::Serialize;

use super::plan::Plan;
use super::report::{table_header, Fill, Out, Row};
use super::{FILL_BS, FILL_IODEPTH};
use crate::osd_store;

/// An opened store, with its BlueStore face if it is one.
pub(super) struct Opened {
    store: Arc<dyn ObjectStore>,
    blue: Option<Arc<BlueStore>>,
    pub(super) made: String,
}

pub(super) fn open_store(plan: &Plan) -> Result<Opened> {
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

/// Fill the volume, run every point on it, and close the store.
pub(super) async fn store_points(
    plan: &Plan,
    opened: Opened,
    out: &Out,
) -> Result<(Fill, Vec<Row>, Option<PerfSummary>)> {
    let Opened { store, blue, .. } = opened;
    if plan.osd_conf.bluestore_loop_commits {
        // As an OSD does: commits on this runtime's loop.
        store
            .attach_to_loop()
            .context("committing on the event loop")?;
    }
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
        // This process's usage is sampled when the measured window starts
        // (after the ramp) and when the point ends.
        let ramp = spec.ramp;
        let (report, usage_before) = tokio::join!(cairn_bench::run(volume.clone(), &spec), async {
            tokio::time::sleep(ramp).await;
            ProcessUsage::now()
        });
        let usage_after = ProcessUsage::now();
        let report = report.with_context(|| format!("store point {}", p.name()))?;
        let dir = if p.rw.writes() {
            &report.write
        } else {
            &report.read
        };
        let mut row = Row::from_stats(p, dir);
        if let (Some(a), Some(b)) = (&before, &perf()) {
            row.perf = Some(PerfSummary::between(a, b));
        }
        if let (Some(a), Some(b)) = (usage_before, usage_after) {
            row.set_usage(a, b);
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

/// A BlueStore's counters over an interval.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct PerfSummary {
    transactions: u64,
    deferred_writes: u64,
    deferred_write_bytes: u64,
    direct_writes: u64,
    direct_write_bytes: u64,
    rmw_reads: u64,
    kv_commits: u64,
    kv_commit_mean_us: f64,
    journal_records: u64,
    journal_bytes: u64,
    journal_write_mean_us: f64,
    kv_syncs: u64,
    journal_tail_waits: u64,
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
    pub(super) fn between(a: &PerfSnapshot, b: &PerfSnapshot) -> PerfSummary {
        let d = |x: u64, y: u64| y.saturating_sub(x);
        let commits = d(a.kv_commits, b.kv_commits);
        let total_us = |p: &PerfSnapshot| p.kv_commit_mean_us * p.kv_commits as f64;
        let records = d(a.journal_records, b.journal_records);
        let journal_us = |p: &PerfSnapshot| p.journal_write_mean_us * p.journal_records as f64;
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
            journal_records: records,
            journal_bytes: d(a.journal_bytes, b.journal_bytes),
            journal_write_mean_us: if records == 0 {
                0.0
            } else {
                ((journal_us(b) - journal_us(a)) / records as f64).max(0.0)
            },
            kv_syncs: d(a.kv_syncs, b.kv_syncs),
            journal_tail_waits: d(a.journal_tail_waits, b.journal_tail_waits),
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

    pub(super) fn text(&self) -> String {
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
             \x20 journal {} records ({}), mean durable write {} us; {} key-value syncs; \
             {} waits for deferred writes\n\
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
            self.journal_records,
            human_bytes(self.journal_bytes),
            fmt_us(self.journal_write_mean_us),
            self.kv_syncs,
            self.journal_tail_waits,
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

#[cfg(test)]
mod tests {
    use super::*;

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
