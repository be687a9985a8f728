//! `cairn pool stats`: per pool, client I/O rates and, for a cache pool,
//! flush, evict and promote rates, the PGs flushing or evicting, and
//! objects, dirty objects and bytes against the cache's targets (Ceph's
//! `ceph osd pool stats`). Rates are differences of the counters the
//! primaries report, over the samples of the last few seconds.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use cairn_map::tier::ratio_f64;
use cairn_map::{ClusterMap, Pool};
use cairn_types::{PgId, PoolId};
use cairn_wire::{ClientIo, PgStat};
use serde_json::{json, Value};

/// One sample is taken at most this often.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Rates are over (about) this long.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// Samples kept per pool.
const SAMPLES_MAX: usize = 16;

/// Counters summed over a pool's PGs.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    io: ClientIo,
    promotes: u64,
    flushes: u64,
    evicts: u64,
    proxied_reads: u64,
    proxied_writes: u64,
}

fn totals(pool: &Pool, stats: &HashMap<PgId, PgStat>) -> Totals {
    let mut t = Totals::default();
    for s in pool.pgs().filter_map(|pg| stats.get(&pg)) {
        t.io.add(&s.client_io);
        if let Some(tier) = &s.tier {
            t.promotes += tier.promotes;
            t.flushes += tier.flushes;
            t.evicts += tier.evicts;
            t.proxied_reads += tier.proxied_reads;
            t.proxied_writes += tier.proxied_writes;
        }
    }
    t
}

/// Recent samples of every pool's counters.
#[derive(Debug, Default)]
pub(crate) struct PoolSamples {
    last: Option<Instant>,
    samples: HashMap<PoolId, VecDeque<(Instant, Totals)>>,
}

impl PoolSamples {
    /// Take a sample if the last is old enough (called as stats arrive).
    pub fn sample(&mut self, map: &ClusterMap, stats: &HashMap<PgId, PgStat>) {
        let now = Instant::now();
        if self.last.is_some_and(|l| now < l + SAMPLE_EVERY) {
            return;
        }
        self.last = Some(now);
        self.samples.retain(|id, _| map.pools.contains_key(id));
        for pool in map.pools.values() {
            let q = self.samples.entry(pool.id).or_default();
            q.push_back((now, totals(pool, stats)));
            while q.len() > SAMPLES_MAX {
                q.pop_front();
            }
        }
    }

    /// Per-second rates of `pool` over the newest samples.
    fn rates(&self, pool: PoolId) -> Option<(Totals, f64)> {
        let q = self.samples.get(&pool)?;
        let &(t1, newest) = q.back()?;
        let &(t0, oldest) = q
            .iter()
            .find(|(t, _)| t1.duration_since(*t) <= RATE_WINDOW)
            .filter(|(t, _)| *t < t1)?;
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let delta = Totals {
            io: ClientIo {
                read_ops: d(newest.io.read_ops, oldest.io.read_ops),
                read_bytes: d(newest.io.read_bytes, oldest.io.read_bytes),
                write_ops: d(newest.io.write_ops, oldest.io.write_ops),
                write_bytes: d(newest.io.write_bytes, oldest.io.write_bytes),
            },
            promotes: d(newest.promotes, oldest.promotes),
            flushes: d(newest.flushes, oldest.flushes),
            evicts: d(newest.evicts, oldest.evicts),
            proxied_reads: d(newest.proxied_reads, oldest.proxied_reads),
            proxied_writes: d(newest.proxied_writes, oldest.proxied_writes),
        };
        Some((delta, t1.duration_since(t0).as_secs_f64()))
    }
}

/// `pool stats [POOL]`.
pub(crate) fn pool_stats(
    map: &ClusterMap,
    stats: &HashMap<PgId, PgStat>,
    samples: &PoolSamples,
    name: Option<&str>,
) -> Result<Value, String> {
    let pools: Vec<&Pool> = match name {
        Some(n) => vec![map
            .pool_by_name(n)
            .ok_or_else(|| format!("pool '{n}' does not exist"))?],
        None => map.pools.values().collect(),
    };
    Ok(json!(pools
        .into_iter()
        .map(|p| one_pool(map, p, stats, samples))
        .collect::<Vec<_>>()))
}

fn one_pool(
    map: &ClusterMap,
    pool: &Pool,
    stats: &HashMap<PgId, PgStat>,
    samples: &PoolSamples,
) -> Value {
    let rate = |n: u64, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let (delta, secs) = samples.rates(pool.id).unwrap_or_default();
    let mine: Vec<&PgStat> = pool.pgs().filter_map(|pg| stats.get(&pg)).collect();
    let objects: u64 = mine.iter().map(|s| s.objects).sum();
    let bytes: u64 = mine.iter().map(|s| s.bytes).sum();
    let mut v = json!({
        "pool": pool.name,
        "id": pool.id,
        "objects": objects,
        "bytes": bytes,
        "client_io": {
            "read_op_per_sec": rate(delta.io.read_ops, secs),
            "read_bytes_sec": rate(delta.io.read_bytes, secs),
            "write_op_per_sec": rate(delta.io.write_ops, secs),
            "write_bytes_sec": rate(delta.io.write_bytes, secs),
        },
    });
    if let Some(base) = pool.tier.tier_of {
        let tiers: Vec<_> = mine.iter().filter_map(|s| s.tier.as_ref()).collect();
        let p = &pool.tier.params;
        let sum = |f: fn(&cairn_wire::TierStat) -> u64| tiers.iter().map(|t| f(t)).sum::<u64>();
        v["cache_io"] = json!({
            "base": map.pool(base).map(|b| b.name.clone()),
            "cache_mode": pool.tier.cache_mode.name(),
            "promote_op_per_sec": rate(delta.promotes, secs),
            "flush_op_per_sec": rate(delta.flushes, secs),
            "evict_op_per_sec": rate(delta.evicts, secs),
            "proxy_read_op_per_sec": rate(delta.proxied_reads, secs),
            "proxy_write_op_per_sec": rate(delta.proxied_writes, secs),
            "pgs_reporting": tiers.len(),
            "pgs_flushing": tiers.iter().filter(|t| t.flushing).count(),
            "pgs_evicting": tiers.iter().filter(|t| t.evicting).count(),
            "pgs_full": tiers.iter().filter(|t| t.full).count(),
            "dirty_objects": sum(|t| t.dirty),
            "whiteouts": sum(|t| t.whiteouts),
            "promotes": sum(|t| t.promotes),
            "flushes": sum(|t| t.flushes),
            "evicts": sum(|t| t.evicts),
            "proxied_reads": sum(|t| t.proxied_reads),
            "proxied_writes": sum(|t| t.proxied_writes),
            "proxied_write_batches": sum(|t| t.proxied_write_batches),
            "partial_writes": sum(|t| t.partial_writes),
            "target_max_objects": p.target_max_objects,
            "target_max_bytes": p.target_max_bytes,
            "cache_target_dirty_ratio": ratio_f64(p.cache_target_dirty_ratio),
            "cache_target_full_ratio": ratio_f64(p.cache_target_full_ratio),
        });
    }
    v
}
