//! The OSD's recovery and backfill budgets, shared by its PGs.
//!
//! - Recovery: at most `osd_recovery_max_active` objects in recovery at
//!   once across the OSD's PGs, and a new one at most every
//!   `osd_recovery_sleep`. Clients come first: while client operations
//!   arrive (within [`CLIENT_ACTIVE_WINDOW`] of the last), one operation
//!   (an object, a backfill step) at a time, spaced by the [`Pacer`]'s gap
//!   (`osd_recovery_sleep_busy`, lengthened while client writes are slower
//!   than usual). Objects clients wait for (a write to an object some
//!   members miss, below `min_size` holders, or being copied) are not
//!   paced: they take any of the `osd_recovery_max_active` slots at once,
//!   since pacing them would slow the very clients it protects. PGs that
//!   found no free slot queue for one.
//! - Backfill: at most `osd_max_backfills` PGs backfilling as primary
//!   (local) and as many as target (remote) — Ceph's reservations. A remote
//!   reservation is refused when this OSD is too full to take data
//!   (`backfillfull`), with the reason.
//! - Scrub: at most `osd_max_scrubs` PGs scrubbing at once as primary.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use cairn_types::PgId;

use crate::pace::Pacer;

/// How long after a client operation this OSD counts as serving clients.
pub const CLIENT_ACTIVE_WINDOW: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct Slots {
    recovery_max: usize,
    recovery_sleep: Duration,
    /// The spacing of recovery starts while clients are served.
    pacer: Pacer,
    /// Clients are served until then (see [`Slots::client_op`]).
    clients_until: Duration,
    in_use: BTreeMap<PgId, usize>,
    total: usize,
    next_start: Duration,
    wanting: VecDeque<PgId>,
    /// PGs with objects clients wait for, queued for any free slot.
    wanting_urgent: VecDeque<PgId>,
    backfill_max: usize,
    local: BTreeSet<PgId>,
    remote: BTreeSet<PgId>,
    /// Why this OSD takes no backfill now (too full), if it does not.
    refuse_backfill: Option<String>,
    scrub_max: usize,
    scrubbing: BTreeSet<PgId>,
}

impl Slots {
    pub fn new(
        recovery_max: usize,
        recovery_sleep: Duration,
        pacer: Pacer,
        backfill_max: usize,
        scrub_max: usize,
    ) -> Self {
        Slots {
            recovery_max: recovery_max.max(1),
            recovery_sleep,
            pacer,
            clients_until: Duration::ZERO,
            in_use: BTreeMap::new(),
            total: 0,
            next_start: Duration::ZERO,
            wanting: VecDeque::new(),
            wanting_urgent: VecDeque::new(),
            backfill_max: backfill_max.max(1),
            local: BTreeSet::new(),
            remote: BTreeSet::new(),
            refuse_backfill: None,
            scrub_max: scrub_max.max(1),
            scrubbing: BTreeSet::new(),
        }
    }

    /// New limits (a runtime configuration change). Work already holding
    /// slots keeps them; the new limits apply to what starts next.
    pub fn set_limits(
        &mut self,
        recovery_max: usize,
        recovery_sleep: Duration,
        backfill_max: usize,
        scrub_max: usize,
    ) {
        self.recovery_max = recovery_max.max(1);
        self.recovery_sleep = recovery_sleep;
        self.backfill_max = backfill_max.max(1);
        self.scrub_max = scrub_max.max(1);
    }

    pub fn pacer_mut(&mut self) -> &mut Pacer {
        &mut self.pacer
    }

    /// Take a scrub slot for `pg` (`osd_max_scrubs` per OSD).
    pub fn take_scrub(&mut self, pg: PgId) -> bool {
        if self.scrubbing.contains(&pg) {
            return true;
        }
        if self.scrubbing.len() >= self.scrub_max {
            return false;
        }
        self.scrubbing.insert(pg);
        true
    }

    pub fn release_scrub(&mut self, pg: PgId) {
        self.scrubbing.remove(&pg);
    }

    /// A client operation arrived: recovery yields to clients for a while.
    pub fn client_op(&mut self, now: Duration) {
        self.clients_until = now + CLIENT_ACTIVE_WINDOW;
    }

    /// A client write this OSD served as primary completed after `latency`
    /// (what the pacer measures).
    pub fn client_write(&mut self, now: Duration, latency: Duration) {
        self.pacer.client_write(now, latency);
    }

    /// Are clients being served (recovery runs at the busy budget)?
    pub fn clients_busy(&self, now: Duration) -> bool {
        now < self.clients_until
    }

    /// Recovery operations allowed in flight now, and the spacing of starts.
    fn budget(&mut self, now: Duration) -> (usize, Duration) {
        if self.clients_busy(now) {
            (1, self.pacer.gap(now).max(self.recovery_sleep))
        } else {
            (self.recovery_max, self.recovery_sleep)
        }
    }

    /// Take a recovery slot for `pg` if one is free now.
    pub fn take(&mut self, pg: PgId, now: Duration) -> bool {
        let (max, sleep) = self.budget(now);
        if self.total >= max || now < self.next_start {
            return false;
        }
        self.total += 1;
        *self.in_use.entry(pg).or_default() += 1;
        self.next_start = now + sleep;
        self.pacer.recovery_started(now);
        true
    }

    /// Take a recovery slot for an object clients wait for: any of the
    /// `osd_recovery_max_active` slots, with no spacing.
    pub fn take_urgent(&mut self, pg: PgId, now: Duration) -> bool {
        if self.total >= self.recovery_max {
            return false;
        }
        self.total += 1;
        *self.in_use.entry(pg).or_default() += 1;
        self.pacer.recovery_started(now);
        true
    }

    /// Give back one of `pg`'s recovery slots.
    pub fn release(&mut self, pg: PgId, _now: Duration) {
        let Some(n) = self.in_use.get_mut(&pg) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.in_use.remove(&pg);
        }
        self.total -= 1;
    }

    /// Give back every recovery slot `pg` holds (its activation ended).
    pub fn release_pg(&mut self, pg: PgId) {
        if let Some(n) = self.in_use.remove(&pg) {
            self.total -= n;
        }
        self.wanting.retain(|p| *p != pg);
        self.wanting_urgent.retain(|p| *p != pg);
    }

    /// `pg` has recovery work waiting for a slot.
    pub fn want(&mut self, pg: PgId) {
        if !self.wanting.contains(&pg) {
            self.wanting.push_back(pg);
        }
    }

    /// `pg` has objects clients wait for, waiting for a slot.
    pub fn want_urgent(&mut self, pg: PgId) {
        if !self.wanting_urgent.contains(&pg) {
            self.wanting_urgent.push_back(pg);
        }
    }

    /// PGs to give another try, if a slot could be free for them.
    pub fn take_wanting(&mut self, now: Duration) -> Vec<PgId> {
        let mut pgs = Vec::new();
        if self.total < self.recovery_max {
            pgs.extend(self.wanting_urgent.drain(..));
        }
        let (max, _) = self.budget(now);
        if self.total < max && now >= self.next_start {
            let more: Vec<PgId> = self
                .wanting
                .drain(..)
                .filter(|p| !pgs.contains(p))
                .collect();
            pgs.extend(more);
        }
        pgs
    }

    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.total
    }

    pub fn take_backfill(&mut self, pg: PgId) -> bool {
        if self.local.contains(&pg) {
            return true;
        }
        if self.local.len() >= self.backfill_max {
            return false;
        }
        self.local.insert(pg);
        true
    }

    pub fn release_backfill(&mut self, pg: PgId) {
        self.local.remove(&pg);
    }

    pub fn reserve_remote(&mut self, pg: PgId) -> Result<(), String> {
        if let Some(why) = &self.refuse_backfill {
            return Err(why.clone());
        }
        if self.remote.contains(&pg) {
            return Ok(());
        }
        if self.remote.len() >= self.backfill_max {
            return Err(format!(
                "all {} backfill slots are taken",
                self.backfill_max
            ));
        }
        self.remote.insert(pg);
        Ok(())
    }

    pub fn release_remote(&mut self, pg: PgId) {
        self.remote.remove(&pg);
    }

    /// PGs holding this OSD's backfill slots: as primary, and as target.
    pub fn backfills(&self) -> (Vec<PgId>, Vec<PgId>) {
        (
            self.local.iter().copied().collect(),
            self.remote.iter().copied().collect(),
        )
    }

    /// Refuse (with the reason) or accept new backfill reservations.
    pub fn set_refuse_backfill(&mut self, why: Option<String>) {
        self.refuse_backfill = why;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_slots_are_bounded_and_spaced() {
        let pg = PgId::new(1, 0);
        let busy = Duration::from_millis(50);
        let mut slots = Slots::new(
            2,
            Duration::from_millis(10),
            Pacer::new(busy, busy, 200),
            1,
            1,
        );
        let t = Duration::from_secs(1);
        assert!(slots.take(pg, t));
        assert!(!slots.take(pg, t), "the sleep spaces starts");
        assert!(slots.take(pg, t + Duration::from_millis(10)));
        assert!(
            !slots.take(pg, t + Duration::from_secs(1)),
            "both slots in use"
        );
        slots.want(pg);
        slots.release(pg, t);
        assert_eq!(slots.take_wanting(t + Duration::from_secs(1)), vec![pg]);
        slots.release_pg(pg);
        assert_eq!(slots.in_use(), 0);
        // Clients first: one object at a time, spaced by the busy sleep.
        let t = t + Duration::from_secs(10);
        slots.client_op(t);
        assert!(slots.take(pg, t));
        assert!(
            !slots.take(pg, t + Duration::from_millis(100)),
            "one at a time"
        );
        slots.release(pg, t);
        assert!(!slots.take(pg, t + Duration::from_millis(20)), "spaced");
        assert!(slots.take(pg, t + Duration::from_millis(50)));
        slots.release(pg, t);
        // Without clients for a while, the idle budget again.
        let idle = t + Duration::from_secs(1);
        assert!(slots.take(pg, idle) && slots.take(pg, idle + Duration::from_millis(10)));
    }

    #[test]
    fn objects_clients_wait_for_are_not_paced() {
        let (a, b) = (PgId::new(1, 0), PgId::new(1, 1));
        let busy = Duration::from_millis(500);
        let mut slots = Slots::new(3, Duration::ZERO, Pacer::new(busy, busy, 200), 1, 1);
        let t = Duration::from_secs(10);
        slots.client_op(t);
        assert!(slots.take(a, t));
        assert!(
            !slots.take(a, t),
            "paced: one at a time while clients are served"
        );
        // Objects clients wait for take the other slots at once...
        assert!(slots.take_urgent(b, t));
        assert!(slots.take_urgent(b, t));
        // ... up to osd_recovery_max_active in all.
        assert!(!slots.take_urgent(a, t));
        slots.want_urgent(a);
        slots.want(b);
        assert!(slots.take_wanting(t).is_empty(), "no slot free");
        slots.release(b, t);
        assert_eq!(
            slots.take_wanting(t),
            vec![a],
            "a free slot goes to the urgent queue; the paced one waits"
        );
        slots.release(b, t);
        slots.release(a, t);
        assert_eq!(slots.take_wanting(t + busy), vec![b]);
        assert_eq!(slots.in_use(), 0);
    }

    #[test]
    fn backfill_reservations_are_bounded_and_refusable() {
        let (a, b) = (PgId::new(1, 0), PgId::new(1, 1));
        let fixed = Pacer::new(Duration::ZERO, Duration::ZERO, 200);
        let mut slots = Slots::new(1, Duration::ZERO, fixed, 1, 1);
        assert!(slots.take_backfill(a));
        assert!(slots.take_backfill(a), "idempotent");
        assert!(!slots.take_backfill(b));
        assert!(slots.reserve_remote(a).is_ok());
        assert!(slots.reserve_remote(b).is_err());
        slots.release_remote(a);
        slots.set_refuse_backfill(Some("osd.0 is backfillfull".into()));
        assert_eq!(
            slots.reserve_remote(b).unwrap_err(),
            "osd.0 is backfillfull"
        );
    }
}
