//! `cairn pg scrub|deep-scrub|repair|inconsistent` and `cairn health`:
//! scrubs are asked of the PG's primary directly; findings and health come
//! from the monitor.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use cairn_wire::{MonCommand, OsdAdminCommand};
use clap::Args;
use serde_json::Value;

use crate::admin::{mon_command, osd_request, pgid_arg, with_cluster};
use crate::Context;

#[derive(Args)]
pub struct ScrubArgs {
    /// The PG, as POOL.SEED in hex (e.g. 1.1f).
    pgid: String,
    /// Wait until the scrub (and, for repair, the rewrite) is done, up to
    /// this many seconds.
    #[arg(long, value_name = "SECONDS")]
    wait: Option<u64>,
}

fn query(ctx: &Context, pg: cairn_types::PgId) -> Result<Value> {
    mon_command(ctx, MonCommand::PgQuery { pg })
}

/// Ask the PG's primary to scrub it; with `--wait`, wait until the PG
/// reports a newer scrub (and, for repair, no inconsistency left).
pub fn scrub(ctx: &Context, args: ScrubArgs, deep: bool, repair: bool) -> Result<()> {
    let pg = pgid_arg(&args.pgid)?;
    let stamp = if deep {
        "last_deep_scrub"
    } else {
        "last_scrub"
    };
    let before = query(ctx, pg)?[stamp].as_u64().unwrap_or(0);
    let reply = with_cluster(ctx, async |cluster| {
        let map = cluster.map();
        let pool = map
            .pool(pg.pool)
            .with_context(|| format!("pg {pg} does not exist: no pool {}", pg.pool))?;
        if pg.seed >= pool.pg_num {
            anyhow::bail!(
                "pg {pg} does not exist: pool {} has {} PGs",
                pool.name,
                pool.pg_num
            );
        }
        let primary = map
            .acting(pg)
            .primary()
            .with_context(|| format!("pg {pg} has no OSD up to scrub it"))?;
        osd_request(
            &cluster,
            primary,
            OsdAdminCommand::Scrub { pg, deep, repair },
        )
        .await
    })?;
    let what = match (deep, repair) {
        (_, true) => "repair",
        (true, false) => "deep-scrub",
        (false, false) => "scrub",
    };
    let Some(limit) = args.wait else {
        if ctx.json {
            println!("{reply}");
        } else {
            println!("instructed pg {pg} to {what}");
        }
        return Ok(());
    };
    // Scrub stamps have a resolution of a second.
    std::thread::sleep(Duration::from_millis(1100));
    let deadline = Instant::now() + Duration::from_secs(limit);
    loop {
        let q = query(ctx, pg)?;
        let scrubbed = q[stamp].as_u64().unwrap_or(0) > before;
        let state = q["state"].as_str().unwrap_or("");
        let settled = !state.contains("scrubbing") && !state.contains("recovering");
        let fixed = !repair || q["inconsistent"].as_array().is_none_or(Vec::is_empty);
        if scrubbed && settled && fixed {
            let found = q["inconsistent"].as_array().map_or(0, Vec::len);
            if ctx.json {
                println!("{q}");
            } else {
                println!("pg {pg}: {what} done: {state}, {found} inconsistent objects");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("pg {pg}: {what} not done after {limit} s (state {state})");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub fn inconsistent(ctx: &Context) -> Result<()> {
    let value = mon_command(ctx, MonCommand::PgInconsistent)?;
    if ctx.json {
        println!("{value}");
        return Ok(());
    }
    let pgs = value.as_array().cloned().unwrap_or_default();
    if pgs.is_empty() {
        println!("no inconsistent PGs");
    }
    for pg in pgs {
        println!("pg {}:", pg["pg"].as_str().unwrap_or("?"));
        for obj in pg["objects"].as_array().into_iter().flatten() {
            let bad: Vec<String> = obj["bad"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| format!("osd.{}: {}", b[0], b[1].as_str().unwrap_or("?")))
                .collect();
            let fix = if obj["repairable"] == true {
                ""
            } else {
                " (no good copy)"
            };
            println!(
                "  {}: {}{fix}",
                obj["name"].as_str().unwrap_or("?"),
                bad.join(", ")
            );
        }
    }
    Ok(())
}

/// `cairn health [detail]`.
pub fn health(ctx: &Context, detail: bool) -> Result<()> {
    let value = mon_command(ctx, MonCommand::HealthDetail)?;
    if ctx.json {
        println!("{value}");
        return Ok(());
    }
    println!("{}", value["health"].as_str().unwrap_or("?"));
    for check in value["checks"].as_array().into_iter().flatten() {
        println!(
            "[{}] {}: {}",
            if check["severity"] == "error" {
                "ERR"
            } else {
                "WRN"
            },
            check["check"].as_str().unwrap_or("?"),
            check["summary"].as_str().unwrap_or("?")
        );
        if detail {
            for line in check["detail"].as_array().into_iter().flatten() {
                println!("    {}", line.as_str().unwrap_or("?"));
            }
        }
    }
    Ok(())
}
