//! Human-readable tables for admin commands (`--json` prints the raw value).

use serde_json::Value;

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub fn print_status(v: &Value) {
    println!("cluster {}", s(&v["fsid"]));
    println!("  health: {}", s(&v["health"]));
    println!("  epoch:  {}", s(&v["epoch"]));
    let osds = &v["osds"];
    println!(
        "  osds:   {} total, {} up, {} in",
        s(&osds["total"]),
        s(&osds["up"]),
        s(&osds["in"])
    );
    println!("  pools:  {}", s(&v["pools"]));
    let pgs = &v["pgs"];
    println!(
        "  pgs:    {} total, {} active, {} clean",
        s(&pgs["total"]),
        s(&pgs["active"]),
        s(&pgs["clean"])
    );
    if let Some(states) = pgs["by_state"].as_object() {
        for (state, count) in states {
            println!("          {count} {state}");
        }
    }
    println!("  objects: {}", s(&v["objects"]));
}

pub fn print_osds(v: &Value) {
    println!(
        "{:<6} {:<22} {:<5} {:<4} {:>9} {:<6} {:>5} {:<12}",
        "ID", "ADDRESS", "UP", "IN", "WEIGHT", "CLASS", "USE%", "FULL"
    );
    for osd in v.as_array().into_iter().flatten() {
        let weight = osd["crush_weight"].as_f64().unwrap_or(0.0);
        let used = match (osd["used_bytes"].as_u64(), osd["total_bytes"].as_u64()) {
            (Some(used), Some(total)) if total > 0 => {
                format!("{:.1}", used as f64 * 100.0 / total as f64)
            }
            _ => "-".to_string(),
        };
        println!(
            "{:<6} {:<22} {:<5} {:<4} {:>9.5} {:<6} {:>5} {:<12}",
            format!("osd.{}", s(&osd["id"])),
            s(&osd["addr"]),
            if osd["up"].as_bool() == Some(true) {
                "up"
            } else {
                "down"
            },
            if osd["is_in"].as_bool() == Some(true) {
                "in"
            } else {
                "out"
            },
            weight,
            s(&osd["class"]),
            used,
            s(&osd["full"])
        );
    }
}

/// `osd dump`, like `ceph osd dump`: the epoch, one line per OSD with both
/// addresses, then pools and pg_temp.
pub fn print_osd_dump(v: &Value) {
    println!("epoch {}", s(&v["epoch"]));
    println!("fsid {}", s(&v["fsid"]));
    for p in v["pools"].as_array().into_iter().flatten() {
        println!(
            "pool {} '{}' size {} min_size {} pg_num {} crush_rule {}",
            s(&p["id"]),
            s(&p["name"]),
            s(&p["size"]),
            s(&p["min_size"]),
            s(&p["pg_num"]),
            s(&p["crush_rule"])
        );
    }
    for o in v["osds"].as_array().into_iter().flatten() {
        let location: Vec<String> = o["location"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(kind, name)| format!("{kind}={}", s(name)))
            .collect();
        println!(
            "osd.{} {} {} up_from {} up_thru {} down_at {} weight {} class {} public {} cluster {} {}",
            s(&o["id"]),
            if o["up"] == true { "up" } else { "down" },
            if o["in"] == true { "in" } else { "out" },
            s(&o["up_from"]),
            s(&o["up_thru"]),
            s(&o["down_at"]),
            s(&o["crush_weight"]),
            s(&o["class"]),
            s(&o["public_addr"]),
            s(&o["cluster_addr"]),
            location.join(" ")
        );
    }
    for (pg, osds) in v["pg_temp"].as_object().into_iter().flatten() {
        println!("pg_temp {pg} {osds}");
    }
}

/// `osd tree`, like `ceph osd tree`: the hierarchy indented by depth.
pub fn print_tree(v: &Value) {
    println!(
        "{:>4}  {:<6} {:>9}  {:<28} {:<7} IN",
        "ID", "CLASS", "WEIGHT", "TYPE NAME", "STATUS"
    );
    for n in v["nodes"].as_array().into_iter().flatten() {
        let depth = n["depth"].as_u64().unwrap_or(0) as usize;
        let is_osd = n["id"].as_i64().is_some_and(|id| id >= 0);
        let indent = "    ".repeat(depth);
        let label = if is_osd {
            format!("{indent}{}", s(&n["name"]))
        } else {
            format!("{indent}{} {}", s(&n["type"]), s(&n["name"]))
        };
        let (status, is_in) = if is_osd {
            (s(&n["status"]), in_word(&n["in"]))
        } else {
            (String::new(), "")
        };
        let class = n["class"].as_str().unwrap_or("");
        println!(
            "{:>4}  {:<6} {:>9.5}  {:<28} {:<7} {}",
            s(&n["id"]),
            class,
            n["crush_weight"].as_f64().unwrap_or(0.0),
            label,
            status,
            is_in
        );
    }
    for n in v["stray"].as_array().into_iter().flatten() {
        println!(
            "{:>4}  {:<6} {:>9}  {:<28} {:<7} {}",
            s(&n["id"]),
            "",
            "-",
            format!("{} (not in CRUSH)", s(&n["name"])),
            s(&n["status"]),
            in_word(&n["in"])
        );
    }
}

fn in_word(v: &Value) -> &'static str {
    match v.as_bool() {
        Some(true) => "in",
        Some(false) => "out",
        None => "-",
    }
}

/// `osd crush rule ls`.
pub fn print_rules(v: &Value) {
    println!("{:<4} {:<20} {:<56} POOLS", "ID", "NAME", "STEPS");
    for r in v.as_array().into_iter().flatten() {
        let join = |key: &str| -> String {
            let items: Vec<String> = r[key].as_array().into_iter().flatten().map(s).collect();
            items.join("; ")
        };
        let pools = join("pools");
        println!(
            "{:<4} {:<20} {:<56} {}",
            s(&r["id"]),
            s(&r["name"]),
            join("steps"),
            if pools.is_empty() {
                "-".into()
            } else {
                pools.replace("; ", ",")
            }
        );
    }
}

pub fn print_pools(v: &Value) {
    println!(
        "{:<4} {:<20} {:>5} {:>9} {:>7}  RULE",
        "ID", "NAME", "SIZE", "MIN_SIZE", "PG_NUM"
    );
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:<4} {:<20} {:>5} {:>9} {:>7}  {}",
            s(&p["id"]),
            s(&p["name"]),
            s(&p["size"]),
            s(&p["min_size"]),
            s(&p["pg_num"]),
            s(&p["crush_rule"])
        );
    }
}

pub fn print_pgs(v: &Value) {
    println!(
        "{:<8} {:<34} {:<12} {:<12} {:>12} {:>8}",
        "PG", "STATE", "UP", "ACTING", "LAST_UPDATE", "OBJECTS"
    );
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:<8} {:<34} {:<12} {:<12} {:>12} {:>8}",
            s(&p["pg"]),
            s(&p["state"]),
            s(&p["up"]),
            s(&p["acting"]),
            s(&p["last_update"]),
            s(&p["objects"])
        );
    }
}

/// `cairn pg query`: the PG's state, sets, what it waits for and its past
/// intervals.
pub fn print_pg_query(v: &Value) {
    println!("pg {}: {}", s(&v["pg"]), s(&v["state"]));
    if let Some(detail) = v["detail"].as_str() {
        println!("  {detail}");
    }
    let blocked = v["blocked_by"].as_array().map_or(0, Vec::len);
    if blocked > 0 {
        println!("  waiting for osds {}", s(&v["blocked_by"]));
    }
    println!(
        "  up {}  acting {}  (map epoch {})",
        s(&v["up"]),
        s(&v["acting"]),
        s(&v["epoch"])
    );
    if !v["pg_temp"].is_null() {
        println!("  pg_temp {}", s(&v["pg_temp"]));
    }
    println!(
        "  last_update {}  objects {}  degraded {}  unfound {}",
        s(&v["last_update"]),
        s(&v["objects"]),
        s(&v["degraded"]),
        s(&v["unfound"])
    );
    if let Some(intervals) = v["past_intervals"].as_array() {
        println!("  past intervals since the PG was last recovered:");
        for i in intervals {
            println!(
                "    epochs {}-{}  acting {}  {}",
                s(&i["first"]),
                s(&i["last"]),
                s(&i["acting"]),
                if i["maybe_went_rw"].as_bool() == Some(true) {
                    "may have served writes"
                } else {
                    "served no writes"
                }
            );
        }
    }
}

pub fn describe_change(v: &Value) -> String {
    if let Some(name) = v.get("removed") {
        return format!("removed pool {}", s(name));
    }
    if let Some(key) = v.get("set") {
        let key = s(key);
        // A cache setting is under the pool's `tier`.
        let value = match v.get(key.as_str()) {
            Some(value) => value,
            None => &v["tier"][key.as_str()],
        };
        return format!("set pool {} {key} {}", s(&v["name"]), s(value));
    }
    if v.get("pg_num").is_some() {
        return format!(
            "created pool {} (id {}, size {}, min_size {}, pg_num {}, rule {})",
            s(&v["name"]),
            s(&v["id"]),
            s(&v["size"]),
            s(&v["min_size"]),
            s(&v["pg_num"]),
            s(&v["crush_rule"])
        );
    }
    v.to_string()
}

/// `osd blocklist ls`.
pub fn print_blocklist(v: &Value) {
    let Some(entries) = v.as_array().filter(|e| !e.is_empty()) else {
        println!("no client is blocklisted");
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for e in entries {
        let left = e["expires_s"].as_u64().unwrap_or(0).saturating_sub(now);
        println!(
            "{}  expires in {left} s  {}",
            s(&e["client"]),
            s(&e["reason"])
        );
    }
}
