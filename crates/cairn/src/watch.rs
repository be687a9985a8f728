//! `cairn status -w` (and `cairn -w`): the status, then one line per change
//! as it happens (OSDs up, down, in, out; pools created or removed; health;
//! PG states), until interrupted, like `ceph -w`. With `--json`, one JSON
//! object per line: the status, then each change.
//!
//! OSD and pool changes come from the maps the client is sent; health and
//! PG states are asked of the monitor every [`POLL`].

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use cairn_map::ClusterMap;
use cairn_wire::MonCommand;
use serde_json::{json, Value};

use crate::admin::with_cluster;
use crate::{output, Context};

/// How often health and PG states are asked for.
const POLL: Duration = Duration::from_secs(1);

/// Run until interrupted (or the monitor stays silent past the timeout).
pub fn watch(ctx: &Context) -> Result<()> {
    let json = ctx.json;
    with_cluster(ctx, async move |cluster| {
        let mut status = cluster.mon_command(MonCommand::Status).await?;
        if json {
            println!("{}", json!({ "time": now(), "status": status }));
        } else {
            output::print_status(&status);
        }
        let mut map = cluster.map();
        loop {
            tokio::time::sleep(POLL).await;
            let next_map = cluster.map();
            for change in map_changes(&map, &next_map) {
                emit(json, &change, json!({ "epoch": next_map.epoch }));
            }
            map = next_map;
            let next = cluster.mon_command(MonCommand::Status).await?;
            for change in status_changes(&status, &next) {
                emit(json, &change, json!({ "health": next["health"] }));
            }
            status = next;
        }
    })
}

fn now() -> String {
    let ms = cairn_client::image::watch::unix_ms();
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic
/// Gregorian calendar (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn emit(json: bool, change: &str, extra: Value) {
    if json {
        let mut line = json!({ "time": now(), "change": change });
        if let (Some(line), Some(extra)) = (line.as_object_mut(), extra.as_object()) {
            line.extend(extra.clone());
        }
        println!("{line}");
    } else {
        println!("{} {change}", now());
    }
}

/// What changed between two maps: OSDs and pools.
fn map_changes(old: &ClusterMap, new: &ClusterMap) -> Vec<String> {
    let mut out = Vec::new();
    if new.epoch == old.epoch {
        return out;
    }
    for (id, o) in &new.osds {
        match old.osds.get(id) {
            None => out.push(format!("epoch {}: osd.{id} added", new.epoch)),
            Some(was) => {
                if was.up != o.up {
                    let now = if o.up { "up" } else { "down" };
                    out.push(format!("epoch {}: osd.{id} {now}", new.epoch));
                }
                if was.is_in != o.is_in {
                    let now = if o.is_in { "in" } else { "out" };
                    out.push(format!("epoch {}: osd.{id} {now}", new.epoch));
                }
            }
        }
    }
    for id in old.osds.keys().filter(|id| !new.osds.contains_key(id)) {
        out.push(format!("epoch {}: osd.{id} removed", new.epoch));
    }
    for (id, p) in &new.pools {
        match old.pools.get(id) {
            None => out.push(format!("epoch {}: pool {} created", new.epoch, p.name)),
            Some(was) if was != p => out.push(format!(
                "epoch {}: pool {} now size {} min_size {} pg_num {}",
                new.epoch, p.name, p.size, p.min_size, p.pg_num
            )),
            Some(_) => {}
        }
    }
    for (id, p) in &old.pools {
        if !new.pools.contains_key(id) {
            out.push(format!("epoch {}: pool {} removed", new.epoch, p.name));
        }
    }
    if old.config != new.config {
        out.push(format!(
            "epoch {}: configuration database changed",
            new.epoch
        ));
    }
    out
}

/// What changed between two statuses: health and PG states.
fn status_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if old["health"] != new["health"] {
        out.push(format!("health {}", new["health"].as_str().unwrap_or("?")));
    }
    let states = |v: &Value| -> BTreeMap<String, u64> {
        v["pgs"]["by_state"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (was, now) = (states(old), states(new));
    if was != now {
        let text: Vec<String> = now.iter().map(|(s, n)| format!("{n} {s}")).collect();
        out.push(format!("pgs: {}", text.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_784), (2026, 11, 27));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn osd_and_pool_changes_are_named() {
        let mut old = ClusterMap::new("f".into());
        old.osd_boot(0, "a".into(), cairn_map::WEIGHT_ONE);
        old.osd_boot(1, "b".into(), cairn_map::WEIGHT_ONE);
        let mut new = old.clone();
        new.epoch += 1;
        new.mark_down(1);
        new.create_pool("rbd", 1, 1, 8).unwrap();
        let changes = map_changes(&old, &new);
        assert!(
            changes.iter().any(|c| c.ends_with("osd.1 down")),
            "{changes:?}"
        );
        assert!(
            changes.iter().any(|c| c.ends_with("pool rbd created")),
            "{changes:?}"
        );
        assert!(map_changes(&new, &new).is_empty());
    }
}
