//! Past intervals: what a PG's primary must know about the PG's earlier
//! acting sets before it may serve again (Ceph's `PastIntervals`).
//!
//! An *interval* is a run of map epochs over which a PG's [`PgMapping`]
//! (up and acting sets, their members' incarnations, pool size and
//! min_size) did not change. A write is acknowledged only once every member
//! of the acting set of its interval has it, so for every earlier interval
//! that may have acknowledged writes, at least one of its acting members
//! must be heard from before the PG goes active again — otherwise the PG
//! could serve data older than an acknowledged write. An interval *may have
//! gone read-write* only if its acting set had at least `min_size` members
//! and its primary's `up_thru` reached the interval's first epoch (a
//! primary raises its `up_thru` through the monitor before going active).
//!
//! The monitor, which sees every epoch, keeps the closed intervals of every
//! PG in the map ([`ClusterMap::pg_history`]) from the moment the PG changes
//! interval until its primary reports it recovered (every acting member
//! holds every object) in a later interval: from then on, that interval's
//! members alone hold everything that was ever acknowledged, and the older
//! intervals are forgotten. A PG with no entry has not changed interval
//! since it was last recovered. A PG created by a split inherits its
//! parent's history, the interval the split closed included.

use cairn_types::{Epoch, OsdId, PgId};
use serde::{Deserialize, Serialize};

use crate::{ClusterMap, PgMapping};

/// One closed interval of a PG.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastInterval {
    /// First epoch of the interval. When the PG had no history entry when
    /// this interval closed, the true first epoch is not known and this is a
    /// lower bound: the newest of the pool's creation and the acting
    /// members' `up_from` (the interval cannot have started earlier).
    pub first: Epoch,
    /// Last epoch of the interval.
    pub last: Epoch,
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// Could the PG have acknowledged writes in this interval?
    pub maybe_went_rw: bool,
}

/// A PG's history since it was last recovered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgHistory {
    /// First epoch of the current interval.
    pub same_interval_since: Epoch,
    /// Closed intervals, oldest first.
    pub intervals: Vec<PastInterval>,
}

/// Closed intervals kept per PG beyond which the oldest read-only ones
/// (which never bind peering) are dropped. Read-write intervals are never
/// dropped, only those another read-write interval makes redundant.
pub const MAX_INTERVALS_PER_PG: usize = 64;

impl ClusterMap {
    /// Record in this map (the successor of `prev`, with its epoch already
    /// set) the intervals that the change from `prev` closes, after dropping
    /// the `pg_temp`s that no longer change anything. The monitor calls this
    /// for every new epoch.
    pub fn advance_history(&mut self, prev: &ClusterMap) {
        assert!(
            self.epoch > prev.epoch,
            "history advanced from epoch {} to {}",
            prev.epoch,
            self.epoch
        );
        self.pg_history
            .retain(|pg, _| prev.pools.get(&pg.pool).is_some_and(|p| pg.seed < p.pg_num));
        self.clean_pg_temps();
        self.prime_pg_temps(prev);
        if !self.placement_changed(prev) {
            return;
        }
        let pgs: Vec<PgId> = prev
            .all_pgs()
            .filter(|pg| self.pools.contains_key(&pg.pool))
            .collect();
        for pg in pgs {
            let before = prev.mapping(pg);
            let after = self.mapping(pg);
            if before == after {
                continue;
            }
            let closed = prev.closed_interval(pg, &before, self.epoch - 1);
            let entry = self.pg_history.entry(pg).or_insert_with(|| PgHistory {
                same_interval_since: 0,
                intervals: Vec::new(),
            });
            entry.same_interval_since = self.epoch;
            push_interval(&mut entry.intervals, closed);
        }
        self.seed_split_history(prev);
    }

    /// A PG split off by a pg_num increase starts with its parent's
    /// history, the parent's interval that the split closed included: its
    /// objects are wherever the parent's were, and its primary must hear
    /// from them before serving.
    fn seed_split_history(&mut self, prev: &ClusterMap) {
        let grown: Vec<(cairn_types::PoolId, u32, u32)> = self
            .pools
            .values()
            .filter_map(|p| {
                let old = prev.pools.get(&p.id)?.pg_num;
                (p.pg_num > old).then_some((p.id, old, p.pg_num))
            })
            .collect();
        for (pool, old, new) in grown {
            for seed in old..new {
                let parent = PgId::new(pool, seed & (old - 1));
                let Some(history) = self.pg_history.get(&parent).cloned() else {
                    continue;
                };
                assert_eq!(
                    history.same_interval_since, self.epoch,
                    "pg {parent} split without a new interval"
                );
                self.pg_history.insert(PgId::new(pool, seed), history);
            }
        }
    }

    /// The interval of `pg` (mapped as `mapping` in this map) closing at
    /// `last`.
    fn closed_interval(&self, pg: PgId, mapping: &PgMapping, last: Epoch) -> PastInterval {
        let acting = mapping.acting.osds.clone();
        let primary = mapping.primary();
        let first = match self.pg_history.get(&pg) {
            Some(h) => h.same_interval_since,
            None => {
                let created = self.pools.get(&pg.pool).map_or(0, |p| p.created);
                let newest_boot = mapping.acting.incarnations.iter().copied().max();
                created.max(newest_boot.unwrap_or(0))
            }
        };
        let maybe_went_rw = acting.len() as u32 >= mapping.min_size.max(1)
            && primary.is_some_and(|p| self.up_thru(p) >= first);
        PastInterval {
            first,
            last,
            acting,
            primary,
            maybe_went_rw,
        }
    }

    /// Drop every `pg_temp` whose up members are none or exactly the up set
    /// (in order): the acting set is the same without it, and a stale
    /// `pg_temp` would otherwise come back into force when its down members
    /// return.
    fn clean_pg_temps(&mut self) {
        let redundant: Vec<PgId> = self
            .pg_temp
            .iter()
            .filter(|(pg, temp)| {
                let live: Vec<OsdId> = temp.iter().copied().filter(|&o| self.is_up(o)).collect();
                live.is_empty() || live == self.up(**pg)
            })
            .map(|(pg, _)| *pg)
            .collect();
        for pg in redundant {
            self.pg_temp.remove(&pg);
        }
    }

    /// An OSD that comes up as a PG's up primary while the PG's acting
    /// primary stays up and in the up set leaves that primary serving, at
    /// the head of the new up set (Ceph's primed `pg_temp`). The returning
    /// OSD would otherwise peer first, from a cold store and behind the
    /// others, only to stand aside for a member that holds everything: two
    /// peerings where clients wait instead of one. Its peering asks for the
    /// up order once it holds everything.
    fn prime_pg_temps(&mut self, prev: &ClusterMap) {
        let returned = |m: &ClusterMap| m.osds.keys().any(|&o| m.is_up(o) && !prev.is_up(o));
        if !returned(self) {
            return;
        }
        let pgs: Vec<PgId> = prev
            .all_pgs()
            .filter(|pg| self.pools.contains_key(&pg.pool) && !self.pg_temp.contains_key(pg))
            .collect();
        for pg in pgs {
            let Some(serving) = prev.acting(pg).primary() else {
                continue;
            };
            let up = self.up(pg);
            let Some(&first) = up.first() else {
                continue;
            };
            if first == serving
                || prev.is_up(first)
                || !self.is_up(serving)
                || !up.contains(&serving)
            {
                continue;
            }
            let mut temp = vec![serving];
            temp.extend(up.iter().copied().filter(|&o| o != serving));
            self.pg_temp.insert(pg, temp);
        }
    }

    /// Did anything that placement or interval identity depends on change
    /// between `prev` and this map? (`up_thru`, `lost_at` and the history
    /// itself do not start intervals.) Anything new that placement reads
    /// must be compared here (the CRUSH map holds every OSD's position,
    /// weight and class, and the rules).
    fn placement_changed(&self, prev: &ClusterMap) -> bool {
        let osd_key = |m: &ClusterMap| -> Vec<(OsdId, bool, bool, Epoch)> {
            m.osds
                .values()
                .map(|o| (o.id, o.up, o.is_in, o.up_from))
                .collect()
        };
        self.pools != prev.pools
            || self.pg_temp != prev.pg_temp
            || osd_key(self) != osd_key(prev)
            || self.crush != prev.crush
    }

    /// The primary of `pg` reports it recovered in the interval that started
    /// at `since` with acting set `acting`: if that is still the current
    /// interval, its past intervals are no longer needed. Returns whether
    /// the history changed.
    pub fn trim_history(&mut self, pg: PgId, since: Epoch, acting: &[OsdId]) -> bool {
        let Some(entry) = self.pg_history.get(&pg) else {
            return false;
        };
        let current = self.acting(pg);
        if entry.same_interval_since > since || current.osds != acting {
            return false;
        }
        self.pg_history.remove(&pg);
        true
    }

    /// The closed intervals of `pg` that may have acknowledged writes.
    pub fn rw_intervals(&self, pg: PgId) -> impl Iterator<Item = &PastInterval> {
        self.pg_history
            .get(&pg)
            .into_iter()
            .flat_map(|h| h.intervals.iter())
            .filter(|i| i.maybe_went_rw)
    }
}

/// Append a closed interval. A read-write interval whose acting set
/// contains another read-write interval's acting set adds no requirement
/// (hearing from a member of the smaller set hears from one of the larger),
/// so the larger one is dropped. Beyond [`MAX_INTERVALS_PER_PG`], the
/// oldest read-only intervals go; read-write ones are never forgotten.
fn push_interval(intervals: &mut Vec<PastInterval>, new: PastInterval) {
    let contains = |big: &[OsdId], small: &[OsdId]| small.iter().all(|o| big.contains(o));
    if new.maybe_went_rw {
        if intervals
            .iter()
            .any(|i| i.maybe_went_rw && contains(&new.acting, &i.acting))
        {
            return;
        }
        intervals.retain(|i| !(i.maybe_went_rw && contains(&i.acting, &new.acting)));
    }
    intervals.push(new);
    while intervals.len() > MAX_INTERVALS_PER_PG {
        match intervals.iter().position(|i| !i.maybe_went_rw) {
            Some(pos) => {
                intervals.remove(pos);
            }
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WEIGHT_ONE;
    use std::collections::BTreeMap;

    fn map_with(osds: u32) -> ClusterMap {
        let mut map = ClusterMap::new("test".into());
        for id in 0..osds {
            map.osd_boot(id, format!("127.0.0.1:{}", 7000 + id), WEIGHT_ONE);
        }
        map.create_pool("rbd", 3, 2, 8).unwrap();
        map
    }

    /// Apply `change` as the monitor does: next epoch, then history.
    fn step(map: &ClusterMap, change: impl FnOnce(&mut ClusterMap)) -> ClusterMap {
        let mut next = map.clone();
        change(&mut next);
        next.epoch = map.epoch + 1;
        next.advance_history(map);
        next
    }

    #[test]
    fn an_interval_went_rw_only_if_its_primary_raised_up_thru() {
        let map = map_with(4);
        let pg = PgId::new(1, 0);
        let acting = map.acting(pg).osds;
        let primary = acting[0];
        // The primary goes active: up_thru reaches the interval's start.
        // (The OSDs booted, and the pool was made, in epoch 2.)
        let map = step(&map, |m| {
            m.set_up_thru(primary, 2);
        });
        assert!(map.pg_history.is_empty(), "up_thru starts no interval");
        let victim = acting[2];
        let map = step(&map, |m| {
            m.mark_down(victim);
        });
        let h = &map.pg_history[&pg];
        assert_eq!(h.same_interval_since, map.epoch);
        assert_eq!(h.intervals.len(), 1);
        assert!(h.intervals[0].maybe_went_rw);
        assert_eq!(h.intervals[0].acting, acting);
        // The next interval's primary never raises up_thru: not rw.
        let next_primary = map.acting(pg).osds[0];
        let epoch_before = map.epoch;
        let map = step(&map, |m| {
            m.mark_down(next_primary);
        });
        let h = &map.pg_history[&pg];
        assert_eq!(h.intervals.len(), 2);
        let second = &h.intervals[1];
        assert_eq!(second.first, epoch_before);
        assert!(!second.maybe_went_rw, "{second:?}");
        assert_eq!(map.rw_intervals(pg).count(), 1);
    }

    #[test]
    fn trimming_forgets_only_the_current_interval_recovered() {
        let map = map_with(4);
        let pg = PgId::new(1, 0);
        let victim = map.acting(pg).osds[1];
        let mut map = step(&map, |m| {
            m.mark_down(victim);
        });
        let since = map.pg_history[&pg].same_interval_since;
        let acting = map.acting(pg).osds;
        assert!(!map.trim_history(pg, since, &[99]), "another acting set");
        assert!(
            !map.trim_history(pg, since - 1, &acting),
            "an older interval"
        );
        assert!(map.trim_history(pg, since, &acting));
        assert!(!map.pg_history.contains_key(&pg));
    }

    #[test]
    fn a_rw_interval_containing_another_adds_no_requirement() {
        let mut intervals = Vec::new();
        let iv = |acting: Vec<OsdId>, rw| PastInterval {
            first: 1,
            last: 2,
            primary: acting.first().copied(),
            acting,
            maybe_went_rw: rw,
        };
        push_interval(&mut intervals, iv(vec![0, 1, 2], true));
        push_interval(&mut intervals, iv(vec![0, 1], true));
        assert_eq!(intervals.len(), 1, "{{0,1,2}} is implied by {{0,1}}");
        push_interval(&mut intervals, iv(vec![0, 1, 3], true));
        assert_eq!(intervals.len(), 1, "{{0,1,3}} is implied by {{0,1}}");
        push_interval(&mut intervals, iv(vec![3], true));
        push_interval(&mut intervals, iv(vec![4], false));
        assert_eq!(intervals.len(), 3);
        for _ in 0..MAX_INTERVALS_PER_PG {
            push_interval(&mut intervals, iv(vec![5], false));
        }
        assert_eq!(intervals.len(), MAX_INTERVALS_PER_PG);
        assert_eq!(intervals.iter().filter(|i| i.maybe_went_rw).count(), 2);
    }

    #[test]
    fn pg_temp_overrides_acting_and_up_thru_or_lost_do_not_start_intervals() {
        let map = map_with(5);
        let pg = PgId::new(1, 3);
        let up = map.up(pg);
        let spare = (0..5).find(|o| !up.contains(o)).unwrap();
        let temp = vec![spare, up[1]];
        let map = step(&map, |m| {
            assert!(m.set_pg_temp(pg, temp.clone()).unwrap());
        });
        assert_eq!(map.acting(pg).osds, temp);
        assert_eq!(map.up(pg), up);
        assert_eq!(map.mapping(pg).backfill_targets().count(), 2);
        assert!(map.pg_history.contains_key(&pg));
        // A down pg_temp member leaves the others acting.
        let map = step(&map, |m| {
            m.mark_down(spare);
        });
        assert_eq!(map.acting(pg).osds, vec![up[1]]);
        let before = map.pg_history.clone();
        let map = step(&map, |m| {
            m.set_up_thru(up[1], 10);
            m.mark_lost(spare).unwrap();
        });
        assert_eq!(map.pg_history, before);
        // A pg_temp equal to the up set is no pg_temp.
        let mut m = map.clone();
        let now_up = m.up(pg);
        m.set_pg_temp(pg, now_up).unwrap();
        assert!(!m.pg_temp.contains_key(&pg));
    }

    #[test]
    fn a_pg_temp_that_changes_nothing_is_dropped_at_the_next_epoch() {
        let map = map_with(5);
        let pg = PgId::new(1, 3);
        let up = map.up(pg);
        // Another order of the up set: in force while its members are up.
        let reordered = vec![up[1], up[0], up[2]];
        let map = step(&map, |m| {
            assert!(m.set_pg_temp(pg, reordered.clone()).unwrap());
        });
        assert_eq!(map.acting(pg).osds, reordered);
        // up[0] goes down: what is left of it is the up set, in order.
        let map = step(&map, |m| {
            m.mark_down(up[0]);
        });
        assert!(!map.pg_temp.contains_key(&pg), "{:?}", map.pg_temp);
        // up[0] returns as the up primary: up[1], which served meanwhile,
        // is primed to go on serving (up[0] next), not the stale order.
        let map = step(&map, |m| {
            m.osd_boot(up[0], "127.0.0.1:1".into(), WEIGHT_ONE);
        });
        assert_eq!(map.acting(pg).osds, vec![up[1], up[0], up[2]]);
        let map = step(&map, |m| {
            assert!(m.set_pg_temp(pg, Vec::new()).unwrap());
        });
        assert_eq!(map.acting(pg).osds, up, "the old order did not come back");

        // A pg_temp whose members are all down is dropped too.
        let spare: Vec<OsdId> = (0..5).filter(|o| !up.contains(o)).collect();
        let map = step(&map, |m| {
            assert!(m.set_pg_temp(pg, spare.clone()).unwrap());
        });
        assert_eq!(map.acting(pg).osds, spare);
        let map = step(&map, |m| {
            m.mark_down(spare[0]);
        });
        assert!(
            map.pg_temp.contains_key(&pg),
            "osd.{} still stands in",
            spare[1]
        );
        let map = step(&map, |m| {
            m.mark_down(spare[1]);
        });
        assert!(!map.pg_temp.contains_key(&pg), "{:?}", map.pg_temp);
    }

    #[test]
    fn a_returning_up_primary_is_primed_behind_the_serving_one() {
        let map = map_with(5);
        let pgs: Vec<PgId> = map.all_pgs().collect();
        let returning = map.up(pgs[0])[0];
        let map = step(&map, |m| {
            m.mark_down(returning);
        });
        let serving: BTreeMap<PgId, Option<OsdId>> = pgs
            .iter()
            .map(|&pg| (pg, map.acting(pg).primary()))
            .collect();
        let map = step(&map, |m| {
            m.osd_boot(returning, "127.0.0.1:1".into(), WEIGHT_ONE);
        });
        let mut primed = 0;
        for &pg in &pgs {
            let up = map.up(pg);
            let acting = map.acting(pg).osds;
            let mut same_members = acting.clone();
            same_members.sort_unstable();
            let mut up_sorted = up.clone();
            up_sorted.sort_unstable();
            assert_eq!(same_members, up_sorted, "pg {pg}: the up set's members act");
            if up[0] == returning {
                primed += 1;
                assert_eq!(
                    Some(acting[0]),
                    serving[&pg],
                    "pg {pg}: the serving primary stays"
                );
            } else {
                assert_eq!(acting, up, "pg {pg}: nothing to prime");
            }
        }
        assert!(primed > 0, "osd.{returning} is the up primary of some PG");
        // Once the returning OSD holds everything its primary asks for the
        // up order; later maps do not prime it again.
        let pg = pgs[0];
        let map = step(&map, |m| {
            assert!(m.set_pg_temp(pg, Vec::new()).unwrap());
        });
        let map = step(&map, |m| {
            m.set_in(4, false).unwrap();
        });
        let map = step(&map, |m| {
            m.set_in(4, true).unwrap();
        });
        assert_eq!(map.acting(pg).osds, map.up(pg));
    }

    #[test]
    fn bad_pg_temp_and_lost_requests_are_refused() {
        let mut map = map_with(3);
        let pg = PgId::new(1, 0);
        assert!(map.set_pg_temp(PgId::new(1, 8), vec![0]).is_err());
        assert!(map.set_pg_temp(PgId::new(9, 0), vec![0]).is_err());
        assert!(map.set_pg_temp(pg, vec![0, 0]).is_err());
        assert!(map.set_pg_temp(pg, vec![7]).is_err());
        assert!(map.mark_lost(0).is_err(), "an up OSD cannot be lost");
        assert!(map.mark_lost(9).is_err());
        map.mark_down(0);
        assert!(map.mark_lost(0).unwrap());
        map.epoch += 1;
        assert!(!map.mark_lost(0).unwrap(), "already lost");
        assert!(map.lost_since(0, 0));
        map.osd_boot(0, "127.0.0.1:1".into(), WEIGHT_ONE);
        map.epoch += 1;
        map.mark_down(0);
        assert!(map.mark_lost(0).unwrap(), "lost again after a boot");
    }

    #[test]
    fn a_split_child_inherits_its_parents_history() {
        let map = map_with(5);
        let parent = PgId::new(1, 3);
        let primary = map.acting(parent).osds[0];
        let old_acting = map.acting(parent).osds;
        let map = step(&map, |m| {
            m.set_up_thru(primary, 2);
        });
        let map = step(&map, |m| {
            assert!(m.set_pg_num("rbd", 32).unwrap());
        });
        assert_eq!(map.pools[&1].pg_num, 32);
        let h = &map.pg_history[&parent];
        assert_eq!(h.same_interval_since, map.epoch);
        assert_eq!(h.intervals.last().unwrap().acting, old_acting);
        assert!(h.intervals.last().unwrap().maybe_went_rw);
        for seed in [11, 19, 27] {
            let child = PgId::new(1, seed);
            assert_eq!(map.pg_history.get(&child), Some(h), "child {child}");
            assert_eq!(map.rw_intervals(child).count(), 1);
        }
        assert_eq!(map.pg_history.len(), 32, "every PG of the pool split");
        // The next change keeps the children's history.
        let map = step(&map, |m| {
            m.set_up_thru(primary, 9);
        });
        assert!(map.pg_history.contains_key(&PgId::new(1, 27)));
    }

    #[test]
    fn pg_num_only_grows_by_powers_of_two() {
        let mut map = map_with(3);
        let err = |r: Result<bool, crate::MapError>| r.unwrap_err().to_string();
        assert!(err(map.set_pg_num("rbd", 12)).contains("power of two"));
        assert!(err(map.set_pg_num("rbd", 4)).contains("merging"));
        assert!(err(map.set_pg_num("rbd", 1 << 20)).contains("power of two"));
        assert!(err(map.set_pg_num("nope", 16)).contains("does not exist"));
        assert_eq!(map.pools[&1].pg_num, 8);
        assert!(!map.set_pg_num("rbd", 8).unwrap());
        assert!(map.set_pg_num("rbd", 16).unwrap());
        assert_eq!(map.all_pgs().count(), 16);
    }
}
