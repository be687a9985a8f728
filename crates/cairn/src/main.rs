//! `cairn`: one binary for every role and admin task. It parses arguments,
//! loads the configuration and calls the library crates; nothing else lives
//! here. Every error is one line on stderr and a non-zero exit.

mod admin;
mod alloc;
mod bench;
mod bench_cpu;
mod bench_matrix;
mod bench_store;
mod conf;
mod crush_cli;
mod daemons;
mod device_info;
mod local_cluster;
mod nbd;
mod osd_store;
mod output;
mod pg_cli;

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
    /// Health checks; `cairn health detail` lists what each concerns.
    Health {
        /// `detail`: list the PGs, OSDs and objects of each check.
        #[arg(value_parser = ["detail"])]
        detail: Option<String>,
    },
    /// Pools: create, list, change, remove.
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

fn main() -> ExitCode {
    alloc::tune();
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
        Command::Health { detail } => pg_cli::health(&ctx, detail.is_some()),
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
