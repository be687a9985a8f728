//! Administrative commands: each returns JSON on success or one line of
//! error text; a failed command changes nothing. CRUSH commands are in
//! `crush_commands`.

use std::collections::BTreeMap;

use cairn_map::blocklist::BLOCKLIST_MAX;
use cairn_map::{BlocklistEntry, ClusterMap, MapError};
use cairn_types::PgId;
use cairn_wire::{MonCommand, PgStat};
use serde_json::{json, Value};

use crate::{MonStoreError, Monitor};

impl Monitor {
    pub(crate) fn command(&self, cmd: MonCommand) -> Result<Result<String, String>, MonStoreError> {
        let mut st = self.state.lock();
        let value: Result<Value, String> = match cmd {
            MonCommand::Status => Ok(status(
                &st.map,
                &st.pg_stats,
                &st.usage,
                &self.opts().full_ratios,
                &st.osd_counters,
            )),
            MonCommand::GetMap => serde_json::to_value(&*st.map).map_err(|e| e.to_string()),
            MonCommand::OsdLs => Ok(crate::full::add_usage(
                crate::crush_commands::osd_list(&st.map),
                &st.usage,
            )),
            MonCommand::OsdDump => Ok(osd_dump(&st.map)),
            MonCommand::PoolLs => Ok(json!(st
                .map
                .pools
                .values()
                .map(|p| crate::crush_commands::pool_json(&st.map, p))
                .collect::<Vec<_>>())),
            MonCommand::PgLs => Ok(json!(pg_list(&st.map, &st.pg_stats))),
            MonCommand::PgQuery { pg } => pg_query(&st.map, pg, st.pg_stats.get(&pg)),
            MonCommand::HealthDetail => Ok(crate::health::health_detail(
                &st.map,
                &st.pg_stats,
                &st.usage,
            )),
            MonCommand::PgInconsistent => Ok(crate::health::pg_inconsistent(&st.map, &st.pg_stats)),
            MonCommand::OsdLost { id } => self.update(&mut st, |map| match map.mark_lost(id) {
                Ok(changed) => (changed, Ok(json!({ "osd": id, "lost": true }))),
                Err(e) => (false, Err(e.to_string())),
            })?,
            MonCommand::OsdOut { id } | MonCommand::OsdIn { id } => {
                let is_in = matches!(cmd, MonCommand::OsdIn { .. });
                self.update(&mut st, |map| match map.set_in(id, is_in) {
                    Ok(changed) => (changed, Ok(json!({ "osd": id, "in": is_in }))),
                    Err(e) => (false, Err(e.to_string())),
                })?
            }
            MonCommand::OsdDown { id } => {
                if !st.map.osds.contains_key(&id) {
                    Err(MapError::NoSuchOsd(id).to_string())
                } else {
                    st.sessions.remove(&id);
                    self.mark_down(&mut st, id);
                    Ok(json!({ "osd": id, "up": false }))
                }
            }
            MonCommand::PoolCreate {
                name,
                pg_num,
                size,
                min_size,
                rule,
            } => {
                let size = size.unwrap_or(self.opts().pool_default_size);
                let min_size =
                    min_size.unwrap_or(self.opts().pool_default_min_size.min(size.max(1)));
                let pg_num = pg_num.unwrap_or(self.opts().pool_default_pg_num);
                self.update(&mut st, |map| {
                    match map.create_pool_with_rule(&name, size, min_size, pg_num, rule.as_deref())
                    {
                        Ok(id) => (
                            true,
                            Ok(crate::crush_commands::pool_json(map, &map.pools[&id])),
                        ),
                        Err(e) => (false, Err(e.to_string())),
                    }
                })?
            }
            MonCommand::OsdTree => Ok(crate::crush_commands::osd_tree(&st.map)),
            MonCommand::OsdCrush(cmd) => self.crush_command(&mut st, cmd)?,
            MonCommand::PoolSet { name, key, value } => {
                self.update(&mut st, |map| match pool_set(map, &name, &key, &value) {
                    Ok(changed) => {
                        let now = if key == "name" { &value } else { &name };
                        let pool = map.pool_by_name(now).map(|p| {
                            let mut v = crate::crush_commands::pool_json(map, p);
                            v["set"] = json!(key);
                            v
                        });
                        (changed, Ok(pool.unwrap_or_default()))
                    }
                    Err(e) => (false, Err(e)),
                })?
            }
            MonCommand::PoolRm { name } => {
                self.update(&mut st, |map| match map.remove_pool(&name) {
                    Ok(id) => (true, Ok(json!({ "removed": name, "id": id }))),
                    Err(e) => (false, Err(e.to_string())),
                })?
            }
            MonCommand::BlocklistAdd {
                client,
                expire_s,
                reason,
            } => {
                if expire_s == 0 || expire_s > BLOCKLIST_EXPIRE_MAX_S {
                    Err(format!(
                        "blocklist expiry must be from 1 to {BLOCKLIST_EXPIRE_MAX_S} seconds, got {expire_s}"
                    ))
                } else {
                    let now = unix_s();
                    let entry = BlocklistEntry {
                        added_s: now,
                        expires_s: now + expire_s,
                        reason,
                    };
                    let updated = self.update(&mut st, |map| {
                        if map.blocklist.add(client, entry) {
                            (true, Ok(()))
                        } else {
                            (
                                false,
                                Err(format!("the blocklist is full ({BLOCKLIST_MAX} clients)")),
                            )
                        }
                    })?;
                    updated.map(|()| json!({ "client": client, "epoch": st.map.epoch, "expires_s": now + expire_s }))
                }
            }
            MonCommand::BlocklistRm { client } => {
                let removed = self.update(&mut st, |map| {
                    let removed = map.blocklist.remove(client);
                    (removed, removed)
                })?;
                if removed {
                    Ok(json!({ "client": client, "epoch": st.map.epoch }))
                } else {
                    Err(format!("client.{client:016x} is not blocklisted"))
                }
            }
            MonCommand::ConfigSet { who, key, value } => {
                self.config_set(&mut st, &who, &key, &value)?
            }
            MonCommand::ConfigRm { who, key } => self.config_rm(&mut st, &who, &key)?,
            MonCommand::ConfigDump => Ok(crate::config::config_dump(&st.map.config)),
            MonCommand::ConfigShow => self.config_show(&st),
            MonCommand::Df => Ok(crate::df::df(
                &st.map,
                &st.pg_stats,
                &st.usage,
                self.opts().full_ratios.full(),
            )),
            MonCommand::OsdTier(cmd) => self.tier_command(&mut st, cmd)?,
            MonCommand::PoolStats { pool } => crate::pool_stats::pool_stats(
                &st.map,
                &st.pg_stats,
                &st.pool_samples,
                pool.as_deref(),
            ),
            MonCommand::BlocklistLs => Ok(json!(st
                .map
                .blocklist
                .entries()
                .map(|(client, e)| json!({
                    "client": format!("client.{client:016x}"),
                    "added_s": e.added_s,
                    "expires_s": e.expires_s,
                    "reason": e.reason,
                }))
                .collect::<Vec<_>>())),
        };
        Ok(value.map(|v| v.to_string()))
    }
}

/// Longest a client can be blocklisted at once: a week.
const BLOCKLIST_EXPIRE_MAX_S: u64 = 7 * 24 * 3600;

/// The monitor's wall clock, in seconds since the Unix epoch.
pub(crate) fn unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn number(key: &str, value: &str) -> Result<u32, String> {
    value
        .parse()
        .map_err(|_| format!("{key} must be a number, not '{value}'"))
}

/// `pool set NAME KEY VALUE`: whether the map changed, or why not.
fn pool_set(map: &mut ClusterMap, name: &str, key: &str, value: &str) -> Result<bool, String> {
    match key {
        "pg_num" => {
            let pg_num: u32 = value
                .parse()
                .map_err(|_| format!("pg_num must be a number, not '{value}'"))?;
            map.set_pg_num(name, pg_num).map_err(|e| e.to_string())
        }
        "size" => map
            .set_pool_size(name, number(key, value)?)
            .map_err(|e| e.to_string()),
        "min_size" => map
            .set_pool_min_size(name, number(key, value)?)
            .map_err(|e| e.to_string()),
        "name" => map.rename_pool(name, value).map_err(|e| e.to_string()),
        k if k.starts_with("compression_") => map
            .set_pool_compression(name, k, value)
            .map_err(|e| e.to_string()),
        k if cairn_map::tier::TIER_KEYS.contains(&k) => {
            match map.pool_by_name(name) {
                Some(p) if !p.is_cache() => {
                    return Err(format!(
                        "{k} applies to a cache tier; pool '{name}' is not one (see `osd tier add`)"
                    ))
                }
                _ => {}
            }
            map.set_tier_param(name, k, value)
                .map_err(|e| e.to_string())
        }
        "application" => match value.split_once(' ') {
            Some(("enable", app)) => map.set_pool_application(name, app, true),
            Some(("disable", app)) => map.set_pool_application(name, app, false),
            _ => {
                return Err(format!(
                    "application takes 'enable APP' or 'disable APP', not '{value}'"
                ))
            }
        }
        .map_err(|e| e.to_string()),
        other => Err(format!(
            "unknown pool setting '{other}' (settable: size, min_size, pg_num, name, \
             compression_mode, compression_algorithm, compression_required_ratio, \
             compression_min_blob_size, compression_max_blob_size, application, and on a \
             cache tier {})",
            cairn_map::tier::TIER_KEYS.join(", ")
        )),
    }
}

/// `osd dump`: the map's epoch, every OSD (public and cluster address,
/// up/in, the epochs of its history, CRUSH weight, class and location),
/// every pool and every `pg_temp`.
fn osd_dump(map: &ClusterMap) -> Value {
    let crush = map.crush();
    let osds: Vec<Value> = map
        .osds
        .values()
        .map(|o| {
            let device = crush.device(o.id);
            let weight = device.map_or(0, |d| u64::from(d.weight));
            json!({
                "id": o.id,
                "public_addr": o.addr,
                "cluster_addr": o.cluster_addr,
                "up": o.up,
                "in": o.is_in,
                "up_from": o.up_from,
                "up_thru": o.up_thru,
                "down_at": o.down_at,
                "lost_at": o.lost_at,
                "weight": weight,
                "crush_weight": cairn_map::crush::format_weight(weight).parse::<f64>().unwrap_or(0.0),
                "class": device.map(|d| crush.class_name(d.class)),
                "location": crush_location(map, o.id),
            })
        })
        .collect();
    let pools: Vec<Value> = map
        .pools
        .values()
        .map(|p| crate::crush_commands::pool_json(map, p))
        .collect();
    let pg_temp: BTreeMap<String, &Vec<u32>> = map
        .pg_temp
        .iter()
        .map(|(pg, osds)| (pg.to_string(), osds))
        .collect();
    json!({
        "fsid": map.fsid,
        "epoch": map.epoch,
        "osds": osds,
        "pools": pools,
        "pg_temp": pg_temp,
    })
}

/// Where `osd` sits in CRUSH, as `{type: bucket}` from its host up (empty
/// outside the hierarchy).
fn crush_location(map: &ClusterMap, osd: cairn_types::OsdId) -> Value {
    let crush = map.crush();
    let mut location = serde_json::Map::new();
    let Ok(mut item) = i32::try_from(osd) else {
        return Value::Object(location);
    };
    // Every step goes at least one type up, so the types bound the walk.
    for _ in 0..=crush.types().len() {
        let Some(parent) = crush.parent_of(item) else {
            break;
        };
        let type_name = crush
            .type_of(parent)
            .map_or("?", |t| crush.type_name(t))
            .to_string();
        location.insert(type_name, json!(crush.item_name(parent)));
        item = parent;
    }
    Value::Object(location)
}

/// The state name of one PG as `cairn status` shows it: its primary's
/// report if that is about the PG's current mapping, else `peering` (or
/// `down` when no OSD of it is up).
pub(crate) fn pg_state(map: &ClusterMap, pg: PgId, stat: Option<&PgStat>) -> String {
    if map.pool(pg.pool).is_none() {
        return "unknown".into();
    }
    let acting = map.acting(pg);
    if acting.osds.is_empty() {
        return "down".into();
    }
    match stat.filter(|s| s.acting == acting.osds && s.up == map.up(pg)) {
        None => "peering".into(),
        Some(s) => s.state.clone(),
    }
}

/// `HEALTH_OK`, or the checks that failed: `HEALTH_ERR` when an OSD is
/// full (writes fail), else `HEALTH_WARN`.
fn health_line(error: bool, checks: &[String]) -> String {
    match (error, checks.is_empty()) {
        (_, true) => "HEALTH_OK".to_string(),
        (true, false) => format!("HEALTH_ERR: {}", checks.join("; ")),
        (false, false) => format!("HEALTH_WARN: {}", checks.join("; ")),
    }
}

fn has_word(state: &str, word: &str) -> bool {
    state.split('+').any(|w| w == word)
}

/// Is `pg` served by fewer OSDs than its pool's size (too few up, or CRUSH
/// cannot find enough failure domains)? Known from the map alone, before
/// any primary reports.
fn is_undersized(map: &ClusterMap, pg: PgId) -> bool {
    map.pool(pg.pool)
        .is_some_and(|p| (map.acting(pg).osds.len() as u32) < p.size)
}

fn pg_list(map: &ClusterMap, stats: &std::collections::HashMap<PgId, PgStat>) -> Vec<Value> {
    map.all_pgs()
        .map(|pg| {
            let stat = stats.get(&pg);
            json!({
                "pg": pg.to_string(),
                "state": pg_state(map, pg, stat),
                "up": map.up(pg),
                "acting": map.acting(pg).osds,
                "last_update": stat.map(|s| s.last_update.to_string()),
                "objects": stat.map(|s| s.objects).unwrap_or(0),
                "degraded": stat.map(|s| s.degraded).unwrap_or(0),
                "unfound": stat.map(|s| s.unfound).unwrap_or(0),
                "blocked_by": stat.map(|s| s.blocked_by.clone()).unwrap_or_default(),
            })
        })
        .collect()
}

fn pg_query(map: &ClusterMap, pg: PgId, stat: Option<&PgStat>) -> Result<Value, String> {
    match map.pool(pg.pool) {
        Some(pool) if pg.seed < pool.pg_num => {}
        _ => return Err(format!("pg {pg} does not exist")),
    }
    let history = map.pg_history.get(&pg);
    let current = stat.filter(|s| s.acting == map.acting(pg).osds);
    Ok(json!({
        "pg": pg.to_string(),
        "state": pg_state(map, pg, stat),
        "epoch": map.epoch,
        "up": map.up(pg),
        "acting": map.acting(pg).osds,
        "pg_temp": map.pg_temp.get(&pg),
        "same_interval_since": history.map(|h| h.same_interval_since),
        "past_intervals": history.map(|h| &h.intervals),
        "blocked_by": current.map(|s| s.blocked_by.clone()).unwrap_or_default(),
        "detail": current.map(|s| s.detail.clone()),
        "last_update": current.map(|s| s.last_update.to_string()),
        "objects": current.map(|s| s.objects),
        "degraded": current.map(|s| s.degraded),
        "unfound": current.map(|s| s.unfound),
        "recovered_objects": current.map(|s| s.recovered_objects),
        "backfilled_objects": current.map(|s| s.backfilled_objects),
        "recovery_bytes": current.map(|s| s.recovery_bytes),
        "repaired_objects": current.map(|s| s.repaired_objects),
        "last_scrub": current.map(|s| s.last_scrub),
        "last_deep_scrub": current.map(|s| s.last_deep_scrub),
        "inconsistent": current.map(|s| s.inconsistent.clone()),
    }))
}

fn status(
    map: &ClusterMap,
    stats: &std::collections::HashMap<PgId, PgStat>,
    usage: &std::collections::HashMap<cairn_types::OsdId, cairn_map::OsdUsage>,
    ratios: &cairn_map::FullRatios,
    counters: &std::collections::HashMap<cairn_types::OsdId, cairn_wire::RecoveryCounters>,
) -> Value {
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    let mut objects = 0;
    let (mut degraded, mut unfound) = (0, 0);
    // Recovery counters are each OSD's, over every PG in any role: a PG's
    // primary changes, an OSD's total does not.
    let recovered_objects: u64 = counters.values().map(|c| c.recovered_objects).sum();
    let backfilled_objects: u64 = counters.values().map(|c| c.backfilled_objects).sum();
    let recovery_bytes: u64 = counters.values().map(|c| c.recovery_bytes).sum();
    let repaired_objects: u64 = counters.values().map(|c| c.repaired_objects).sum();
    let mut undersized = 0u64;
    for pg in map.all_pgs() {
        let stat = stats.get(&pg);
        *by_state.entry(pg_state(map, pg, stat)).or_default() += 1;
        undersized += u64::from(is_undersized(map, pg));
        if let Some(s) = stat {
            objects += s.objects;
            degraded += s.degraded;
            unfound += s.unfound;
        }
    }
    let count = |word: &str| -> u64 {
        by_state
            .iter()
            .filter(|(s, _)| has_word(s, word))
            .map(|(_, n)| n)
            .sum()
    };
    let total_pgs: u64 = by_state.values().sum();
    let clean = count("clean");
    let active = count("active");
    let osds_up = map.osds.values().filter(|o| o.up).count();
    let osds_in = map.osds.values().filter(|o| o.is_in).count();
    let (any_full, mut warnings) = crate::full::health(map, usage);
    if osds_up < map.osds.len() {
        warnings.push(format!("{} osds down", map.osds.len() - osds_up));
    }
    for (word, what) in [
        ("down", "down (waiting for OSDs that may hold newer data)"),
        ("incomplete", "incomplete"),
        ("inconsistent", "inconsistent (see cairn health detail)"),
        ("peering", "peering"),
        ("peered", "peered but below min_size (I/O blocked)"),
        ("degraded", "degraded"),
        ("backfilling", "backfilling"),
        (
            "backfill_toofull",
            "waiting for backfill targets below backfillfull",
        ),
        ("recovering", "recovering"),
    ] {
        let n = count(word);
        if n > 0 {
            warnings.push(format!("{n} pgs {what}"));
        }
    }
    // From the map: a PG with fewer OSDs than its size, reported or not.
    if undersized > 0 {
        warnings.push(format!("{undersized} pgs undersized"));
    }
    let unmet: Vec<&str> = map
        .pools
        .values()
        .filter(|p| map.check_rule(p.rule, p.size).is_err())
        .map(|p| p.name.as_str())
        .collect();
    if !unmet.is_empty() {
        warnings.push(format!(
            "{} pools cannot place all their copies ({}; see cairn health detail)",
            unmet.len(),
            unmet.join(", ")
        ));
    }
    for check in crate::health::cache_checks(map, stats) {
        warnings.push(format!("{} (see cairn health detail)", check.summary));
    }
    let outside_crush = map.osds_outside_crush().count();
    if outside_crush > 0 {
        warnings.push(format!(
            "{outside_crush} osds not in the CRUSH map (they get no data)"
        ));
    }
    if unfound > 0 {
        warnings.push(format!("{unfound} objects unfound"));
    }
    if active < total_pgs && warnings.is_empty() {
        warnings.push(format!("{} pgs not active", total_pgs - active));
    }
    json!({
        "fsid": map.fsid,
        "epoch": map.epoch,
        "health": health_line(any_full, &warnings),
        "osds": { "total": map.osds.len(), "up": osds_up, "in": osds_in },
        "full": crate::full::status_json(map, ratios),
        "pools": map.pools.len(),
        "pgs": { "total": total_pgs, "active": active, "clean": clean, "undersized": undersized, "by_state": by_state },
        "objects": objects,
        "degraded_objects": degraded,
        "unfound_objects": unfound,
        "recovery": {
            "recovered_objects": recovered_objects,
            "backfilled_objects": backfilled_objects,
            "bytes": recovery_bytes,
            "repaired_objects": repaired_objects,
        },
    })
}
