//! A map's memo of raw placements: each PG's CRUSH result is computed at
//! most once per map, on first use, without locks on the read path.
//!
//! Published maps never change, and every client op asks for a PG's acting
//! set, so a map remembers what it computed. The memo is not part of the
//! map's value: it is never serialized, a clone starts empty, and two maps
//! compare equal whatever their memos hold. It must be cleared by every
//! mutation of what placement reads (pools, `is_in`, the CRUSH map); the
//! `ClusterMap` methods that make them do so.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use cairn_types::{OsdId, PgId, PoolId};

use crate::Pool;

/// One slot per PG of every pool the map had when first used.
type Slots = BTreeMap<PoolId, Box<[OnceLock<Vec<OsdId>>]>>;

#[derive(Default)]
pub(crate) struct PlacementCache {
    slots: OnceLock<Slots>,
}

impl PlacementCache {
    /// The placement of `pg` (a PG of one of `pools`): remembered, or
    /// computed by `compute` and remembered.
    pub(crate) fn get_or_compute(
        &self,
        pools: &BTreeMap<PoolId, Pool>,
        pg: PgId,
        compute: impl FnOnce() -> Vec<OsdId>,
    ) -> Vec<OsdId> {
        let slots = self.slots.get_or_init(|| {
            pools
                .values()
                .map(|p| (p.id, (0..p.pg_num).map(|_| OnceLock::new()).collect()))
                .collect()
        });
        match slots.get(&pg.pool).and_then(|s| s.get(pg.seed as usize)) {
            Some(slot) => slot.get_or_init(compute).clone(),
            None => compute(), // a seed beyond pg_num: not worth keeping
        }
    }

    /// Forget everything (the map is about to change).
    pub(crate) fn clear(&mut self) {
        self.slots = OnceLock::new();
    }
}

impl Clone for PlacementCache {
    /// A clone may be changed, so it starts empty.
    fn clone(&self) -> Self {
        PlacementCache::default()
    }
}

impl PartialEq for PlacementCache {
    /// Memos never make maps differ.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PlacementCache {}

impl fmt::Debug for PlacementCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filled = self.slots.get().map_or(0, |s| {
            s.values()
                .flat_map(|v| v.iter())
                .filter(|slot| slot.get().is_some())
                .count()
        });
        write!(f, "PlacementCache({filled} PGs)")
    }
}
