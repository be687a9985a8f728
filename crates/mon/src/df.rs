//! `cairn df` and `cairn osd df`: space per OSD (from heartbeats) and
//! stored data per pool (from the PG stats primaries report).
//!
//! A pool's `max_avail_bytes` follows Ceph's estimate: the pool can grow
//! until its fullest OSD, relative to that OSD's share of the pool's PG
//! copies, reaches the full ratio; divided by the pool's size.

use std::collections::{BTreeMap, HashMap};

use cairn_map::{ClusterMap, OsdUsage};
use cairn_types::{OsdId, PgId};
use cairn_wire::PgStat;
use serde_json::{json, Value};

pub(crate) fn df(
    map: &ClusterMap,
    stats: &HashMap<PgId, PgStat>,
    usage: &HashMap<OsdId, OsdUsage>,
    full_ratio: f64,
) -> Value {
    // PG copies each OSD holds (its up sets), per pool and in all.
    let mut copies: BTreeMap<OsdId, u64> = BTreeMap::new();
    let mut pools = Vec::new();
    for pool in map.pools.values() {
        let mut pool_copies: BTreeMap<OsdId, u64> = BTreeMap::new();
        let (mut stored, mut objects, mut reporting) = (0u64, 0u64, 0u32);
        for pg in pool.pgs() {
            for osd in map.up(pg) {
                *pool_copies.entry(osd).or_default() += 1;
                *copies.entry(osd).or_default() += 1;
            }
            if let Some(st) = stats.get(&pg) {
                stored += st.bytes;
                objects += st.objects;
                reporting += 1;
            }
        }
        let total_copies: u64 = pool_copies.values().sum();
        // Each OSD fills at its share of the pool's copies; the first to
        // reach the full ratio ends the pool's room.
        let projected = pool_copies
            .iter()
            .filter_map(|(osd, n)| {
                let u = usage.get(osd)?;
                let room = (u.total_bytes as f64 * full_ratio - u.used_bytes as f64).max(0.0);
                Some(room * total_copies as f64 / *n as f64)
            })
            .fold(None, |min: Option<f64>, v| {
                Some(min.map_or(v, |m| m.min(v)))
            })
            .unwrap_or(0.0);
        let size = u64::from(pool.size.max(1));
        pools.push(json!({
            "name": pool.name,
            "id": pool.id,
            "size": pool.size,
            "pg_num": pool.pg_num,
            "stored_bytes": stored,
            "used_bytes": stored * size,
            "objects": objects,
            "max_avail_bytes": (projected / size as f64) as u64,
            "pgs_reporting": reporting,
        }));
    }
    let mut osds = Vec::new();
    let (mut total, mut used) = (0u64, 0u64);
    for osd in map.osds.values() {
        let u = usage.get(&osd.id);
        if let Some(u) = u {
            total += u.total_bytes;
            used += u.used_bytes;
        }
        osds.push(json!({
            "id": osd.id,
            "up": osd.up,
            "in": osd.is_in,
            "total_bytes": u.map(|u| u.total_bytes),
            "used_bytes": u.map(|u| u.used_bytes),
            "avail_bytes": u.map(|u| u.total_bytes.saturating_sub(u.used_bytes)),
            "used_ratio": u.map(OsdUsage::ratio),
            "pgs": copies.get(&osd.id).copied().unwrap_or(0),
        }));
    }
    json!({
        "raw": {
            "total_bytes": total,
            "used_bytes": used,
            "avail_bytes": total.saturating_sub(used),
            "used_ratio": if total == 0 { 0.0 } else { used as f64 / total as f64 },
        },
        "pools": pools,
        "osds": osds,
    })
}
