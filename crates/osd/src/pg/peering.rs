//! The primary's peering: from a new interval to an active PG.
//!
//! | step        | what happens                                                                  | next                |
//! |-------------|-------------------------------------------------------------------------------|---------------------|
//! | GetInfo     | ask every up member of the up and acting sets, of every past interval that may have gone read-write, and every stray that spoke up, for its info | Down, Incomplete, WaitActing, GetLog, WaitUpThru |
//! | Down        | a read-write past interval has no member heard from with a complete copy, and some of its members are down and not lost: wait for a new map | (new interval)      |
//! | Incomplete  | no member heard from holds a complete copy of a PG that held data              | (new interval)      |
//! | WaitActing  | the wanted acting set (complete members; incomplete up members become backfill targets) differs from the map's: asked the monitor for `pg_temp` | (new interval)      |
//! | GetLog      | the authoritative member (newest `last_epoch_started`, then newest `last_update`) is not this OSD: fetch and merge its log | WaitUpThru |
//! | WaitUpThru  | the monitor has not recorded this OSD alive through the interval's start       | activation          |
//! | Activating  | every acting member and backfill target merges the log and reports its missing set | Active       |
//!
//! A member answers a query only once everything it submitted is durable,
//! and only after it has the querier's map (so it has stopped accepting the
//! previous interval's writes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cairn_types::{OsdId, Version};
use cairn_wire::{ActId, LogBase, LogEntry, OpError, PgBody, PgInfo};

use super::log::{self, Merged, Missing};
use super::persist;
use super::{Ctx, Pg, Phase, PrimaryState, Role, Wait};

/// What one member said about its copy.
#[derive(Clone, Debug)]
pub(crate) struct Heard {
    pub info: Option<PgInfo>,
    pub missing: Missing,
    pub damaged: Option<String>,
}

impl Heard {
    /// Does this member hold a complete copy?
    pub fn usable(&self) -> Option<&PgInfo> {
        self.info
            .as_ref()
            .filter(|i| self.damaged.is_none() && i.backfill.is_complete())
    }
}

#[derive(Clone, Debug)]
pub(crate) struct GetInfo {
    pub heard: BTreeMap<OsdId, Heard>,
    pub waiting: BTreeSet<OsdId>,
    pub retry_at: Duration,
}

/// What peering learned, kept until activation.
#[derive(Debug)]
pub(crate) struct Peered {
    pub heard: BTreeMap<OsdId, Heard>,
    pub backfill: Vec<OsdId>,
    pub merged: Option<Merged>,
}

/// When a peering attempt began and when each of its steps ended.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    began: Duration,
    ended: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn begin(&mut self, now: Duration) {
        self.began = now;
        self.ended.clear();
    }

    fn end(&mut self, step: &'static str, now: Duration) {
        self.ended.push((step, now));
    }

    /// "N ms (step a ms, step b ms, ...)", for the log line at activation.
    fn describe(&self, now: Duration) -> String {
        let ms = |d: Duration| d.as_millis();
        let mut at = self.began;
        let parts: Vec<String> = self
            .ended
            .iter()
            .map(|&(step, end)| {
                let took = end.saturating_sub(at);
                at = end;
                format!("{step} {}", ms(took))
            })
            .collect();
        format!(
            "{} ms ({})",
            ms(now.saturating_sub(self.began)),
            parts.join(", ")
        )
    }
}

impl Pg {
    pub(crate) fn start_peering(&mut self, ctx: &mut Ctx<'_>) {
        self.attempt += 1;
        self.peering_steps.begin(ctx.now());
        self.peered = None;
        let mut heard = BTreeMap::new();
        heard.insert(ctx.me, self.my_heard());
        let mut waiting = BTreeSet::new();
        for osd in self.probe_set(ctx) {
            ctx.send(
                osd,
                self.id,
                PgBody::Query {
                    query_epoch: self.interval_since,
                },
            );
            waiting.insert(osd);
        }
        self.phase = Phase::GetInfo(GetInfo {
            heard,
            waiting,
            retry_at: ctx.now() + ctx.opts.peering_retry,
        });
        self.check_infos(ctx);
    }

    /// Peer again in the same interval (a member failed mid-activation or
    /// a replication stream broke).
    pub(crate) fn restart_peering(&mut self, ctx: &mut Ctx<'_>) {
        let epoch = ctx.map.epoch;
        self.stop_primary(ctx, OpError::Retry { epoch });
        if self.role == Role::Primary {
            self.start_peering(ctx);
        }
    }

    /// Peer again after `retry` unless the interval changes first.
    pub(crate) fn retry_later(&mut self, ctx: &mut Ctx<'_>, reason: String) {
        tracing::info!("pg {}: {reason}; peering again shortly", self.id);
        let epoch = ctx.map.epoch;
        self.stop_primary(ctx, OpError::Retry { epoch });
        self.phase = Phase::Retry { reason };
        self.retry_at = ctx.now() + ctx.opts.peering_retry;
    }

    pub(crate) fn retry_due(&mut self, ctx: &Ctx<'_>) -> bool {
        if ctx.now() < self.retry_at {
            return false;
        }
        self.retry_at = ctx.now() + ctx.opts.peering_retry;
        true
    }

    fn my_heard(&self) -> Heard {
        Heard {
            info: (self.holds && self.damaged.is_none()).then(|| self.info.clone()),
            missing: self.missing.clone(),
            damaged: self.damaged.clone(),
        }
    }

    fn probe_set(&self, ctx: &Ctx<'_>) -> BTreeSet<OsdId> {
        let mut probe: BTreeSet<OsdId> = self.mapping.up.iter().copied().collect();
        probe.extend(self.mapping.acting.osds.iter().copied());
        for interval in ctx.map.rw_intervals(self.id) {
            probe.extend(
                interval
                    .acting
                    .iter()
                    .copied()
                    .filter(|&o| ctx.map.is_up(o)),
            );
        }
        probe.extend(self.strays.keys().copied().filter(|&o| ctx.map.is_up(o)));
        probe.remove(&ctx.me);
        probe
    }

    pub(crate) fn resend_queries(&mut self, ctx: &mut Ctx<'_>) {
        let Phase::GetInfo(get) = &mut self.phase else {
            return;
        };
        get.retry_at = ctx.now() + ctx.opts.peering_retry;
        let waiting: Vec<OsdId> = get.waiting.iter().copied().collect();
        for osd in waiting {
            ctx.send(
                osd,
                self.id,
                PgBody::Query {
                    query_epoch: self.interval_since,
                },
            );
        }
    }

    pub(crate) fn got_info(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        query_epoch: cairn_types::Epoch,
        info: Option<PgInfo>,
        missing: Vec<(String, Version)>,
        damaged: Option<String>,
    ) {
        if query_epoch != self.interval_since {
            return;
        }
        let Phase::GetInfo(get) = &mut self.phase else {
            return;
        };
        if !get.waiting.remove(&from) {
            return;
        }
        let heard = Heard {
            info,
            missing: missing.into_iter().collect(),
            damaged,
        };
        get.heard.insert(from, heard);
        self.check_infos(ctx);
    }

    /// A member outside the up and acting sets holds data of this PG.
    pub(crate) fn got_notify(&mut self, ctx: &mut Ctx<'_>, from: OsdId, info: PgInfo) {
        // A stray down in this map cannot be asked: it notifies again once
        // up.
        if self.role != Role::Primary || self.mapping.contains(from) || !ctx.map.is_up(from) {
            return;
        }
        self.strays.insert(from, info);
        if matches!(self.phase, Phase::Active) && self.is_clean() {
            return self.remove_strays(ctx);
        }
        // Objects no member heard at peering holds may be on the stray:
        // peer again so that it is heard and they can be recovered from it.
        let unfound = self.primary.as_ref().map_or(0, |p| p.unfound.len());
        if matches!(self.phase, Phase::Active) && unfound > 0 {
            tracing::info!(
                "pg {}: osd.{from} holds a copy and {unfound} objects are unfound; peering again to hear it",
                self.id
            );
            return self.restart_peering(ctx);
        }
        match &mut self.phase {
            Phase::GetInfo(get)
                if !get.heard.contains_key(&from) && !get.waiting.contains(&from) =>
            {
                get.waiting.insert(from);
                ctx.send(
                    from,
                    self.id,
                    PgBody::Query {
                        query_epoch: self.interval_since,
                    },
                );
            }
            Phase::Down { .. } | Phase::Incomplete { .. } => self.restart_peering(ctx),
            _ => {}
        }
    }

    fn check_infos(&mut self, ctx: &mut Ctx<'_>) {
        let Phase::GetInfo(get) = &self.phase else {
            return;
        };
        if !get.waiting.is_empty() {
            return;
        }
        let heard = get.heard.clone();
        // Every past interval that may have acknowledged writes must have
        // a member heard from with a complete copy — unless it ended
        // before an interval in which a complete member heard from was
        // activated: that activation's primary had heard from every
        // earlier interval, and the member took its authoritative log, so
        // it holds every write acknowledged before (objects it lacks are
        // in its missing set). The monitor forgets such intervals only
        // once the PG reports itself recovered, which can come after its
        // members are gone.
        let started = heard
            .values()
            .filter_map(|h| h.usable())
            .map(|i| i.last_epoch_started)
            .max()
            .unwrap_or(0);
        let mut blocked_by = BTreeSet::new();
        let mut blocking = Vec::new();
        let mut gone = Vec::new();
        for interval in ctx.map.rw_intervals(self.id) {
            if interval.last < started {
                continue;
            }
            if interval
                .acting
                .iter()
                .any(|o| heard.get(o).is_some_and(|h| h.usable().is_some()))
            {
                continue;
            }
            let down: Vec<OsdId> = interval
                .acting
                .iter()
                .copied()
                .filter(|&o| !ctx.map.is_up(o) && !ctx.map.lost_since(o, interval.first))
                .collect();
            if down.is_empty() {
                gone.push(format!(
                    "{}-{} {:?}",
                    interval.first, interval.last, interval.acting
                ));
            } else {
                blocking.push(format!(
                    "{}-{} {:?}",
                    interval.first, interval.last, interval.acting
                ));
                blocked_by.extend(down);
            }
        }
        if !blocked_by.is_empty() {
            let reason = format!(
                "interval(s) {} may have acknowledged writes and no member of them holding a complete copy is up; waiting for osd {:?} (or `cairn osd lost`)",
                blocking.join(", "),
                blocked_by
            );
            tracing::warn!("pg {}: down: {reason}", self.id);
            self.phase = Phase::Down {
                blocked_by: blocked_by.into_iter().collect(),
                reason,
            };
            return;
        }
        let usable: Vec<(OsdId, &PgInfo)> = heard
            .iter()
            .filter_map(|(&o, h)| h.usable().map(|i| (o, i)))
            .collect();
        let had_writes = ctx.map.rw_intervals(self.id).next().is_some();
        if usable.is_empty() && (had_writes || heard.values().any(|h| h.damaged.is_some())) {
            let reason = "no OSD heard from holds a complete copy: every OSD that held one is down or lost; bring one back".to_string();
            tracing::warn!("pg {}: incomplete: {reason}", self.id);
            self.phase = Phase::Incomplete { reason };
            self.retry_at = ctx.now() + ctx.opts.peering_retry * 10;
            return;
        }
        if !gone.is_empty() {
            tracing::error!(
                "pg {}: every member of interval(s) {} is lost or holds no complete copy: writes acknowledged only there are gone",
                self.id,
                gone.join(", ")
            );
        }
        // The authority: newest last_epoch_started, then newest
        // last_update, then the longest log; among members equal on all
        // three, this OSD if it is one (it need not fetch a log that adds
        // nothing), else the lowest id. Every primary that hears the same
        // members so picks an authority with the same log tail, and agrees
        // on who needs backfill.
        let me = ctx.me;
        let rank = |i: &PgInfo| {
            (
                i.last_epoch_started,
                i.last_update,
                std::cmp::Reverse(i.log_tail),
            )
        };
        let best = usable.iter().map(|(_, i)| rank(i)).max();
        let auth = if usable
            .iter()
            .any(|(o, i)| *o == me && Some(rank(i)) == best)
        {
            me
        } else {
            usable
                .iter()
                .filter(|(_, i)| Some(rank(i)) == best)
                .map(|(o, _)| *o)
                .min()
                .unwrap_or(me)
        };
        self.choose_acting(ctx, heard, auth);
    }

    /// Decide the acting set: complete members that can catch up from the
    /// authoritative log, the up set's first; up members that cannot become
    /// backfill targets.
    fn choose_acting(&mut self, ctx: &mut Ctx<'_>, heard: BTreeMap<OsdId, Heard>, auth: OsdId) {
        let auth_tail = heard
            .get(&auth)
            .and_then(|h| h.info.as_ref())
            .map_or(Version::ZERO, |i| i.log_tail);
        let blank = heard
            .values()
            .all(|h| h.info.is_none() && h.damaged.is_none());
        let ok = |o: OsdId| {
            let Some(h) = heard.get(&o) else { return false };
            if blank {
                return true; // a new PG: nobody holds anything yet
            }
            h.usable().is_some_and(|i| i.last_update >= auth_tail)
        };
        let mut want: Vec<OsdId> = self.mapping.up.iter().copied().filter(|&o| ok(o)).collect();
        // Members from outside the up set stand in for up members that must
        // be backfilled first, and to reach min_size. Beyond that they fill
        // the size only from failure domains no chosen member is in: a size
        // CRUSH cannot place (a host down in a 3-host cluster) stays
        // undersized rather than putting two copies in one failure domain.
        let size = self.mapping.size as usize;
        let min_size = self.mapping.min_size as usize;
        let stand_ins = self.mapping.up.len() - want.len();
        if want.len() < size {
            let mut extra: Vec<(&OsdId, &PgInfo)> = heard
                .iter()
                .filter(|(o, _)| !want.contains(o) && ctx.map.is_up(**o) && ok(**o))
                .filter_map(|(o, h)| h.usable().map(|i| (o, i)))
                .collect();
            extra.sort_by_key(|(o, i)| {
                (
                    std::cmp::Reverse((i.last_epoch_started, i.last_update)),
                    **o,
                )
            });
            let domain = |o: OsdId| ctx.map.failure_domain(self.id, o);
            let mut taken = 0;
            for (&o, _) in extra {
                if want.len() >= size {
                    break;
                }
                let needed = taken < stand_ins || want.len() < min_size;
                let apart = domain(o).is_some_and(|d| want.iter().all(|&w| domain(w) != Some(d)));
                if needed || apart {
                    want.push(o);
                    taken += 1;
                }
            }
        }
        // A primary that must first recover objects itself would make
        // clients wait for them: a member that holds everything serves
        // meanwhile (the up primary stays acting, catching up by log
        // recovery), and the acting set returns to the up order when done.
        let auth_head = heard
            .get(&auth)
            .and_then(|h| h.info.as_ref())
            .map(|i| i.last_update);
        let current = |o: &OsdId| {
            heard.get(o).is_some_and(|h| {
                h.missing.is_empty() && h.usable().map(|i| i.last_update) == auth_head
            })
        };
        if !blank && want.first().is_some_and(|p| !current(p)) {
            if let Some(pos) = want.iter().position(current) {
                let serving = want.remove(pos);
                want.insert(0, serving);
            }
        }
        let backfill: Vec<OsdId> = self
            .mapping
            .up
            .iter()
            .copied()
            .filter(|o| !want.contains(o))
            .collect();
        if want.is_empty() {
            self.phase = Phase::Incomplete {
                reason: "no complete member is up".into(),
            };
            return;
        }
        if want != self.mapping.acting.osds {
            let ask = if want == self.mapping.up {
                Vec::new()
            } else {
                want.clone()
            };
            tracing::info!(
                "pg {}: want acting {want:?} (up {:?}, backfill {backfill:?}); asking for pg_temp {ask:?}",
                self.id,
                self.mapping.up
            );
            ctx.request_pg_temp(self.id, ask);
            self.phase = Phase::WaitActing { want };
            self.retry_at = ctx.now() + ctx.opts.peering_retry * 5;
            return;
        }
        self.peered = Some(Box::new(Peered {
            heard,
            backfill,
            merged: None,
        }));
        self.peering_steps.end("infos", ctx.now());
        if auth == ctx.me {
            self.phase = Phase::WaitUpThru;
            self.check_up_thru(ctx);
        } else {
            self.phase = Phase::GetLog { auth };
            self.retry_at = ctx.now() + ctx.opts.peering_retry;
            ctx.send(
                auth,
                self.id,
                PgBody::GetLog {
                    query_epoch: self.interval_since,
                },
            );
        }
    }

    pub(crate) fn got_log(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        query_epoch: cairn_types::Epoch,
        info: PgInfo,
        entries: Vec<LogEntry>,
    ) {
        if query_epoch != self.interval_since
            || !matches!(self.phase, Phase::GetLog { auth } if auth == from)
        {
            return;
        }
        let store = ctx.io.store();
        let pg = self.id;
        let local = |name: &str| {
            persist::object_version(store, &cairn_store::ObjectId::new(pg, name))
                .ok()
                .flatten()
        };
        match log::merge(
            &self.log,
            &self.missing,
            info.log_tail,
            info.last_update,
            &entries,
            local,
        ) {
            Ok(merged) => {
                tracing::info!(
                    "pg {}: merged osd.{from}'s log: head {}, {} missing here, {} divergent",
                    self.id,
                    merged.log.head(),
                    merged.missing.len(),
                    merged.divergent
                );
                if let Some(peered) = self.peered.as_mut() {
                    peered.merged = Some(merged);
                }
                self.peering_steps.end("log", ctx.now());
                self.phase = Phase::WaitUpThru;
                self.check_up_thru(ctx);
            }
            Err(e) => self.retry_later(ctx, format!("cannot merge osd.{from}'s log: {e}")),
        }
    }

    pub(crate) fn check_up_thru(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.map.up_thru(ctx.me) >= self.interval_since {
            self.activate(ctx);
        } else {
            ctx.request_up_thru(self.interval_since);
        }
    }

    fn activate(&mut self, ctx: &mut Ctx<'_>) {
        let Some(peered) = self.peered.take() else {
            return self.restart_peering(ctx);
        };
        self.peering_steps.end("up_thru", ctx.now());
        let act = ActId {
            epoch: self.interval_since,
            attempt: self.attempt,
        };
        let mut txn = cairn_store::Transaction::new();
        if let Some(merged) = peered.merged {
            for name in &merged.remove {
                txn.remove(&cairn_store::ObjectId::new(self.id, name.clone()));
            }
            if merged.rewritten {
                persist::log_rewrite(&mut txn, self.id, &merged.log);
            } else {
                for entry in merged.log.entries_after(self.log.head()) {
                    persist::log_append(&mut txn, self.id, entry);
                }
            }
            persist::missing_rewrite(&mut txn, self.id, &merged.missing);
            self.info.last_update = merged.log.head();
            self.info.log_tail = merged.log.tail();
            self.log = merged.log;
            self.missing = merged.missing;
        }
        self.info.last_epoch_started = self.interval_since;
        self.info.backfill = cairn_wire::Backfill::Complete;
        if self.info.last_scrub == 0 {
            // A new PG: its first scheduled scrub is an interval away.
            let now = ctx.io.wall_secs();
            self.info.last_scrub = now;
            self.info.last_deep_scrub = now;
        }
        persist::save_info(&mut txn, &self.info);
        if let Err(e) = self.submit(ctx, txn, Wait::PrimaryActivated { act }) {
            return self.retry_later(ctx, format!("cannot persist activation: {e}"));
        }
        let members: Vec<OsdId> = self
            .mapping
            .acting
            .osds
            .iter()
            .copied()
            .filter(|&o| o != ctx.me)
            .chain(peered.backfill.iter().copied())
            .collect();
        for &member in &members {
            let backfill = peered.backfill.contains(&member);
            let base = if backfill {
                None
            } else {
                peered.heard.get(&member).and_then(|h| self.log_base(h))
            };
            // Compacted: what a member must fetch or remove depends only on
            // each object's newest entry (see `log::compact`).
            let entries = match &base {
                Some(b) => log::compact(self.log.entries_after(b.version), b.version),
                None => log::compact(self.log.entries(), Version::ZERO),
            };
            ctx.send(
                member,
                self.id,
                PgBody::Activate {
                    act,
                    info: self.info.clone(),
                    base,
                    entries,
                    backfill,
                },
            );
        }
        let sources = peered
            .heard
            .iter()
            .filter_map(|(&o, h)| h.usable().map(|i| (o, (i.clone(), h.missing.clone()))))
            .filter(|(o, _)| *o != ctx.me)
            .collect();
        self.primary = Some(Box::new(PrimaryState::new(act, sources, &peered.backfill)));
        let mut waiting: BTreeSet<OsdId> = members.into_iter().collect();
        waiting.insert(ctx.me);
        self.phase = Phase::Activating { waiting };
        tracing::debug!("pg {}: activating {act}", self.id);
    }

    /// Where a complete member's log meets this (authoritative) one: its
    /// newest entry, if this log holds it. Such a member needs only the
    /// entries after it, and has none that diverge (a version is assigned
    /// once, by its interval's primary, and members take entries in order).
    fn log_base(&self, heard: &Heard) -> Option<LogBase> {
        let head = heard.usable()?.last_update;
        let entry = self.log.get(head)?;
        Some(LogBase {
            version: head,
            oid: entry.oid.clone(),
        })
    }

    pub(crate) fn activation_committed(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        result: Result<(), String>,
    ) {
        if self.primary.as_ref().map(|p| p.act) != Some(act) {
            return;
        }
        if let Err(e) = result {
            return self.retry_later(ctx, format!("activation commit failed: {e}"));
        }
        let me = ctx.me;
        self.activation_step(ctx, me);
    }

    pub(crate) fn got_activated(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        result: Result<(PgInfo, Vec<(String, Version)>), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        match result {
            Ok((info, mut missing)) => {
                if ctx.opts.planted_bug == Some(crate::core::PlantedBug::ForgetReplicaMissing)
                    && !missing.is_empty()
                {
                    missing.remove(0);
                }
                primary.add_peer(from, info, missing.into_iter().collect());
                self.activation_step(ctx, from);
            }
            Err(e) => self.retry_later(ctx, format!("osd.{from} refused activation: {e}")),
        }
    }

    fn activation_step(&mut self, ctx: &mut Ctx<'_>, done: OsdId) {
        let Phase::Activating { waiting } = &mut self.phase else {
            return;
        };
        waiting.remove(&done);
        if waiting.is_empty() {
            self.go_active(ctx);
        }
    }

    fn go_active(&mut self, ctx: &mut Ctx<'_>) {
        self.phase = Phase::Active;
        let serving = self.mapping.acting.osds.len() as u32 >= self.mapping.min_size;
        self.peering_steps.end("activation", ctx.now());
        tracing::info!(
            "pg {}: active in interval {} with {:?} after {}{}",
            self.id,
            self.interval_since,
            self.mapping.acting.osds,
            self.peering_steps.describe(ctx.now()),
            if serving {
                ""
            } else {
                " (below min_size: recovering, not serving)"
            }
        );
        self.release_waiting(ctx);
        self.kick_recovery(ctx);
        if self.is_clean() {
            self.remove_strays(ctx);
        }
    }

    /// Tell members outside the up and acting sets to delete their copies:
    /// the PG is clean without them. A stray stays while a read-write past
    /// interval in the map names it and no current member: a later peering
    /// must hear from a member of that interval (the monitor forgets it
    /// once this PG's clean report reaches it, and a new map then lets the
    /// stray go, see `advance_map`).
    pub(crate) fn remove_strays(&mut self, ctx: &mut Ctx<'_>) {
        let acting = &self.mapping.acting.osds;
        let needed = |stray: OsdId| {
            ctx.map
                .rw_intervals(self.id)
                .any(|i| i.acting.contains(&stray) && !i.acting.iter().any(|o| acting.contains(o)))
        };
        let mut keep = BTreeMap::new();
        for (stray, info) in std::mem::take(&mut self.strays) {
            if self.mapping.contains(stray) {
                continue;
            }
            if needed(stray) {
                keep.insert(stray, info);
            } else {
                ctx.send(stray, self.id, PgBody::Remove);
            }
        }
        self.strays = keep;
    }
}
