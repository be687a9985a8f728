//! The cluster map: the one versioned description of the cluster that every
//! daemon and client shares — OSDs (address, up/down, in/out, up_thru,
//! lost), the CRUSH hierarchy and rules ([`crush`]: where each OSD sits, its
//! weight and class), pools (size, min_size, pg_num, CRUSH rule), PG
//! overrides (`pg_temp`), the PGs' past intervals ([`history`]), each
//! OSD's fullness ([`full`]), the fenced clients ([`blocklist`]) and the
//! options set at runtime ([`config_db`]) — and the placement computed from it alone.
//!
//! The monitor is the only writer; it bumps [`ClusterMap::epoch`] on every
//! change. Everyone else holds an immutable copy and computes, for any object,
//! its PG ([`ClusterMap::object_pg`]) and, for any PG, its *up* set (the
//! placement's OSDs that are up, [`ClusterMap::up`]) and its *acting* set
//! (who serves it: the up set, or a `pg_temp` override while the up set's
//! members are being backfilled, [`ClusterMap::acting`]). A PG's raw
//! placement is its pool's CRUSH rule evaluated over the `in` OSDs; it is
//! memoized per map ([`cache`]), since maps never change once published.
//! This crate must never do I/O.

pub mod blocklist;
mod cache;
pub mod config_db;
pub mod full;
mod hierarchy;
pub mod history;
mod pool_edit;
pub mod tier;
#[cfg(test)]
mod timing;

pub use blocklist::{Blocklist, BlocklistEntry};
pub use cairn_crush as crush;
pub use config_db::ConfigDb;
pub use full::{FullRatios, FullState, OsdUsage};
pub use history::{PastInterval, PgHistory};
pub use tier::{CacheMode, PoolTier, TierParams};

use std::collections::BTreeMap;

use cache::PlacementCache;
use cairn_crush::{CrushError, CrushMap, RuleId};
use cairn_placement::{pg_placement_seed, pg_seed};
use cairn_types::{Epoch, OsdId, PgId, PoolId};
use serde::{Deserialize, Serialize};

/// Weight 1.0 (one TiB) in the 16.16 fixed point that placement uses.
pub const WEIGHT_ONE: u32 = cairn_crush::WEIGHT_ONE;

/// Largest pg_num a pool may have.
pub const MAX_PG_NUM: u32 = 1 << 16;

/// Largest replication factor.
pub const MAX_POOL_SIZE: u32 = 10;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdInfo {
    pub id: OsdId,
    /// The OSD's public address, where clients, admin tools and the
    /// monitor reach it; set at boot.
    pub addr: String,
    /// The OSD's cluster address, where other OSDs reach it (replication,
    /// peering, recovery); set at boot.
    pub cluster_addr: String,
    pub up: bool,
    /// `in` OSDs take part in placement; `out` ones get no PGs. (How much
    /// data an `in` OSD gets is its CRUSH weight, in [`ClusterMap::crush`].)
    pub is_in: bool,
    /// Epoch of the OSD's latest boot: a restart is a new incarnation even if
    /// no map in between showed it down.
    pub up_from: Epoch,
    /// Epoch at which the OSD was last marked down (0 if never).
    pub down_at: Epoch,
    /// The newest epoch this OSD has asked the monitor to record as one it
    /// was alive through (Ceph's `up_thru`). A primary goes active in an
    /// interval only once its `up_thru` reaches the interval's first epoch,
    /// so an interval whose primary never got there cannot have served a
    /// write ([`PastInterval::maybe_went_rw`]).
    pub up_thru: Epoch,
    /// Epoch at which an administrator declared this OSD's data lost (0 if
    /// never): peering stops waiting for it.
    pub lost_at: Epoch,
    /// How full the OSD's store is, as the monitor last judged from its
    /// heartbeats ([`full`]); kept while the OSD is down.
    #[serde(default)]
    pub full: FullState,
}

/// The addresses an OSD announces at boot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdAddrs {
    /// For clients, admin tools and the monitor.
    pub public: String,
    /// For other OSDs.
    pub cluster: String,
}

impl From<String> for OsdAddrs {
    /// One address for both networks.
    fn from(addr: String) -> Self {
        OsdAddrs {
            cluster: addr.clone(),
            public: addr,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub id: PoolId,
    pub name: String,
    /// Number of copies.
    pub size: u32,
    /// Copies that must be up for the PG to serve I/O.
    pub min_size: u32,
    pub pg_num: u32,
    pub created: Epoch,
    /// The CRUSH rule placing its PGs.
    #[serde(default)]
    pub rule: RuleId,
    /// Compression of its data, over each OSD's own settings.
    pub compression: cairn_types::compression::PoolCompression,
    /// Applications that use it (`rbd`, ...): Ceph's application tags.
    pub application: std::collections::BTreeSet<String>,
    /// Its place in cache tiering ([`tier`]).
    pub tier: tier::PoolTier,
}

impl Pool {
    /// Check a pool's parameters; the error names the bad one.
    pub fn validate_params(size: u32, min_size: u32, pg_num: u32) -> Result<(), MapError> {
        if !pg_num.is_power_of_two() || pg_num > MAX_PG_NUM {
            return Err(MapError::Invalid(format!(
                "pg_num {pg_num} must be a power of two between 1 and {MAX_PG_NUM}"
            )));
        }
        if size == 0 || size > MAX_POOL_SIZE {
            return Err(MapError::Invalid(format!(
                "size {size} must be between 1 and {MAX_POOL_SIZE}"
            )));
        }
        if min_size == 0 || min_size > size {
            return Err(MapError::Invalid(format!(
                "min_size {min_size} must be between 1 and size ({size})"
            )));
        }
        Ok(())
    }

    pub fn pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        (0..self.pg_num).map(move |seed| PgId::new(self.id, seed))
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MapError {
    #[error("{0}")]
    Invalid(String),
    #[error("pool '{0}' already exists")]
    PoolExists(String),
    #[error("pool '{0}' does not exist")]
    NoSuchPool(String),
    #[error("osd.{0} does not exist")]
    NoSuchOsd(OsdId),
    #[error(transparent)]
    Crush(#[from] CrushError),
}

/// The acting set of a PG under one map: the OSDs that serve it, in order;
/// the first is the primary. Every member holds a complete copy (OSDs still
/// being backfilled are in the up set only).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Acting {
    pub osds: Vec<OsdId>,
    /// `up_from` of each member, so that a restarted member starts a new interval.
    pub incarnations: Vec<Epoch>,
}

/// Everything about a PG's placement whose change starts a new interval:
/// the up and acting sets, the incarnation of each of their members, and
/// the pool parameters that decide when it may serve.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PgMapping {
    pub up: Vec<OsdId>,
    pub acting: Acting,
    /// `up_from` of each member of `up`.
    pub up_incarnations: Vec<Epoch>,
    pub size: u32,
    pub min_size: u32,
    pub pg_num: u32,
}

impl PgMapping {
    pub fn primary(&self) -> Option<OsdId> {
        self.acting.primary()
    }

    /// Up members that are not acting: OSDs being backfilled.
    pub fn backfill_targets(&self) -> impl Iterator<Item = OsdId> + '_ {
        self.up
            .iter()
            .copied()
            .filter(|o| !self.acting.contains(*o))
    }

    /// Is `osd` in the up or the acting set?
    pub fn contains(&self, osd: OsdId) -> bool {
        self.up.contains(&osd) || self.acting.contains(osd)
    }
}

impl Acting {
    pub fn primary(&self) -> Option<OsdId> {
        self.osds.first().copied()
    }

    pub fn contains(&self, osd: OsdId) -> bool {
        self.osds.contains(&osd)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Random id of the cluster, fixed at creation.
    pub fsid: String,
    pub epoch: Epoch,
    pub osds: BTreeMap<OsdId, OsdInfo>,
    pub pools: BTreeMap<PoolId, Pool>,
    pub next_pool_id: PoolId,
    /// Acting sets that override the up set while its members are being
    /// backfilled; requested by the PG's primary, removed when done.
    pub pg_temp: BTreeMap<PgId, Vec<OsdId>>,
    /// Past intervals of every PG that changed interval since it was last
    /// recovered; see [`history`].
    pub pg_history: BTreeMap<PgId, PgHistory>,
    /// Clients whose ops every OSD refuses ([`blocklist`]).
    pub blocklist: Blocklist,
    /// Options set at runtime ([`config_db`]).
    pub config: ConfigDb,
    /// The CRUSH hierarchy and rules. Changed only through methods that
    /// also forget `placements`.
    crush: CrushMap,
    /// Raw placements computed so far; empty in a clone, never serialized,
    /// never compared. Every method that changes what
    /// [`ClusterMap::raw_placement`] reads (pools, `is_in`, CRUSH) clears it.
    #[serde(skip)]
    placements: PlacementCache,
}

impl ClusterMap {
    /// A new map whose default rule puts replicas on distinct OSDs (the
    /// failure domain of a cluster on one machine); the monitor makes its
    /// maps with [`ClusterMap::with_crush`] and its configured hierarchy.
    pub fn new(fsid: String) -> Self {
        Self::with_crush(fsid, CrushMap::single_machine())
    }

    /// A new map with the CRUSH map `crush` (no OSDs in it yet).
    pub fn with_crush(fsid: String, crush: CrushMap) -> Self {
        Self {
            fsid,
            epoch: 1,
            osds: BTreeMap::new(),
            pools: BTreeMap::new(),
            next_pool_id: 1,
            pg_temp: BTreeMap::new(),
            pg_history: BTreeMap::new(),
            blocklist: Blocklist::default(),
            config: ConfigDb::default(),
            crush,
            placements: PlacementCache::default(),
        }
    }

    /// The map a daemon holds before it has any: epoch 0, older than every
    /// map a monitor publishes.
    pub fn before_first() -> Self {
        Self {
            epoch: 0,
            ..Self::new(String::new())
        }
    }

    pub fn pool_by_name(&self, name: &str) -> Option<&Pool> {
        self.pools.values().find(|p| p.name == name)
    }

    pub fn pool(&self, id: PoolId) -> Option<&Pool> {
        self.pools.get(&id)
    }

    /// The PG an object of `pool` belongs to.
    pub fn object_pg(&self, pool: &Pool, object: &str) -> PgId {
        PgId::new(pool.id, pg_seed(object, pool.pg_num))
    }

    /// The failure domain `osd` counts in for `pg`'s pool: the item of the
    /// pool rule's failure-domain type above it (`None`: not placed under
    /// one, or no such pool).
    pub fn failure_domain(&self, pg: PgId, osd: OsdId) -> Option<cairn_crush::ItemId> {
        let pool = self.pools.get(&pg.pool)?;
        let rule = self.crush.rule(pool.rule)?;
        self.crush.ancestor_of_type(osd, rule.failure_domain)
    }

    /// Placement ignoring up/down: the pool's CRUSH rule over the `in` OSDs
    /// (at most `size` distinct OSDs in distinct failure domains, in order).
    pub fn raw_placement(&self, pg: PgId) -> Vec<OsdId> {
        let Some(pool) = self.pools.get(&pg.pool) else {
            return Vec::new();
        };
        self.placements.get_or_compute(&self.pools, pg, || {
            self.crush.map_rule(
                pool.rule,
                pg_placement_seed(pg.pool, pg.seed),
                pool.size as usize,
                |osd| self.osds.get(&osd).is_some_and(|o| o.is_in),
            )
        })
    }

    /// The up set: the raw placement without the OSDs that are down.
    pub fn up(&self, pg: PgId) -> Vec<OsdId> {
        let mut up = self.raw_placement(pg);
        up.retain(|&osd| self.is_up(osd));
        up
    }

    /// The acting set: the PG's `pg_temp` without its down members if that
    /// leaves any, else the up set.
    pub fn acting(&self, pg: PgId) -> Acting {
        let temp: Vec<OsdId> = self
            .pg_temp
            .get(&pg)
            .map(|t| t.iter().copied().filter(|&o| self.is_up(o)).collect())
            .unwrap_or_default();
        let osds = if temp.is_empty() { self.up(pg) } else { temp };
        let incarnations = osds.iter().map(|o| self.incarnation(*o)).collect();
        Acting { osds, incarnations }
    }

    /// Everything about `pg`'s placement whose change starts a new interval.
    pub fn mapping(&self, pg: PgId) -> PgMapping {
        let up = self.up(pg);
        let up_incarnations = up.iter().map(|o| self.incarnation(*o)).collect();
        let (size, min_size, pg_num) = self
            .pools
            .get(&pg.pool)
            .map_or((0, 0, 0), |p| (p.size, p.min_size, p.pg_num));
        PgMapping {
            acting: self.acting(pg),
            up,
            up_incarnations,
            size,
            min_size,
            pg_num,
        }
    }

    /// The `up_from` of an OSD (0 if unknown).
    fn incarnation(&self, osd: OsdId) -> Epoch {
        self.osds.get(&osd).map_or(0, |o| o.up_from)
    }

    /// Was `osd` declared lost after `epoch`, so that nothing it held in an
    /// interval starting at `epoch` is to be waited for?
    pub fn lost_since(&self, osd: OsdId, epoch: Epoch) -> bool {
        self.osds.get(&osd).is_some_and(|o| o.lost_at > epoch)
    }

    pub fn up_thru(&self, osd: OsdId) -> Epoch {
        self.osds.get(&osd).map_or(0, |o| o.up_thru)
    }

    pub fn is_up(&self, osd: OsdId) -> bool {
        self.osds.get(&osd).is_some_and(|o| o.up)
    }

    /// The public address of `osd` if it is up: where clients and admin
    /// tools reach it.
    pub fn osd_addr(&self, osd: OsdId) -> Option<&str> {
        self.osds
            .get(&osd)
            .filter(|o| o.up)
            .map(|o| o.addr.as_str())
    }

    /// The cluster address of `osd` if it is up: where its peers reach it.
    pub fn osd_cluster_addr(&self, osd: OsdId) -> Option<&str> {
        self.osds
            .get(&osd)
            .filter(|o| o.up)
            .map(|o| o.cluster_addr.as_str())
    }

    /// Every PG of every pool.
    pub fn all_pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        self.pools.values().flat_map(|p| p.pgs())
    }

    // ----- mutations (monitor only); each returns whether the map changed -----

    /// Record a boot from an OSD that states no CRUSH location: a new OSD is
    /// added (in) and, if not in the CRUSH map yet, placed under
    /// `host=localhost root=default` with CRUSH weight `weight`.
    pub fn osd_boot(&mut self, id: OsdId, addr: String, weight: u32) {
        let report = cairn_crush::DeviceReport::unlocated(weight);
        let result = self.osd_boot_with(id, addr, &report);
        debug_assert!(
            result.is_ok(),
            "the default location was refused: {result:?}"
        );
    }

    /// Record that `osd` was alive through `epoch` (it is about to serve as
    /// a primary in an interval that started then). Only ever raises it.
    pub fn set_up_thru(&mut self, osd: OsdId, epoch: Epoch) -> bool {
        match self.osds.get_mut(&osd) {
            Some(info) if info.up && info.up_thru < epoch => {
                info.up_thru = epoch;
                true
            }
            _ => false,
        }
    }

    /// Declare a down OSD's data lost, so peering stops waiting for it.
    pub fn mark_lost(&mut self, osd: OsdId) -> Result<bool, MapError> {
        let next = self.epoch + 1;
        let info = self.osds.get_mut(&osd).ok_or(MapError::NoSuchOsd(osd))?;
        if info.up {
            return Err(MapError::Invalid(format!(
                "osd.{osd} is up: only a down OSD can be marked lost"
            )));
        }
        if info.lost_at >= info.up_from {
            return Ok(false); // already lost since its latest boot
        }
        info.lost_at = next;
        Ok(true)
    }

    /// Set (or, with an empty list or one equal to the up set, remove) the
    /// PG's `pg_temp`. Every member must exist and be distinct.
    pub fn set_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>) -> Result<bool, MapError> {
        let pool = self
            .pools
            .get(&pg.pool)
            .ok_or_else(|| MapError::NoSuchPool(format!("id {}", pg.pool)))?;
        if pg.seed >= pool.pg_num {
            return Err(MapError::Invalid(format!("pg {pg} does not exist")));
        }
        if let Some(&osd) = osds.iter().find(|o| !self.osds.contains_key(o)) {
            return Err(MapError::NoSuchOsd(osd));
        }
        let mut sorted = osds.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != osds.len() || osds.len() > MAX_POOL_SIZE as usize {
            return Err(MapError::Invalid(format!(
                "pg_temp {osds:?} is not a set of OSDs"
            )));
        }
        if osds.is_empty() || osds == self.up(pg) {
            return Ok(self.pg_temp.remove(&pg).is_some());
        }
        Ok(self.pg_temp.insert(pg, osds.clone()).as_ref() != Some(&osds))
    }

    pub fn mark_down(&mut self, id: OsdId) -> bool {
        let next = self.epoch + 1;
        match self.osds.get_mut(&id) {
            Some(info) if info.up => {
                info.up = false;
                info.down_at = next;
                true
            }
            _ => false,
        }
    }

    pub fn set_in(&mut self, id: OsdId, is_in: bool) -> Result<bool, MapError> {
        let info = self.osds.get_mut(&id).ok_or(MapError::NoSuchOsd(id))?;
        let changed = info.is_in != is_in;
        info.is_in = is_in;
        self.placements.clear();
        Ok(changed)
    }

    /// Create a pool placed by the default rule; see
    /// [`ClusterMap::create_pool_with_rule`].
    pub fn create_pool(
        &mut self,
        name: &str,
        size: u32,
        min_size: u32,
        pg_num: u32,
    ) -> Result<PoolId, MapError> {
        self.create_pool_with_rule(name, size, min_size, pg_num, None)
    }

    /// Create a pool placed by CRUSH rule `rule` (default:
    /// `replicated_rule`). Refused if the rule cannot place `size` replicas
    /// on the `in` OSDs now, with the reason.
    pub fn create_pool_with_rule(
        &mut self,
        name: &str,
        size: u32,
        min_size: u32,
        pg_num: u32,
        rule: Option<&str>,
    ) -> Result<PoolId, MapError> {
        validate_pool_name(name)?;
        Pool::validate_params(size, min_size, pg_num)?;
        if self.pool_by_name(name).is_some() {
            return Err(MapError::PoolExists(name.to_string()));
        }
        let rule = self
            .crush
            .rule_by_name(rule.unwrap_or(cairn_crush::DEFAULT_RULE))?
            .id;
        self.check_rule(rule, size)?;
        let id = self.next_pool_id;
        self.next_pool_id += 1;
        let pool = Pool {
            id,
            name: name.to_string(),
            size,
            min_size,
            pg_num,
            created: self.epoch + 1,
            rule,
            compression: Default::default(),
            application: Default::default(),
            tier: Default::default(),
        };
        self.pools.insert(id, pool);
        self.placements.clear();
        Ok(id)
    }

    /// Raise pool `name`'s pg_num to `pg_num` (a power of two): every PG
    /// splits into the PGs its objects' placement hash picks under the new
    /// number (seed `s` of `n` PGs into seeds `s + k·n`). The OSDs holding a
    /// parent split their copy when they see this map, and each child's
    /// history starts with its parent's (see [`history`]), so the child's
    /// primary finds the copies wherever CRUSH now places it. Returns
    /// whether anything changed; shrinking (merging PGs) is refused.
    pub fn set_pg_num(&mut self, name: &str, pg_num: u32) -> Result<bool, MapError> {
        let pool = self
            .pools
            .values_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| MapError::NoSuchPool(name.into()))?;
        if !pg_num.is_power_of_two() || pg_num > MAX_PG_NUM {
            return Err(MapError::Invalid(format!(
                "pg_num {pg_num} must be a power of two between 1 and {MAX_PG_NUM}"
            )));
        }
        if pg_num < pool.pg_num {
            return Err(MapError::Invalid(format!(
                "pg_num {pg_num} is smaller than pool '{name}''s {}: PGs can only split, \
                 merging them is not supported",
                pool.pg_num
            )));
        }
        if pg_num == pool.pg_num {
            return Ok(false);
        }
        pool.pg_num = pg_num;
        self.placements.clear();
        Ok(true)
    }

    pub fn remove_pool(&mut self, name: &str) -> Result<PoolId, MapError> {
        let id = self
            .pool_by_name(name)
            .ok_or_else(|| MapError::NoSuchPool(name.into()))?
            .id;
        let tier = &self.pools[&id].tier;
        if let Some(other) = tier.cache.or(tier.tier_of) {
            let other = self.pools.get(&other).map_or("?", |p| p.name.as_str());
            return Err(MapError::Invalid(format!(
                "pool '{name}' is in a cache tier with '{other}': `osd tier rm` it first"
            )));
        }
        self.pools.remove(&id);
        self.placements.clear();
        self.pg_temp.retain(|pg, _| pg.pool != id);
        self.pg_history.retain(|pg, _| pg.pool != id);
        Ok(id)
    }
}

/// Pool names: 1–64 characters of `[A-Za-z0-9_.-]`, not starting with `.`.
pub fn validate_pool_name(name: &str) -> Result<(), MapError> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if name.is_empty() || name.len() > 64 || !ok_chars || name.starts_with('.') {
        return Err(MapError::Invalid(format!(
            "invalid pool name '{name}': use 1-64 characters of A-Z a-z 0-9 _ . -"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_with(osds: u32) -> ClusterMap {
        let mut map = ClusterMap::new("test".into());
        for id in 0..osds {
            map.osd_boot(id, format!("127.0.0.1:{}", 7000 + id), WEIGHT_ONE);
        }
        map.create_pool("rbd", 3, 2, 64).unwrap();
        map
    }

    #[test]
    fn acting_sets_are_distinct_and_drop_down_osds() {
        let mut map = map_with(5);
        let pool = map.pool_by_name("rbd").unwrap().clone();
        for pg in pool.pgs() {
            let acting = map.acting(pg);
            assert_eq!(acting.osds.len(), 3, "{pg}");
        }
        map.mark_down(2);
        for pg in pool.pgs() {
            let raw = map.raw_placement(pg);
            let acting = map.acting(pg);
            assert!(!acting.contains(2));
            assert_eq!(acting.osds.len(), raw.iter().filter(|&&o| o != 2).count());
        }
    }

    #[test]
    fn out_osds_get_no_placement() {
        let mut map = map_with(4);
        map.set_in(1, false).unwrap();
        let pool = map.pool_by_name("rbd").unwrap().clone();
        for pg in pool.pgs() {
            assert!(!map.raw_placement(pg).contains(&1));
            assert_eq!(map.acting(pg).osds.len(), 3);
        }
    }

    #[test]
    fn restart_changes_the_acting_incarnation() {
        let mut map = map_with(3);
        let pg = PgId::new(1, 0);
        let before = map.acting(pg);
        map.epoch += 1;
        map.osd_boot(before.osds[1], "127.0.0.1:1".into(), WEIGHT_ONE);
        let after = map.acting(pg);
        assert_eq!(before.osds, after.osds);
        assert_ne!(before, after);
    }

    #[test]
    fn public_and_cluster_addresses_are_kept_apart() {
        let mut map = map_with(3);
        let report = cairn_crush::DeviceReport::unlocated(WEIGHT_ONE);
        let addrs = OsdAddrs {
            public: "10.0.0.1:6800".into(),
            cluster: "10.1.0.1:6801".into(),
        };
        map.osd_boot_with(1, addrs, &report).unwrap();
        assert_eq!(map.osd_addr(1), Some("10.0.0.1:6800"));
        assert_eq!(map.osd_cluster_addr(1), Some("10.1.0.1:6801"));
        // One address serves both networks.
        assert_eq!(map.osd_addr(0), Some("127.0.0.1:7000"));
        assert_eq!(map.osd_cluster_addr(0), Some("127.0.0.1:7000"));
        // A down OSD has no address to reach.
        map.mark_down(1);
        assert_eq!((map.osd_addr(1), map.osd_cluster_addr(1)), (None, None));
        assert_eq!(map.osds[&1].cluster_addr, "10.1.0.1:6801");
    }

    #[test]
    fn pool_parameters_are_checked() {
        let mut map = map_with(3);
        assert!(matches!(
            map.create_pool("rbd", 3, 2, 8),
            Err(MapError::PoolExists(_))
        ));
        assert!(map.create_pool("a", 3, 2, 12).is_err());
        assert!(map.create_pool("a", 0, 0, 8).is_err());
        assert!(map.create_pool("a", 2, 3, 8).is_err());
        assert!(map.create_pool("bad/name", 2, 1, 8).is_err());
        assert!(map.create_pool("a", 2, 1, 8).is_ok());
        assert!(map.remove_pool("nope").is_err());
        assert!(map.remove_pool("a").is_ok());
    }
}
