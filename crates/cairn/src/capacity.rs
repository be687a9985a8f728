//! `cairn df`, `cairn osd df` and `cairn image du`: where the space goes.
//! OSD space comes from the OSDs' heartbeats, pool figures from the PG
//! stats their primaries report (both a few seconds old), image usage from
//! asking each data object its size.

use anyhow::Result;
use cairn_client::image::ImageUsage;
use cairn_client::Image;
use cairn_wire::MonCommand;
use serde_json::Value;

use crate::admin::{mon_command, split_image, with_cluster};
use crate::Context;

/// Bytes as people read them: `1.5 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "PiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    UNITS.iter().find(|(unit, _)| n >= *unit).map_or_else(
        || format!("{n} B"),
        |(unit, name)| format!("{:.1} {name}", n as f64 / *unit as f64),
    )
}

fn bytes(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".to_string(), human_bytes)
}

/// A JSON value as plain text, so that table widths apply.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

fn percent(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "-".to_string(), |r| format!("{:.2}", r * 100.0))
}

/// `cairn df`: raw space, then every pool.
pub fn df(ctx: &Context) -> Result<()> {
    let v = mon_command(ctx, MonCommand::Df)?;
    if ctx.json {
        let out = serde_json::json!({ "raw": v["raw"], "pools": v["pools"] });
        println!("{out}");
        return Ok(());
    }
    let raw = &v["raw"];
    println!("RAW STORAGE");
    println!(
        "{:>12} {:>12} {:>12} {:>8}",
        "SIZE", "AVAIL", "USED", "%USED"
    );
    println!(
        "{:>12} {:>12} {:>12} {:>8}",
        bytes(&raw["total_bytes"]),
        bytes(&raw["avail_bytes"]),
        bytes(&raw["used_bytes"]),
        percent(&raw["used_ratio"])
    );
    println!();
    println!("POOLS");
    println!(
        "{:<16} {:>4} {:>5} {:>12} {:>10} {:>12} {:>12}",
        "POOL", "ID", "SIZE", "STORED", "OBJECTS", "USED", "MAX AVAIL"
    );
    for p in v["pools"].as_array().into_iter().flatten() {
        println!(
            "{:<16} {:>4} {:>5} {:>12} {:>10} {:>12} {:>12}",
            text(&p["name"]),
            text(&p["id"]),
            text(&p["size"]),
            bytes(&p["stored_bytes"]),
            text(&p["objects"]),
            bytes(&p["used_bytes"]),
            bytes(&p["max_avail_bytes"])
        );
    }
    Ok(())
}

/// `cairn osd df`: every OSD's size, use and PG copies.
pub fn osd_df(ctx: &Context) -> Result<()> {
    let v = mon_command(ctx, MonCommand::Df)?;
    if ctx.json {
        println!("{}", v["osds"]);
        return Ok(());
    }
    println!(
        "{:<7} {:<5} {:<4} {:>12} {:>12} {:>12} {:>7} {:>5}",
        "ID", "UP", "IN", "SIZE", "USED", "AVAIL", "%USE", "PGS"
    );
    for o in v["osds"].as_array().into_iter().flatten() {
        println!(
            "{:<7} {:<5} {:<4} {:>12} {:>12} {:>12} {:>7} {:>5}",
            format!("osd.{}", text(&o["id"])),
            if o["up"] == true { "up" } else { "down" },
            if o["in"] == true { "in" } else { "out" },
            bytes(&o["total_bytes"]),
            bytes(&o["used_bytes"]),
            bytes(&o["avail_bytes"]),
            percent(&o["used_ratio"]),
            text(&o["pgs"])
        );
    }
    Ok(())
}

/// `cairn image du [POOL | POOL/NAME]`: provisioned against used, for one
/// image, a pool's images, or every image.
pub fn image_du(ctx: &Context, spec: Option<String>) -> Result<()> {
    let json = ctx.json;
    let usage = with_cluster(ctx, async move |cluster| {
        let targets: Vec<(String, String)> = match spec {
            Some(spec) if spec.contains('/') => vec![split_image(&spec)?],
            Some(pool) => Image::list(&cluster, &pool)
                .await?
                .into_iter()
                .map(|name| (pool.clone(), name))
                .collect(),
            None => {
                let pools: Vec<String> = cluster
                    .map()
                    .pools
                    .values()
                    .map(|p| p.name.clone())
                    .collect();
                let mut all = Vec::new();
                for pool in pools {
                    for name in Image::list(&cluster, &pool).await? {
                        all.push((pool.clone(), name));
                    }
                }
                all
            }
        };
        let mut usage: Vec<ImageUsage> = Vec::new();
        for (pool, name) in targets {
            usage.push(Image::du(&cluster, &pool, &name).await?);
        }
        Ok(usage)
    })?;
    if json {
        println!("{}", serde_json::to_string(&usage)?);
        return Ok(());
    }
    println!(
        "{:<32} {:>12} {:>12} {:>10}",
        "IMAGE", "PROVISIONED", "USED", "OBJECTS"
    );
    let (mut provisioned, mut used) = (0, 0);
    for u in &usage {
        provisioned += u.provisioned_bytes;
        used += u.used_bytes;
        println!(
            "{:<32} {:>12} {:>12} {:>10}",
            format!("{}/{}", u.pool, u.name),
            human_bytes(u.provisioned_bytes),
            human_bytes(u.used_bytes),
            format!("{}/{}", u.objects, u.objects_max)
        );
    }
    if usage.len() > 1 {
        println!(
            "{:<32} {:>12} {:>12}",
            "<TOTAL>",
            human_bytes(provisioned),
            human_bytes(used)
        );
    }
    Ok(())
}
