//! The configuration database's commands (`cairn config set|rm|dump`, and
//! `config show mon`) and the monitor's own runtime options.
//!
//! The monitor knows no option: a [`ConfigSchema`] given by whoever runs it
//! checks each change and turns the database into [`MonOptions`]. Without
//! one, changes are refused. Entries live in the map, so every daemon and
//! client gets them with the epoch that adds them.

use std::sync::Arc;

use cairn_map::ConfigDb;
use serde_json::{json, Value};

use crate::{MonOptions, MonState, MonStoreError, Monitor};

/// What the monitor needs from the option schema.
pub trait ConfigSchema: Send + Sync {
    /// Checks `who key = value` against the schema and the entries in `db`
    /// (a runtime option WHO reads, a valid value); returns the entry to
    /// store as (who, full key, value), or the reason it is refused.
    fn check(
        &self,
        db: &ConfigDb,
        who: &str,
        key: &str,
        value: &str,
    ) -> Result<(String, String, String), String>;

    /// The monitor's options with the entries of `db` that apply to it,
    /// having applied what is not in [`MonOptions`] (the log level);
    /// warnings name entries that could not be applied.
    fn apply(&self, db: &ConfigDb) -> (MonOptions, Vec<String>);

    /// The monitor's running options, each with where it came from.
    fn show(&self, db: &ConfigDb) -> Value;
}

impl Monitor {
    /// Give the monitor its option schema and apply the map's entries.
    pub fn install_config(&self, schema: Arc<dyn ConfigSchema>) {
        let _ = self.config.set(schema);
        let db = self.state.lock().map.config.clone();
        self.apply_config(&db);
    }

    fn schema(&self) -> Result<&Arc<dyn ConfigSchema>, String> {
        self.config
            .get()
            .ok_or_else(|| "this monitor was started without the option schema".to_string())
    }

    fn apply_config(&self, db: &ConfigDb) {
        let Some(schema) = self.config.get() else {
            return;
        };
        let (opts, warnings) = schema.apply(db);
        for w in warnings {
            tracing::warn!("{w}");
        }
        *self.opts.write() = opts;
    }

    pub(crate) fn config_set(
        &self,
        st: &mut MonState,
        who: &str,
        key: &str,
        value: &str,
    ) -> Result<Result<Value, String>, MonStoreError> {
        let (who, key, value) = match self
            .schema()
            .and_then(|s| s.check(&st.map.config, who, key, value))
        {
            Ok(entry) => entry,
            Err(e) => return Ok(Err(e)),
        };
        let stored = self.update(st, |map| match map.config.set(&who, &key, &value) {
            Ok(changed) => (changed, Ok(())),
            Err(e) => (false, Err(e)),
        })?;
        if stored.is_ok() {
            tracing::info!("config set {who} {key} = {value} (epoch {})", st.map.epoch);
            let db = st.map.config.clone();
            self.apply_config(&db);
        }
        Ok(stored
            .map(|()| json!({ "who": who, "key": key, "value": value, "epoch": st.map.epoch })))
    }

    pub(crate) fn config_rm(
        &self,
        st: &mut MonState,
        who: &str,
        key: &str,
    ) -> Result<Result<Value, String>, MonStoreError> {
        // `rm osd max_scrubs` removes `osd osd.max_scrubs`: find the full
        // key; a bare name two entries of WHO share must be given in full.
        let matching: Vec<String> = st
            .map
            .config
            .entries()
            .filter(|(w, k, _)| {
                *w == who && (*k == key || k.split_once('.').map(|(_, n)| n) == Some(key))
            })
            .map(|(_, k, _)| k.to_string())
            .collect();
        let full = match matching.as_slice() {
            [one] => one.clone(),
            [] => {
                return Ok(Err(format!(
                    "no configuration entry {who} {key} (see cairn config dump)"
                )))
            }
            several => {
                return Ok(Err(format!(
                    "{who} has several entries named {key}: give one of {}",
                    several.join(", ")
                )))
            }
        };
        self.update(st, |map| (map.config.remove(who, &full), ()))?;
        tracing::info!("config rm {who} {full} (epoch {})", st.map.epoch);
        let db = st.map.config.clone();
        self.apply_config(&db);
        Ok(Ok(
            json!({ "who": who, "key": full, "removed": true, "epoch": st.map.epoch }),
        ))
    }

    pub(crate) fn config_show(&self, st: &MonState) -> Result<Value, String> {
        Ok(self.schema()?.show(&st.map.config))
    }
}

/// Every entry of the database, as `cairn config dump` prints it.
pub(crate) fn config_dump(db: &ConfigDb) -> Value {
    json!(db
        .entries()
        .map(|(who, key, value)| json!({ "who": who, "key": key, "value": value }))
        .collect::<Vec<_>>())
}
