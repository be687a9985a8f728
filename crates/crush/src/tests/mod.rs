//! Unit tests of the CRUSH map: placement properties over realistic trees
//! (`mapping`) and edits with their bad input (`edits`). Floating point
//! appears only here, to compare shares with weights.

mod edits;
mod mapping;

use cairn_placement::pg_placement_seed;
use cairn_types::OsdId;

use crate::*;

/// A report placing an OSD at `location` with `weight` TiB-units and `class`.
pub(crate) fn report(location: &str, class: &str, weight: u32) -> DeviceReport {
    DeviceReport {
        location: Location::parse(location).expect("location"),
        update_location: true,
        class: class.into(),
        class_configured: false,
        size_bytes: 0,
        initial_weight: Some(weight),
    }
}

/// The placement inputs of `pgs` PGs of pool 1.
pub(crate) fn inputs(pgs: u32) -> impl Iterator<Item = u32> {
    (0..pgs).map(|seed| pg_placement_seed(1, seed))
}

/// Two datacenters × two racks × three hosts × four OSDs (48 OSDs), with
/// weights 1, 2 or 3 TiB and the first two OSDs of each host `hdd`, the
/// others `ssd`; the default rule picks distinct hosts.
pub(crate) fn realistic() -> CrushMap {
    let mut map = CrushMap::default();
    let mut osd: OsdId = 0;
    for dc in 0..2 {
        for rack in 0..2 {
            for host in 0..3 {
                for slot in 0..4 {
                    let location = format!(
                        "host=dc{dc}-r{rack}-h{host} rack=dc{dc}-r{rack} datacenter=dc{dc}"
                    );
                    let class = if slot < 2 { "hdd" } else { "ssd" };
                    let weight = WEIGHT_ONE * (1 + osd % 3);
                    map.boot_device(osd, &report(&location, class, weight))
                        .expect("boot");
                    osd += 1;
                }
            }
        }
    }
    map
}

/// The ancestor of `osd` of type `kind` (the OSD itself for `osd`).
pub(crate) fn ancestor(map: &CrushMap, osd: OsdId, kind: &str) -> ItemId {
    let want = map.type_id(kind).expect("type");
    let mut item = osd as ItemId;
    while map.type_of(item) != Some(want) {
        item = map.parent_of(item).expect("ancestor of that type");
    }
    item
}

pub(crate) fn all_in(_: OsdId) -> bool {
    true
}
