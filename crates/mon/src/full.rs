//! The monitor's side of full ratios: judging each OSD's reported usage
//! against the configured ratios (a map change only when an OSD's state
//! changes), the health checks that name full OSDs, and their usage in
//! `status` and `osd ls`. Pure functions of the map and the reports, so
//! they are tested without sockets.

use std::collections::HashMap;

use cairn_map::{ClusterMap, FullRatios, FullState, OsdUsage};
use cairn_types::OsdId;
use serde_json::{json, Value};

/// The state OSD `osd` must be recorded in after reporting `usage`, if it
/// differs from the map's (`None`: no change, no new epoch).
pub(crate) fn state_change(
    map: &ClusterMap,
    ratios: &FullRatios,
    osd: OsdId,
    usage: &OsdUsage,
) -> Option<FullState> {
    if !map.osds.contains_key(&osd) {
        return None;
    }
    let state = ratios.state(usage);
    (state != map.full_state(osd)).then_some(state)
}

/// OSDs with their usage ratio, if they reported one.
pub(crate) type OsdRatios = Vec<(OsdId, Option<f64>)>;

/// Up OSDs in each state but `none` (a down OSD has its own warning),
/// most serious first, each with its usage ratio if it reported one.
pub(crate) fn by_state(
    map: &ClusterMap,
    usage: &HashMap<OsdId, OsdUsage>,
) -> Vec<(FullState, OsdRatios)> {
    [
        FullState::Full,
        FullState::Backfillfull,
        FullState::Nearfull,
    ]
    .into_iter()
    .map(|state| {
        let osds: Vec<(OsdId, Option<f64>)> = map
            .osds_in_full_state(state)
            .filter(|o| map.is_up(*o))
            .map(|o| (o, usage.get(&o).map(OsdUsage::ratio)))
            .collect();
        (state, osds)
    })
    .filter(|(_, osds)| !osds.is_empty())
    .collect()
}

/// `osd.N (97% used)`.
pub(crate) fn describe(osd: OsdId, ratio: Option<f64>) -> String {
    match ratio {
        Some(r) => format!("osd.{osd} ({:.0}% used)", r * 100.0),
        None => format!("osd.{osd}"),
    }
}

/// The health summary of `n` OSDs in `state`.
pub(crate) fn summary(state: FullState, n: usize) -> String {
    let what = match state {
        FullState::Full => "full (writes to their PGs fail)",
        FullState::Backfillfull => "backfillfull (they take no backfill)",
        _ => "nearfull",
    };
    format!("{n} osds {what}")
}

/// Health lines about full OSDs for `status`, naming them, and whether
/// any is full (an error: writes to its PGs fail).
pub(crate) fn health(map: &ClusterMap, usage: &HashMap<OsdId, OsdUsage>) -> (bool, Vec<String>) {
    let states = by_state(map, usage);
    let any_full = states.iter().any(|(s, _)| *s == FullState::Full);
    let lines = states
        .into_iter()
        .map(|(state, osds)| {
            let names: Vec<String> = osds.iter().map(|(o, r)| describe(*o, *r)).collect();
            format!("{}: {}", summary(state, osds.len()), names.join(", "))
        })
        .collect();
    (any_full, lines)
}

/// The ratios and the OSDs in each state, for `status`.
pub(crate) fn status_json(map: &ClusterMap, ratios: &FullRatios) -> Value {
    let ids = |state| map.osds_in_full_state(state).collect::<Vec<_>>();
    json!({
        "ratios": {
            "nearfull": ratios.nearfull(),
            "backfillfull": ratios.backfillfull(),
            "full": ratios.full(),
        },
        "nearfull": ids(FullState::Nearfull),
        "backfillfull": ids(FullState::Backfillfull),
        "full": ids(FullState::Full),
    })
}

/// Add each OSD's last reported usage to `osd ls` entries.
pub(crate) fn add_usage(mut osds: Value, usage: &HashMap<OsdId, OsdUsage>) -> Value {
    for osd in osds.as_array_mut().into_iter().flatten() {
        let Some(u) = osd["id"].as_u64().and_then(|id| usage.get(&(id as OsdId))) else {
            continue;
        };
        osd["used_bytes"] = json!(u.used_bytes);
        osd["total_bytes"] = json!(u.total_bytes);
    }
    osds
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_map::WEIGHT_ONE;

    fn usage(used: u64) -> OsdUsage {
        OsdUsage {
            used_bytes: used,
            total_bytes: 100,
        }
    }

    fn map(osds: u32) -> ClusterMap {
        let mut map = ClusterMap::new("t".into());
        for id in 0..osds {
            map.osd_boot(id, format!("a{id}"), WEIGHT_ONE);
        }
        map
    }

    #[test]
    fn a_new_state_only_when_the_threshold_crossed_changes() {
        let ratios = FullRatios::default();
        let mut map = map(2);
        assert_eq!(state_change(&map, &ratios, 0, &usage(50)), None);
        assert_eq!(state_change(&map, &ratios, 0, &usage(84)), None);
        assert_eq!(
            state_change(&map, &ratios, 0, &usage(86)),
            Some(FullState::Nearfull)
        );
        map.set_full_state(0, FullState::Nearfull);
        assert_eq!(
            state_change(&map, &ratios, 0, &usage(89)),
            None,
            "same state"
        );
        assert_eq!(
            state_change(&map, &ratios, 0, &usage(96)),
            Some(FullState::Full)
        );
        map.set_full_state(0, FullState::Full);
        assert_eq!(
            state_change(&map, &ratios, 0, &usage(91)),
            Some(FullState::Backfillfull),
            "space freed"
        );
        assert_eq!(
            state_change(&map, &ratios, 0, &usage(10)),
            Some(FullState::None)
        );
        assert_eq!(state_change(&map, &ratios, 9, &usage(99)), None, "unknown");
        let low = FullRatios::new(0.1, 0.2, 0.3).unwrap();
        assert_eq!(
            state_change(&map, &low, 1, &usage(25)),
            Some(FullState::Backfillfull)
        );
    }

    #[test]
    fn health_names_up_osds_per_state() {
        let mut map = map(4);
        map.create_pool("p", 2, 1, 8).expect("pool");
        let mut reports = HashMap::new();
        assert_eq!(health(&map, &reports), (false, Vec::new()));
        map.set_full_state(0, FullState::Full);
        map.set_full_state(1, FullState::Nearfull);
        map.set_full_state(2, FullState::Nearfull);
        map.set_full_state(3, FullState::Full);
        map.mark_down(3);
        reports.insert(0, usage(97));
        let (error, lines) = health(&map, &reports);
        assert!(error);
        assert_eq!(
            lines,
            [
                "1 osds full (writes to their PGs fail): osd.0 (97% used)",
                "2 osds nearfull: osd.1, osd.2",
            ]
        );
        map.set_full_state(0, FullState::Backfillfull);
        let (error, lines) = health(&map, &reports);
        assert!(!error);
        assert_eq!(
            lines[0],
            "1 osds backfillfull (they take no backfill): osd.0 (97% used)"
        );
        let detail = crate::health::health_detail(&map, &HashMap::new(), &reports);
        assert_eq!(detail["health"], "HEALTH_WARN", "{detail}");
        assert_eq!(detail["checks"][0]["check"], "OSD_BACKFILLFULL", "{detail}");
        assert_eq!(
            detail["checks"][0]["detail"],
            json!(["osd.0 (97% used) is backfillfull"])
        );
        assert_eq!(detail["checks"][0]["osds"], json!([0]), "{detail}");
        assert_eq!(detail["checks"][0]["pools"], json!(["p"]), "{detail}");
        map.set_full_state(1, FullState::Full);
        let detail = crate::health::health_detail(&map, &HashMap::new(), &reports);
        assert_eq!(detail["health"], "HEALTH_ERR", "{detail}");
        assert_eq!(detail["checks"][0]["check"], "OSD_FULL", "{detail}");
        assert_eq!(detail["checks"][0]["severity"], "error", "{detail}");
        let status = status_json(&map, &FullRatios::default());
        assert_eq!(status["full"], json!([1, 3]));
        assert_eq!(status["backfillfull"], json!([0]));
        assert_eq!(status["ratios"]["full"], json!(0.95));
    }
}
