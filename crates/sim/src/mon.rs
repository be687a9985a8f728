//! The simulated monitor: the real map model ([`ClusterMap`] and its
//! mutations, past intervals included) driven by the same requests the
//! daemon monitor serves — boot, heartbeats (an OSD silent for the grace
//! period is marked down, and out after the down-out interval), `up_thru`,
//! `pg_temp`, trimming history when a primary reports its PG recovered,
//! each OSD's fullness judged from the usage its heartbeats report — batched
//! into one new epoch per tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_map::crush::{CrushMap, DeviceReport, Location};
use cairn_map::{ClusterMap, FullRatios, FullState, OsdUsage, WEIGHT_ONE};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::PgStat;

use crate::SimConfig;

#[derive(Clone, Debug)]
pub enum Change {
    Boot(OsdId),
    Down(OsdId),
    Out(OsdId),
    In(OsdId),
    Lost(OsdId),
    UpThru(OsdId, Epoch),
    PgTemp(OsdId, PgId, Vec<OsdId>),
    Full(OsdId, FullState),
    /// `pool set rbd pg_num N`.
    PgNum(u32),
}

pub struct SimMon {
    pub map: Arc<ClusterMap>,
    pub grace: Duration,
    pub down_out: Option<Duration>,
    /// The ratios reported usage is judged by.
    pub full_ratios: FullRatios,
    /// Each OSD's latest reported usage.
    pub usage: BTreeMap<OsdId, OsdUsage>,
    last_heartbeat: BTreeMap<OsdId, Duration>,
    down_since: BTreeMap<OsdId, Duration>,
    pub stats: BTreeMap<PgId, PgStat>,
    pending: Vec<Change>,
    to_trim: Vec<PgId>,
    /// Keep every PG's past intervals although primaries report their PGs
    /// recovered: the daemon's monitor trims on a timer, so a map without
    /// the trim can outlive the members (tests set this to hold it so).
    pub hold_trims: bool,
}

impl SimMon {
    /// A map with `osds` OSDs (known, in, down until they boot) and pool
    /// `rbd`.
    pub fn new(cfg: &SimConfig) -> Self {
        let mut map = if cfg.osds_per_host == 0 {
            ClusterMap::new("sim".into())
        } else {
            ClusterMap::with_crush("sim".into(), CrushMap::default())
        };
        for id in 0..cfg.osds {
            if let Some(host) = id.checked_div(cfg.osds_per_host) {
                let location = format!("host=h{host}");
                let report = DeviceReport {
                    location: Location::parse(&location)
                        .unwrap_or_else(|e| panic!("bad simulation location: {e}")),
                    update_location: true,
                    class: "ssd".into(),
                    class_configured: false,
                    size_bytes: 0,
                    initial_weight: Some(WEIGHT_ONE),
                };
                map.osd_boot_with(id, format!("sim:{id}"), &report)
                    .unwrap_or_else(|e| panic!("bad simulation host: {e}"));
            } else {
                map.osd_boot(id, format!("sim:{id}"), WEIGHT_ONE);
            }
            map.mark_down(id);
        }
        map.create_pool("rbd", cfg.size, cfg.min_size, cfg.pg_num)
            .unwrap_or_else(|e| panic!("bad simulation pool: {e}"));
        map.epoch = 2;
        SimMon {
            map: Arc::new(map),
            grace: Duration::from_secs(3),
            down_out: Some(Duration::from_secs(8)),
            full_ratios: FullRatios::default(),
            usage: BTreeMap::new(),
            last_heartbeat: BTreeMap::new(),
            down_since: BTreeMap::new(),
            stats: BTreeMap::new(),
            pending: Vec::new(),
            to_trim: Vec::new(),
            hold_trims: false,
        }
    }

    pub fn request(&mut self, change: Change) {
        self.pending.push(change);
    }

    pub fn heartbeat(
        &mut self,
        osd: OsdId,
        now: Duration,
        stats: Vec<PgStat>,
        usage: Option<OsdUsage>,
    ) {
        if self.map.is_up(osd) {
            self.last_heartbeat.insert(osd, now);
        }
        if let Some(usage) = usage {
            self.usage.insert(osd, usage);
            let state = self.full_ratios.state(&usage);
            if state != self.map.full_state(osd) {
                self.pending.push(Change::Full(osd, state));
            }
        }
        for stat in stats {
            if stat.recovered && self.map.pg_history.contains_key(&stat.pg) {
                self.to_trim.push(stat.pg);
            }
            self.stats.insert(stat.pg, stat);
        }
    }

    /// Apply what is pending; returns the new map if it changed.
    pub fn tick(&mut self, now: Duration) -> Option<Arc<ClusterMap>> {
        // Timers first, so that requests (an administrator's `in`, a boot)
        // made meanwhile win.
        let mut timed = Vec::new();
        for (&osd, &at) in &self.last_heartbeat {
            if self.map.is_up(osd) && now > at + self.grace {
                timed.push(Change::Down(osd));
            }
        }
        if let Some(after) = self.down_out {
            for (&osd, &at) in &self.down_since {
                let info = self.map.osds.get(&osd);
                if info.is_some_and(|o| !o.up && o.is_in) && now > at + after {
                    timed.push(Change::Out(osd));
                }
            }
        }
        timed.append(&mut self.pending);
        self.pending = timed;
        if self.hold_trims {
            self.to_trim.clear();
        }
        if self.pending.is_empty() && self.to_trim.is_empty() {
            return None;
        }
        let mut next = (*self.map).clone();
        let mut changed = false;
        for change in std::mem::take(&mut self.pending) {
            let applied = self.apply(&mut next, change.clone(), now);
            if applied {
                tracing::debug!("mon: epoch {} at {now:?}: {change:?}", self.map.epoch + 1);
            }
            changed |= applied;
        }
        for pg in std::mem::take(&mut self.to_trim) {
            if let Some(stat) = self.stats.get(&pg).filter(|s| s.recovered) {
                changed |= next.trim_history(pg, stat.interval_epoch, &stat.acting);
            }
        }
        if !changed {
            return None;
        }
        next.epoch = self.map.epoch + 1;
        next.advance_history(&self.map);
        self.map = Arc::new(next);
        Some(self.map.clone())
    }

    fn apply(&mut self, map: &mut ClusterMap, change: Change, now: Duration) -> bool {
        match change {
            Change::Boot(osd) => {
                map.osd_boot(osd, format!("sim:{osd}"), WEIGHT_ONE);
                self.last_heartbeat.insert(osd, now);
                self.down_since.remove(&osd);
                true
            }
            Change::Down(osd) => {
                self.last_heartbeat.remove(&osd);
                self.down_since.insert(osd, now);
                map.mark_down(osd)
            }
            Change::Out(osd) => {
                self.down_since.remove(&osd);
                map.set_in(osd, false).unwrap_or(false)
            }
            Change::In(osd) => {
                self.down_since.remove(&osd);
                map.set_in(osd, true).unwrap_or(false)
            }
            Change::Lost(osd) => map.mark_lost(osd).unwrap_or(false),
            Change::UpThru(osd, epoch) => map.set_up_thru(osd, epoch),
            Change::Full(osd, state) => map.set_full_state(osd, state),
            Change::PgNum(n) => map
                .set_pg_num("rbd", n)
                .unwrap_or_else(|e| panic!("bad simulated pg_num {n}: {e}")),
            Change::PgTemp(from, pg, osds) => {
                if map.acting(pg).primary() != Some(from) {
                    return false;
                }
                map.set_pg_temp(pg, osds).unwrap_or(false)
            }
        }
    }
}
