//! Finding and loading `cairn.toml`, and `cairn config`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use cairn_config::Config;
use clap::Subcommand;

use crate::Context;

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print every option with its default and documentation, as a TOML file.
    Defaults,
    /// Validate a configuration file (the one found by --conf or the default search).
    Check,
}

/// Where the configuration is: `--conf`, `$CAIRN_CONF`, `./cairn.toml`,
/// `./cairn-cluster/cairn.toml`, in that order; `None` means defaults.
pub fn find(ctx: &Context) -> Option<PathBuf> {
    if let Some(path) = &ctx.conf_path {
        return Some(path.clone());
    }
    if let Some(path) = std::env::var_os("CAIRN_CONF") {
        return Some(PathBuf::from(path));
    }
    ["cairn.toml", "cairn-cluster/cairn.toml"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Load the configuration (defaults if there is none) and apply `--mon`.
pub fn load(ctx: &Context) -> Result<Config> {
    let config = match find(ctx) {
        Some(path) => load_file(&path)?,
        None => Config::default(),
    };
    apply_flags(ctx, config)
}

/// Load the configuration for a client or admin command: a mistake in a
/// daemon's section is a warning on stderr (the daemon itself refuses to
/// start on it), not a reason to refuse `cairn status`.
pub fn load_client(ctx: &Context) -> Result<Config> {
    let config = match find(ctx) {
        Some(path) if path.exists() => {
            let (config, warnings) = Config::load_for_client(&path)?;
            for w in warnings {
                eprintln!("cairn: warning: {w} (not used by this command; daemons refuse it)");
            }
            config
        }
        Some(path) => load_file(&path)?,
        None => Config::default(),
    };
    apply_flags(ctx, config)
}

/// Apply `--mon` and `--timeout`.
fn apply_flags(ctx: &Context, mut config: Config) -> Result<Config> {
    if let Some(mon) = &ctx.mon_override {
        config.set("global.mon_addr", mon).context("--mon")?;
    }
    if let Some(secs) = ctx.timeout {
        let ms = secs.saturating_mul(1000).to_string();
        config
            .set("client.command_timeout_ms", &ms)
            .context("--timeout")?;
    }
    Ok(config)
}

pub fn load_file(path: &Path) -> Result<Config> {
    if !path.exists() {
        anyhow::bail!("configuration file {} does not exist", path.display());
    }
    Ok(Config::load(path)?)
}

pub fn run(ctx: &Context, cmd: ConfigCmd) -> Result<()> {
    match cmd {
        ConfigCmd::Defaults => {
            if ctx.json {
                let options: Vec<serde_json::Value> = cairn_config::options()
                    .iter()
                    .map(|o| {
                        serde_json::json!({
                            "section": o.section, "name": o.name, "type": o.kind,
                            "default": o.default_value(), "doc": o.doc,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&options)?);
            } else {
                print!("{}", cairn_config::render_defaults());
            }
        }
        ConfigCmd::Check => {
            let path = find(ctx).context("no configuration file found (use --conf PATH)")?;
            load_file(&path)?;
            if ctx.json {
                println!("{}", serde_json::json!({ "path": path, "ok": true }));
            } else {
                println!("{}: ok", path.display());
            }
        }
    }
    Ok(())
}

/// The client options from a configuration.
pub fn client_options(config: &Config) -> cairn_client::ClientOptions {
    let ms = |v: u64| (v > 0).then(|| std::time::Duration::from_millis(v));
    cairn_client::ClientOptions {
        mon_addr: config.global.mon_addr.clone(),
        op_timeout: ms(config.client.op_timeout_ms),
        op_complaint_time: ms(config.client.op_complaint_time_ms),
        watch_timeout: std::time::Duration::from_millis(config.client.watch_timeout_ms),
        command_timeout: std::time::Duration::from_millis(config.client.command_timeout_ms),
    }
}

/// The client options of an admin command: its object ops, too, give up
/// after `client.command_timeout_ms` unless `client.op_timeout_ms` is set.
pub fn admin_client_options(config: &Config) -> cairn_client::ClientOptions {
    let mut opts = client_options(config);
    opts.op_timeout.get_or_insert(opts.command_timeout);
    opts
}

/// Set up logging for a command whose standard output is its result (a
/// benchmark's report): to standard error, `RUST_LOG` winning over `level`.
pub fn init_stderr_logging(level: &str) {
    init_logging(level);
}

/// Set up logging: to standard error (stdout is for results: `cairn nbd`
/// prints its URI there), in colour only when that is a terminal (a log
/// file gets plain text), `RUST_LOG` winning over the configured level.
pub fn init_logging(level: &str) {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(log_filter(level))
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn log_filter(level: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level))
}
