//! `cairn osd tier ...`: the map records the tiering ([`cairn_map::tier`]);
//! the monitor adds what only it knows, the PG stats: a new cache must be
//! empty, and clients stop being sent to a cache (remove-overlay), or the
//! tier is removed, only once every PG of the cache reported, after the
//! cache stopped taking new data, that it holds nothing dirty. It also
//! sums each cache pool's contents for the OSDs' tiering agents
//! ([`cache_usage`]), which judge fullness by the pool.

use std::collections::HashMap;

use cairn_map::{CacheMode, ClusterMap, Pool};
use cairn_types::PgId;
use cairn_wire::{PgStat, TierCommand, TierPoolUsage};
use serde_json::{json, Value};

use crate::{MonState, MonStoreError, Monitor};

impl Monitor {
    pub(crate) fn tier_command(
        &self,
        st: &mut MonState,
        cmd: TierCommand,
    ) -> Result<Result<Value, String>, MonStoreError> {
        // Checks against the stats first: they do not change the map.
        let check = match &cmd {
            TierCommand::Add { cache, .. } => pool_is_empty(&st.map, &st.pg_stats, cache),
            TierCommand::RemoveOverlay { base } => {
                let cache = st
                    .map
                    .pool_by_name(base)
                    .and_then(|b| b.tier.overlay)
                    .and_then(|c| st.map.pool(c));
                match cache {
                    Some(c) if c.tier.cache_mode != CacheMode::None => Err(format!(
                        "cache '{}' is in {} mode: `osd tier cache-mode {} none` and \
                         `osd tier flush-evict-all {}` first, so that nothing is left only in it",
                        c.name,
                        c.tier.cache_mode.name(),
                        c.name,
                        c.name
                    )),
                    Some(c) => nothing_dirty(&st.pg_stats, c, true),
                    None => Ok(()),
                }
            }
            TierCommand::Rm { cache, .. } => match st.map.pool_by_name(cache) {
                Some(c) if c.is_cache() => nothing_dirty(&st.pg_stats, c, false),
                _ => Ok(()),
            },
            _ => Ok(()),
        };
        if let Err(why) = check {
            return Ok(Err(why));
        }
        self.update(st, |map| {
            let done = match &cmd {
                TierCommand::Add { base, cache } => map.tier_add(base, cache),
                TierCommand::CacheMode { cache, mode } => {
                    CacheMode::parse(mode).and_then(|m| map.tier_cache_mode(cache, m))
                }
                TierCommand::SetOverlay { base, cache } => map.tier_set_overlay(base, cache),
                TierCommand::RemoveOverlay { base } => {
                    map.tier_remove_overlay(base).map(|c| c.is_some())
                }
                TierCommand::Rm { base, cache } => map.tier_rm(base, cache),
            };
            match done {
                Ok(changed) => (changed, Ok(tier_json(map, &cmd, changed))),
                Err(e) => (false, Err(e.to_string())),
            }
        })
    }
}

/// What a tier command prints: the pools it concerns, as they are now.
fn tier_json(map: &ClusterMap, cmd: &TierCommand, changed: bool) -> Value {
    let names: Vec<&str> = match cmd {
        TierCommand::Add { base, cache }
        | TierCommand::SetOverlay { base, cache }
        | TierCommand::Rm { base, cache } => vec![base, cache],
        TierCommand::CacheMode { cache, .. } => vec![cache],
        TierCommand::RemoveOverlay { base } => vec![base],
    };
    let pools: Vec<Value> = names
        .iter()
        .filter_map(|n| map.pool_by_name(n))
        .map(|p| json!({ "pool": p.name, "tier": tier_summary(map, p) }))
        .collect();
    json!({ "changed": changed, "epoch": map.epoch + u32::from(changed), "pools": pools })
}

/// A pool's tiering for `pool ls` and `pool get`.
pub(crate) fn tier_summary(map: &ClusterMap, pool: &Pool) -> Value {
    let name =
        |id: Option<cairn_types::PoolId>| id.and_then(|i| map.pool(i)).map(|p| p.name.clone());
    let t = &pool.tier;
    if t.tier_of.is_none() && t.cache.is_none() {
        return Value::Null;
    }
    let mut v = json!({
        "tier_of": name(t.tier_of),
        "cache": name(t.cache),
        "overlay": name(t.overlay),
    });
    if t.tier_of.is_some() {
        v["cache_mode"] = json!(t.cache_mode.name());
        for key in cairn_map::tier::TIER_KEYS {
            v[*key] = t.params.get(key).unwrap_or(Value::Null);
        }
    }
    v
}

fn pool_is_empty(
    map: &ClusterMap,
    stats: &HashMap<PgId, PgStat>,
    name: &str,
) -> Result<(), String> {
    let Some(pool) = map.pool_by_name(name) else {
        return Ok(()); // the map names the missing pool
    };
    let objects: u64 = pool
        .pgs()
        .filter_map(|pg| stats.get(&pg))
        .map(|s| s.objects)
        .sum();
    if objects > 0 {
        return Err(format!(
            "pool '{name}' holds {objects} objects: a cache tier must start empty \
             (its objects would hide the base pool's)"
        ));
    }
    Ok(())
}

/// Every PG of cache `pool` reported no dirty object (and, if `empty`, no
/// object at all), counted under a map at least as new as the cache's
/// last mode or overlay change.
fn nothing_dirty(stats: &HashMap<PgId, PgStat>, pool: &Pool, empty: bool) -> Result<(), String> {
    let since = pool.tier.mode_epoch;
    let (mut dirty, mut objects) = (0u64, 0u64);
    let mut unknown = Vec::new();
    for pg in pool.pgs() {
        match stats.get(&pg).and_then(|s| s.tier.as_ref()) {
            Some(t) if t.counted_epoch >= since => {
                dirty += t.dirty;
                objects += t.objects;
            }
            _ => unknown.push(pg),
        }
    }
    if dirty > 0 {
        return Err(format!(
            "cache '{}' still holds {dirty} dirty objects: `osd tier flush-evict-all {}` first",
            pool.name, pool.name
        ));
    }
    if objects > 0 && empty {
        // Clean copies left behind would be served, stale, if the overlay
        // came back after clients wrote to the base pool directly.
        return Err(format!(
            "cache '{}' still holds {objects} objects: `osd tier flush-evict-all {}` first \
             (in mode none the agent empties it too)",
            pool.name, pool.name
        ));
    }
    if !unknown.is_empty() {
        let shown: Vec<String> = unknown.iter().take(4).map(|p| p.to_string()).collect();
        return Err(format!(
            "cache '{}': {} PGs ({}{}) have not reported their dirty objects since epoch {since} \
             (a PG not active, or its stats not in yet): try again in a few seconds",
            pool.name,
            unknown.len(),
            shown.join(", "),
            if unknown.len() > 4 { ", ..." } else { "" }
        ));
    }
    Ok(())
}

/// Each cache pool's objects and bytes, dirty and all, summed over the
/// last stats of its PGs that counted them; sent to every OSD after its
/// heartbeat. Empty when the map has no cache pool.
pub(crate) fn cache_usage(map: &ClusterMap, stats: &HashMap<PgId, PgStat>) -> Vec<TierPoolUsage> {
    map.pools
        .values()
        .filter(|p| p.is_cache())
        .map(|pool| {
            let mut u = TierPoolUsage {
                pool: pool.id,
                ..TierPoolUsage::default()
            };
            for t in pool.pgs().filter_map(|pg| stats.get(&pg)?.tier.as_ref()) {
                u.pgs_counted += 1;
                u.objects += t.objects;
                u.bytes += t.bytes;
                u.dirty += t.dirty;
                u.dirty_bytes += t.dirty_bytes;
            }
            u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::Version;
    use cairn_wire::{ClientIo, TierStat};

    fn stat(pg: PgId, objects: u64, tier: Option<TierStat>) -> PgStat {
        PgStat {
            pg,
            state: "active+clean".into(),
            interval_epoch: 1,
            up: vec![0],
            acting: vec![0],
            last_update: Version::default(),
            objects,
            bytes: 0,
            degraded: 0,
            unfound: 0,
            recovered: true,
            blocked_by: Vec::new(),
            detail: String::new(),
            recovered_objects: 0,
            backfilled_objects: 0,
            recovery_bytes: 0,
            repaired_objects: 0,
            last_scrub: 0,
            last_deep_scrub: 0,
            inconsistent: Vec::new(),
            tier,
            client_io: ClientIo::default(),
        }
    }

    #[test]
    fn cache_usage_sums_the_cache_pools_counted_pgs() {
        let mut map = ClusterMap::new("t".into());
        map.osd_boot(0, "a0".into(), cairn_map::WEIGHT_ONE);
        let base = map.create_pool("base", 1, 1, 4).unwrap();
        let fast = map.create_pool("fast", 1, 1, 4).unwrap();
        assert!(
            cache_usage(&map, &HashMap::new()).is_empty(),
            "no cache pool yet"
        );
        map.tier_add("base", "fast").unwrap();
        let mut stats = HashMap::new();
        for (seed, objects) in [(0, 5u64), (2, 7)] {
            let pg = PgId::new(fast, seed);
            let tier = TierStat {
                objects,
                bytes: objects << 20,
                dirty: 1,
                dirty_bytes: 4096,
                ..TierStat::default()
            };
            stats.insert(pg, stat(pg, objects, Some(tier)));
        }
        // A base PG's stat (no tier part), and a cache PG not counted yet.
        stats.insert(PgId::new(base, 0), stat(PgId::new(base, 0), 100, None));
        stats.insert(PgId::new(fast, 3), stat(PgId::new(fast, 3), 9, None));
        let u = cache_usage(&map, &stats);
        assert_eq!(
            u,
            vec![TierPoolUsage {
                pool: fast,
                pgs_counted: 2,
                objects: 12,
                bytes: 12 << 20,
                dirty: 2,
                dirty_bytes: 8192,
            }]
        );
    }
}
