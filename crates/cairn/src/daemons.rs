//! `cairn mon` and `cairn osd`: run the daemons; also `cairn osd
//! mkfs|fsck|perf|ls|dump|out|in|down`, and `cairn osd tree|crush` (in
//! `crush_cli`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use cairn_config::Config;
use cairn_store::ObjectStore;
use cairn_wire::MonCommand;
use clap::{Args, Subcommand};

use crate::{admin, conf, crush_cli, device_info, osd_store, runtime_config, Context};

#[derive(Args)]
pub struct MonArgs {
    /// Directory for the monitor's store.
    #[arg(long)]
    dir: PathBuf,
    /// Override an option, e.g. `--set mon.osd_heartbeat_grace_ms=3000` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OsdArgs {
    #[command(subcommand)]
    cmd: Option<OsdCmd>,
    /// The OSD's id.
    #[arg(long)]
    id: Option<u32>,
    /// Directory for the OSD's data.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Object store backend (overrides `osd.store`).
    #[arg(long, value_name = "bluestore|filestore|memstore")]
    store: Option<String>,
    /// Where the OSD is in the CRUSH hierarchy, e.g. `"host=h1 rack=r1"`
    /// (overrides `osd.crush_location`).
    #[arg(long, value_name = "TYPE=NAME ...")]
    crush_location: Option<String>,
    /// Override an option, e.g. `--set osd.heartbeat_interval_ms=500` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Subcommand)]
pub enum OsdCmd {
    /// Make an OSD's object store.
    Mkfs(MkfsArgs),
    /// Check an OSD's BlueStore (the OSD must not be running).
    Fsck(FsckArgs),
    /// A running OSD's object-store performance counters.
    Perf {
        /// One OSD's every counter; without it, a line per OSD with its
        /// commit latency, transactions, client ops in flight and CPU.
        id: Option<u32>,
    },
    /// List OSDs with their state.
    Ls,
    /// The map's OSDs with their public and cluster addresses, state and
    /// CRUSH location, then pools and pg_temp.
    Dump,
    /// Mark an OSD out: its PGs move elsewhere.
    Out { id: u32 },
    /// Mark an OSD in.
    In { id: u32 },
    /// Mark an OSD down (it re-boots if alive).
    Down { id: u32 },
    /// Declare a down OSD's data lost, so PGs waiting for it go on with
    /// what the other OSDs hold (acknowledged writes only it held are gone).
    Lost {
        id: u32,
        /// Confirm that writes only this OSD held may be lost.
        #[arg(long)]
        yes_i_really_mean_it: bool,
    },
    /// The CRUSH hierarchy with every OSD's weight, class and state.
    Tree,
    /// Every OSD's size, use, room and PG copies.
    Df,
    /// Change the CRUSH hierarchy and rules.
    #[command(subcommand)]
    Crush(crush_cli::CrushCmd),
    /// Clients fenced off the cluster (a broken or taken-over image lock).
    #[command(subcommand)]
    Blocklist(BlocklistCmd),
    /// Cache tiering: a fast pool as a cache over a slow one.
    #[command(subcommand)]
    Tier(crate::tier_cli::TierCmd),
}

#[derive(Subcommand)]
pub enum BlocklistCmd {
    /// Every fenced client, why, and when its entry expires.
    Ls,
    /// Let a fenced client back in: `client.<16 hex digits>`.
    Rm { client: String },
}

/// `client.0123456789abcdef` (or the bare hex) as a client id.
fn client_arg(text: &str) -> Result<u64> {
    let hex = text.strip_prefix("client.").unwrap_or(text);
    u64::from_str_radix(hex, 16).map_err(|_| {
        anyhow::anyhow!(
            "invalid client '{text}': expected client.<hex id> as `osd blocklist ls` shows"
        )
    })
}

#[derive(Args)]
pub struct MkfsArgs {
    /// The OSD's id (selects `[osd.N]` options).
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Directory for the OSD's data.
    #[arg(long)]
    dir: PathBuf,
    /// Object store backend (default: `osd.store`).
    #[arg(long, value_name = "bluestore|filestore|memory")]
    store: Option<String>,
    /// BlueStore data device: a block device or file (created, preallocated,
    /// if missing). Default: `block` in the directory.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// BlueStore: RocksDB directory, e.g. on a faster device.
    #[arg(long, value_name = "PATH")]
    db_path: Option<PathBuf>,
    /// BlueStore: RocksDB write-ahead log directory.
    #[arg(long, value_name = "PATH")]
    wal_path: Option<PathBuf>,
    /// BlueStore: size of a new device file (default `osd.bluestore_block_size`).
    #[arg(long)]
    size: Option<String>,
    /// Overwrite an existing store.
    #[arg(long)]
    force: bool,
    /// Override an option, e.g. `--set osd.bluestore_min_alloc_size=65536` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(Args)]
pub struct FsckArgs {
    /// The OSD's id (selects `[osd.N]` options).
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Directory of the OSD's data.
    #[arg(long)]
    dir: PathBuf,
    /// Also read every stored block and verify its checksum.
    #[arg(long)]
    deep: bool,
    /// Return leaked space to the free list.
    #[arg(long)]
    repair: bool,
    /// Override an option (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

/// `memory` is accepted for `memstore`, as the CLI has always said.
fn store_word(word: &str) -> &str {
    if word == "memory" {
        "memstore"
    } else {
        word
    }
}

/// An async runtime: one thread runs everything (no cross-thread wakeups,
/// the fastest per core), more threads use a work-stealing pool.
pub fn runtime(threads: u32) -> Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads as usize);
        b
    };
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn load_with_overrides(ctx: &Context, set: &[String]) -> Result<Config> {
    let mut config = conf::load(ctx)?;
    config.set_args(set)?;
    Ok(config)
}

pub fn run_mon(ctx: &Context, args: MonArgs) -> Result<()> {
    let config = load_with_overrides(ctx, &args.set)?;
    runtime_config::init_logging(&config.global.log_level);
    let opts = runtime_config::mon_options(&config.mon)?;
    let rt = runtime(1)?;
    rt.block_on(async {
        let mon = cairn_mon::Monitor::open(&args.dir, opts)?;
        mon.install_config(Arc::new(runtime_config::MonSchema {
            file: config.clone(),
        }));
        let listener = cairn_mon::Monitor::bind(&config.global.mon_addr).await?;
        tracing::info!("monitor listening on {}", config.global.mon_addr);
        tokio::select! {
            r = mon.serve(listener) => r.context("monitor stopped")?,
            _ = shutdown_signal() => tracing::info!("monitor shutting down"),
        }
        Ok(())
    })
}

pub fn osd(ctx: &Context, args: OsdArgs) -> Result<()> {
    if let Some(cmd) = args.cmd {
        return osd_admin(ctx, cmd);
    }
    let id = args
        .id
        .context("missing --id (or a subcommand: ls, out, in, down)")?;
    let dir = args.dir.context("missing --dir")?;
    let mut config = load_with_overrides(ctx, &args.set)?;
    if let Some(store) = &args.store {
        config
            .set(&format!("osd.{id}.store"), store_word(store))
            .context("--store")?;
    }
    if let Some(location) = &args.crush_location {
        config
            .set(&format!("osd.{id}.crush_location"), location)
            .context("--crush-location")?;
    }
    let osd_conf = config.osd_for(id);
    runtime_config::init_logging(&config.global.log_level);
    let store: Arc<dyn ObjectStore> = osd_store::open(&dir, &osd_conf)?;
    let crush = device_info::report(&dir, &osd_conf)?;
    let opts = cairn_osd::OsdOptions {
        id,
        mon_addr: config.global.mon_addr.clone(),
        heartbeat_interval: Duration::from_millis(osd_conf.heartbeat_interval_ms),
        heartbeat_grace: Duration::from_millis(config.mon.osd_heartbeat_grace_ms),
        fsid_file: Some(dir.join("fsid")),
        crush,
        boot_catch_up: Duration::from_millis(osd_conf.boot_catch_up_ms),
        client_limits: cairn_osd::ClientLimits {
            ops_per_connection: osd_conf.client_message_cap as usize,
            bytes: osd_conf.client_message_size_cap,
            ops: osd_conf.client_ops_max as usize,
        },
        core: runtime_config::core_options(&osd_conf),
    };
    let addrs = osd_conf
        .addrs()
        .map_err(|(key, reason)| anyhow::anyhow!("osd.{key}: {reason}"))?;
    let rt = runtime(osd_conf.worker_threads)?;
    rt.block_on(async {
        if osd_conf.bluestore_loop_commits {
            match store.attach_to_loop() {
                Ok(true) => tracing::debug!("osd.{id}: commits run on the event loop"),
                Ok(false) => {}
                Err(e) => tracing::warn!("osd.{id}: commits stay on the store's threads: {e}"),
            }
        }
        let (osd, listeners) =
            cairn_osd::Osd::bind(opts, store, addrs.public, addrs.cluster).await?;
        osd.install_config(Arc::new(runtime_config::OsdSchema {
            id,
            file: config.clone(),
            overrides: std::sync::Mutex::new(Vec::new()),
        }));
        let (public, cluster) = osd.addrs();
        tracing::info!("osd.{id} listening on {public} (public) and {cluster} (cluster)");
        tokio::select! {
            r = osd.serve(listeners) => r.context("osd stopped")?,
            _ = shutdown_signal() => tracing::info!("osd.{id} shutting down"),
        }
        Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn osd_mkfs(ctx: &Context, args: MkfsArgs) -> Result<()> {
    let mut config = load_with_overrides(ctx, &args.set)?;
    if let Some(store) = &args.store {
        config
            .set(&format!("osd.{}.store", args.id), store_word(store))
            .context("--store")?;
    }
    let osd_conf = config.osd_for(args.id);
    let size = args.size.as_deref().map(admin::size_arg).transpose()?;
    let req = osd_store::MkfsRequest {
        device: args.device,
        db_path: args.db_path,
        wal_path: args.wal_path,
        size,
        force: args.force,
    };
    let made = osd_store::mkfs(&args.dir, osd_conf.store, &osd_conf, &req)?;
    if ctx.json {
        println!("{}", serde_json::json!({ "dir": args.dir, "made": made }));
    } else {
        println!("made {made}");
    }
    Ok(())
}

fn osd_fsck(ctx: &Context, args: FsckArgs) -> Result<()> {
    let config = load_with_overrides(ctx, &args.set)?;
    let osd_conf = config.osd_for(args.id);
    let report = osd_store::fsck(&args.dir, &osd_conf, args.deep, args.repair)?;
    if ctx.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "objects {}  blobs {}  used {}  free {}  leaked {}  repaired {}",
            report.objects,
            report.blobs,
            report.used_bytes,
            report.free_bytes,
            report.leaked_bytes,
            report.repaired_bytes
        );
        for e in &report.errors {
            println!("error: {e}");
        }
    }
    let clean = report.errors.is_empty() && report.leaked_bytes == report.repaired_bytes;
    if !clean {
        anyhow::bail!(
            "{}: {} errors, {} bytes leaked",
            args.dir.display(),
            report.errors.len(),
            report.leaked_bytes - report.repaired_bytes
        );
    }
    Ok(())
}

/// What a state-changing OSD command did, for people.
fn describe(cmd: &MonCommand) -> String {
    match cmd {
        MonCommand::OsdOut { id } => format!("marked osd.{id} out"),
        MonCommand::OsdIn { id } => format!("marked osd.{id} in"),
        MonCommand::OsdDown { id } => format!("marked osd.{id} down"),
        MonCommand::OsdLost { id } => format!("marked osd.{id} lost"),
        MonCommand::BlocklistRm { client } => {
            format!("removed client.{client:016x} from the blocklist")
        }
        _ => String::new(),
    }
}

fn osd_admin(ctx: &Context, cmd: OsdCmd) -> Result<()> {
    let mon_cmd = match cmd {
        OsdCmd::Mkfs(args) => return osd_mkfs(ctx, args),
        OsdCmd::Fsck(args) => return osd_fsck(ctx, args),
        OsdCmd::Perf { id: Some(id) } => return crate::osd_perf::osd_perf(ctx, id),
        OsdCmd::Perf { id: None } => return crate::osd_perf::osd_perf_all(ctx),
        OsdCmd::Ls => MonCommand::OsdLs,
        OsdCmd::Dump => MonCommand::OsdDump,
        OsdCmd::Out { id } => MonCommand::OsdOut { id },
        OsdCmd::In { id } => MonCommand::OsdIn { id },
        OsdCmd::Down { id } => MonCommand::OsdDown { id },
        OsdCmd::Lost {
            id,
            yes_i_really_mean_it,
        } => {
            if !yes_i_really_mean_it {
                anyhow::bail!(
                    "marking osd.{id} lost gives up every write only it holds; repeat with --yes-i-really-mean-it"
                );
            }
            MonCommand::OsdLost { id }
        }
        OsdCmd::Tree => return crush_cli::tree(ctx),
        OsdCmd::Df => return crate::capacity::osd_df(ctx),
        OsdCmd::Crush(cmd) => return crush_cli::run(ctx, cmd),
        OsdCmd::Tier(cmd) => return crate::tier_cli::run(ctx, cmd),
        OsdCmd::Blocklist(BlocklistCmd::Ls) => MonCommand::BlocklistLs,
        OsdCmd::Blocklist(BlocklistCmd::Rm { client }) => MonCommand::BlocklistRm {
            client: client_arg(&client)?,
        },
    };
    let text = describe(&mon_cmd);
    let value = admin::mon_command(ctx, mon_cmd.clone())?;
    if ctx.json {
        println!("{value}");
        return Ok(());
    }
    match mon_cmd {
        MonCommand::OsdLs => crate::output::print_osds(&value),
        MonCommand::OsdDump => crate::output::print_osd_dump(&value),
        MonCommand::BlocklistLs => crate::output::print_blocklist(&value),
        _ => println!("{text}"),
    }
    Ok(())
}
