//! `cairn osd tier ...`: put a cache pool over a base pool and take it away
//! again, in Ceph's words. The monitor checks and records every change;
//! `flush-evict-all` asks the cache PGs' primaries to sweep and waits
//! until every PG's sweep is done.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use cairn_types::PgId;
use cairn_wire::{MonCommand, OsdAdminCommand, TierCommand};
use clap::Subcommand;
use serde_json::{json, Value};

use crate::admin::{self, osd_request};
use crate::Context;

#[derive(Subcommand)]
pub enum TierCmd {
    /// Make CACHE (an empty pool) a cache tier of BASE.
    Add { base: String, cache: String },
    /// How the cache treats ops: writeback (writes land in the cache,
    /// cold reads are proxied until promoted), readproxy (reads proxied,
    /// writes promote) or none (nothing new is kept: used to drain it).
    CacheMode {
        cache: String,
        #[arg(value_parser = ["writeback", "readproxy", "none"])]
        mode: String,
    },
    /// Send clients' ops on BASE to CACHE.
    SetOverlay { base: String, cache: String },
    /// Send clients' ops on BASE to BASE again. Refused until the cache is
    /// in mode none and holds nothing dirty.
    RemoveOverlay { base: String },
    /// Undo `tier add`. Refused while the overlay is set or the cache
    /// holds dirty objects.
    Rm { base: String, cache: String },
    /// Flush every dirty object of CACHE to its base pool and evict every
    /// object, then report (Ceph's `rados cache-flush-evict-all`).
    FlushEvictAll {
        cache: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 600)]
        wait: u64,
    },
}

pub fn run(ctx: &Context, cmd: TierCmd) -> Result<()> {
    let command = match cmd {
        TierCmd::Add { base, cache } => TierCommand::Add { base, cache },
        TierCmd::CacheMode { cache, mode } => TierCommand::CacheMode { cache, mode },
        TierCmd::SetOverlay { base, cache } => TierCommand::SetOverlay { base, cache },
        TierCmd::RemoveOverlay { base } => TierCommand::RemoveOverlay { base },
        TierCmd::Rm { base, cache } => TierCommand::Rm { base, cache },
        TierCmd::FlushEvictAll { cache, wait } => return flush_evict_all(ctx, &cache, wait),
    };
    let value = admin::mon_command(ctx, MonCommand::OsdTier(command.clone()))?;
    if ctx.json {
        println!("{value}");
        return Ok(());
    }
    let unchanged = value["changed"] == false;
    let line = match &command {
        TierCommand::Add { base, cache } if unchanged => {
            format!("pool '{cache}' is already a tier of '{base}'")
        }
        TierCommand::Add { base, cache } => format!(
            "pool '{cache}' is now a cache tier of '{base}' (mode none; set a mode, \
             target_max_bytes or target_max_objects, and the overlay)"
        ),
        TierCommand::CacheMode { cache, mode } => format!("cache mode of '{cache}' is {mode}"),
        TierCommand::SetOverlay { base, cache } => {
            format!("ops on '{base}' now go to cache '{cache}'")
        }
        TierCommand::RemoveOverlay { base } if unchanged => {
            format!("pool '{base}' has no overlay")
        }
        TierCommand::RemoveOverlay { base } => format!("ops on '{base}' go to '{base}' again"),
        TierCommand::Rm { base, cache } if unchanged => {
            format!("pool '{cache}' is not a tier of '{base}'")
        }
        TierCommand::Rm { base, cache } => {
            format!("pool '{cache}' is no longer a tier of '{base}'")
        }
    };
    println!("{line}");
    Ok(())
}

fn flush_evict_all(ctx: &Context, cache: &str, wait: u64) -> Result<()> {
    let summary = admin::with_cluster(ctx, async move |cluster| {
        let map = cluster.map();
        let pool = map
            .pool_by_name(cache)
            .with_context(|| format!("pool '{cache}' does not exist"))?;
        if !pool.is_cache() {
            bail!("pool '{cache}' is not a cache tier");
        }
        let pool_id = pool.id;
        let pgs: Vec<PgId> = pool.pgs().collect();
        let deadline = Instant::now() + Duration::from_secs(wait);
        // PG → its sweep's last report, once started on its primary.
        let mut started: BTreeMap<PgId, u32> = BTreeMap::new();
        let mut reports: BTreeMap<PgId, Value> = BTreeMap::new();
        loop {
            let map = cluster.map();
            let mut by_primary: BTreeMap<u32, Vec<PgId>> = BTreeMap::new();
            for &pg in &pgs {
                if let Some(p) = map.acting(pg).primary() {
                    by_primary.entry(p).or_default().push(pg);
                }
            }
            for (&osd, owned) in &by_primary {
                // A PG whose primary changed starts again on the new one.
                let restart = owned.iter().any(|pg| started.get(pg) != Some(&osd));
                if restart {
                    let cmd = OsdAdminCommand::TierFlushEvictAll { pool: pool_id };
                    // The PGs it started (active ones); the others are
                    // asked again next round.
                    if let Ok(text) = osd_request(&cluster, osd, cmd).await {
                        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                        for pg in owned {
                            let listed = v["pgs"]
                                .as_array()
                                .is_some_and(|a| a.iter().any(|p| p == &json!(pg.to_string())));
                            if listed {
                                started.insert(*pg, osd);
                                reports.remove(pg);
                            }
                        }
                    }
                }
                if let Ok(text) = osd_request(
                    &cluster,
                    osd,
                    OsdAdminCommand::TierSweepStatus { pool: pool_id },
                )
                .await
                {
                    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    for pg in owned {
                        match v.get(pg.to_string()).filter(|r| !r.is_null()) {
                            Some(r) => {
                                reports.insert(*pg, r.clone());
                            }
                            // Its sweep is gone (the PG re-peered): again.
                            None => {
                                started.remove(pg);
                            }
                        }
                    }
                }
            }
            let finished = pgs.iter().all(|pg| {
                reports.get(pg).is_some_and(|r| r["finished"] == true)
                    && started.get(pg) == map.acting(*pg).primary().as_ref()
            });
            if finished {
                break;
            }
            if Instant::now() >= deadline {
                let left = pgs
                    .iter()
                    .filter(|pg| !reports.get(pg).is_some_and(|r| r["finished"] == true))
                    .count();
                bail!("flush-evict-all of '{cache}': {left} PGs not done after {wait} s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let sum = |k: &str| {
            reports
                .values()
                .map(|r| r[k].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        Ok(json!({
            "pool": cache,
            "pgs": pgs.len(),
            "flushed": sum("flushed"),
            "evicted": sum("evicted"),
            "failed": sum("failed"),
        }))
    })?;
    if ctx.json {
        println!("{summary}");
    } else {
        println!(
            "{}: flushed {} and evicted {} objects in {} PGs",
            cache, summary["flushed"], summary["evicted"], summary["pgs"]
        );
    }
    let failed = summary["failed"].as_u64().unwrap_or(0);
    if failed > 0 {
        bail!("{failed} objects of '{cache}' could not be flushed or evicted (see the OSDs' logs)");
    }
    Ok(())
}

/// `pool stats [POOL]`.
pub fn pool_stats(ctx: &Context, name: Option<String>) -> Result<()> {
    let value = admin::mon_command(ctx, MonCommand::PoolStats { pool: name })?;
    if ctx.json {
        println!("{value}");
        return Ok(());
    }
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let bytes = |v: &Value| crate::capacity::human_bytes(f(v) as u64);
    for p in value.as_array().into_iter().flatten() {
        println!("pool {} id {}", p["pool"].as_str().unwrap_or("?"), p["id"]);
        let io = &p["client_io"];
        println!(
            "  client io {}/s rd, {}/s wr, {:.0} op/s rd, {:.0} op/s wr",
            bytes(&io["read_bytes_sec"]),
            bytes(&io["write_bytes_sec"]),
            f(&io["read_op_per_sec"]),
            f(&io["write_op_per_sec"])
        );
        let c = &p["cache_io"];
        if c.is_null() {
            continue;
        }
        println!(
            "  cache tier io {:.1} op/s promote, {:.1} op/s flush, {:.1} op/s evict, \
             {:.1} op/s proxied; {} PGs flushing, {} evicting, {} full",
            f(&c["promote_op_per_sec"]),
            f(&c["flush_op_per_sec"]),
            f(&c["evict_op_per_sec"]),
            f(&c["proxy_read_op_per_sec"]) + f(&c["proxy_write_op_per_sec"]),
            c["pgs_flushing"],
            c["pgs_evicting"],
            c["pgs_full"]
        );
        let target = |v: &Value, show: &dyn Fn(&Value) -> String| {
            if v.as_u64().unwrap_or(0) == 0 {
                "no target".to_string()
            } else {
                format!("target {}", show(v))
            }
        };
        println!(
            "  {} objects ({} dirty, {} whiteouts; {}), {} ({}); mode {} over {}",
            p["objects"],
            c["dirty_objects"],
            c["whiteouts"],
            target(&c["target_max_objects"], &|v| v.to_string()),
            bytes(&p["bytes"]),
            target(&c["target_max_bytes"], &|v| bytes(v)),
            c["cache_mode"].as_str().unwrap_or("?"),
            c["base"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}
