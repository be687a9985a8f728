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
        "{:<6} {:<22} {:<5} {:<4} {:>7}",
        "ID", "ADDRESS", "UP", "IN", "WEIGHT"
    );
    for osd in v.as_array().into_iter().flatten() {
        let weight = osd["weight"].as_u64().unwrap_or(0) as f64 / 65536.0;
        println!(
            "{:<6} {:<22} {:<5} {:<4} {:>7.2}",
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
            weight
        );
    }
}

pub fn print_pools(v: &Value) {
    println!(
        "{:<4} {:<20} {:>5} {:>9} {:>7}",
        "ID", "NAME", "SIZE", "MIN_SIZE", "PG_NUM"
    );
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:<4} {:<20} {:>5} {:>9} {:>7}",
            s(&p["id"]),
            s(&p["name"]),
            s(&p["size"]),
            s(&p["min_size"]),
            s(&p["pg_num"])
        );
    }
}

pub fn print_pgs(v: &Value) {
    println!(
        "{:<8} {:<18} {:<12} {:>12} {:>8}",
        "PG", "STATE", "ACTING", "LAST_UPDATE", "OBJECTS"
    );
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:<8} {:<18} {:<12} {:>12} {:>8}",
            s(&p["pg"]),
            s(&p["state"]),
            s(&p["acting"]),
            s(&p["last_update"]),
            s(&p["objects"])
        );
    }
}

pub fn describe_change(v: &Value) -> String {
    if let Some(name) = v.get("removed") {
        return format!("removed pool {}", s(name));
    }
    if v.get("pg_num").is_some() {
        return format!(
            "created pool {} (id {}, size {}, min_size {}, pg_num {})",
            s(&v["name"]),
            s(&v["id"]),
            s(&v["size"]),
            s(&v["min_size"]),
            s(&v["pg_num"])
        );
    }
    v.to_string()
}
