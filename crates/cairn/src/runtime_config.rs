//! Runtime configuration, on the binary's side: the option schema the
//! monitor, OSDs and clients are given (they know no option themselves),
//! the translation of options into each one's settings, and the log level
//! that changes while a daemon runs.
//!
//! A daemon keeps its `cairn.toml` as read at start; each change of the
//! map's configuration database, or a `tell`, resolves it again
//! ([`cairn_config::central::resolve`]) and hands the result on.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Result;
use cairn_config::central::{self, Who};
use cairn_config::{Config, MonConfig, OsdConfig};
use cairn_map::ConfigDb;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

// ------------------------------------------------------------------ logging

/// The handle that changes the running log level, once logging is set up.
static LOG_FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// The level last applied, so an unchanged one is not reloaded.
static LOG_LEVEL: Mutex<String> = Mutex::new(String::new());

/// Set up logging: to standard error (stdout is for results: `cairn nbd`
/// prints its URI there), in colour only when that is a terminal (a log
/// file gets plain text), `RUST_LOG` winning over the configured level
/// until the level is changed at runtime.
pub fn init_logging(level: &str) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .is_ok()
    {
        let _ = LOG_FILTER.set(handle);
        if let Ok(mut current) = LOG_LEVEL.lock() {
            *current = level.to_string();
        }
    }
}

/// Change the running log level (`global.log_level`, already validated).
fn set_log_level(level: &str) {
    let Ok(mut current) = LOG_LEVEL.lock() else {
        return;
    };
    if *current == level {
        return;
    }
    if let Some(handle) = LOG_FILTER.get() {
        match handle.reload(EnvFilter::new(level)) {
            Ok(()) => {
                tracing::info!("log level now {level}");
                *current = level.to_string();
            }
            Err(e) => tracing::warn!("cannot change the log level to {level}: {e}"),
        }
    }
}

// ------------------------------------------------------------- translation

/// The monitor's settings from its options.
pub fn mon_options(m: &MonConfig) -> Result<cairn_mon::MonOptions> {
    Ok(cairn_mon::MonOptions {
        heartbeat_grace: Duration::from_millis(m.osd_heartbeat_grace_ms),
        min_down_reporters: m.osd_min_down_reporters,
        reporter_subtree_level: m.osd_reporter_subtree_level.clone(),
        down_on_disconnect: m.osd_down_on_disconnect,
        down_out_interval: (m.osd_down_out_interval_s > 0)
            .then(|| Duration::from_secs(m.osd_down_out_interval_s)),
        pg_temp_batch: Duration::from_millis(m.pg_temp_batch_ms),
        pool_default_pg_num: m.pool_default_pg_num,
        pool_default_size: m.pool_default_size,
        pool_default_min_size: m.pool_default_min_size,
        crush_bucket_types: m
            .crush_bucket_types
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        crush_chooseleaf_type: m.osd_crush_chooseleaf_type.clone(),
        full_ratios: cairn_map::FullRatios::new(
            m.osd_nearfull_ratio.get(),
            m.osd_backfillfull_ratio.get(),
            m.osd_full_ratio.get(),
        )?,
    })
}

/// The OSD core's settings from an OSD's options.
pub fn core_options(o: &OsdConfig) -> cairn_osd::CoreOptions {
    cairn_osd::CoreOptions {
        pg_log_max_entries: o.pg_log_max_entries as usize,
        recovery_max_active: o.recovery_max_active as usize,
        recovery_sleep: Duration::from_millis(o.recovery_sleep_ms),
        recovery_sleep_busy: Duration::from_millis(o.recovery_sleep_busy_ms),
        recovery_sleep_busy_max: Duration::from_millis(o.recovery_sleep_busy_max_ms),
        recovery_slowdown_pct: o.recovery_slowdown_pct,
        max_backfills: o.max_backfills as usize,
        peering_retry: Duration::from_millis(o.peering_retry_ms),
        scrub_interval: Duration::from_secs(o.scrub_interval_s),
        deep_scrub_interval: Duration::from_secs(o.deep_scrub_interval_s),
        max_scrubs: o.max_scrubs as usize,
        op_complaint_time: Duration::from_millis(o.op_complaint_time_ms),
        planted_bug: None,
    }
}

/// A client's settings from its options; an admin command's object ops
/// also give up after `client.command_timeout_ms` unless
/// `client.op_timeout_ms` is set.
pub fn client_options(config: &Config, admin: bool) -> cairn_client::ClientOptions {
    let ms = |v: u64| (v > 0).then(|| Duration::from_millis(v));
    let command_timeout = Duration::from_millis(config.client.command_timeout_ms);
    let mut op_timeout = ms(config.client.op_timeout_ms);
    if admin {
        op_timeout.get_or_insert(command_timeout);
    }
    cairn_client::ClientOptions {
        mon_addr: config.global.mon_addr.clone(),
        op_timeout,
        op_complaint_time: ms(config.client.op_complaint_time_ms),
        watch_timeout: Duration::from_millis(config.client.watch_timeout_ms),
        command_timeout,
        reconfigure: None,
    }
}

/// [`client_options`] that follow the configuration database: `file` is
/// the client's configuration, `flags` what its command line set (which
/// wins over the database).
pub fn following_client_options(
    file: &Config,
    flags: Vec<(String, String)>,
    admin: bool,
) -> cairn_client::ClientOptions {
    let mut opts = client_options(file, admin);
    let file = file.clone();
    opts.reconfigure = Some(cairn_client::Reconfigure(Arc::new(move |db: &ConfigDb| {
        let resolved = central::resolve(&file, Who::Client, db.entries(), &flags);
        for w in &resolved.warnings {
            tracing::warn!("{w}");
        }
        client_options(&resolved.config, admin)
    })));
    opts
}

// ------------------------------------------------------------------ daemons

/// The option schema as the monitor sees it.
pub struct MonSchema {
    /// `cairn.toml` as the monitor read it at start.
    pub file: Config,
}

impl cairn_mon::ConfigSchema for MonSchema {
    fn check(
        &self,
        db: &ConfigDb,
        who: &str,
        key: &str,
        value: &str,
    ) -> Result<(String, String, String), String> {
        let entry =
            central::check_entry(who, key, value, db.entries()).map_err(|e| e.to_string())?;
        Ok((entry.who, entry.key, entry.value))
    }

    fn apply(&self, db: &ConfigDb) -> (cairn_mon::MonOptions, Vec<String>) {
        let resolved = central::resolve(&self.file, Who::Mon, db.entries(), &[]);
        let mut warnings = resolved.warnings;
        set_log_level(&resolved.config.global.log_level);
        let opts = mon_options(&resolved.config.mon)
            .or_else(|e| {
                warnings.push(format!("configuration database not applied: {e}"));
                mon_options(&self.file.mon)
            })
            .unwrap_or_default();
        (opts, warnings)
    }

    fn show(&self, db: &ConfigDb) -> serde_json::Value {
        let resolved = central::resolve(&self.file, Who::Mon, db.entries(), &[]);
        json!(resolved.show(Who::Mon))
    }
}

/// The option schema as one OSD sees it, with its `tell` overrides.
pub struct OsdSchema {
    pub id: u32,
    /// `cairn.toml` (with `--set` and flags) as the OSD read it at start.
    pub file: Config,
    pub overrides: Mutex<Vec<(String, String)>>,
}

impl OsdSchema {
    fn who(&self) -> Who {
        Who::OsdId(self.id)
    }

    fn overrides(&self) -> Vec<(String, String)> {
        self.overrides.lock().map(|o| o.clone()).unwrap_or_default()
    }
}

impl cairn_osd::ConfigHook for OsdSchema {
    fn apply(&self, db: &ConfigDb) -> cairn_osd::CoreOptions {
        let resolved = central::resolve(&self.file, self.who(), db.entries(), &self.overrides());
        for w in &resolved.warnings {
            tracing::warn!("osd.{}: {w}", self.id);
        }
        set_log_level(&resolved.config.global.log_level);
        core_options(&resolved.config.osd)
    }

    fn tell_set(
        &self,
        db: &ConfigDb,
        key: &str,
        value: &str,
    ) -> Result<(cairn_osd::CoreOptions, String), String> {
        let who = self.who().to_string();
        let entry = central::check_entry(&who, key, value, db.entries()).map_err(|e| {
            e.to_string()
                .replacen("config set", &format!("tell {who}"), 1)
        })?;
        // Held from read to write, so two `tell`s cannot lose one another.
        let mut kept = self
            .overrides
            .lock()
            .map_err(|_| format!("tell {who}: the override list was poisoned"))?;
        let mut overrides = kept.clone();
        overrides.retain(|(k, _)| *k != entry.key);
        overrides.push((entry.key.clone(), entry.value.clone()));
        let resolved = central::resolve(&self.file, self.who(), db.entries(), &overrides);
        let prefix = format!("override {}=", entry.key);
        if let Some(w) = resolved.warnings.iter().find(|w| w.starts_with(&prefix)) {
            return Err(format!("tell {who}: {w}"));
        }
        *kept = overrides;
        drop(kept);
        tracing::info!("osd.{}: {} = {} (tell)", self.id, entry.key, entry.value);
        set_log_level(&resolved.config.global.log_level);
        let running = resolved.config.value(&entry.key);
        let reply = json!({ "osd": self.id, "key": entry.key, "value": running });
        Ok((core_options(&resolved.config.osd), reply.to_string()))
    }

    fn show(&self, db: &ConfigDb) -> String {
        let resolved = central::resolve(&self.file, self.who(), db.entries(), &self.overrides());
        json!(resolved.show(self.who())).to_string()
    }
}
