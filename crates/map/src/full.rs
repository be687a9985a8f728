//! How full each OSD is: the three ratios (Ceph's `nearfull`,
//! `backfillfull`, `full`), the state an OSD's reported usage puts it in,
//! and the map's record of that state per OSD.
//!
//! The monitor judges: each heartbeat carries the OSD's used and total
//! bytes ([`OsdUsage`]), the monitor compares them with its ratios
//! ([`FullRatios::state`]) and records the state in the map
//! ([`ClusterMap::set_full_state`]), a new epoch only when a state
//! changes. Everyone else acts on the map: a primary refuses mutations
//! that add data while a member of the PG is [`FullState::Full`], and an
//! OSD at [`FullState::Backfillfull`] or above takes no backfill.

use std::fmt;

use cairn_types::OsdId;
use serde::{Deserialize, Serialize};

use crate::{ClusterMap, MapError};

/// An OSD's fullness, from least to most full.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FullState {
    /// Below the nearfull ratio.
    #[default]
    None,
    /// At or above the nearfull ratio: a health warning only.
    Nearfull,
    /// At or above the backfillfull ratio: takes no backfill.
    Backfillfull,
    /// At or above the full ratio: PGs it serves refuse writes.
    Full,
}

impl FullState {
    /// The word `status` and `osd ls` show.
    pub fn as_str(self) -> &'static str {
        match self {
            FullState::None => "none",
            FullState::Nearfull => "nearfull",
            FullState::Backfillfull => "backfillfull",
            FullState::Full => "full",
        }
    }
}

impl fmt::Display for FullState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Space an OSD's store reports: bytes in use and bytes it can hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdUsage {
    pub used_bytes: u64,
    pub total_bytes: u64,
}

impl OsdUsage {
    /// Used over total, in [0, 1] (a store with no capacity counts as
    /// full: it can take nothing).
    pub fn ratio(&self) -> f64 {
        if self.total_bytes == 0 {
            return 1.0;
        }
        (self.used_bytes as f64 / self.total_bytes as f64).min(1.0)
    }
}

/// The three thresholds, each a fraction of an OSD's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FullRatios {
    nearfull: f64,
    backfillfull: f64,
    full: f64,
}

impl Default for FullRatios {
    /// Ceph's defaults: 0.85, 0.90, 0.95.
    fn default() -> Self {
        FullRatios {
            nearfull: 0.85,
            backfillfull: 0.90,
            full: 0.95,
        }
    }
}

impl FullRatios {
    /// Ratios that are each in (0, 1] and ordered nearfull ≤ backfillfull
    /// ≤ full; the error names the one that is not.
    pub fn new(nearfull: f64, backfillfull: f64, full: f64) -> Result<Self, MapError> {
        for (name, value) in [
            ("nearfull", nearfull),
            ("backfillfull", backfillfull),
            ("full", full),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(MapError::Invalid(format!(
                    "the {name} ratio must be greater than 0 and at most 1, got {value}"
                )));
            }
        }
        if nearfull > backfillfull {
            return Err(MapError::Invalid(format!(
                "the nearfull ratio ({nearfull}) must not exceed the backfillfull ratio ({backfillfull})"
            )));
        }
        if backfillfull > full {
            return Err(MapError::Invalid(format!(
                "the backfillfull ratio ({backfillfull}) must not exceed the full ratio ({full})"
            )));
        }
        Ok(FullRatios {
            nearfull,
            backfillfull,
            full,
        })
    }

    pub fn nearfull(&self) -> f64 {
        self.nearfull
    }

    pub fn backfillfull(&self) -> f64 {
        self.backfillfull
    }

    pub fn full(&self) -> f64 {
        self.full
    }

    /// The state `usage` puts an OSD in: the highest threshold reached.
    pub fn state(&self, usage: &OsdUsage) -> FullState {
        let ratio = usage.ratio();
        if ratio >= self.full {
            FullState::Full
        } else if ratio >= self.backfillfull {
            FullState::Backfillfull
        } else if ratio >= self.nearfull {
            FullState::Nearfull
        } else {
            FullState::None
        }
    }
}

impl ClusterMap {
    /// OSD `osd`'s fullness as the monitor last recorded it (`None` for
    /// an unknown OSD).
    pub fn full_state(&self, osd: OsdId) -> FullState {
        self.osds.get(&osd).map_or(FullState::None, |o| o.full)
    }

    /// Record OSD `osd`'s fullness; returns whether it changed (an
    /// unknown OSD changes nothing).
    pub fn set_full_state(&mut self, osd: OsdId, state: FullState) -> bool {
        match self.osds.get_mut(&osd) {
            Some(info) if info.full != state => {
                info.full = state;
                true
            }
            _ => false,
        }
    }

    /// OSDs whose recorded state is exactly `state`.
    pub fn osds_in_full_state(&self, state: FullState) -> impl Iterator<Item = OsdId> + '_ {
        self.osds
            .values()
            .filter(move |o| o.full == state)
            .map(|o| o.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WEIGHT_ONE;

    fn usage(used: u64, total: u64) -> OsdUsage {
        OsdUsage {
            used_bytes: used,
            total_bytes: total,
        }
    }

    #[test]
    fn ratios_are_in_range_and_ordered() {
        assert!(FullRatios::new(0.85, 0.90, 0.95).is_ok());
        assert!(FullRatios::new(0.5, 0.5, 0.5).is_ok(), "equal is allowed");
        assert!(FullRatios::new(1.0, 1.0, 1.0).is_ok(), "1 is allowed");
        let err = |n, b, f| FullRatios::new(n, b, f).unwrap_err().to_string();
        assert!(err(0.0, 0.9, 0.95).contains("nearfull ratio must be greater than 0"));
        assert!(err(0.85, 0.9, 1.01).contains("full ratio must be greater than 0 and at most 1"));
        assert!(err(0.85, -0.1, 0.95).contains("backfillfull ratio"));
        assert!(err(f64::NAN, 0.9, 0.95).contains("nearfull"));
        assert!(err(0.91, 0.9, 0.95).contains("nearfull ratio (0.91) must not exceed"));
        assert!(err(0.85, 0.96, 0.95).contains("backfillfull ratio (0.96) must not exceed"));
    }

    #[test]
    fn state_is_the_highest_threshold_reached() {
        let r = FullRatios::default();
        assert_eq!(r.state(&usage(0, 100)), FullState::None);
        assert_eq!(r.state(&usage(84, 100)), FullState::None);
        assert_eq!(r.state(&usage(85, 100)), FullState::Nearfull);
        assert_eq!(r.state(&usage(90, 100)), FullState::Backfillfull);
        assert_eq!(r.state(&usage(94, 100)), FullState::Backfillfull);
        assert_eq!(r.state(&usage(95, 100)), FullState::Full);
        assert_eq!(r.state(&usage(100, 100)), FullState::Full);
        assert_eq!(r.state(&usage(0, 0)), FullState::Full, "no capacity");
        let same = FullRatios::new(0.5, 0.5, 0.5).unwrap();
        assert_eq!(same.state(&usage(50, 100)), FullState::Full);
        assert!(FullState::Full > FullState::Backfillfull);
        assert!(FullState::Backfillfull > FullState::Nearfull);
    }

    #[test]
    fn the_map_records_changes_only() {
        let mut map = ClusterMap::new("t".into());
        map.osd_boot(0, "a".into(), WEIGHT_ONE);
        assert_eq!(map.full_state(0), FullState::None);
        assert!(map.set_full_state(0, FullState::Full));
        assert!(!map.set_full_state(0, FullState::Full), "no change");
        assert!(!map.set_full_state(7, FullState::Full), "unknown OSD");
        assert_eq!(map.full_state(0), FullState::Full);
        assert_eq!(
            map.osds_in_full_state(FullState::Full).collect::<Vec<_>>(),
            [0]
        );
        assert_eq!(map.full_state(7), FullState::None);
    }
}
