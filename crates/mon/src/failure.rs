//! Failure reports: OSDs tell the monitor which peers have stopped
//! answering their heartbeats on the cluster network. The monitor's own
//! heartbeats travel on the public network, so an OSD cut off from the
//! cluster network only would otherwise stay up in the map while its
//! peers cannot reach it, and every PG it serves would hang.
//!
//! A target is marked down once the reporters that reported it within the
//! heartbeat grace sit in at least `osd_min_down_reporters` distinct
//! buckets of type `osd_reporter_subtree_level` (as Ceph counts them), so
//! the OSDs of one host cut off from the rest cannot get the rest marked
//! down: they are one reporter. Reports from or about OSDs that are down
//! are ignored; a target's reports are forgotten when it is marked down or
//! boots; reports not renewed within the grace expire.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use cairn_map::ClusterMap;
use cairn_types::OsdId;

/// The live reports, by target then reporter, with when each was last
/// renewed. At most one entry per (target, reporter) pair of the map's
/// OSDs.
#[derive(Default)]
pub(crate) struct FailureReports {
    by_target: HashMap<OsdId, HashMap<OsdId, Instant>>,
}

impl FailureReports {
    /// Record (or renew) `reporter`'s report that `target` is silent.
    pub fn report(&mut self, target: OsdId, reporter: OsdId, now: Instant) {
        debug_assert_ne!(target, reporter);
        self.by_target
            .entry(target)
            .or_default()
            .insert(reporter, now);
    }

    /// Forget every report about `target` (it was marked down or booted).
    pub fn forget(&mut self, target: OsdId) {
        self.by_target.remove(&target);
    }

    /// Drop reports not renewed within `grace`.
    pub fn expire(&mut self, now: Instant, grace: Duration) {
        self.by_target.retain(|_, reporters| {
            reporters.retain(|_, at| now.duration_since(*at) <= grace);
            !reporters.is_empty()
        });
    }

    /// The distinct `level` buckets of the OSDs reporting `target` now.
    pub fn domains(&self, map: &ClusterMap, target: OsdId, level: &str) -> BTreeSet<String> {
        self.by_target
            .get(&target)
            .into_iter()
            .flatten()
            .filter(|(reporter, _)| map.is_up(**reporter))
            .map(|(reporter, _)| domain_of(map, *reporter, level))
            .collect()
    }
}

/// The bucket of type `level` holding `osd` (`osd.N` itself for `osd`,
/// or when it sits under no such bucket).
fn domain_of(map: &ClusterMap, osd: OsdId, level: &str) -> String {
    let crush = map.crush();
    let own = format!("osd.{osd}");
    let Ok(mut item) = i32::try_from(osd) else {
        return own;
    };
    if level == "osd" {
        return own;
    }
    // Every step goes at least one type up, so the types bound the walk.
    for _ in 0..=crush.types().len() {
        let Some(parent) = crush.parent_of(item) else {
            break;
        };
        let is_level = crush
            .type_of(parent)
            .is_some_and(|t| crush.type_name(t) == level);
        if is_level {
            return crush.item_name(parent);
        }
        item = parent;
    }
    own
}

#[cfg(test)]
mod tests {
    use cairn_map::crush::{CrushMap, DeviceReport, Location, WEIGHT_ONE};

    use super::*;

    /// Three hosts of two OSDs.
    fn map() -> ClusterMap {
        let mut map = ClusterMap::with_crush("test".into(), CrushMap::default());
        for id in 0..6 {
            let report = DeviceReport {
                location: Location::parse(&format!("host=h{}", id / 2 + 1)).unwrap(),
                ..DeviceReport::unlocated(WEIGHT_ONE)
            };
            map.osd_boot_with(id, format!("127.0.0.1:{id}"), &report)
                .unwrap();
        }
        map
    }

    #[test]
    fn reports_count_once_per_bucket_and_expire() {
        let mut map = map();
        let mut reports = FailureReports::default();
        let t0 = Instant::now();
        // osd.2's host-mate and both OSDs of h1: two hosts.
        reports.report(2, 3, t0);
        reports.report(2, 0, t0);
        reports.report(2, 1, t0);
        let hosts = reports.domains(&map, 2, "host");
        assert_eq!(hosts, BTreeSet::from(["h1".to_string(), "h2".to_string()]));
        assert_eq!(reports.domains(&map, 2, "osd").len(), 3);
        // The OSDs of one host count as one reporter.
        reports.report(4, 2, t0);
        reports.report(4, 3, t0);
        assert_eq!(reports.domains(&map, 4, "host").len(), 1);
        // A reporter that is down does not count.
        map.mark_down(3);
        assert_eq!(reports.domains(&map, 4, "host").len(), 1);
        assert_eq!(reports.domains(&map, 2, "host").len(), 1);
        // Reports not renewed within the grace expire.
        let grace = Duration::from_secs(3);
        reports.report(2, 1, t0 + grace);
        reports.expire(t0 + grace + Duration::from_millis(1), grace);
        assert_eq!(reports.domains(&map, 2, "osd").len(), 1);
        assert!(reports.domains(&map, 4, "osd").is_empty());
        reports.forget(2);
        assert!(reports.domains(&map, 2, "osd").is_empty());
    }
}
