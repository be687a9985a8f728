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
    /// Store an option in the monitor's database: running daemons of WHO
    /// apply it at once, and at every start, over their cairn.toml. WHO:
    /// global, mon, osd, osd.N or client. Only runtime options (see
    /// `config defaults`).
    Set {
        who: String,
        key: String,
        value: String,
    },
    /// The database's entries that apply to WHO (or KEY's).
    Get { who: String, key: Option<String> },
    /// Remove an entry: its daemons go back to their cairn.toml.
    Rm { who: String, key: String },
    /// Every entry of the database.
    Dump,
    /// The options a running daemon (osd.N or mon) uses, where each came
    /// from, and whether it can change without a restart.
    Show { who: String, key: Option<String> },
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

/// Options this process's command line set (`--timeout`): they win over
/// the configuration database.
static FLAG_OVERRIDES: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

fn flag_overrides() -> Vec<(String, String)> {
    FLAG_OVERRIDES.lock().map(|f| f.clone()).unwrap_or_default()
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
        if let Ok(mut flags) = FLAG_OVERRIDES.lock() {
            flags.push(("client.command_timeout_ms".to_string(), ms));
        }
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
                            "default": o.default_value(), "runtime": o.runtime, "doc": o.doc,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&options)?);
            } else {
                print!("{}", cairn_config::render_defaults());
            }
        }
        ConfigCmd::Set { who, key, value } => return crate::config_cli::set(ctx, who, key, value),
        ConfigCmd::Get { who, key } => return crate::config_cli::get(ctx, who, key),
        ConfigCmd::Rm { who, key } => return crate::config_cli::rm(ctx, who, key),
        ConfigCmd::Dump => return crate::config_cli::dump(ctx),
        ConfigCmd::Show { who, key } => return crate::config_cli::show(ctx, who, key),
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

/// The client options from a configuration; they follow the cluster's
/// configuration database, with this command line's flags winning.
pub fn client_options(config: &Config) -> cairn_client::ClientOptions {
    crate::runtime_config::following_client_options(config, flag_overrides(), false)
}

/// The client options of an admin command: its object ops, too, give up
/// after `client.command_timeout_ms` unless `client.op_timeout_ms` is set.
pub fn admin_client_options(config: &Config) -> cairn_client::ClientOptions {
    crate::runtime_config::following_client_options(config, flag_overrides(), true)
}

/// Set up logging for a command whose standard output is its result (a
/// benchmark's report): to standard error, `RUST_LOG` winning over `level`.
pub fn init_stderr_logging(level: &str) {
    init_logging(level);
}

/// Set up logging (see [`crate::runtime_config::init_logging`]).
pub fn init_logging(level: &str) {
    crate::runtime_config::init_logging(level);
}
