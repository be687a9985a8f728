//! Typed Cairn configuration from one TOML file, `cairn.toml`.
//!
//! This crate owns the list of configuration options — their names, types,
//! defaults, valid ranges and documentation — and reading them from
//! `cairn.toml` plus command-line overrides (`osd.heartbeat_interval_ms=500`,
//! `osd.3.store=memstore`). Sections are `[global]`, `[mon]`, `[osd]`,
//! `[client]`, and `[osd.N]` holding `[osd]` options for OSD `N` only.
//!
//! It must never silently fall back: an unknown section, an unknown option or
//! a bad value is an error naming the option. It does no I/O beyond reading
//! the file it is asked to load, holds no global state, and knows nothing of
//! the daemons that use the values.
//!
//! Every option is declared once (in `options.rs`) with its type, default,
//! validation and doc; [`options`] and [`render_defaults`] derive from that.

pub mod central;
mod crush;
mod error;
mod options;
mod render;
mod values;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Serialize, Serializer};
use toml::{Table, Value};

pub use error::ConfigError;
pub use options::{
    options, ClientConfig, GlobalConfig, MonConfig, OptionDoc, OsdBindAddrs, OsdConfig, LOG_LEVELS,
    OBJECT_SIZE_RANGE,
};
pub use render::render_defaults;
pub use values::{
    ChecksumKind, CompressionAlgorithmKind, CompressionModeKind, IoEngineKind, Ratio, StoreKind,
};

use options::{describe, FieldError, Raw, Section};

/// Origin named in errors from [`Config::parse`].
const PARSE_ORIGIN: &str = "cairn.toml";
/// Origin named in errors from [`Config::set`] and [`Config::set_all`].
const SET_ORIGIN: &str = "override";

/// The complete configuration: one struct per section plus `[osd.N]`
/// overrides (read them through [`Config::osd_for`]).
///
/// Serializes to the same tables as `cairn.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `[global]`.
    pub global: GlobalConfig,
    /// `[mon]`.
    pub mon: MonConfig,
    /// `[osd]`: defaults for every OSD.
    pub osd: OsdConfig,
    /// `[client]`.
    pub client: ClientConfig,
    /// `[osd.N]`: the options set explicitly for OSD `N`.
    osd_overrides: BTreeMap<u32, OsdOverride>,
}

/// The options set in one `[osd.N]` section: `values` holds them at the
/// fields named in `keys` (other fields are unused).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct OsdOverride {
    values: OsdConfig,
    keys: BTreeSet<&'static str>,
}

impl Config {
    /// Reads and validates the configuration file at `path`. Options missing
    /// from the file keep their defaults. Errors name the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::parse_from(&read(path)?, &path.display().to_string())
    }

    /// Parses and validates configuration text (errors say `cairn.toml`).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Self::parse_from(text, PARSE_ORIGIN)
    }

    fn parse_from(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let table = parse_table(text, origin)?;
        let mut config = Config::default();
        for (name, value) in &table {
            config.apply_section(name, value, origin)?;
        }
        config.validate_from(origin)?;
        Ok(config)
    }

    /// Like [`Config::load`], for a client or admin command: `[global]` and
    /// `[client]` must be valid, but an error in a daemon's section (or an
    /// unknown section) does not stop the command. That section is left at
    /// its defaults and the error comes back as a warning to show.
    pub fn load_for_client(path: &Path) -> Result<(Config, Vec<ConfigError>), ConfigError> {
        let origin = path.display().to_string();
        let table = parse_table(&read(path)?, &origin)?;
        let mut config = Config::default();
        let mut warnings = Vec::new();
        for (name, value) in &table {
            if matches!(name.as_str(), "global" | "client") {
                config.apply_section(name, value, &origin)?;
                continue;
            }
            let mut trial = config.clone();
            match trial.apply_section(name, value, &origin) {
                Ok(()) => config = trial,
                Err(e) => warnings.push(e),
            }
        }
        if let Err(e) = config.validate_from(&origin) {
            // A daemon section's values that do not fit together: the
            // client does not use them.
            check_section(&config.global, &origin)?;
            check_section(&config.client, &origin)?;
            warnings.push(e);
            config.mon = MonConfig::default();
            config.osd = OsdConfig::default();
            config.osd_overrides.clear();
            config.validate_from(&origin)?;
        }
        Ok((config, warnings))
    }

    /// Apply one top-level entry of the file: a section.
    fn apply_section(
        &mut self,
        name: &str,
        value: &Value,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let Value::Table(section) = value else {
            return Err(if is_section(name) {
                invalid(
                    origin,
                    name,
                    format!("expected a section, got {}", describe(value)),
                )
            } else {
                ConfigError::OutsideSection {
                    origin: origin.to_string(),
                    key: name.to_string(),
                }
            });
        };
        match name {
            "global" => load_section(&mut self.global, section, origin),
            "mon" => load_section(&mut self.mon, section, origin),
            "client" => load_section(&mut self.client, section, origin),
            "osd" => self.load_osd_section(section, origin),
            _ => Err(unknown_section(origin, name)),
        }
    }

    /// Loads `[osd]`: its options, and its `N` subtables as `[osd.N]`.
    fn load_osd_section(&mut self, section: &Table, origin: &str) -> Result<(), ConfigError> {
        for (key, value) in section {
            match (value, osd_id(key)) {
                (Value::Table(sub), Some(id)) => {
                    let entry = self.osd_overrides.entry(id).or_default();
                    for (k, v) in sub {
                        let full = format!("osd.{id}.{k}");
                        if let Value::Table(_) = v {
                            if !OsdConfig::KEYS.contains(&k.as_str()) {
                                return Err(unknown_section(origin, &full));
                            }
                        }
                        entry.set(k, Raw::Toml(v), &full, origin)?;
                    }
                }
                _ => set_in(&mut self.osd, key, value, origin)?,
            }
        }
        Ok(())
    }

    /// The options for OSD `id`: `[osd]` with `[osd.id]` applied on top.
    pub fn osd_for(&self, id: u32) -> OsdConfig {
        let mut osd = self.osd.clone();
        if let Some(o) = self.osd_overrides.get(&id) {
            for key in &o.keys {
                osd.copy_from(&o.values, key);
            }
        }
        osd
    }

    /// The configuration as OSD `id` sees it: `osd` is [`Config::osd_for`]
    /// and no `[osd.N]` sections remain, so a later `set("osd.K", ..)`
    /// changes that OSD's value.
    pub fn for_osd(&self, id: u32) -> Config {
        Config {
            osd: self.osd_for(id),
            osd_overrides: BTreeMap::new(),
            ..self.clone()
        }
    }

    /// The value of `section.option` (`[osd]` for `osd.` keys), or `None`
    /// for an unknown name.
    pub fn value(&self, key: &str) -> Option<Value> {
        let (section, name) = key.split_once('.')?;
        match section {
            "global" => self.global.get(name),
            "mon" => self.mon.get(name),
            "osd" => self.osd.get(name),
            "client" => self.client.get(name),
            _ => None,
        }
    }

    /// The ids of the OSDs that have an `[osd.N]` section.
    pub fn overridden_osds(&self) -> Vec<u32> {
        self.osd_overrides.keys().copied().collect()
    }

    /// Sets one option from a command-line style override: `key` is
    /// `section.option` (e.g. `osd.heartbeat_interval_ms`) or
    /// `osd.N.option` (e.g. `osd.3.store`); `value` is the text, with no TOML
    /// quoting (`memstore`, `500`, `true`). Validated like the file
    /// (including cross-option checks); on error `self` is unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.set_all([(key, value)])
    }

    /// Applies several overrides, then validates once, so that options
    /// checked against each other (e.g. `mon.pool_default_size` and
    /// `mon.pool_default_min_size`) can be changed together. Atomic: on
    /// error `self` is unchanged.
    pub fn set_all<'a, I>(&mut self, assignments: I) -> Result<(), ConfigError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut next = self.clone();
        for (key, value) in assignments {
            next.set_one(key, value)?;
        }
        next.validate_from(SET_ORIGIN)?;
        *self = next;
        Ok(())
    }

    /// Like [`Config::set_all`] for `key=value` strings, as given on a
    /// command line (e.g. `--set osd.3.store=memstore`).
    pub fn set_args<S: AsRef<str>>(&mut self, args: &[S]) -> Result<(), ConfigError> {
        let mut pairs = Vec::with_capacity(args.len());
        for arg in args {
            let arg = arg.as_ref();
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| ConfigError::InvalidName {
                    origin: SET_ORIGIN.to_string(),
                    name: arg.to_string(),
                    reason: "expected key=value".to_string(),
                })?;
            pairs.push((key.trim(), value.trim()));
        }
        self.set_all(pairs)
    }

    fn set_one(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let origin = SET_ORIGIN;
        let raw = Raw::Arg(value);
        let parts: Vec<&str> = key.split('.').collect();
        match parts.as_slice() {
            [section, option] => match *section {
                "global" => set_field(&mut self.global, option, raw, key, origin).map(drop),
                "mon" => set_field(&mut self.mon, option, raw, key, origin).map(drop),
                "osd" => set_field(&mut self.osd, option, raw, key, origin).map(drop),
                "client" => set_field(&mut self.client, option, raw, key, origin).map(drop),
                _ => Err(unknown_section(origin, section)),
            },
            ["osd", id, option] => match osd_id(id) {
                Some(id) => self
                    .osd_overrides
                    .entry(id)
                    .or_default()
                    .set(option, raw, key, origin),
                None => Err(unknown_section(origin, &format!("osd.{id}"))),
            },
            [section, sub, _] if is_section(section) => {
                Err(unknown_section(origin, &format!("{section}.{sub}")))
            }
            _ => Err(ConfigError::InvalidName {
                origin: origin.to_string(),
                name: key.to_string(),
                reason: "expected section.option or osd.N.option".to_string(),
            }),
        }
    }

    /// Checks every option and the constraints between options. Loading and
    /// `set` already do this; call it after changing fields directly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_from("config")
    }

    fn validate_from(&self, origin: &str) -> Result<(), ConfigError> {
        check_section(&self.global, origin)?;
        check_section(&self.mon, origin)?;
        check_section(&self.osd, origin)?;
        check_section(&self.client, origin)?;
        let mon = &self.mon;
        if mon.pool_default_min_size > mon.pool_default_size {
            return Err(invalid(
                origin,
                "mon.pool_default_min_size",
                format!(
                    "must not exceed mon.pool_default_size ({}), got {}",
                    mon.pool_default_size, mon.pool_default_min_size
                ),
            ));
        }
        let (nearfull, backfillfull, full) = (
            mon.osd_nearfull_ratio.get(),
            mon.osd_backfillfull_ratio.get(),
            mon.osd_full_ratio.get(),
        );
        if nearfull > backfillfull {
            return Err(invalid(
                origin,
                "mon.osd_nearfull_ratio",
                format!(
                    "must not exceed mon.osd_backfillfull_ratio ({backfillfull}), got {nearfull}"
                ),
            ));
        }
        if backfillfull > full {
            return Err(invalid(
                origin,
                "mon.osd_backfillfull_ratio",
                format!("must not exceed mon.osd_full_ratio ({full}), got {backfillfull}"),
            ));
        }
        crush::check_failure_domain(&mon.crush_bucket_types, &mon.osd_crush_chooseleaf_type)
            .map_err(|reason| invalid(origin, "mon.osd_crush_chooseleaf_type", reason))?;
        crush::check_failure_domain(&mon.crush_bucket_types, &mon.osd_reporter_subtree_level)
            .map_err(|reason| invalid(origin, "mon.osd_reporter_subtree_level", reason))?;
        let check_location = |key: &str, osd: &OsdConfig| {
            crush::check_location_types(&mon.crush_bucket_types, &osd.crush_location)
                .map_err(|reason| invalid(origin, key, reason))
        };
        check_location("osd.crush_location", &self.osd)?;
        let grace = mon.osd_heartbeat_grace_ms;
        let check_interval = |key: &str, osd: &OsdConfig| {
            if osd.heartbeat_interval_ms >= grace {
                return Err(invalid(
                    origin,
                    key,
                    format!(
                        "must be less than mon.osd_heartbeat_grace_ms ({grace}), got {}",
                        osd.heartbeat_interval_ms
                    ),
                ));
            }
            Ok(())
        };
        check_interval("osd.heartbeat_interval_ms", &self.osd)?;
        let check_addrs = |prefix: &str, osd: &OsdConfig| {
            osd.addrs()
                .map(|_| ())
                .map_err(|(key, reason)| invalid(origin, &format!("{prefix}.{key}"), reason))
        };
        check_addrs("osd", &self.osd)?;
        let check_cache = |key: &str, osd: &OsdConfig| {
            let (meta, kv) = (
                osd.bluestore_cache_meta_ratio.get(),
                osd.bluestore_cache_kv_ratio.get(),
            );
            if meta + kv > 1.0 {
                return Err(invalid(
                    origin,
                    key,
                    format!("plus bluestore_cache_meta_ratio ({meta}) must not exceed 1, got {kv}"),
                ));
            }
            Ok(())
        };
        check_cache("osd.bluestore_cache_kv_ratio", &self.osd)?;
        for (id, o) in &self.osd_overrides {
            check_cache(
                &format!("osd.{id}.bluestore_cache_kv_ratio"),
                &self.osd_for(*id),
            )?;
            if let Err((key, reason)) = o.values.check() {
                if o.keys.contains(key) {
                    return Err(invalid(origin, &format!("osd.{id}.{key}"), reason));
                }
            }
            let key = format!("osd.{id}.heartbeat_interval_ms");
            check_interval(&key, &self.osd_for(*id))?;
            check_location(&format!("osd.{id}.crush_location"), &self.osd_for(*id))?;
            check_addrs(&format!("osd.{id}"), &self.osd_for(*id))?;
        }
        Ok(())
    }

    /// The configuration as TOML text that [`Config::parse`] reads back to
    /// an equal `Config` (all options written out, `[osd.N]` included).
    pub fn to_toml(&self) -> String {
        self.to_table().to_string()
    }

    fn to_table(&self) -> Table {
        let mut osd = self.osd.to_table();
        for (id, o) in &self.osd_overrides {
            let sub: Table = o
                .keys
                .iter()
                .filter_map(|k| Some((k.to_string(), o.values.get(k)?)))
                .collect();
            osd.insert(id.to_string(), Value::Table(sub));
        }
        let mut root = Table::new();
        root.insert("global".into(), Value::Table(self.global.to_table()));
        root.insert("mon".into(), Value::Table(self.mon.to_table()));
        root.insert("osd".into(), Value::Table(osd));
        root.insert("client".into(), Value::Table(self.client.to_table()));
        root
    }
}

impl Serialize for Config {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_table().serialize(serializer)
    }
}

impl OsdOverride {
    fn set(
        &mut self,
        key: &str,
        raw: Raw<'_>,
        full: &str,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let name = set_field(&mut self.values, key, raw, full, origin)?;
        self.keys.insert(name);
        Ok(())
    }
}

fn is_section(name: &str) -> bool {
    matches!(name, "global" | "mon" | "osd" | "client")
}

/// The OSD id of an `[osd.N]` name part: a canonical decimal `u32`.
fn osd_id(text: &str) -> Option<u32> {
    text.parse::<u32>().ok().filter(|id| id.to_string() == text)
}

/// Loads every key of a section table.
fn load_section<S: Section>(
    target: &mut S,
    table: &Table,
    origin: &str,
) -> Result<(), ConfigError> {
    for (key, value) in table {
        set_in(target, key, value, origin)?;
    }
    Ok(())
}

/// Sets `key` of section `S` from a TOML value of the file.
fn set_in<S: Section>(
    target: &mut S,
    key: &str,
    value: &Value,
    origin: &str,
) -> Result<(), ConfigError> {
    let full = format!("{}.{key}", S::NAME);
    if let Value::Table(_) = value {
        if !S::KEYS.contains(&key) {
            return Err(unknown_section(origin, &full));
        }
    }
    set_field(target, key, Raw::Toml(value), &full, origin).map(drop)
}

/// Sets one option, turning a field error into an error naming `full`.
fn set_field<S: Section>(
    target: &mut S,
    key: &str,
    raw: Raw<'_>,
    full: &str,
    origin: &str,
) -> Result<&'static str, ConfigError> {
    target.set(key, raw).map_err(|e| match e {
        FieldError::Unknown => ConfigError::UnknownOption {
            origin: origin.to_string(),
            key: full.to_string(),
            suggestion: nearest_option(S::NAME, key).map(|name| match full.rsplit_once('.') {
                Some((prefix, _)) => format!("{prefix}.{name}"),
                None => name.to_string(),
            }),
        },
        FieldError::Invalid(reason) => invalid(origin, full, reason),
    })
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_table(text: &str, origin: &str) -> Result<Table, ConfigError> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
}

/// The option of `section` nearest to `key` if it looks like a typo of it
/// (an edit distance of at most a third of its length, and at most 4).
pub(crate) fn nearest_option(section: &str, key: &str) -> Option<&'static str> {
    options::options()
        .into_iter()
        .filter(|o| o.section == section)
        .map(|o| (edit_distance(key, o.name), o.name))
        .filter(|(d, name)| *d <= (name.len() / 3).clamp(1, 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// Edit distance between two short names: insertions, deletions,
/// substitutions and swaps of neighbours each count one.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

fn check_section<S: Section>(section: &S, origin: &str) -> Result<(), ConfigError> {
    section
        .check()
        .map_err(|(key, reason)| invalid(origin, &format!("{}.{key}", S::NAME), reason))
}

fn invalid(origin: &str, key: &str, reason: String) -> ConfigError {
    ConfigError::InvalidValue {
        origin: origin.to_string(),
        key: key.to_string(),
        reason,
    }
}

fn unknown_section(origin: &str, section: &str) -> ConfigError {
    ConfigError::UnknownSection {
        origin: origin.to_string(),
        section: section.to_string(),
    }
}
