//! What a primary reports about its PG: Ceph-style state words, counts of
//! degraded and unfound objects, what it waits for, recovery counters.

use cairn_wire::PgStat;

use super::backfill::Reservation;
use super::{Pg, Phase};

impl Pg {
    /// The PG's state as a primary reports it.
    pub fn stat(&self) -> PgStat {
        let (state, detail, blocked_by) = self.describe();
        let primary = self.primary.as_ref();
        let mut degraded = self.missing.len() as u64;
        let mut unfound = 0;
        if let Some(p) = primary {
            degraded += p
                .peers
                .values()
                .map(|s| s.missing.len() as u64)
                .sum::<u64>();
            unfound = p.unfound.len() as u64;
            let behind = p.backfill.values().filter(|b| !b.complete).count() as u64;
            degraded += behind * self.objects_estimate;
        }
        let absent = (self.mapping.size as u64).saturating_sub(self.mapping.up.len() as u64);
        degraded += absent * self.objects_estimate;
        PgStat {
            pg: self.id,
            state,
            interval_epoch: self.interval_since,
            up: self.mapping.up.clone(),
            acting: self.mapping.acting.osds.clone(),
            last_update: self.info.last_update,
            objects: self.objects_estimate,
            // Counted by the daemon, off the core's lock.
            bytes: 0,
            degraded,
            unfound,
            // Only a serving interval may end the monitor's memory of
            // earlier ones: it is the one recorded as read-write when it
            // closes, whose members then hold everything acknowledged. A
            // PG recovered below min_size is not.
            recovered: self.recovered()
                && self.mapping.acting.osds.len() as u32 >= self.mapping.min_size,
            blocked_by,
            detail,
            recovered_objects: self.counters.recovered_objects,
            backfilled_objects: self.counters.backfilled_objects,
            recovery_bytes: self.counters.recovery_bytes,
            repaired_objects: self.counters.repaired_objects,
            last_scrub: self.info.last_scrub,
            last_deep_scrub: self.info.last_deep_scrub,
            inconsistent: self
                .inconsistent
                .iter()
                .take(cairn_wire::MAX_INCONSISTENT_REPORTED)
                .cloned()
                .collect(),
            // Filled in by the core for a cache pool's PG.
            tier: None,
            client_io: self.client_io,
        }
    }

    fn describe(&self) -> (String, String, Vec<cairn_types::OsdId>) {
        let peering = |what: &str| ("peering".to_string(), what.to_string(), Vec::new());
        match &self.phase {
            Phase::Idle => peering("not primary here"),
            Phase::GetInfo(get) => {
                let detail = format!("asking {:?} for their info", get.waiting);
                ("peering".into(), detail, Vec::new())
            }
            Phase::GetLog { auth } => {
                peering(&format!("fetching the authoritative log from osd.{auth}"))
            }
            Phase::WaitUpThru => peering("waiting for the monitor to record up_thru"),
            Phase::Activating { waiting } => {
                peering(&format!("activating: waiting for {waiting:?}"))
            }
            Phase::WaitActing { want } => (
                "peering+remapped".into(),
                format!("asked the monitor for acting set {want:?}"),
                Vec::new(),
            ),
            Phase::Retry { reason } => peering(reason),
            Phase::Down { blocked_by, reason } => {
                ("down".into(), reason.clone(), blocked_by.clone())
            }
            Phase::Incomplete { reason } => ("incomplete".into(), reason.clone(), Vec::new()),
            Phase::Active => self.describe_active(),
        }
    }

    fn describe_active(&self) -> (String, String, Vec<cairn_types::OsdId>) {
        let acting = self.mapping.acting.osds.len() as u32;
        let serving = acting >= self.mapping.min_size;
        let mut words = vec![if serving { "active" } else { "peered" }];
        let primary = self.primary.as_ref();
        let recovered = self.recovered();
        let clean = self.is_clean();
        if clean {
            words.push("clean");
        }
        if acting < self.mapping.size {
            words.push("undersized");
        }
        if !recovered || acting < self.mapping.size {
            words.push("degraded");
        }
        let recovering = primary.is_some_and(|p| !p.recovering.is_empty() || !p.pulls.is_empty())
            || !self.missing.is_empty()
            || primary.is_some_and(|p| p.peers.values().any(|s| !s.missing.is_empty()));
        if recovering {
            words.push("recovering");
        }
        if let Some(p) = primary {
            let pending: Vec<_> = p.backfill.values().filter(|b| !b.complete).collect();
            if !pending.is_empty() {
                let running = p.backfill_slot
                    && pending
                        .iter()
                        .any(|b| b.reservation == Reservation::Granted);
                let too_full = pending.iter().any(|b| b.too_full);
                words.push(if running {
                    "backfilling"
                } else if too_full {
                    "backfill_toofull"
                } else {
                    "backfill_wait"
                });
            }
            if !p.unfound.is_empty() {
                words.push("recovery_unfound");
            }
        }
        if self.mapping.acting.osds != self.mapping.up {
            words.push("remapped");
        }
        if let Some(scrub) = &self.scrub {
            words.push(if scrub.deep {
                "scrubbing+deep"
            } else {
                "scrubbing"
            });
        }
        if !self.inconsistent.is_empty() {
            words.push("inconsistent");
        }
        let detail = if !serving {
            format!(
                "{acting} of min_size {} acting members: recovering, client I/O waits",
                self.mapping.min_size
            )
        } else if clean {
            "serving".to_string()
        } else {
            let backfill: Vec<String> = primary
                .map(|p| {
                    p.backfill
                        .iter()
                        .filter(|(_, b)| !b.complete)
                        .map(|(o, b)| {
                            format!(
                                "osd.{o} {:?} after {:?}{}{}",
                                b.reservation,
                                b.done_upto,
                                if b.step.is_some() {
                                    " (batch in flight)"
                                } else {
                                    ""
                                },
                                match &b.refused {
                                    Some(why) => format!(" (refused: {why})"),
                                    None => String::new(),
                                }
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let slot = primary.is_some_and(|p| p.backfill_slot);
            format!(
                "serving; {} missing here, {} unfound; backfill slot {}; targets [{}]",
                self.missing.len(),
                primary.map_or(0, |p| p.unfound.len()),
                if slot { "held" } else { "not held" },
                backfill.join(", ")
            )
        };
        (words.join("+"), detail, Vec::new())
    }
}
