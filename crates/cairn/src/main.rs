//! `cairn`: one binary for every role and admin task. It parses arguments,
//! loads the configuration and calls the library crates; nothing else lives
//! here. Every error is one line on stderr and a non-zero exit.

mod admin;
mod alloc;
mod bench;
mod bench_cpu;
mod bench_matrix;
mod bench_store;
mod capacity;
mod conf;
mod config_cli;
mod crush_cli;
mod daemons;
mod device_info;
mod local_cluster;
mod nbd;
mod osd_perf;
mod osd_store;
mod output;
mod pg_cli;
mod runtime_config;
mod tier_cli;
mod watch;

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
    /// Seconds an admin command may wait for the cluster before it fails
    /// naming what did not answer (default: client.command_timeout_ms;
    /// for `cluster up`, how long to wait for the cluster to be active,
    /// default 120).
    #[arg(long, global = true, value_name = "SECS")]
    timeout: Option<u64>,
    /// `cairn -w`: the status, then each change as it happens (as
    /// `cairn status -w`).
    #[arg(short = 'w', long = "watch")]
    watch: bool,
    #[command(subcommand)]
    command: Option<Command>,
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
    /// Cluster health, OSD and PG summary; `-w` then prints each change
    /// as it happens until interrupted.
    Status {
        #[arg(short = 'w', long = "watch")]
        watch: bool,
    },
    /// Raw space, and every pool's stored bytes, objects, space used with
    /// its copies, and room left.
    Df,
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
    /// Configuration: every option with its default and meaning, and
    /// options changed while the cluster runs (set, get, show).
    #[command(subcommand)]
    Config(conf::ConfigCmd),
    /// Send a command to one running daemon: `cairn tell osd.N config set
    /// KEY VALUE` (until it stops), `... config show [KEY]`.
    Tell {
        /// The daemon: osd.N.
        who: String,
        #[command(subcommand)]
        cmd: config_cli::TellCmd,
    },
}

/// What every command gets: where the cluster is and how to print.
pub struct Context {
    pub conf_path: Option<PathBuf>,
    pub mon_override: Option<String>,
    pub json: bool,
    /// `--timeout`, in seconds.
    pub timeout: Option<u64>,
}

/// A reader that went away (`cairn pg ls | head -2`) ends the command as it
/// ends `ls`: killed by SIGPIPE, silently. Rust ignores SIGPIPE so that
/// sockets report EPIPE; a failed print to stdout then panics, and this
/// hook turns that one panic back into the signal. Daemons never print
/// results to stdout, so their sockets keep the error.
fn die_quietly_on_a_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            // SAFETY: restoring a default disposition and raising a signal
            // at ourselves; nothing else runs in this process any more.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    alloc::tune();
    die_quietly_on_a_closed_stdout();
    let cli = Cli::parse();
    let json = cli.json;
    let ctx = Context {
        conf_path: cli.conf,
        mon_override: cli.mon,
        json: cli.json,
        timeout: cli.timeout,
    };
    let Some(command) = cli.command else {
        let result = if cli.watch {
            watch::watch(&ctx)
        } else {
            Err(anyhow::anyhow!(
                "no command given (try `cairn --help`, `cairn status` or `cairn -w`)"
            ))
        };
        return finish(result, json);
    };
    let result = match command {
        Command::Mon(args) => daemons::run_mon(&ctx, args),
        Command::Osd(args) => daemons::osd(&ctx, args),
        Command::Nbd(args) => nbd::run(&ctx, args),
        Command::Bench(args) => bench::run(&ctx, args),
        Command::Cluster(cmd) => local_cluster::run(&ctx, cmd),
        Command::Status { watch: true } => watch::watch(&ctx),
        Command::Status { watch: false } => admin::status(&ctx),
        Command::Df => capacity::df(&ctx),
        Command::Health { detail } => pg_cli::health(&ctx, detail.is_some()),
        Command::Pool(cmd) => admin::pool(&ctx, cmd),
        Command::Pg(cmd) => admin::pg(&ctx, cmd),
        Command::Image(cmd) => admin::image(&ctx, cmd),
        Command::Config(cmd) => conf::run(&ctx, cmd),
        Command::Tell { who, cmd } => config_cli::tell(&ctx, who, cmd),
    };
    finish(result, json)
}

/// The exit code of a command, its error printed as one line (JSON under
/// `--json`).
fn finish(result: anyhow::Result<()>, json: bool) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut text = format!("{e:#}");
            if let Some(first) = text.lines().next() {
                text = first.to_string();
            }
            if json {
                eprintln!("{}", serde_json::json!({ "error": text }));
            } else {
                eprintln!("cairn: error: {text}");
            }
            ExitCode::FAILURE
        }
    }
}
