//! The cluster map's side of CRUSH: booting OSDs into the hierarchy,
//! applying administrators' CRUSH edits, and checking that a pool's rule
//! can be met by the OSDs that are `in`.
//!
//! Every change here goes through [`CrushMap`]'s atomic edits and clears the
//! placement memo; nothing else in the map may change the CRUSH map.

use cairn_crush::{CrushError, CrushMap, DeviceReport, RuleId};
use cairn_types::OsdId;

use crate::{ClusterMap, MapError, OsdAddrs, OsdInfo};

impl ClusterMap {
    /// The CRUSH hierarchy and rules.
    pub fn crush(&self) -> &CrushMap {
        &self.crush
    }

    /// Apply an edit to the CRUSH map (atomic: an error changes nothing).
    pub fn crush_edit<T>(
        &mut self,
        edit: impl FnOnce(&mut CrushMap) -> Result<T, CrushError>,
    ) -> Result<T, MapError> {
        let value = edit(&mut self.crush)?;
        self.placements.clear();
        Ok(value)
    }

    /// Record OSD `id`'s boot at `addrs` (public and cluster; one address
    /// converts to both) with what it reports about its
    /// device: a new OSD is added (in); in CRUSH it is added at its
    /// location with its weight and class, or moved if it asks to be and
    /// sits elsewhere ([`CrushMap::boot_device`]). The boot is recorded even
    /// if the CRUSH update is refused (the error says why): the OSD then
    /// keeps its CRUSH position, or, if new, has none and gets no data.
    /// Returns whether the CRUSH map changed.
    pub fn osd_boot_with(
        &mut self,
        id: OsdId,
        addrs: impl Into<OsdAddrs>,
        report: &DeviceReport,
    ) -> Result<bool, CrushError> {
        let addrs = addrs.into();
        let next = self.epoch + 1;
        let info = self.osds.entry(id).or_insert_with(|| OsdInfo {
            id,
            addr: String::new(),
            cluster_addr: String::new(),
            up: false,
            is_in: true,
            up_from: 0,
            down_at: 0,
            up_thru: 0,
            lost_at: 0,
            full: crate::FullState::None,
        });
        info.addr = addrs.public;
        info.cluster_addr = addrs.cluster;
        info.up = true;
        info.up_from = next;
        self.placements.clear();
        self.crush.boot_device(id, report)
    }

    /// Can rule `rule` place `size` replicas on the OSDs that are in now?
    pub fn check_rule(&self, rule: RuleId, size: u32) -> Result<(), MapError> {
        let is_in = |osd: OsdId| self.osds.get(&osd).is_some_and(|o| o.is_in);
        self.crush.check_rule(rule, size as usize, is_in)?;
        Ok(())
    }

    /// OSDs in the map but not in the CRUSH hierarchy (they get no data).
    pub fn osds_outside_crush(&self) -> impl Iterator<Item = OsdId> + '_ {
        self.osds
            .keys()
            .copied()
            .filter(|id| self.crush.device(*id).is_none())
    }
}

#[cfg(test)]
mod tests {
    use cairn_crush::{Location, WEIGHT_ONE};
    use cairn_types::PgId;

    use super::*;

    fn report(location: &str) -> DeviceReport {
        DeviceReport {
            location: Location::parse(location).unwrap(),
            update_location: true,
            class: "hdd".into(),
            class_configured: false,
            size_bytes: 1 << 40,
            initial_weight: None,
        }
    }

    /// Three hosts of two OSDs, the default rule picking distinct hosts.
    fn hosts_map() -> ClusterMap {
        let mut map = ClusterMap::with_crush("test".into(), CrushMap::default());
        for id in 0..6 {
            let location = format!("host=h{}", id / 2 + 1);
            map.osd_boot_with(id, format!("127.0.0.1:{id}"), &report(&location))
                .unwrap();
        }
        map
    }

    fn host_of(map: &ClusterMap, osd: OsdId) -> String {
        let parent = map.crush().parent_of(osd as i32).unwrap();
        map.crush().item_name(parent)
    }

    #[test]
    fn pools_follow_their_rule_across_hosts() {
        let mut map = hosts_map();
        map.create_pool("rbd", 3, 2, 64).unwrap();
        let pool = map.pool_by_name("rbd").unwrap().clone();
        for pg in pool.pgs() {
            let acting = map.acting(pg).osds;
            assert_eq!(acting.len(), 3, "{pg}");
            let mut hosts: Vec<String> = acting.iter().map(|&o| host_of(&map, o)).collect();
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 3, "{pg}: {acting:?}");
        }
        assert_eq!(map.crush().device(0).unwrap().weight, WEIGHT_ONE, "1 TiB");
    }

    #[test]
    fn unsatisfiable_pools_are_refused_and_out_osds_shrink_sets() {
        let mut map = hosts_map();
        let before = map.clone();
        let err = map.create_pool("big", 4, 2, 8).unwrap_err().to_string();
        assert_eq!(
            err,
            "rule replicated_rule places replicas on distinct hosts, but only 3 hosts have \
             in OSDs; size 4 cannot be met"
        );
        let err = map
            .create_pool_with_rule("p", 2, 1, 8, Some("nope"))
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown CRUSH rule 'nope'"),
            "{err}"
        );
        assert_eq!(map, before);
        map.create_pool("rbd", 3, 2, 16).unwrap();
        // Both OSDs of h3 out: every PG keeps two replicas (undersized).
        map.set_in(4, false).unwrap();
        map.set_in(5, false).unwrap();
        for pg in map.pool_by_name("rbd").unwrap().clone().pgs() {
            let raw = map.raw_placement(pg);
            assert_eq!(raw.len(), 2, "{pg}");
            assert!(!raw.contains(&4) && !raw.contains(&5));
        }
        assert!(map.create_pool("again", 3, 2, 8).is_err());
    }

    #[test]
    fn the_memo_never_changes_answers_or_equality() {
        let mut map = hosts_map();
        map.create_pool("rbd", 3, 2, 32).unwrap();
        let fresh = map.clone();
        let pg = PgId::new(1, 5);
        let first = map.raw_placement(pg);
        assert_eq!(map.raw_placement(pg), first, "memoized");
        assert_eq!(map, fresh, "a filled memo does not make maps differ");
        assert!(format!("{map:?}").contains("PlacementCache(1 PGs)"));
        // Edits forget the memo.
        let victim = first[0];
        map.set_in(victim, false).unwrap();
        assert!(!map.raw_placement(pg).contains(&victim));
        map.set_in(victim, true).unwrap();
        assert_eq!(map.raw_placement(pg), first);
        let host = host_of(&map, first[1]);
        map.crush_edit(|c| {
            c.move_item(
                &format!("osd.{}", first[1]),
                &Location::parse("host=h9 root=default")?,
            )
        })
        .unwrap();
        assert_ne!(host_of(&map, first[1]), host);
        let moved = map.raw_placement(pg);
        let fresh_answer = map.clone().raw_placement(pg);
        assert_eq!(moved, fresh_answer);
        // Serialization carries the CRUSH map, not the memo.
        let bytes = bincode::serialize(&map).unwrap();
        let decoded: ClusterMap = bincode::deserialize(&bytes).unwrap();
        assert_eq!(decoded, map);
        assert!(format!("{decoded:?}").contains("PlacementCache(0 PGs)"));
        assert_eq!(decoded.raw_placement(pg), moved);
    }

    #[test]
    fn a_crush_change_starts_new_intervals() {
        let mut map = hosts_map();
        map.create_pool("rbd", 3, 2, 32).unwrap();
        let mut next = map.clone();
        next.crush_edit(|c| c.reweight("osd.0", 8 * WEIGHT_ONE))
            .unwrap();
        next.epoch = map.epoch + 1;
        next.advance_history(&map);
        let changed = map
            .pool_by_name("rbd")
            .unwrap()
            .pgs()
            .filter(|pg| map.acting(*pg) != next.acting(*pg))
            .count();
        assert!(changed > 0);
        assert_eq!(next.pg_history.len(), changed);
    }

    #[test]
    fn a_refused_location_still_records_the_boot() {
        let mut map = hosts_map();
        let err = map
            .osd_boot_with(9, "127.0.0.1:9".to_string(), &report("shelf=s1"))
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown bucket type 'shelf'"),
            "{err}"
        );
        assert!(map.is_up(9));
        assert_eq!(map.osds_outside_crush().collect::<Vec<_>>(), vec![9]);
    }
}
