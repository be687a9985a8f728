//! What a cache PG reports: its tiering counters and object counts for the
//! monitor (`pool stats`, the checks before a tier goes), and how far a
//! flush-evict-all sweep has come.

use cairn_wire::TierStat;

use super::{fullness, index};
use crate::pg::Pg;

impl Pg {
    /// How far this PG's flush-evict-all sweep has come (null: none).
    pub(crate) fn sweep_status(&self) -> serde_json::Value {
        self.primary
            .as_ref()
            .and_then(|p| p.tier.as_ref())
            .and_then(|t| t.sweep.as_ref())
            .map_or(serde_json::Value::Null, |s| {
                let mut v = serde_json::json!(s);
                v["finished"] = serde_json::json!(s.finished());
                v
            })
    }

    /// The cache PG's tiering state for its stats: counted once the PG
    /// holds every object (its dirty count is exact from then on, kept up
    /// by every write); `None` before.
    pub(crate) fn tier_stat(
        &mut self,
        store: &dyn cairn_store::ObjectStore,
        epoch: cairn_types::Epoch,
        now: u64,
    ) -> Option<TierStat> {
        if !self.is_active() || !self.missing.is_empty() {
            return None;
        }
        let pg = self.id;
        let tier = self.tier_mut()?;
        if tier.index.is_none() {
            match index::Index::load(store, pg, now) {
                Ok(ix) => tier.index = Some(ix),
                Err(e) => {
                    tracing::warn!("pg {pg}: cannot count the cache's objects: {e}");
                    return None;
                }
            }
        }
        let mut st = tier.stat()?;
        st.counted_epoch = epoch;
        tier.reported = Some(fullness::Contents {
            objects: st.objects,
            bytes: st.bytes,
            dirty: st.dirty,
            dirty_bytes: st.dirty_bytes,
        });
        Some(st)
    }
}
