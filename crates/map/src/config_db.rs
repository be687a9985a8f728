//! The configuration database: options set while the cluster runs (`cairn
//! config set WHO KEY VALUE`), carried in every map so each daemon and
//! client applies the entries meant for it as soon as it has the epoch.
//!
//! Entries are text as the user gave it; the monitor checks them against
//! the option schema before storing, and each daemon checks them again
//! against its own file before applying (this crate knows no option).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most entries kept; beyond it the monitor refuses more (every map every
/// daemon holds carries them all).
pub const CONFIG_DB_MAX: usize = 4096;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigDb {
    /// WHO (`global`, `osd`, `osd.3`, `mon`, `client`) → full option name
    /// (`osd.recovery_max_active`) → value.
    entries: BTreeMap<String, BTreeMap<String, String>>,
}

impl ConfigDb {
    /// Every entry as (who, key, value), sorted by who then key.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.entries.iter().flat_map(|(who, keys)| {
            keys.iter()
                .map(move |(k, v)| (who.as_str(), k.as_str(), v.as_str()))
        })
    }

    pub fn get(&self, who: &str, key: &str) -> Option<&str> {
        self.entries.get(who)?.get(key).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.entries.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Store `who key = value`. Returns `Ok(false)` if it was already so,
    /// and an error if the database is full.
    pub fn set(&mut self, who: &str, key: &str, value: &str) -> Result<bool, String> {
        if self.get(who, key) == Some(value) {
            return Ok(false);
        }
        if self.get(who, key).is_none() && self.len() >= CONFIG_DB_MAX {
            return Err(format!(
                "the configuration database holds {CONFIG_DB_MAX} entries, the most it may"
            ));
        }
        self.entries
            .entry(who.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
        Ok(true)
    }

    /// Remove `who key`; returns whether it was there.
    pub fn remove(&mut self, who: &str, key: &str) -> bool {
        let Some(keys) = self.entries.get_mut(who) else {
            return false;
        };
        let removed = keys.remove(key).is_some();
        if keys.is_empty() {
            self.entries.remove(who);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_remove() {
        let mut db = ConfigDb::default();
        assert_eq!(db.set("osd.1", "osd.max_scrubs", "2"), Ok(true));
        assert_eq!(db.set("osd.1", "osd.max_scrubs", "2"), Ok(false));
        assert_eq!(db.set("osd", "global.log_level", "debug"), Ok(true));
        assert_eq!(db.get("osd.1", "osd.max_scrubs"), Some("2"));
        let all: Vec<_> = db.entries().collect();
        assert_eq!(
            all,
            vec![
                ("osd", "global.log_level", "debug"),
                ("osd.1", "osd.max_scrubs", "2")
            ]
        );
        assert!(db.remove("osd.1", "osd.max_scrubs"));
        assert!(!db.remove("osd.1", "osd.max_scrubs"));
        assert_eq!(db.len(), 1);
    }
}
