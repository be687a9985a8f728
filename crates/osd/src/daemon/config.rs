//! Runtime configuration of a running OSD: the configuration database's
//! entries that arrive with each map, `cairn tell osd.N config set`, and
//! the pools' compression settings, which go to the store.
//!
//! The OSD knows no option: a [`ConfigHook`] given by whoever runs it (the
//! `cairn` binary) checks changes and turns them into [`CoreOptions`],
//! applying on its side what is not the core's (the log level). The core
//! gets new options between two events, never in the middle of one.

use std::sync::Arc;

use cairn_map::{ClusterMap, ConfigDb};

use super::Osd;
use crate::core::CoreOptions;

/// What the OSD needs from the option schema.
pub trait ConfigHook: Send + Sync {
    /// The core's options with the entries of `db` for this OSD and its
    /// overrides applied (and the log level set); entries that could not
    /// be applied are logged by the hook.
    fn apply(&self, db: &ConfigDb) -> CoreOptions;

    /// `tell osd.N config set KEY VALUE`: check it as `config set` does
    /// and keep it as an override until the OSD stops. Returns the
    /// options to apply and the JSON reply, or why it was refused.
    fn tell_set(
        &self,
        db: &ConfigDb,
        key: &str,
        value: &str,
    ) -> Result<(CoreOptions, String), String>;

    /// The running options as JSON: each option's value, where it came
    /// from and whether it can change at runtime.
    fn show(&self, db: &ConfigDb) -> String;
}

impl Osd {
    /// Give the OSD its option schema; the next map applies its entries.
    pub fn install_config(&self, hook: Arc<dyn ConfigHook>) {
        let _ = self.config.set(hook);
    }

    /// A new map: apply its configuration entries if they changed.
    pub(crate) fn map_config_changed(self: &Arc<Self>, old: &ClusterMap, new: &ClusterMap) {
        if old.epoch != 0 && old.config == new.config {
            return;
        }
        if let Some(hook) = self.config.get() {
            // Under the core's lock, so a `tell` cannot interleave.
            self.with_core(|core, _| core.set_options(hook.apply(&new.config)));
        }
    }

    /// A new map: hand the store the compression settings of every pool
    /// whose settings changed (all of them with the first map).
    pub(crate) fn map_pools_changed(&self, old: &ClusterMap, new: &ClusterMap) {
        for (id, pool) in &new.pools {
            let same = old.epoch != 0
                && old.pools.get(id).map(|p| &p.compression) == Some(&pool.compression);
            if !same {
                self.store
                    .set_pool_compression(*id, Some(&pool.compression));
            }
        }
        for id in old.pools.keys().filter(|id| !new.pools.contains_key(id)) {
            self.store.set_pool_compression(*id, None);
        }
    }

    pub(crate) fn tell_config_set(
        self: &Arc<Self>,
        key: &str,
        value: &str,
    ) -> Result<String, String> {
        let hook = self
            .config
            .get()
            .ok_or("this OSD was started without the option schema")?;
        // Under the core's lock, against the entries the core last applied,
        // so a map applied meanwhile cannot be undone by this change.
        self.with_core(|core, _| {
            let db = core.map().config.clone();
            let (opts, reply) = hook.tell_set(&db, key, value)?;
            core.set_options(opts);
            Ok(reply)
        })
    }

    pub(crate) fn config_show(&self) -> Result<String, String> {
        let hook = self
            .config
            .get()
            .ok_or("this OSD was started without the option schema")?;
        let db = self.map.read().config.clone();
        Ok(hook.show(&db))
    }
}
