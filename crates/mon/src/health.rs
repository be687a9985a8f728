//! Health checks with what they concern (`cairn health detail`: full
//! OSDs, down OSDs, PG states) and the scrub findings (`cairn pg
//! inconsistent`), from the map and the latest reports of the OSDs and the
//! PGs' primaries.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cairn_map::tier::PG_SHARE_CAP;
use cairn_map::{ClusterMap, FullState, OsdUsage};
use cairn_types::{OsdId, PgId};
use cairn_wire::{PgStat, TierStat};
use serde_json::{json, Value};

use crate::commands::pg_state;

/// One health check: a code, its severity, a summary and the details,
/// with the pools, PGs and OSDs it concerns (for scripts).
#[derive(Default)]
pub(crate) struct Check {
    code: &'static str,
    error: bool,
    pub(crate) summary: String,
    detail: Vec<String>,
    pools: BTreeSet<String>,
    pgs: Vec<String>,
    osds: BTreeSet<OsdId>,
}

fn pool_name(map: &ClusterMap, pg: PgId) -> String {
    map.pool(pg.pool)
        .map_or_else(|| format!("pool {}", pg.pool), |p| p.name.clone())
}

/// The report of `pg`'s primary if it is about the PG's current mapping.
fn current<'a>(map: &ClusterMap, pg: PgId, stats: &'a HashMap<PgId, PgStat>) -> Option<&'a PgStat> {
    stats
        .get(&pg)
        .filter(|s| s.acting == map.acting(pg).osds && s.up == map.up(pg))
}

fn pg_checks(map: &ClusterMap, stats: &HashMap<PgId, PgStat>) -> Vec<Check> {
    let kinds: [(&str, &str, bool, &str); 8] = [
        (
            "down",
            "PG_DOWN",
            true,
            "down: waiting for OSDs that may hold newer data",
        ),
        (
            "incomplete",
            "PG_INCOMPLETE",
            true,
            "incomplete: no complete copy reachable",
        ),
        (
            "inconsistent",
            "PG_INCONSISTENT",
            true,
            "inconsistent: scrub found bad copies",
        ),
        (
            "peered",
            "PG_AVAILABILITY",
            false,
            "below min_size: client I/O waits",
        ),
        ("peering", "PG_PEERING", false, "peering"),
        ("undersized", "PG_UNDERSIZED", false, "undersized"),
        ("degraded", "PG_DEGRADED", false, "degraded"),
        (
            "backfill_toofull",
            "PG_BACKFILL_FULL",
            false,
            "waiting for backfill targets below backfillfull",
        ),
    ];
    let mut checks = Vec::new();
    for (word, code, error, what) in kinds {
        let mut detail = Vec::new();
        let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
        let (mut pgs, mut osds) = (Vec::new(), BTreeSet::new());
        for pg in map.all_pgs() {
            let state = pg_state(map, pg, stats.get(&pg));
            if !state.split('+').any(|w| w == word) {
                continue;
            }
            let stat = current(map, pg, stats);
            let pool = pool_name(map, pg);
            *per_pool.entry(pool.clone()).or_default() += 1;
            pgs.push(pg.to_string());
            let mut line = format!(
                "pg {pg} (pool {pool}) is {state}, acting {:?}",
                map.acting(pg).osds
            );
            if let Some(s) = stat {
                osds.extend(s.blocked_by.iter().copied());
                if !s.blocked_by.is_empty() {
                    line.push_str(&format!(", waiting for osds {:?}", s.blocked_by));
                }
                if word == "inconsistent" {
                    let objects: Vec<String> = s
                        .inconsistent
                        .iter()
                        .map(|i| {
                            let bad: Vec<String> = i
                                .bad
                                .iter()
                                .map(|(o, why)| format!("osd.{o}: {why}"))
                                .collect();
                            format!("{} ({})", i.name, bad.join(", "))
                        })
                        .collect();
                    line.push_str(&format!(": {}", objects.join("; ")));
                } else if !s.detail.is_empty() {
                    line.push_str(&format!(": {}", s.detail));
                }
            }
            detail.push(line);
        }
        if !detail.is_empty() {
            let pools: Vec<String> = per_pool.iter().map(|(p, n)| format!("{p}: {n}")).collect();
            checks.push(Check {
                code,
                error,
                summary: format!(
                    "{} pgs {what} (pool {})",
                    detail.len(),
                    pools.join(", pool ")
                ),
                detail,
                pools: per_pool.into_keys().collect(),
                pgs,
                osds,
            });
        }
    }
    let unfound: Vec<(PgId, u64)> = map
        .all_pgs()
        .filter_map(|pg| {
            current(map, pg, stats)
                .filter(|s| s.unfound > 0)
                .map(|s| (pg, s.unfound))
        })
        .collect();
    if !unfound.is_empty() {
        checks.push(Check {
            code: "OBJECT_UNFOUND",
            error: true,
            summary: format!("{} pgs with unfound objects", unfound.len()),
            detail: unfound
                .iter()
                .map(|(pg, n)| {
                    format!(
                        "pg {pg} (pool {}) has {n} unfound objects",
                        pool_name(map, *pg)
                    )
                })
                .collect(),
            pools: unfound.iter().map(|(pg, _)| pool_name(map, *pg)).collect(),
            pgs: unfound.iter().map(|(pg, _)| pg.to_string()).collect(),
            ..Check::default()
        });
    }
    checks
}

/// Pools whose size their rule cannot meet with the OSDs in now (too few
/// failure domains): their PGs stay undersized until OSDs are added.
fn pool_checks(map: &ClusterMap) -> Vec<Check> {
    let mut detail = Vec::new();
    let mut pools = BTreeSet::new();
    for pool in map.pools.values() {
        if let Err(e) = map.check_rule(pool.rule, pool.size) {
            detail.push(format!("pool {} (size {}): {e}", pool.name, pool.size));
            pools.insert(pool.name.clone());
        }
    }
    let mut checks = Vec::new();
    if detail.is_empty() {
        return checks;
    }
    checks.push(Check {
        code: "POOL_SIZE_UNMET",
        error: false,
        summary: format!(
            "{} pools cannot place all their copies: {}",
            pools.len(),
            pools.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        detail,
        pools,
        ..Check::default()
    });
    checks
}

/// Cache tiers with neither `target_max_bytes` nor `target_max_objects`:
/// their agent has nothing to measure fullness by and never flushes or
/// evicts for it (the trap Ceph leaves silent).
pub(crate) fn cache_checks(map: &ClusterMap, stats: &HashMap<PgId, PgStat>) -> Vec<Check> {
    let mut checks = cache_full(map, stats);
    let pools: BTreeSet<String> = map
        .pools
        .values()
        .filter(|p| p.is_cache() && p.tier.params.targets_unset())
        .map(|p| p.name.clone())
        .collect();
    if pools.is_empty() {
        return checks;
    }
    checks.push(Check {
        code: "CACHE_POOL_NO_TARGET",
        error: false,
        summary: format!(
            "{} cache pools have no target_max_bytes or target_max_objects: {}",
            pools.len(),
            pools.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        detail: pools
            .iter()
            .map(|p| {
                format!(
                    "cache pool {p} never flushes or evicts for fullness: \
                     `cairn pool set {p} target_max_bytes|target_max_objects N`"
                )
            })
            .collect(),
        pools,
        ..Check::default()
    });
    checks
}

/// Cache PGs that take no new objects (ops on objects they do not hold go
/// to the base pool) until the agents have flushed and evicted enough:
/// their pool is at its target, or the PG alone at [`PG_SHARE_CAP`] times
/// its share of it.
fn cache_full(map: &ClusterMap, stats: &HashMap<PgId, PgStat>) -> Vec<Check> {
    let full: Vec<(PgId, &TierStat)> = map
        .pools
        .values()
        .filter(|p| p.is_cache())
        .flat_map(|p| p.pgs())
        .filter_map(|pg| {
            let t = current(map, pg, stats)?.tier.as_ref()?;
            t.full.then_some((pg, t))
        })
        .collect();
    if full.is_empty() {
        return Vec::new();
    }
    let usage = crate::tier::cache_usage(map, stats);
    let pools: BTreeSet<String> = full.iter().map(|(pg, _)| pool_name(map, *pg)).collect();
    // Both counts, without guessing which one made the PG full: its
    // own estimate of the pool runs ahead of the monitor's sums between
    // two heartbeats.
    let why = |pg: PgId, t: &TierStat| {
        let name = pool_name(map, pg);
        let Some(pool) = map.pool(pg.pool) else {
            return format!("pg {pg} (pool {name}) is full");
        };
        let p = &pool.tier.params;
        let (objects, bytes) = usage
            .iter()
            .find(|u| u.pool == pg.pool)
            .map_or((0, 0), |u| (u.objects, u.bytes));
        format!(
            "pg {pg} holds {} objects, {} bytes (full alone at {PG_SHARE_CAP}x its share of the \
             targets); pool {name} holds {objects} objects, {bytes} bytes (targets {} objects, \
             {} bytes; 0: none)",
            t.objects, t.bytes, p.target_max_objects, p.target_max_bytes
        )
    };
    vec![Check {
        code: "CACHE_POOL_FULL",
        error: false,
        summary: format!(
            "{} cache PGs full ({}): new objects go to the base pool until the agents make room",
            full.len(),
            pools.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        detail: full.iter().map(|(pg, t)| why(*pg, t)).collect(),
        pgs: full.iter().map(|(pg, _)| pg.to_string()).collect(),
        pools,
        ..Check::default()
    }]
}

/// OSDs at or above a full ratio: `OSD_FULL` (an error: writes fail),
/// `OSD_BACKFILLFULL`, `OSD_NEARFULL`.
fn full_checks(map: &ClusterMap, usage: &HashMap<OsdId, OsdUsage>) -> Vec<Check> {
    // The pools with a PG on any of `osds`: where writes are at stake.
    let pools_on = |osds: &[OsdId]| -> BTreeSet<String> {
        map.pools
            .values()
            .filter(|p| {
                p.pgs()
                    .any(|pg| map.up(pg).iter().any(|o| osds.contains(o)))
            })
            .map(|p| p.name.clone())
            .collect()
    };
    crate::full::by_state(map, usage)
        .into_iter()
        .map(|(state, osds)| Check {
            pools: pools_on(&osds.iter().map(|(o, _)| *o).collect::<Vec<_>>()),
            code: match state {
                FullState::Full => "OSD_FULL",
                FullState::Backfillfull => "OSD_BACKFILLFULL",
                _ => "OSD_NEARFULL",
            },
            error: state == FullState::Full,
            summary: crate::full::summary(state, osds.len()),
            detail: osds
                .iter()
                .map(|(o, r)| format!("{} is {state}", crate::full::describe(*o, *r)))
                .collect(),
            osds: osds.iter().map(|(o, _)| *o).collect(),
            ..Check::default()
        })
        .collect()
}

fn osd_checks(map: &ClusterMap) -> Vec<Check> {
    let down: Vec<String> = map
        .osds
        .values()
        .filter(|o| !o.up)
        .map(|o| {
            let lost = if o.lost_at > o.up_from { " (lost)" } else { "" };
            let out = if o.is_in { "" } else { ", out" };
            format!("osd.{} is down since epoch {}{out}{lost}", o.id, o.down_at)
        })
        .collect();
    if down.is_empty() {
        return Vec::new();
    }
    vec![Check {
        code: "OSD_DOWN",
        error: false,
        summary: format!("{} osds down", down.len()),
        detail: down,
        osds: map.osds.values().filter(|o| !o.up).map(|o| o.id).collect(),
        ..Check::default()
    }]
}

/// `cairn health detail`.
pub(crate) fn health_detail(
    map: &ClusterMap,
    stats: &HashMap<PgId, PgStat>,
    usage: &HashMap<OsdId, OsdUsage>,
) -> Value {
    let mut checks = full_checks(map, usage);
    checks.extend(osd_checks(map));
    checks.extend(pool_checks(map));
    checks.extend(cache_checks(map, stats));
    checks.extend(pg_checks(map, stats));
    let health = if checks.iter().any(|c| c.error) {
        "HEALTH_ERR"
    } else if checks.is_empty() {
        "HEALTH_OK"
    } else {
        "HEALTH_WARN"
    };
    json!({
        "health": health,
        "checks": checks
            .into_iter()
            .map(|c| json!({
                "check": c.code,
                "severity": if c.error { "error" } else { "warning" },
                "summary": c.summary,
                "detail": c.detail,
                "pools": c.pools,
                "pgs": c.pgs,
                "osds": c.osds,
            }))
            .collect::<Vec<_>>(),
    })
}

/// `cairn pg inconsistent`: PGs whose last scrub found bad copies.
pub(crate) fn pg_inconsistent(map: &ClusterMap, stats: &HashMap<PgId, PgStat>) -> Value {
    let pgs: Vec<Value> = map
        .all_pgs()
        .filter_map(|pg| current(map, pg, stats).filter(|s| !s.inconsistent.is_empty()))
        .map(|s| json!({ "pg": s.pg.to_string(), "objects": s.inconsistent }))
        .collect();
    json!(pgs)
}
