//! The CRUSH commands: `osd tree`, `osd crush add-bucket|move|rm|reweight|
//! set-device-class`, `osd crush rule create-replicated|ls`, and the
//! CRUSH facts in `osd ls`. Each returns JSON, or one line saying what is
//! wrong; a refused command changes nothing (the map's CRUSH edits are
//! atomic, and a failed one publishes no epoch).

use cairn_map::crush::{format_weight, parse_weight, CrushMap, Location, Rule, TreeNode};
use cairn_map::{ClusterMap, MapError};
use cairn_types::OsdId;
use cairn_wire::CrushCommand;
use serde_json::{json, Value};

use crate::{MonState, MonStoreError, Monitor};

impl Monitor {
    pub(crate) fn crush_command(
        &self,
        st: &mut MonState,
        cmd: CrushCommand,
    ) -> Result<Result<Value, String>, MonStoreError> {
        if let CrushCommand::RuleLs = cmd {
            return Ok(Ok(rule_list(&st.map)));
        }
        self.update(st, |map| match apply(map, cmd) {
            Ok((changed, value)) => (changed, Ok(value)),
            Err(e) => (false, Err(e.to_string())),
        })
    }
}

/// Apply one CRUSH change to the next map; returns whether it changed and
/// the reply.
fn apply(map: &mut ClusterMap, cmd: CrushCommand) -> Result<(bool, Value), MapError> {
    match cmd {
        CrushCommand::AddBucket {
            name,
            type_name,
            location,
        } => {
            let loc = Location::parse(&location)?;
            let id = map.crush_edit(|c| c.add_bucket(&name, &type_name, &loc))?;
            Ok((true, json!({ "added": name, "id": id, "type": type_name })))
        }
        CrushCommand::Move { name, location } => {
            let loc = Location::parse(&location)?;
            let moved = map.crush_edit(|c| c.move_item(&name, &loc))?;
            let reply = json!({ "moved": name, "location": loc.to_string(), "changed": moved });
            Ok((moved, reply))
        }
        CrushCommand::Rm { name } => {
            map.crush_edit(|c| c.remove_item(&name))?;
            Ok((true, json!({ "removed": name })))
        }
        CrushCommand::Reweight { name, weight } => {
            let weight = parse_weight(&weight)?;
            let changed = map.crush_edit(|c| c.reweight(&name, weight))?;
            let reply = json!({
                "reweighted": name,
                "crush_weight": tib(u64::from(weight)),
                "changed": changed,
            });
            Ok((changed, reply))
        }
        CrushCommand::SetDeviceClass { class, names } => {
            let osds = names
                .iter()
                .map(|n| osd_arg(n))
                .collect::<Result<Vec<OsdId>, MapError>>()?;
            let changed = map.crush_edit(|c| c.set_device_class(&class, &osds))?;
            let reply = json!({ "class": class, "osds": osds, "changed": changed });
            Ok((changed, reply))
        }
        CrushCommand::RuleCreateReplicated {
            name,
            root,
            failure_domain,
            class,
        } => {
            let id = map.crush_edit(|c| {
                c.create_replicated_rule(&name, &root, &failure_domain, class.as_deref())
            })?;
            let rule = map
                .crush()
                .rule(id)
                .map(|r| rule_json(map, r))
                .unwrap_or(Value::Null);
            Ok((true, rule))
        }
        CrushCommand::RuleLs => Ok((false, rule_list(map))),
    }
}

/// An OSD named `osd.N` or `N`.
fn osd_arg(name: &str) -> Result<OsdId, MapError> {
    let digits = name.strip_prefix("osd.").unwrap_or(name);
    digits
        .parse::<OsdId>()
        .ok()
        .filter(|id| id.to_string() == digits)
        .ok_or_else(|| MapError::Invalid(format!("'{name}' is not an OSD (osd.N)")))
}

/// A 16.16 weight as TiB, for JSON.
fn tib(weight: u64) -> f64 {
    format_weight(weight).parse().unwrap_or(0.0)
}

fn rule_json(map: &ClusterMap, rule: &Rule) -> Value {
    let crush = map.crush();
    let class = rule.class.map(|c| crush.class_name(c).to_string());
    let take = match &class {
        Some(c) => format!("take {} class {c}", crush.item_name(rule.root)),
        None => format!("take {}", crush.item_name(rule.root)),
    };
    let domain = crush.type_name(rule.failure_domain);
    let pools: Vec<&str> = map
        .pools
        .values()
        .filter(|p| p.rule == rule.id)
        .map(|p| p.name.as_str())
        .collect();
    json!({
        "id": rule.id,
        "name": rule.name,
        "root": crush.item_name(rule.root),
        "class": class,
        "failure_domain": domain,
        "steps": [take, format!("chooseleaf firstn {} type {domain}", rule.count), "emit"],
        "pools": pools,
    })
}

fn rule_list(map: &ClusterMap) -> Value {
    json!(map
        .crush()
        .rules()
        .map(|r| rule_json(map, r))
        .collect::<Vec<_>>())
}

/// `osd tree`: the hierarchy depth-first, each OSD with its state; OSDs
/// outside the hierarchy are listed as `stray`.
pub(crate) fn osd_tree(map: &ClusterMap) -> Value {
    let crush = map.crush();
    let nodes: Vec<Value> = crush
        .tree()
        .iter()
        .map(|n| tree_node(map, crush, n))
        .collect();
    let stray: Vec<Value> = map
        .osds_outside_crush()
        .map(|id| {
            let mut v = osd_state(map, id);
            v["id"] = json!(id);
            v["name"] = json!(format!("osd.{id}"));
            v
        })
        .collect();
    json!({ "nodes": nodes, "stray": stray })
}

fn tree_node(map: &ClusterMap, crush: &CrushMap, n: &TreeNode) -> Value {
    let mut v = json!({
        "id": n.id,
        "name": n.name,
        "type": n.type_name,
        "class": n.class,
        "crush_weight": tib(n.weight),
        "weight": n.weight,
        "depth": n.depth,
        "children": n.children,
    });
    if let Ok(osd) = OsdId::try_from(n.id) {
        let state = osd_state(map, osd);
        v["status"] = state["status"].clone();
        v["in"] = state["in"].clone();
    }
    if n.id < 0 {
        v["type_id"] = json!(crush.type_of(n.id));
    }
    v
}

/// `up`/`down` (`null` if the map has no such OSD) and in/out.
fn osd_state(map: &ClusterMap, osd: OsdId) -> Value {
    match map.osds.get(&osd) {
        Some(info) => json!({
            "status": if info.up { "up" } else { "down" },
            "in": info.is_in,
        }),
        None => json!({ "status": null, "in": null }),
    }
}

/// A pool as JSON, with its rule's name as `crush_rule`.
pub(crate) fn pool_json(map: &ClusterMap, pool: &cairn_map::Pool) -> Value {
    let mut v = json!(pool);
    v["crush_rule"] = json!(map.crush().rule(pool.rule).map(|r| r.name.as_str()));
    // One level, with the names `pool set` takes; null: the OSDs' own.
    if let Some(obj) = v.as_object_mut() {
        obj.remove("compression");
        let c = &pool.compression;
        obj.insert("compression_mode".into(), json!(c.mode));
        obj.insert("compression_algorithm".into(), json!(c.algorithm));
        obj.insert("compression_required_ratio".into(), json!(c.required_ratio));
        obj.insert("compression_min_blob_size".into(), json!(c.min_blob_size));
        obj.insert("compression_max_blob_size".into(), json!(c.max_blob_size));
        obj.insert("tier".into(), crate::tier::tier_summary(map, pool));
    }
    v
}

/// `osd ls`: every OSD with its CRUSH weight in TiB (`crush_weight`, 0
/// outside the hierarchy; as `osd tree` shows it) and class.
pub(crate) fn osd_list(map: &ClusterMap) -> Value {
    let crush = map.crush();
    let osds: Vec<Value> = map
        .osds
        .values()
        .map(|info| {
            let mut v = json!(info);
            let device = crush.device(info.id);
            v["crush_weight"] = json!(tib(u64::from(device.map_or(0, |d| d.weight))));
            v["class"] = json!(device.map(|d| crush.class_name(d.class)));
            v
        })
        .collect();
    json!(osds)
}

#[cfg(test)]
mod tests;
