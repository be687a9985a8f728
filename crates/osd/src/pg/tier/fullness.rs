//! How full a cache PG counts as, for its agent (when to flush, when to
//! evict) and for admission (at 100% it takes no new object: writes to
//! objects it does not hold go to the base pool).
//!
//! The targets are the pool's. A PG judges by the pool's totals, which
//! the monitor sums from every PG's stats and sends each OSD after its
//! heartbeat ([`TierUsage`]), brought up to date with what this PG took
//! or dropped since it last reported, counted as if every PG took or
//! dropped as much: the totals lag by a heartbeat, and PGs filling (or
//! evicting) together would otherwise pass the target between two of them
//! (or each evict the whole excess). Hashing spreads objects unevenly,
//! so judging by the PG's share alone (Ceph's way) makes some PGs full
//! while the pool is far from it: they then pass writes to the slow pool,
//! and a client writing at random ends up with every op parked on their
//! objects. A PG counts on its own only past [`PG_SHARE_CAP`] times its
//! share, so no PG grows without bound when hashing is far off.
//!
//! Without totals from the monitor (none yet, or none for
//! [`TIER_USAGE_STALE`]) a PG falls back to its share of the targets.

use std::collections::HashMap;
use std::time::Duration;

use cairn_map::tier::RATIO_ONE;
use cairn_map::TierParams;
use cairn_types::PoolId;
use cairn_wire::TierPoolUsage;

pub use cairn_map::tier::PG_SHARE_CAP;

/// Pool totals older than this are not used (the monitor unreachable).
pub const TIER_USAGE_STALE: Duration = Duration::from_secs(10);

/// The latest pool totals this OSD has from the monitor.
#[derive(Debug, Default)]
pub struct TierUsage {
    pools: HashMap<PoolId, TierPoolUsage>,
    at: Duration,
}

impl TierUsage {
    /// Take the monitor's totals, received at `now` ([`crate::io::OsdIo::now`]).
    pub fn set(&mut self, pools: Vec<TierPoolUsage>, now: Duration) {
        self.pools = pools.into_iter().map(|u| (u.pool, u)).collect();
        self.at = now;
    }

    /// `pool`'s totals, if fresh.
    pub fn get(&self, pool: PoolId, now: Duration) -> Option<&TierPoolUsage> {
        if now.saturating_sub(self.at) > TIER_USAGE_STALE {
            return None;
        }
        self.pools.get(&pool)
    }
}

/// What one cache PG holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub objects: u64,
    pub bytes: u64,
    pub dirty: u64,
    pub dirty_bytes: u64,
}

/// How full a PG counts as, in millionths of the targets (0: no target).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Levels {
    pub full: u64,
    pub dirty: u64,
}

impl Levels {
    /// At the target: no new object is taken.
    pub fn is_full(&self) -> bool {
        self.full >= u64::from(RATIO_ONE)
    }
}

/// How full a PG holding `here` counts as, in a pool of `pg_num` PGs
/// whose totals are `pool` (if known), in which this PG last reported
/// `reported` (`None`: not yet this term).
pub fn levels(
    params: &TierParams,
    pg_num: u32,
    here: Contents,
    reported: Option<Contents>,
    pool: Option<&TierPoolUsage>,
) -> Levels {
    let share = |objects, bytes| {
        params
            .fullness(objects, bytes, u64::from(pg_num.max(1)))
            .unwrap_or(0)
    };
    let pg = Levels {
        full: share(here.objects, here.bytes),
        dirty: share(here.dirty, here.dirty_bytes),
    };
    let Some(pool) = pool.filter(|p| p.pgs_counted > 0) else {
        return pg;
    };
    let was = reported.unwrap_or(here);
    let pgs = u128::from(pg_num.max(pool.pgs_counted));
    // The pool now, as far as this PG can tell: its totals scaled up for
    // PGs not counted yet, with this PG's change since it reported. The
    // others' changes are not known until the next totals, and are taken
    // to be this PG's: PGs filling at once do not pass the target between
    // two reports, nor do PGs evicting at once each evict the whole
    // excess.
    let now = |total: u64, here: u64, was: u64| {
        let total = u128::from(total) * pgs / u128::from(pool.pgs_counted);
        let n = if here >= was {
            total + u128::from(here - was) * pgs
        } else {
            total.saturating_sub(u128::from(was - here) * pgs)
        };
        u64::try_from(n).unwrap_or(u64::MAX)
    };
    let whole = |objects, bytes| params.fullness(objects, bytes, 1).unwrap_or(0);
    let total = Levels {
        full: whole(
            now(pool.objects, here.objects, was.objects),
            now(pool.bytes, here.bytes, was.bytes),
        ),
        dirty: whole(
            now(pool.dirty, here.dirty, was.dirty),
            now(pool.dirty_bytes, here.dirty_bytes, was.dirty_bytes),
        ),
    };
    Levels {
        full: total.full.max(pg.full / PG_SHARE_CAP),
        dirty: total.dirty.max(pg.dirty / PG_SHARE_CAP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> TierParams {
        TierParams {
            target_max_objects: 96,
            target_max_bytes: 0,
            ..TierParams::default()
        }
    }

    fn objects(objects: u64, dirty: u64) -> Contents {
        Contents {
            objects,
            dirty,
            ..Contents::default()
        }
    }

    fn pool(objects: u64, dirty: u64, pgs_counted: u32) -> TierPoolUsage {
        TierPoolUsage {
            pool: 1,
            pgs_counted,
            objects,
            dirty,
            ..TierPoolUsage::default()
        }
    }

    #[test]
    fn without_totals_a_pg_judges_by_its_share() {
        // 16 PGs: a share of 6 objects.
        let l = levels(&params(), 16, objects(6, 3), None, None);
        assert_eq!(l.full, 1_000_000);
        assert_eq!(l.dirty, 500_000);
        assert!(l.is_full());
        let none = TierParams::default();
        assert_eq!(
            levels(&none, 16, objects(60, 60), None, None),
            Levels::default()
        );
    }

    #[test]
    fn a_pg_past_its_share_is_not_full_while_the_pool_is_not() {
        // The case measured in the document-004 runs: one PG holds 6 (its
        // share) while the pool holds 30 of 96.
        let l = levels(
            &params(),
            16,
            objects(6, 6),
            Some(objects(6, 6)),
            Some(&pool(30, 30, 16)),
        );
        assert!(!l.is_full(), "{l:?}");
        assert_eq!(l.full, 312_500);
        assert_eq!(l.dirty, 312_500);
        // At its cap (4 × 6) it is full on its own.
        let l = levels(&params(), 16, objects(24, 0), None, Some(&pool(30, 0, 16)));
        assert!(l.is_full(), "{l:?}");
        // The pool at its target: every PG is full, however little it holds.
        let l = levels(&params(), 16, objects(1, 0), None, Some(&pool(96, 0, 16)));
        assert!(l.is_full(), "{l:?}");
    }

    #[test]
    fn the_totals_are_brought_up_to_date_and_scaled_for_pgs_not_counted() {
        // Reported 10, holds 11 now: the pool may hold 16 more than it
        // said (every PG counted as taking one).
        let l = levels(
            &params(),
            16,
            objects(11, 0),
            Some(objects(10, 0)),
            Some(&pool(80, 0, 16)),
        );
        assert!(l.is_full(), "{l:?}");
        let l = levels(
            &params(),
            16,
            objects(11, 0),
            Some(objects(10, 0)),
            Some(&pool(40, 0, 16)),
        );
        assert_eq!(l.full, 56 * 1_000_000 / 96);
        // Dropped 2: every PG counted as dropping 2.
        let l = levels(
            &params(),
            16,
            objects(8, 0),
            Some(objects(10, 0)),
            Some(&pool(90, 0, 16)),
        );
        assert_eq!(l.full, 58 * 1_000_000 / 96);
        // Half the PGs counted: the pool is taken as twice what they hold.
        let l = levels(&params(), 16, objects(2, 0), None, Some(&pool(24, 0, 8)));
        assert_eq!(l.full, 500_000);
        // Totals with no PG counted are no totals.
        let l = levels(&params(), 16, objects(3, 0), None, Some(&pool(0, 0, 0)));
        assert_eq!(l.full, 500_000);
    }

    #[test]
    fn stale_totals_are_not_used() {
        let mut u = TierUsage::default();
        u.set(vec![pool(10, 0, 16)], Duration::from_secs(100));
        assert!(u.get(1, Duration::from_secs(105)).is_some());
        assert!(u.get(2, Duration::from_secs(105)).is_none());
        assert!(u.get(1, Duration::from_secs(111)).is_none());
    }
}
