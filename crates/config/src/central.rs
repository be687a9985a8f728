//! Options changed while the cluster runs: the monitor's configuration
//! database (`cairn config set WHO KEY VALUE`) and one daemon's own
//! overrides (`cairn tell osd.N config set KEY VALUE`).
//!
//! This module decides what a change may be and what a daemon's options
//! are with the changes applied; where the entries are kept (the cluster
//! map) and how daemons act on new values is theirs. A daemon's options
//! come from, weakest first: the defaults, `cairn.toml` (`[osd]`, then
//! `[osd.N]`), the database's `global`, type (`osd`, `mon`, `client`) and
//! `osd.N` entries, and its `tell` overrides, which last until it stops.
//!
//! Only options marked runtime ([`OptionDoc::runtime`]) may be changed
//! here: an option read only at start is refused with the reason, so no
//! change is ever stored that nothing would apply.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use toml::Value;

use crate::{options, Config, ConfigError, OptionDoc};

/// Origin named in errors from [`check_entry`].
const ORIGIN: &str = "config set";

/// Whom a database entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    /// Every daemon and client.
    Global,
    /// The monitor.
    Mon,
    /// Every OSD.
    Osd,
    /// One OSD.
    OsdId(u32),
    /// Every client (gateways, `cairn bench`, admin commands).
    Client,
}

impl Who {
    /// The configuration section this daemon type reads besides `global`.
    fn section(self) -> Option<&'static str> {
        match self {
            Who::Global => None,
            Who::Mon => Some("mon"),
            Who::Osd | Who::OsdId(_) => Some("osd"),
            Who::Client => Some("client"),
        }
    }

    /// The entries that apply to this daemon, weakest first.
    fn chain(self) -> Vec<Who> {
        match self {
            Who::OsdId(_) => vec![Who::Global, Who::Osd, self],
            Who::Global => vec![Who::Global],
            other => vec![Who::Global, other],
        }
    }

    /// Whether this daemon reads options of `section`.
    fn reads(self, section: &str) -> bool {
        section == "global" || self.section().is_none() || self.section() == Some(section)
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Global => f.write_str("global"),
            Who::Mon => f.write_str("mon"),
            Who::Osd => f.write_str("osd"),
            Who::OsdId(id) => write!(f, "osd.{id}"),
            Who::Client => f.write_str("client"),
        }
    }
}

impl FromStr for Who {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Who, ConfigError> {
        match text {
            "global" => Ok(Who::Global),
            "mon" => Ok(Who::Mon),
            "osd" => Ok(Who::Osd),
            "client" => Ok(Who::Client),
            _ => text
                .strip_prefix("osd.")
                .and_then(|id| id.parse().ok())
                .map(Who::OsdId)
                .ok_or_else(|| ConfigError::InvalidName {
                    origin: ORIGIN.to_string(),
                    name: text.to_string(),
                    reason: "expected global, mon, osd, osd.N or client".to_string(),
                }),
        }
    }
}

/// One checked database entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Whom it is for, as text (`osd.3`).
    pub who: String,
    /// The full option name (`osd.recovery_max_active`).
    pub key: String,
    /// The value as given (`5`, `debug`).
    pub value: String,
}

/// Where a running value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Nobody set it.
    Default,
    /// `cairn.toml`.
    File,
    /// The monitor's database (`cairn config set`).
    Mon,
    /// `cairn tell` to this daemon (until it stops).
    Override,
}

/// The option `key` names for `who`: `name` (looked up in WHO's section,
/// then `global`) or `section.name`.
fn find_option(who: Who, key: &str) -> Result<OptionDoc, ConfigError> {
    let all = options();
    let found = match key.split_once('.') {
        Some((section, name)) => all
            .iter()
            .find(|o| o.section == section && o.name == name)
            .cloned(),
        None => who
            .section()
            .into_iter()
            .chain(["global"])
            .find_map(|section| all.iter().find(|o| o.section == section && o.name == key))
            .cloned(),
    };
    let found = match found {
        Some(doc) => Some(doc),
        None if !key.contains('.') => {
            // A bare name of another section's option: for WHO = global it
            // names that option, if only one section has it; otherwise it
            // is named below as not read by WHO, rather than unknown.
            let matching: Vec<&OptionDoc> = all.iter().filter(|o| o.name == key).collect();
            if matching.len() > 1 {
                let names: Vec<String> = matching.iter().map(|o| o.key()).collect();
                return Err(ConfigError::InvalidName {
                    origin: ORIGIN.to_string(),
                    name: key.to_string(),
                    reason: format!("several sections have it: give one of {}", names.join(", ")),
                });
            }
            matching.first().map(|o| (*o).clone())
        }
        None => None,
    };
    let Some(doc) = found else {
        let (section, name) = key
            .split_once('.')
            .unwrap_or((who.section().unwrap_or("global"), key));
        return Err(ConfigError::UnknownOption {
            origin: ORIGIN.to_string(),
            key: key.to_string(),
            suggestion: crate::nearest_option(section, name).map(|n| format!("{section}.{n}")),
        });
    };
    if !who.reads(doc.section) {
        return Err(ConfigError::NotReadBy {
            origin: ORIGIN.to_string(),
            key: doc.key(),
            who: who.to_string(),
            hint: Some(format!(
                "it is a {} option: set it for {}",
                doc.section, doc.section
            )),
        });
    }
    Ok(doc)
}

/// Checks `cairn config set WHO KEY VALUE` (and `tell`, with `existing`
/// empty): WHO names a daemon type or OSD, KEY an option it reads that may
/// change at runtime, VALUE a valid value for it, also together with the
/// `existing` entries for the same daemons (`min_size` not above
/// `size`). Returns the entry to store, with the full option name.
pub fn check_entry<'a, I>(
    who: &str,
    key: &str,
    value: &str,
    existing: I,
) -> Result<Entry, ConfigError>
where
    I: IntoIterator<Item = (&'a str, &'a str, &'a str)>,
{
    let target: Who = who.parse()?;
    let doc = find_option(target, key)?;
    if !doc.runtime {
        return Err(ConfigError::NeedsRestart {
            origin: ORIGIN.to_string(),
            key: doc.key(),
        });
    }
    let full = doc.key();
    let mut trial = Config::default();
    let chain = target.chain();
    let stored: Vec<(&str, &str)> = existing
        .into_iter()
        .filter(|(w, _, _)| w.parse::<Who>().is_ok_and(|w| chain.contains(&w)))
        .map(|(_, k, v)| (k, v))
        .collect();
    let others: Vec<(&str, &str)> = stored.iter().copied().filter(|(k, _)| *k != full).collect();
    let fixed = |e: ConfigError| match e {
        ConfigError::InvalidValue { key, reason, .. } => ConfigError::InvalidValue {
            origin: ORIGIN.to_string(),
            key,
            reason,
        },
        other => other,
    };
    let together = others.iter().copied().chain([(full.as_str(), value)]);
    match trial.clone().set_all(together) {
        Ok(()) => {}
        // What is stored fits together: this change is what does not.
        Err(e) if trial.clone().set_all(stored.iter().copied()).is_ok() => return Err(fixed(e)),
        Err(_) => {
            // The entries already stored do not fit together (a daemon
            // warns about them): check the change against what fits.
            for (k, v) in others {
                let _ = trial.set(k, v);
            }
            trial.set(&full, value).map_err(fixed)?;
        }
    }
    Ok(Entry {
        who: target.to_string(),
        key: full,
        value: value.to_string(),
    })
}

/// One daemon's options with the database and its overrides applied.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The options; for an OSD, `osd` is already its own (`[osd.N]`
    /// applied).
    pub config: Config,
    /// Where each option that is not at its default came from.
    pub sources: BTreeMap<String, Source>,
    /// Entries that could not be applied, and why (each names the entry).
    pub warnings: Vec<String>,
}

impl Resolved {
    /// Every option this daemon reads, with its running value, where it
    /// came from and whether it can change at runtime.
    pub fn show(&self, daemon: Who) -> Vec<ShownOption> {
        options()
            .into_iter()
            .filter(|o| daemon.reads(o.section))
            .filter_map(|o| {
                let key = o.key();
                let value = self.config.value(&key)?;
                let source = self.sources.get(&key).copied().unwrap_or(Source::Default);
                Some(ShownOption {
                    key,
                    value,
                    source,
                    runtime: o.runtime,
                })
            })
            .collect()
    }
}

/// One line of `cairn config show`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShownOption {
    /// The full option name.
    pub key: String,
    /// The running value.
    pub value: Value,
    /// Where it came from.
    pub source: Source,
    /// Whether it can be changed without a restart.
    pub runtime: bool,
}

/// The options of `daemon`: `file` (the daemon's `cairn.toml`), then the
/// database `entries` (who, key, value) that apply to it, weakest first,
/// then its `overrides` (key, value). An entry that does not fit is
/// skipped with a warning; the rest still apply.
pub fn resolve<'a, I>(
    file: &Config,
    daemon: Who,
    entries: I,
    overrides: &[(String, String)],
) -> Resolved
where
    I: IntoIterator<Item = (&'a str, &'a str, &'a str)>,
{
    let mut config = match daemon {
        Who::OsdId(id) => file.for_osd(id),
        _ => file.clone(),
    };
    let defaults = Config::default();
    let mut sources = BTreeMap::new();
    for doc in options() {
        let key = doc.key();
        if config.value(&key) != defaults.value(&key) {
            sources.insert(key, Source::File);
        }
    }
    let mut warnings = Vec::new();
    let chain = daemon.chain();
    let mut applicable: Vec<(usize, &str, &str, &str)> = entries
        .into_iter()
        .filter_map(|(w, k, v)| {
            let rank = chain
                .iter()
                .position(|c| w.parse::<Who>().ok() == Some(*c))?;
            Some((rank, w, k, v))
        })
        .collect();
    applicable.sort_by_key(|(rank, ..)| *rank);
    for rank in 0..chain.len() {
        let group: Vec<(&str, &str, &str)> = applicable
            .iter()
            .filter(|(r, _, k, _)| {
                *r == rank && daemon.reads(k.split_once('.').map_or("", |(s, _)| s))
            })
            .map(|(_, w, k, v)| (*w, *k, *v))
            .collect();
        // Together first: entries checked against each other (`size` and
        // `min_size`, the full ratios) fit only as a set.
        if config
            .set_all(group.iter().map(|(_, k, v)| (*k, *v)))
            .is_ok()
        {
            for (_, key, _) in &group {
                sources.insert(key.to_string(), Source::Mon);
            }
            continue;
        }
        for (who, key, value) in group {
            match config.set(key, value) {
                Ok(()) => {
                    sources.insert(key.to_string(), Source::Mon);
                }
                Err(e) => {
                    warnings.push(format!("config entry {who} {key}={value} not applied: {e}"))
                }
            }
        }
    }
    for (key, value) in overrides {
        match config.set(key, value) {
            Ok(()) => {
                sources.insert(key.clone(), Source::Override);
            }
            Err(e) => warnings.push(format!("override {key}={value} not applied: {e}")),
        }
    }
    Resolved {
        config,
        sources,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Vec<(&'static str, &'static str, &'static str)> {
        Vec::new()
    }

    #[test]
    fn a_runtime_option_is_stored_under_its_full_name() {
        let e = check_entry("osd.3", "recovery_max_active", "5", none()).unwrap();
        assert_eq!(
            (e.who.as_str(), e.key.as_str(), e.value.as_str()),
            ("osd.3", "osd.recovery_max_active", "5")
        );
        let e = check_entry("osd", "log_level", "debug", none()).unwrap();
        assert_eq!(e.key, "global.log_level");
        let e = check_entry("global", "osd.max_scrubs", "2", none()).unwrap();
        assert_eq!(
            (e.who.as_str(), e.key.as_str()),
            ("global", "osd.max_scrubs")
        );
    }

    #[test]
    fn bad_changes_are_refused_with_the_reason() {
        let err = |who, key, value| {
            check_entry(who, key, value, none())
                .unwrap_err()
                .to_string()
        };
        assert!(err("osd", "store", "memstore").contains("read only when a daemon starts"));
        assert!(err("osd", "recovery_max_actve", "5")
            .contains("did you mean 'osd.recovery_max_active'"));
        assert!(err("osd", "recovery_max_active", "0").contains("must be at least 1"));
        assert!(err("osd", "recovery_max_active", "many").contains("recovery_max_active"));
        assert!(
            err("osd.x", "max_scrubs", "2").contains("expected global, mon, osd, osd.N or client")
        );
        assert!(err("mon", "recovery_max_active", "2").contains("not read by mon"));
        assert!(err("client", "mon.osd_full_ratio", "0.9").contains("not read by client"));
        assert!(err("global", "log_level", "loud").contains("log_level"));
    }

    #[test]
    fn values_are_checked_with_the_entries_already_set() {
        let existing = vec![("mon", "mon.pool_default_size", "2")];
        let e = check_entry("mon", "pool_default_min_size", "3", existing.clone()).unwrap_err();
        assert!(
            e.to_string()
                .contains("must not exceed mon.pool_default_size (2)"),
            "{e}"
        );
        assert!(check_entry("mon", "pool_default_min_size", "2", existing).is_ok());
    }

    #[test]
    fn the_most_specific_entry_wins_and_overrides_win_over_all() {
        let file = Config::parse("[osd]\nmax_scrubs = 2\n[osd.1]\nmax_backfills = 4\n").unwrap();
        let db = vec![
            ("osd.1", "osd.recovery_max_active", "7"),
            ("global", "osd.recovery_max_active", "5"),
            ("osd", "osd.recovery_max_active", "6"),
            ("osd.2", "osd.max_scrubs", "9"),
            ("mon", "mon.pool_default_size", "2"),
        ];
        let r = resolve(&file, Who::OsdId(1), db.clone(), &[]);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert_eq!(r.config.osd.recovery_max_active, 7);
        assert_eq!(r.config.osd.max_scrubs, 2, "osd.2's entry is not osd.1's");
        assert_eq!(r.config.osd.max_backfills, 4, "[osd.1] of the file applies");
        assert_eq!(r.sources["osd.recovery_max_active"], Source::Mon);
        assert_eq!(r.sources["osd.max_scrubs"], Source::File);
        let r = resolve(&file, Who::OsdId(2), db.clone(), &[]);
        assert_eq!(
            (r.config.osd.recovery_max_active, r.config.osd.max_scrubs),
            (6, 9)
        );
        assert_eq!(r.config.osd.max_backfills, 1);
        let over = vec![("osd.max_scrubs".to_string(), "3".to_string())];
        let r = resolve(&file, Who::OsdId(2), db, &over);
        assert_eq!(r.config.osd.max_scrubs, 3);
        assert_eq!(r.sources["osd.max_scrubs"], Source::Override);
        let shown = r.show(Who::OsdId(2));
        assert!(shown
            .iter()
            .any(|o| o.key == "global.log_level" && o.runtime));
        assert!(shown.iter().any(|o| o.key == "osd.store" && !o.runtime));
        assert!(!shown.iter().any(|o| o.key.starts_with("mon.")));
    }

    #[test]
    fn entries_that_fit_only_together_apply_together() {
        let db = vec![
            ("mon", "mon.pool_default_min_size", "4"),
            ("mon", "mon.pool_default_size", "5"),
            ("mon", "mon.osd_nearfull_ratio", "0.96"),
            ("mon", "mon.osd_backfillfull_ratio", "0.97"),
            ("mon", "mon.osd_full_ratio", "0.98"),
        ];
        let r = resolve(&Config::default(), Who::Mon, db.clone(), &[]);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert_eq!(
            (
                r.config.mon.pool_default_size,
                r.config.mon.pool_default_min_size
            ),
            (5, 4)
        );
        assert_eq!(r.config.mon.osd_full_ratio.get(), 0.98);
        // And a change is checked against them together.
        assert!(check_entry("mon", "pool_default_size", "6", db.clone()).is_ok());
        assert!(check_entry("mon", "pool_default_size", "3", db).is_err());
    }

    #[test]
    fn a_bare_name_several_sections_have_must_be_given_in_full() {
        let e = check_entry("global", "op_complaint_time_ms", "100", none()).unwrap_err();
        assert!(e.to_string().contains("osd.op_complaint_time_ms"), "{e}");
        assert!(e.to_string().contains("client.op_complaint_time_ms"), "{e}");
        let e = check_entry("global", "client.op_complaint_time_ms", "100", none()).unwrap();
        assert_eq!(e.key, "client.op_complaint_time_ms");
        // Within WHO's own section a bare name is that section's.
        assert_eq!(
            check_entry("osd", "op_complaint_time_ms", "5", none())
                .unwrap()
                .key,
            "osd.op_complaint_time_ms"
        );
    }

    #[test]
    fn an_entry_that_does_not_fit_this_daemon_is_skipped_with_a_warning() {
        let file =
            Config::parse("[mon]\npool_default_size = 2\npool_default_min_size = 2\n").unwrap();
        let db = vec![
            ("mon", "mon.pool_default_size", "1"),
            ("mon", "mon.pg_temp_batch_ms", "50"),
        ];
        let r = resolve(&file, Who::Mon, db, &[]);
        assert_eq!(r.config.mon.pool_default_size, 2);
        assert_eq!(r.config.mon.pg_temp_batch_ms, 50);
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].contains("mon.pool_default_size=1"),
            "{:?}",
            r.warnings
        );
    }
}
