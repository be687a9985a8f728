//! `cairn osd perf [N]`: a running OSD's counters, or every OSD's
//! headline counters side by side.

use anyhow::{Context as _, Result};
use serde_json::Value;

use crate::admin::{osd_request, with_cluster};
use crate::Context;

/// `cairn osd perf N`: ask OSD `N` for its counters.
pub fn osd_perf(ctx: &Context, id: u32) -> Result<()> {
    let text = with_cluster(ctx, async |cluster| {
        osd_request(&cluster, id, cairn_wire::OsdAdminCommand::Perf).await
    })?;
    let value: Value = serde_json::from_str(&text).context("osd perf reply is not JSON")?;
    if ctx.json {
        println!("{value}");
    } else if let Some(map) = value.as_object() {
        for (k, v) in map {
            let v = v.as_str().map_or_else(|| v.to_string(), String::from);
            println!("{k:<30} {v}");
        }
    }
    Ok(())
}

/// `osd perf` without an id: the headline counters of every up OSD (a
/// down one is listed as such), as `ceph osd perf`.
pub fn osd_perf_all(ctx: &Context) -> Result<()> {
    let rows = with_cluster(ctx, async |cluster| {
        let map = cluster.map();
        let mut rows = Vec::new();
        for (id, info) in &map.osds {
            let perf = if info.up {
                match osd_request(&cluster, *id, cairn_wire::OsdAdminCommand::Perf).await {
                    Ok(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
                    Err(e) => serde_json::json!({ "error": format!("{e:#}") }),
                }
            } else {
                Value::Null
            };
            rows.push(serde_json::json!({ "id": id, "up": info.up, "perf": perf }));
        }
        Ok(rows)
    })?;
    if ctx.json {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    println!(
        "{:<7} {:<10} {:>16} {:>15} {:>12} {:>13} {:>10}",
        "ID", "BACKEND", "COMMIT MEAN µs", "COMMIT MAX µs", "TXNS", "CLIENT OPS", "CPU s"
    );
    for row in rows {
        let p = &row["perf"];
        let n = |k: &str| {
            p[k].as_f64()
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
        };
        let backend = match (
            row["up"].as_bool(),
            p["backend"].as_str(),
            p["error"].as_str(),
        ) {
            (Some(false), ..) => "down".to_string(),
            (_, _, Some(_)) => "no answer".to_string(),
            (_, Some(b), _) => b.to_string(),
            _ => "-".to_string(),
        };
        let cpu = p["process_cpu_us"]
            .as_f64()
            .map_or_else(|| "-".to_string(), |us| format!("{:.1}", us / 1e6));
        println!(
            "{:<7} {:<10} {:>16} {:>15} {:>12} {:>13} {:>10}",
            format!("osd.{}", row["id"]),
            backend,
            n("kv_commit_mean_us"),
            n("kv_commit_max_us"),
            n("transactions"),
            n("client_ops_in_flight"),
            cpu
        );
    }
    Ok(())
}
