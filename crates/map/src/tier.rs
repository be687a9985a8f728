//! Cache tiering in the map: which pool is a cache over which base pool,
//! whether clients are sent to the cache (the *overlay*), the cache's mode,
//! and the parameters of its hit sets and of its tiering agent, with the
//! names Ceph gives them (`ceph osd tier ...`, `ceph osd pool set`).
//!
//! The map only records and checks; the cache pool's primaries act on it
//! (promote, proxy, flush, evict) and clients route by
//! [`ClusterMap::op_target`]. A cache is one level deep: a cache pool has
//! no cache, a base pool has at most one.

use serde::{Deserialize, Serialize};

use crate::{ClusterMap, MapError, Pool};
use cairn_types::PoolId;

/// How a cache pool treats the ops clients send it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CacheMode {
    /// Takes no new data: every op is passed to the base pool, an object
    /// still dirty here being flushed (and evicted) first. How a cache is
    /// drained before its overlay is removed.
    #[default]
    None,
    /// Writes land in the cache; reads of objects not in it are proxied to
    /// the base pool, or promote the object once it is seen often enough.
    Writeback,
    /// Reads of objects not in the cache are proxied, never promoted;
    /// writes promote the object and land in the cache.
    Readproxy,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::Writeback => "writeback",
            CacheMode::Readproxy => "readproxy",
        }
    }

    pub fn parse(s: &str) -> Result<Self, MapError> {
        match s {
            "none" => Ok(CacheMode::None),
            "writeback" => Ok(CacheMode::Writeback),
            "readproxy" => Ok(CacheMode::Readproxy),
            other => Err(MapError::Invalid(format!(
                "cache mode '{other}' is not one of writeback, readproxy, none"
            ))),
        }
    }
}

/// Ratios are kept in millionths, so maps compare exactly.
pub const RATIO_ONE: u32 = 1_000_000;

/// Most hit sets a cache PG keeps.
pub const MAX_HIT_SET_COUNT: u32 = 64;

/// The parameters of a cache pool (`cairn pool set CACHE KEY VALUE`).
/// Defaults are those of the setup in document 004; the targets start
/// unset (0), which `cairn status` warns about: a cache without a target
/// never flushes for fullness.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TierParams {
    pub hit_set_count: u32,
    /// Seconds each hit set covers.
    pub hit_set_period: u32,
    /// Most bytes the cache should hold (0: unset).
    pub target_max_bytes: u64,
    /// Most objects the cache should hold (0: unset).
    pub target_max_objects: u64,
    /// A read promotes an object seen in at least this many of the last
    /// hit sets (the current one included, this access counted); 0: every
    /// read promotes.
    pub min_read_recency_for_promote: u32,
    /// The same for writes in readproxy mode.
    pub min_write_recency_for_promote: u32,
    /// Dirty share of the target above which the agent flushes.
    pub cache_target_dirty_ratio: u32,
    /// ... and above which it flushes faster.
    pub cache_target_dirty_high_ratio: u32,
    /// Fullness above which the agent evicts clean objects.
    pub cache_target_full_ratio: u32,
    /// Seconds an object stays dirty before the agent may flush it.
    pub cache_min_flush_age: u32,
    /// Seconds since its last access before the agent may evict it.
    pub cache_min_evict_age: u32,
}

impl Default for TierParams {
    fn default() -> Self {
        TierParams {
            hit_set_count: 12,
            hit_set_period: 14_400,
            target_max_bytes: 0,
            target_max_objects: 0,
            min_read_recency_for_promote: 2,
            min_write_recency_for_promote: 2,
            cache_target_dirty_ratio: 400_000,
            cache_target_dirty_high_ratio: 600_000,
            cache_target_full_ratio: 800_000,
            cache_min_flush_age: 600,
            cache_min_evict_age: 1800,
        }
    }
}

/// The settable keys, in the order `pool get` lists them.
pub const TIER_KEYS: &[&str] = &[
    "hit_set_count",
    "hit_set_period",
    "target_max_bytes",
    "target_max_objects",
    "min_read_recency_for_promote",
    "min_write_recency_for_promote",
    "cache_target_dirty_ratio",
    "cache_target_dirty_high_ratio",
    "cache_target_full_ratio",
    "cache_min_flush_age",
    "cache_min_evict_age",
];

fn ratio(key: &str, value: &str) -> Result<u32, MapError> {
    let r: f64 = value
        .parse()
        .map_err(|_| MapError::Invalid(format!("{key} must be a number, not '{value}'")))?;
    if !(0.0..=1.0).contains(&r) {
        return Err(MapError::Invalid(format!(
            "{key} must be between 0 and 1, not {value}"
        )));
    }
    Ok((r * f64::from(RATIO_ONE)).round() as u32)
}

fn count<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, MapError> {
    value
        .parse()
        .map_err(|_| MapError::Invalid(format!("{key} must be a whole number ≥ 0, not '{value}'")))
}

/// A ratio in millionths as a decimal.
pub fn ratio_f64(r: u32) -> f64 {
    f64::from(r) / f64::from(RATIO_ONE)
}

/// A cache PG counts as full on its own at this many times its share of
/// the targets (`target / pg_num`), however empty the pool is; below it,
/// the pool's totals decide.
pub const PG_SHARE_CAP: u64 = 4;

impl TierParams {
    /// Set one key from its text; the whole set is checked before it is
    /// kept (dirty_high below dirty is refused). Returns whether it changed.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, MapError> {
        let mut next = self.clone();
        match key {
            "hit_set_count" => next.hit_set_count = count(key, value)?,
            "hit_set_period" => next.hit_set_period = count(key, value)?,
            "target_max_bytes" => next.target_max_bytes = count(key, value)?,
            "target_max_objects" => next.target_max_objects = count(key, value)?,
            "min_read_recency_for_promote" => {
                next.min_read_recency_for_promote = count(key, value)?
            }
            "min_write_recency_for_promote" => {
                next.min_write_recency_for_promote = count(key, value)?
            }
            "cache_target_dirty_ratio" => next.cache_target_dirty_ratio = ratio(key, value)?,
            "cache_target_dirty_high_ratio" => {
                next.cache_target_dirty_high_ratio = ratio(key, value)?
            }
            "cache_target_full_ratio" => next.cache_target_full_ratio = ratio(key, value)?,
            "cache_min_flush_age" => next.cache_min_flush_age = count(key, value)?,
            "cache_min_evict_age" => next.cache_min_evict_age = count(key, value)?,
            other => {
                return Err(MapError::Invalid(format!(
                    "unknown cache setting '{other}' (settable: {})",
                    TIER_KEYS.join(", ")
                )))
            }
        }
        next.validate()?;
        let changed = next != *self;
        *self = next;
        Ok(changed)
    }

    /// The value of `key` as JSON (ratios as decimals).
    pub fn get(&self, key: &str) -> Option<serde_json::Value> {
        use serde_json::json;
        Some(match key {
            "hit_set_count" => json!(self.hit_set_count),
            "hit_set_period" => json!(self.hit_set_period),
            "target_max_bytes" => json!(self.target_max_bytes),
            "target_max_objects" => json!(self.target_max_objects),
            "min_read_recency_for_promote" => json!(self.min_read_recency_for_promote),
            "min_write_recency_for_promote" => json!(self.min_write_recency_for_promote),
            "cache_target_dirty_ratio" => json!(ratio_f64(self.cache_target_dirty_ratio)),
            "cache_target_dirty_high_ratio" => {
                json!(ratio_f64(self.cache_target_dirty_high_ratio))
            }
            "cache_target_full_ratio" => json!(ratio_f64(self.cache_target_full_ratio)),
            "cache_min_flush_age" => json!(self.cache_min_flush_age),
            "cache_min_evict_age" => json!(self.cache_min_evict_age),
            _ => return None,
        })
    }

    pub fn validate(&self) -> Result<(), MapError> {
        if self.hit_set_count == 0 || self.hit_set_count > MAX_HIT_SET_COUNT {
            return Err(MapError::Invalid(format!(
                "hit_set_count {} must be between 1 and {MAX_HIT_SET_COUNT}",
                self.hit_set_count
            )));
        }
        if self.hit_set_period == 0 {
            return Err(MapError::Invalid(
                "hit_set_period must be at least 1 second".into(),
            ));
        }
        for (key, recency) in [
            (
                "min_read_recency_for_promote",
                self.min_read_recency_for_promote,
            ),
            (
                "min_write_recency_for_promote",
                self.min_write_recency_for_promote,
            ),
        ] {
            if recency > self.hit_set_count {
                return Err(MapError::Invalid(format!(
                    "{key} {recency} is more than hit_set_count {}: objects would never be promoted",
                    self.hit_set_count
                )));
            }
        }
        if self.cache_target_dirty_high_ratio < self.cache_target_dirty_ratio {
            return Err(MapError::Invalid(format!(
                "cache_target_dirty_high_ratio {} is below cache_target_dirty_ratio {}",
                ratio_f64(self.cache_target_dirty_high_ratio),
                ratio_f64(self.cache_target_dirty_ratio)
            )));
        }
        Ok(())
    }

    /// How full `objects` and `bytes` are against the targets divided by
    /// `divisor` (1: the whole pool; `pg_num`: one PG's share), in
    /// millionths, the fuller of the two; `None`: no target set.
    pub fn fullness(&self, objects: u64, bytes: u64, divisor: u64) -> Option<u64> {
        let ratio = |n: u64, target: u64| {
            (target > 0).then(|| {
                let share = (target / divisor.max(1)).max(1);
                let r = u128::from(n) * u128::from(RATIO_ONE) / u128::from(share);
                u64::try_from(r).unwrap_or(u64::MAX)
            })
        };
        ratio(objects, self.target_max_objects).max(ratio(bytes, self.target_max_bytes))
    }

    /// Neither target is set: the agent has nothing to measure fullness by.
    pub fn targets_unset(&self) -> bool {
        self.target_max_bytes == 0 && self.target_max_objects == 0
    }
}

/// A pool's place in cache tiering.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolTier {
    /// This pool is a cache over that base pool.
    pub tier_of: Option<PoolId>,
    /// The cache pool over this one, if any.
    pub cache: Option<PoolId>,
    /// Clients send this pool's ops to that cache pool (Ceph's
    /// read_tier and write_tier, always the same here).
    pub overlay: Option<PoolId>,
    /// Only meaningful on a cache pool.
    pub cache_mode: CacheMode,
    /// Epoch of the last change of `cache_mode` or of the overlay.
    pub mode_epoch: cairn_types::Epoch,
    pub params: TierParams,
}

impl Pool {
    /// Is this pool a cache over another one?
    pub fn is_cache(&self) -> bool {
        self.tier.tier_of.is_some()
    }
}

impl ClusterMap {
    fn pool_named(&self, name: &str) -> Result<&Pool, MapError> {
        self.pool_by_name(name)
            .ok_or_else(|| MapError::NoSuchPool(name.into()))
    }

    /// The pool an op on an object of `pool` is sent to: its overlay if it
    /// has one, else itself.
    pub fn op_target(&self, pool: PoolId) -> PoolId {
        self.pools
            .get(&pool)
            .and_then(|p| p.tier.overlay)
            .filter(|c| self.pools.contains_key(c))
            .unwrap_or(pool)
    }

    /// `osd tier add BASE CACHE`.
    pub fn tier_add(&mut self, base: &str, cache: &str) -> Result<bool, MapError> {
        let b = self.pool_named(base)?;
        let c = self.pool_named(cache)?;
        if b.id == c.id {
            return Err(MapError::Invalid(format!(
                "pool '{base}' cannot be a tier of itself"
            )));
        }
        if c.tier.tier_of == Some(b.id) {
            return Ok(false);
        }
        if let Some(of) = c.tier.tier_of {
            return Err(MapError::Invalid(format!(
                "pool '{cache}' is already a cache tier of pool {}",
                self.pool_name(of)
            )));
        }
        if c.tier.cache.is_some() {
            return Err(MapError::Invalid(format!(
                "pool '{cache}' has a cache tier itself: a cache over a cache is not supported"
            )));
        }
        if b.is_cache() {
            return Err(MapError::Invalid(format!(
                "pool '{base}' is a cache tier: a cache over a cache is not supported"
            )));
        }
        if let Some(other) = b.tier.cache {
            return Err(MapError::Invalid(format!(
                "pool '{base}' already has a cache tier, {}",
                self.pool_name(other)
            )));
        }
        let (bid, cid) = (b.id, c.id);
        let epoch = self.epoch + 1; // the epoch that will publish this change
        if let Some(p) = self.pools.get_mut(&bid) {
            p.tier.cache = Some(cid);
        }
        if let Some(p) = self.pools.get_mut(&cid) {
            p.tier.tier_of = Some(bid);
            p.tier.cache_mode = CacheMode::None;
            p.tier.mode_epoch = epoch;
        }
        Ok(true)
    }

    fn pool_name(&self, id: PoolId) -> String {
        self.pools
            .get(&id)
            .map_or_else(|| format!("id {id}"), |p| format!("'{}'", p.name))
    }

    /// The base pool id of cache pool `cache`, or an error naming why not.
    fn base_of(&self, cache: &str) -> Result<(PoolId, PoolId), MapError> {
        let c = self.pool_named(cache)?;
        let base = c.tier.tier_of.ok_or_else(|| {
            MapError::Invalid(format!(
                "pool '{cache}' is not a cache tier (see `osd tier add`)"
            ))
        })?;
        Ok((base, c.id))
    }

    /// `osd tier cache-mode CACHE MODE`. Going to `none` while clients are
    /// sent to the cache is allowed: it drains the cache.
    pub fn tier_cache_mode(&mut self, cache: &str, mode: CacheMode) -> Result<bool, MapError> {
        let (_, cid) = self.base_of(cache)?;
        let epoch = self.epoch + 1; // the epoch that will publish this change
        let p = self
            .pools
            .get_mut(&cid)
            .ok_or_else(|| MapError::NoSuchPool(cache.into()))?;
        if p.tier.cache_mode == mode {
            return Ok(false);
        }
        p.tier.cache_mode = mode;
        p.tier.mode_epoch = epoch;
        Ok(true)
    }

    /// `osd tier set-overlay BASE CACHE`.
    pub fn tier_set_overlay(&mut self, base: &str, cache: &str) -> Result<bool, MapError> {
        let (bid, cid) = self.base_of(cache)?;
        let b = self.pool_named(base)?;
        if b.id != bid {
            return Err(MapError::Invalid(format!(
                "pool '{cache}' is a cache tier of {}, not of '{base}'",
                self.pool_name(bid)
            )));
        }
        if b.tier.overlay == Some(cid) {
            return Ok(false);
        }
        let epoch = self.epoch + 1; // the epoch that will publish this change
        if let Some(p) = self.pools.get_mut(&bid) {
            p.tier.overlay = Some(cid);
        }
        if let Some(p) = self.pools.get_mut(&cid) {
            p.tier.mode_epoch = epoch;
        }
        Ok(true)
    }

    /// `osd tier remove-overlay BASE`. The caller (the monitor) checks
    /// first that the cache holds nothing dirty.
    pub fn tier_remove_overlay(&mut self, base: &str) -> Result<Option<PoolId>, MapError> {
        let b = self.pool_named(base)?;
        let Some(cid) = b.tier.overlay else {
            return Ok(None);
        };
        let bid = b.id;
        // (The cache's mode_epoch stays: no new dirty object can come of
        // this change, so its PGs' earlier counts still hold.)
        if let Some(p) = self.pools.get_mut(&bid) {
            p.tier.overlay = None;
        }
        Ok(Some(cid))
    }

    /// `osd tier rm BASE CACHE`. Refused while clients are still sent to
    /// the cache; the monitor checks that it holds nothing dirty.
    pub fn tier_rm(&mut self, base: &str, cache: &str) -> Result<bool, MapError> {
        let b = self.pool_named(base)?;
        let c = self.pool_named(cache)?;
        if c.tier.tier_of != Some(b.id) {
            return Ok(false);
        }
        if b.tier.overlay == Some(c.id) {
            return Err(MapError::Invalid(format!(
                "clients are still sent to '{cache}': `osd tier remove-overlay {base}` first"
            )));
        }
        let (bid, cid) = (b.id, c.id);
        if let Some(p) = self.pools.get_mut(&bid) {
            p.tier.cache = None;
        }
        if let Some(p) = self.pools.get_mut(&cid) {
            p.tier.tier_of = None;
            p.tier.cache_mode = CacheMode::None;
        }
        Ok(true)
    }

    /// `pool set CACHE KEY VALUE` for the cache keys ([`TIER_KEYS`]).
    pub fn set_tier_param(&mut self, name: &str, key: &str, value: &str) -> Result<bool, MapError> {
        let p = self
            .pools
            .values_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| MapError::NoSuchPool(name.into()))?;
        p.tier.params.set(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_crush::WEIGHT_ONE;

    fn map() -> ClusterMap {
        let mut map = ClusterMap::new("t".into());
        for id in 0..3 {
            map.osd_boot(id, format!("127.0.0.1:{}", 7000 + id), WEIGHT_ONE);
        }
        for name in ["base", "cache", "other"] {
            map.create_pool(name, 2, 1, 8).expect("pool");
        }
        map
    }

    fn err(r: Result<bool, MapError>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn a_tier_is_added_overlaid_and_removed_in_order() {
        let mut m = map();
        let base = m.pool_by_name("base").map(|p| p.id).expect("base");
        let cache = m.pool_by_name("cache").map(|p| p.id).expect("cache");
        assert_eq!(m.tier_add("base", "cache"), Ok(true));
        assert_eq!(m.tier_add("base", "cache"), Ok(false));
        assert_eq!(m.op_target(base), base, "no overlay yet");
        assert_eq!(m.tier_cache_mode("cache", CacheMode::Writeback), Ok(true));
        assert_eq!(m.tier_set_overlay("base", "cache"), Ok(true));
        assert_eq!(m.op_target(base), cache);
        assert_eq!(m.op_target(cache), cache);
        assert!(err(m.tier_rm("base", "cache")).contains("remove-overlay"));
        assert_eq!(m.tier_remove_overlay("base"), Ok(Some(cache)));
        assert_eq!(m.op_target(base), base);
        assert_eq!(m.tier_rm("base", "cache"), Ok(true));
        assert!(!m.pool(cache).expect("cache").is_cache());
        assert_eq!(m.pool(base).expect("base").tier, PoolTier::default());
    }

    #[test]
    fn bad_tiers_are_refused_and_change_nothing() {
        let mut m = map();
        assert!(err(m.tier_add("base", "base")).contains("itself"));
        assert_eq!(m.tier_add("base", "cache"), Ok(true));
        let before = m.clone();
        assert!(err(m.tier_add("other", "cache")).contains("already a cache tier"));
        assert!(err(m.tier_add("base", "other")).contains("already has a cache tier"));
        assert!(err(m.tier_add("cache", "other")).contains("cache over a cache"));
        assert!(err(m.tier_add("other", "base")).contains("cache over a cache"));
        assert!(err(m.tier_add("nope", "cache")).contains("does not exist"));
        assert!(err(m.tier_set_overlay("other", "cache")).contains("not of 'other'"));
        assert!(err(m.tier_cache_mode("other", CacheMode::Writeback)).contains("not a cache tier"));
        assert_eq!(m, before);
    }

    #[test]
    fn parameters_are_checked_as_a_set() {
        let mut p = TierParams::default();
        assert_eq!(p.set("cache_target_dirty_ratio", "0.5"), Ok(true));
        assert_eq!(p.cache_target_dirty_ratio, 500_000);
        let before = p.clone();
        for (k, v, why) in [
            ("cache_target_dirty_ratio", "1.5", "between 0 and 1"),
            ("cache_target_full_ratio", "-0.1", "between 0 and 1"),
            (
                "cache_target_dirty_high_ratio",
                "0.4",
                "below cache_target_dirty_ratio",
            ),
            (
                "cache_target_dirty_ratio",
                "0.7",
                "below cache_target_dirty_ratio",
            ),
            ("target_max_bytes", "lots", "whole number"),
            ("hit_set_count", "0", "between 1"),
            (
                "min_read_recency_for_promote",
                "13",
                "more than hit_set_count",
            ),
            ("cache_mode", "writeback", "unknown cache setting"),
        ] {
            let e = p.set(k, v).expect_err(k).to_string();
            assert!(e.contains(why), "{k}={v}: {e}");
        }
        assert_eq!(p, before);
        assert!(p.targets_unset());
        assert_eq!(p.set("target_max_objects", "1000"), Ok(true));
        assert!(!p.targets_unset());
        assert_eq!(
            p.get("cache_target_dirty_ratio"),
            Some(serde_json::json!(0.5))
        );
    }
}
