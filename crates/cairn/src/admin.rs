//! Admin commands that talk to a running cluster: status, pools, PGs, images.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use cairn_client::image::lock::parse_features;
use cairn_client::image::{ImageStatus, ShrinkPolicy};
use cairn_client::{Cluster, Image};
use cairn_types::{format_size, parse_size};
use cairn_wire::MonCommand;
use clap::Subcommand;
use serde_json::Value;

use crate::{conf, output, Context};

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Create a pool.
    Create {
        name: String,
        /// Number of PGs, a power of two (default: mon.pool_default_pg_num).
        #[arg(long)]
        pg_num: Option<u32>,
        /// Copies of each object (default: mon.pool_default_size).
        #[arg(long)]
        size: Option<u32>,
        /// Copies that must be up to serve I/O (default: mon.pool_default_min_size).
        #[arg(long)]
        min_size: Option<u32>,
        /// CRUSH rule placing the pool's PGs (default: replicated_rule).
        #[arg(long)]
        rule: Option<String>,
    },
    /// Change a pool setting: `size N` (copies; new ones are backfilled),
    /// `min_size N`, `pg_num N` (splits every PG online: a power of two,
    /// larger than now), `name NEW` (as `pool rename`), `compression_mode
    /// none|passive|aggressive|force`, `compression_algorithm
    /// lz4|zstd|snappy`, `compression_required_ratio R`,
    /// `compression_min_blob_size N`, `compression_max_blob_size N` (each
    /// over the OSDs' own bluestore_compression_*; `default` to unset).
    Set {
        name: String,
        /// The setting.
        key: String,
        value: String,
    },
    /// Tag the pool with the application using it (`rbd`), or untag it.
    Application {
        /// enable or disable.
        #[arg(value_parser = ["enable", "disable"])]
        action: String,
        name: String,
        app: String,
    },
    /// Show a pool's settings, or one of them.
    Get {
        name: String,
        /// size, min_size, pg_num, rule, id, compression_*, application (default: all).
        key: Option<String>,
    },
    /// Rename a pool (its data stays where it is).
    Rename { name: String, new_name: String },
    /// List pools.
    Ls,
    /// Client I/O per pool (op/s and B/s, read and written, over the last
    /// seconds) and, for a cache pool, promote, flush and evict rates, PGs
    /// flushing or evicting, dirty objects, objects and bytes against the
    /// targets (Ceph's `osd pool stats`).
    Stats { name: Option<String> },
    /// Remove a pool and everything in it (needs --yes-i-really-mean-it).
    Rm {
        name: String,
        /// Confirm that every image and object in the pool is to be destroyed.
        #[arg(long)]
        yes_i_really_mean_it: bool,
    },
}

#[derive(Subcommand)]
pub enum PgCmd {
    /// List every PG with its state and acting set.
    Ls,
    /// One PG in detail: state, up and acting sets, past intervals, and
    /// which OSDs it waits for.
    Query {
        /// The PG, as POOL.SEED in hex (e.g. 1.1f).
        pgid: String,
    },
    /// Compare the PG's copies (metadata) across its acting set.
    Scrub(crate::pg_cli::ScrubArgs),
    /// Compare the PG's copies, reading every byte.
    DeepScrub(crate::pg_cli::ScrubArgs),
    /// Deep-scrub the PG and rewrite the bad copies from a good one.
    Repair(crate::pg_cli::ScrubArgs),
    /// PGs whose last scrub found inconsistent objects, with the objects.
    Inconsistent,
}

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Create an image: `cairn image create rbd/vol0 --size 10G`.
    Create {
        /// POOL/NAME
        image: String,
        /// Size with an optional suffix (K, M, G, T); a multiple of 512.
        #[arg(long)]
        size: String,
        /// Object size, a power of two from 4K to 64M (default: client.image_default_object_size).
        #[arg(long)]
        object_size: Option<String>,
        /// Features, comma-separated: `exclusive-lock` (one writer at a
        /// time, a dead one fenced before another takes over) or `none`.
        #[arg(long, default_value = "exclusive-lock")]
        image_feature: String,
    },
    /// List the images of a pool (default `rbd`).
    Ls { pool: Option<String> },
    /// Show an image's size and layout.
    Info { image: String },
    /// Grow or shrink an image. Shrinking discards the data past the new
    /// end: it needs --allow-shrink and is refused while the image is open.
    Resize {
        image: String,
        #[arg(long)]
        size: String,
        /// Allow the new size to be smaller (the data past it is removed).
        #[arg(long)]
        allow_shrink: bool,
        /// Evict watchers whose lease ran out (their client is dead).
        #[arg(long)]
        force: bool,
    },
    /// Remove an image and its data; refused while the image is open.
    Rm {
        image: String,
        /// Evict watchers whose lease ran out (their client is dead).
        #[arg(long)]
        force: bool,
    },
    /// Who has an image open (its watchers) and any admin operation on it.
    Status { image: String },
    /// Provisioned and used bytes of an image, a pool's images (POOL) or
    /// every image.
    Du { spec: Option<String> },
    /// The exclusive lock: `ls` shows its holder, `break` fences the
    /// holder (its later writes are refused by every OSD) and frees it.
    Lock {
        #[command(subcommand)]
        cmd: LockCmd,
    },
}

#[derive(Subcommand)]
pub enum LockCmd {
    /// Show who holds an image's exclusive lock.
    Ls { image: String },
    /// Fence the holder (blocklist its client for an hour) and remove the lock.
    Break { image: String },
}

fn print_image_status(pool: &str, name: &str, status: &ImageStatus) {
    println!("image {pool}/{name}: {}", format_size(status.image.size));
    if let Some(op) = &status.admin_op {
        println!(
            "  admin operation: {} by {} (if that command is gone, run it again)",
            op.op, op.by
        );
    }
    if status.watchers.is_empty() {
        println!("  watchers: none");
        return;
    }
    println!("  watchers:");
    for w in &status.watchers {
        println!(
            "    {}  {}  renewed {:.1} s ago, timeout {:.1} s{}",
            w.entry.client,
            w.entry.desc,
            w.age_ms as f64 / 1000.0,
            w.entry.timeout_ms as f64 / 1000.0,
            if w.expired {
                "  EXPIRED (dead? `image rm --force` evicts it)"
            } else {
                ""
            }
        );
    }
}

impl ImageCmd {
    fn verb(&self) -> &'static str {
        match self {
            ImageCmd::Create { .. } => "create",
            ImageCmd::Ls { .. } => "ls",
            ImageCmd::Info { .. } => "info",
            ImageCmd::Resize { .. } => "resize",
            ImageCmd::Rm { .. } => "rm",
            ImageCmd::Status { .. } => "status",
            ImageCmd::Lock { .. } => "lock",
            ImageCmd::Du { .. } => "du",
        }
    }
}

/// Split `POOL/NAME`.
pub fn split_image(spec: &str) -> Result<(String, String)> {
    match spec.split_once('/') {
        Some((pool, name)) if !pool.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((pool.to_string(), name.to_string()))
        }
        _ => anyhow::bail!("image must be given as POOL/NAME, got '{spec}'"),
    }
}

pub fn size_arg(text: &str) -> Result<u64> {
    parse_size(text).map_err(|_| anyhow::anyhow!("invalid size '{text}' (e.g. 4096, 512K, 10G)"))
}

/// Run `f` against a freshly connected cluster on a small runtime.
pub fn with_cluster<T>(ctx: &Context, f: impl AsyncFnOnce(Arc<Cluster>) -> Result<T>) -> Result<T> {
    let config = conf::load_client(ctx)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let cluster = Cluster::connect(conf::admin_client_options(&config)).await?;
        f(cluster).await
    })
}

/// Send an admin command to OSD `id` (found in the map) and return its
/// JSON reply.
pub async fn osd_request(
    cluster: &Cluster,
    id: u32,
    cmd: cairn_wire::OsdAdminCommand,
) -> Result<String> {
    let map = cluster.map();
    let addr = match map.osd_addr(id) {
        Some(addr) if map.is_up(id) => addr.to_string(),
        Some(_) => anyhow::bail!("osd.{id} is down"),
        None => anyhow::bail!("osd.{id} does not exist"),
    };
    let hello = cairn_wire::Message::Hello {
        entity: cairn_types::Entity::Client(cluster.client_id()),
        fsid: None,
    };
    let mut conn = cairn_wire::connect(&addr, hello)
        .await
        .with_context(|| format!("cannot reach osd.{id} at {addr}"))?;
    conn.sender
        .send(cairn_wire::Message::OsdAdmin { tid: 1, cmd });
    let reply = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match conn.reader.read().await? {
                cairn_wire::Message::OsdAdminReply { tid: 1, result } => return Ok(result),
                _ => continue,
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("osd.{id} did not answer"))?
    .map_err(|e: cairn_wire::WireError| anyhow::anyhow!("osd.{id}: {e}"))?;
    reply.map_err(|e| anyhow::anyhow!("osd.{id}: {e}"))
}

pub fn mon_command(ctx: &Context, cmd: MonCommand) -> Result<Value> {
    with_cluster(ctx, async move |cluster| {
        Ok(cluster.mon_command(cmd).await?)
    })
}

pub fn status(ctx: &Context) -> Result<()> {
    let value = mon_command(ctx, MonCommand::Status)?;
    if ctx.json {
        println!("{value}");
    } else {
        output::print_status(&value);
    }
    Ok(())
}

pub fn pool(ctx: &Context, cmd: PoolCmd) -> Result<()> {
    let (mon_cmd, ls) = match cmd {
        PoolCmd::Create {
            name,
            pg_num,
            size,
            min_size,
            rule,
        } => {
            if let Some(pg_num) = pg_num {
                if !pg_num.is_power_of_two() {
                    anyhow::bail!("pg_num {pg_num} must be a power of two");
                }
            }
            (
                MonCommand::PoolCreate {
                    name,
                    pg_num,
                    size,
                    min_size,
                    rule,
                },
                false,
            )
        }
        PoolCmd::Ls => (MonCommand::PoolLs, true),
        PoolCmd::Stats { name } => return crate::tier_cli::pool_stats(ctx, name),
        PoolCmd::Set { name, key, value } => (MonCommand::PoolSet { name, key, value }, false),
        PoolCmd::Rename { name, new_name } => (
            MonCommand::PoolSet {
                name,
                key: "name".into(),
                value: new_name,
            },
            false,
        ),
        PoolCmd::Get { name, key } => return pool_get(ctx, &name, key.as_deref()),
        PoolCmd::Application { action, name, app } => (
            MonCommand::PoolSet {
                name,
                key: "application".into(),
                value: format!("{action} {app}"),
            },
            false,
        ),
        PoolCmd::Rm {
            name,
            yes_i_really_mean_it,
        } => {
            if !yes_i_really_mean_it {
                anyhow::bail!(
                    "removing pool '{name}' destroys all its data; repeat with --yes-i-really-mean-it"
                );
            }
            (MonCommand::PoolRm { name }, false)
        }
    };
    let value = mon_command(ctx, mon_cmd)?;
    if ctx.json {
        println!("{value}");
    } else if ls {
        output::print_pools(&value);
    } else {
        println!("{}", output::describe_change(&value));
    }
    Ok(())
}

/// `pool get NAME [KEY]`, from the pool list.
fn pool_get(ctx: &Context, name: &str, key: Option<&str>) -> Result<()> {
    const KEYS: &[&str] = &[
        "id",
        "size",
        "min_size",
        "pg_num",
        "crush_rule",
        "compression_mode",
        "compression_algorithm",
        "compression_required_ratio",
        "compression_min_blob_size",
        "compression_max_blob_size",
        "application",
    ];
    let pools = mon_command(ctx, MonCommand::PoolLs)?;
    let pool = pools
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .ok_or_else(|| anyhow::anyhow!("pool '{name}' does not exist"))?;
    // A cache tier's settings are read from its `tier` object.
    let tier_keys: Vec<&str> = ["tier_of", "overlay", "cache", "cache_mode"]
        .into_iter()
        .chain(cairn_map::tier::TIER_KEYS.iter().copied())
        .collect();
    let mut pool = pool.clone();
    let tier = pool["tier"].clone();
    for k in &tier_keys {
        pool[*k] = tier[*k].clone();
    }
    let is_cache = !tier["tier_of"].is_null();
    let keys: Vec<&str> = match key {
        None if is_cache => KEYS.iter().chain(&tier_keys).copied().collect(),
        None if !tier.is_null() => KEYS.iter().copied().chain(["cache", "overlay"]).collect(),
        None => KEYS.to_vec(),
        Some("rule") => vec!["crush_rule"],
        Some(k) if KEYS.contains(&k) => vec![k],
        Some(k) if tier_keys.contains(&k) && (is_cache || k == "cache" || k == "overlay") => {
            vec![k]
        }
        Some(k) if tier_keys.contains(&k) => {
            anyhow::bail!("pool '{name}' is not a cache tier: it has no {k}")
        }
        Some(k) => {
            anyhow::bail!(
                "unknown pool setting '{k}' (readable: {}, rule)",
                KEYS.join(", ")
            )
        }
    };
    if ctx.json {
        let v: serde_json::Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), pool[*k].clone()))
            .collect();
        println!("{}", Value::Object(v));
    } else {
        for k in keys {
            let shown = match &pool[k] {
                Value::String(s) => s.clone(),
                Value::Null if tier_keys.contains(&k) => "none".to_string(),
                Value::Null => "(the OSDs' own setting)".to_string(),
                Value::Array(a) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
                other => other.to_string(),
            };
            println!("{k}: {shown}");
        }
    }
    Ok(())
}

pub fn pg(ctx: &Context, cmd: PgCmd) -> Result<()> {
    match cmd {
        PgCmd::Ls => {
            let value = mon_command(ctx, MonCommand::PgLs)?;
            if ctx.json {
                println!("{value}");
            } else {
                output::print_pgs(&value);
            }
        }
        PgCmd::Scrub(args) => crate::pg_cli::scrub(ctx, args, false, false)?,
        PgCmd::DeepScrub(args) => crate::pg_cli::scrub(ctx, args, true, false)?,
        PgCmd::Repair(args) => crate::pg_cli::scrub(ctx, args, true, true)?,
        PgCmd::Inconsistent => crate::pg_cli::inconsistent(ctx)?,
        PgCmd::Query { pgid } => {
            let pg = pgid_arg(&pgid)?;
            let value = mon_command(ctx, MonCommand::PgQuery { pg })?;
            if ctx.json {
                println!("{value}");
            } else {
                output::print_pg_query(&value);
            }
        }
    }
    Ok(())
}

/// Parse a PG id given on the command line.
pub fn pgid_arg(text: &str) -> Result<cairn_types::PgId> {
    text.parse().map_err(|_| {
        anyhow::anyhow!("invalid PG id '{text}': use POOL.SEED with SEED in hex, e.g. 1.1f")
    })
}

pub fn image(ctx: &Context, cmd: ImageCmd) -> Result<()> {
    if let ImageCmd::Du { spec } = cmd {
        return crate::capacity::image_du(ctx, spec);
    }
    let json = ctx.json;
    let default_object_size = conf::load_client(ctx)?.client.image_default_object_size;
    cairn_client::image::watch::set_process_role(format!("cairn image {}", cmd.verb()));
    with_cluster(ctx, async move |cluster| {
        match cmd {
            ImageCmd::Create {
                image,
                size,
                object_size,
                image_feature,
            } => {
                let features = parse_features(&image_feature)?;
                let (pool, name) = split_image(&image)?;
                let size = size_arg(&size)?;
                let object_size = match object_size {
                    Some(text) => size_arg(&text)?,
                    None => default_object_size,
                };
                let info =
                    Image::create(&cluster, &pool, &name, size, object_size, features).await?;
                if json {
                    println!("{}", serde_json::to_string(&info)?);
                } else {
                    println!(
                        "created {pool}/{name}: {} ({} objects of {})",
                        format_size(info.size),
                        info.objects(),
                        format_size(info.object_size)
                    );
                }
            }
            ImageCmd::Ls { pool } => {
                let pool = pool.unwrap_or_else(|| "rbd".into());
                let names = Image::list(&cluster, &pool).await?;
                if json {
                    println!("{}", serde_json::to_string(&names)?);
                } else {
                    for name in names {
                        println!("{name}");
                    }
                }
            }
            ImageCmd::Info { image } => {
                let (pool, name) = split_image(&image)?;
                let info = Image::info(&cluster, &pool, &name).await?;
                if json {
                    println!("{}", serde_json::to_string(&info)?);
                } else {
                    println!("image {pool}/{name}");
                    println!("  id:          {}", info.id);
                    println!(
                        "  size:        {} ({} bytes)",
                        format_size(info.size),
                        info.size
                    );
                    println!("  object size: {}", format_size(info.object_size));
                    let features = if info.features.is_empty() {
                        "none".to_string()
                    } else {
                        info.features.join(",")
                    };
                    println!("  features:    {features}");
                    println!("  objects:     {}", info.objects());
                }
            }
            ImageCmd::Resize {
                image,
                size,
                allow_shrink,
                force,
            } => {
                let (pool, name) = split_image(&image)?;
                let policy = ShrinkPolicy {
                    allow_shrink,
                    force,
                };
                let info = Image::resize(&cluster, &pool, &name, size_arg(&size)?, policy).await?;
                if json {
                    println!("{}", serde_json::to_string(&info)?);
                } else {
                    println!("resized {pool}/{name} to {}", format_size(info.size));
                }
            }
            ImageCmd::Rm { image, force } => {
                let (pool, name) = split_image(&image)?;
                Image::remove(&cluster, &pool, &name, force).await?;
                if json {
                    println!("{}", serde_json::json!({ "removed": image }));
                } else {
                    println!("removed {pool}/{name}");
                }
            }
            ImageCmd::Lock {
                cmd: LockCmd::Ls { image },
            } => {
                let (pool, name) = split_image(&image)?;
                let holder = Image::lock_holder(&cluster, &pool, &name).await?;
                if json {
                    println!("{}", serde_json::json!({ "locker": holder }));
                } else {
                    match holder {
                        Some(h) => {
                            println!("locked by {} ({}), watch {}", h.client, h.desc, h.watch)
                        }
                        None => println!("not locked"),
                    }
                }
            }
            ImageCmd::Lock {
                cmd: LockCmd::Break { image },
            } => {
                let (pool, name) = split_image(&image)?;
                let holder = Image::break_lock(&cluster, &pool, &name).await?;
                if json {
                    println!("{}", serde_json::json!({ "broken": holder }));
                } else {
                    println!(
                        "fenced {} ({}) and removed the lock of {pool}/{name}",
                        holder.client, holder.desc
                    );
                }
            }
            ImageCmd::Du { .. } => anyhow::bail!("image du runs before this connection is made"),
            ImageCmd::Status { image } => {
                let (pool, name) = split_image(&image)?;
                let status = Image::status(&cluster, &pool, &name).await?;
                if json {
                    println!("{}", serde_json::to_string(&status)?);
                } else {
                    print_image_status(&pool, &name, &status);
                }
            }
        }
        Ok(())
    })
}
