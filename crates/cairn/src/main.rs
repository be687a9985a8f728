//! `cairn`: one binary for every role and admin task. It parses arguments,
//! loads the configuration and calls the library crates; nothing else lives
//! here. Every error is one line on stderr and a non-zero exit.

/// mimalloc: per-thread heaps make the frees the store's threads do of
/// each other's allocations (batches, blocks, records) lock-free; glibc's
/// arenas contend on every one of them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin;
mod bench;
mod bench_matrix;
mod bench_store;
mod conf;
mod daemons;
mod local_cluster;
mod nbd;
mod osd_store;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cairn",
    version,
    about = "Cairn: distributed replicated block storage"
)]
struct Cli {
    /// Configuration file (default: $CAIRN_CONF, ./cairn.toml, ./cairn-cluster/cairn.toml).
    #[arg(short = 'c', long, global = true, value_name = "PATH")]
    conf: Option<PathBuf>,
    /// Override the monitor address from the configuration.
    #[arg(long, global = true, value_name = "ADDR")]
    mon: Option<String>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the monitor daemon.
    Mon(daemons::MonArgs),
    /// Run an OSD daemon (`cairn osd --id N --dir DIR`), or OSD admin commands.
    Osd(daemons::OsdArgs),
    /// Export an image over NBD.
    Nbd(nbd::NbdArgs),
    /// Load generator on the client library (no NBD in the path); `bench store`
    /// benchmarks one object store directly.
    Bench(bench::BenchArgs),
    /// Start, inspect and stop a local cluster on this machine.
    #[command(subcommand)]
    Cluster(local_cluster::ClusterCmd),
    /// Cluster health, OSD and PG summary.
    Status,
    /// Pools: create, list, remove.
    #[command(subcommand)]
    Pool(admin::PoolCmd),
    /// Placement groups.
    #[command(subcommand)]
    Pg(admin::PgCmd),
    /// Images (virtual disks): create, list, info, resize, remove.
    #[command(subcommand)]
    Image(admin::ImageCmd),
    /// Configuration: list every option with its default and meaning.
    #[command(subcommand)]
    Config(conf::ConfigCmd),
}

/// What every command gets: where the cluster is and how to print.
pub struct Context {
    pub conf_path: Option<PathBuf>,
    pub mon_override: Option<String>,
    pub json: bool,
}

/// Keep glibc's malloc from holding on to freed memory: bound its
/// per-thread arenas (each would keep what its thread freed), and serve
/// buffers of 256 KiB and more (object data in flight) from mmap, returned
/// to the system when freed, instead of letting the heap's high-water mark
/// stay resident. Without this an OSD's memory grows far past its caches.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables; called before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

fn main() -> ExitCode {
    tune_malloc();
    let cli = Cli::parse();
    let ctx = Context {
        conf_path: cli.conf,
        mon_override: cli.mon,
        json: cli.json,
    };
    let result = match cli.command {
        Command::Mon(args) => daemons::run_mon(&ctx, args),
        Command::Osd(args) => daemons::osd(&ctx, args),
        Command::Nbd(args) => nbd::run(&ctx, args),
        Command::Bench(args) => bench::run(&ctx, args),
        Command::Cluster(cmd) => local_cluster::run(&ctx, cmd),
        Command::Status => admin::status(&ctx),
        Command::Pool(cmd) => admin::pool(&ctx, cmd),
        Command::Pg(cmd) => admin::pg(&ctx, cmd),
        Command::Image(cmd) => admin::image(&ctx, cmd),
        Command::Config(cmd) => conf::run(&ctx, cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut text = format!("{e:#}");
            if let Some(first) = text.lines().next() {
                text = first.to_string();
            }
            eprintln!("cairn: error: {text}");
            ExitCode::FAILURE
        }
    }
}
