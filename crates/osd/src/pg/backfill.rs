//! Backfill on the primary: copy the PG, in object-name order, to up
//! members whose copy the log cannot bring up to date (new, blank,
//! damaged, or too far behind), while the acting set keeps serving.
//!
//! Per target, one batch at a time: list this OSD's next objects, hold
//! writes to that range (and wait for those in flight), ask the target for
//! its objects in the range, push what differs and remove what the primary
//! does not have, then advance the target's watermark (`done_upto`, stored
//! by the target with the last push). Writes behind the watermark reach the
//! target as ordinary RepOps; writes ahead of it carry only the log entry.
//! A PG backfills only while holding one of this OSD's backfill slots and
//! one of each target's (`osd_max_backfills`); a target refuses when it has
//! none free or is too full. A target the map records as backfillfull (or
//! full) gets nothing more: the primary checks the map before each batch,
//! gives the reservation (and its own slot) back, and the PG shows
//! `backfill_toofull` until the target has room again. When every target is complete, the primary
//! asks the monitor to drop the `pg_temp`, and the PG peers again with the
//! up set acting.

use cairn_map::FullState;
use cairn_store::ObjectId;
use cairn_types::{OsdId, Version};
use cairn_wire::{ActId, Backfill, ObjectCopy, PgBody};

use super::recovery::Push;
use super::replica::scan;
use super::{CopyPurpose, Ctx, Pg, Phase, Wait};
use crate::io::{CopyError, CopyResult, Done};

/// Objects per backfill batch.
pub const BACKFILL_BATCH: usize = 64;
/// Objects copied per batch while clients are served: writes to a batch's
/// range wait until it lands, so a batch stays short then (and batches are
/// spaced like other recovery operations, see `crate::slots`).
pub const BACKFILL_BUSY_COPIES: usize = 1;
/// A target the map records at this fullness or above gets no backfill.
pub(crate) const BACKFILL_LIMIT: FullState = FullState::Backfillfull;

/// Why `osd` gets no backfill now.
fn too_full(ctx: &Ctx<'_>, osd: OsdId) -> String {
    format!(
        "osd.{osd} is {} (backfill_toofull)",
        ctx.map.full_state(osd)
    )
}
/// Data bytes per push message at most (a larger object goes alone).
pub const PUSH_BYTES: usize = 8 << 20;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reservation {
    #[default]
    None,
    Asked,
    Granted,
}

#[derive(Debug, Default)]
pub(crate) struct BackfillTarget {
    /// Objects named up to this one are on the target (acknowledged).
    pub done_upto: Option<String>,
    pub complete: bool,
    pub reservation: Reservation,
    pub step: Option<Step>,
    /// When to ask again after a refused reservation or a failed batch.
    pub retry_at: std::time::Duration,
    /// Why the target last refused or lost its reservation, until granted.
    pub refused: Option<String>,
    /// The map records the target as too full for backfill (checked at
    /// every kick): the PG shows `backfill_toofull`.
    pub too_full: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Step {
    /// The batch's range is `(done_upto, upto]`; `None`: to the end.
    pub upto: Option<String>,
    pub stage: Stage,
    pub local: Vec<(String, Version)>,
    pub removes: Vec<String>,
    pub copies: Vec<ObjectCopy>,
    pub reads: usize,
    pub pushes: Vec<u64>,
    pub objects: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Writes in flight in the range must finish first.
    #[default]
    WaitWrites,
    Scanning(u64),
    Reading,
    Pushing,
}

impl BackfillTarget {
    /// Does the target hold `name` (so writes to it go there in full)?
    pub fn covers(&self, name: &str) -> bool {
        self.complete || self.done_upto.as_deref().is_some_and(|d| name <= d)
    }

    /// Is `name` in the batch being copied (so writes to it wait)?
    pub fn blocks(&self, name: &str) -> bool {
        let Some(step) = &self.step else {
            return false;
        };
        !self.covers(name) && step.upto.as_deref().is_none_or(|u| name <= u)
    }

    fn in_range(&self, name: &str, upto: Option<&str>) -> bool {
        !self.covers(name) && upto.is_none_or(|u| name <= u)
    }
}

impl Pg {
    pub(crate) fn kick_backfill(&mut self, ctx: &mut Ctx<'_>) {
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        if primary.backfill.is_empty() {
            return;
        }
        if primary.backfill.values().all(|t| t.complete) {
            return self.finish_backfill(ctx);
        }
        // The primary's own copy must be whole first: backfill copies
        // from it, and must never push an object it holds stale.
        if !self.missing.is_empty() {
            return;
        }
        // One target at a time, holding only its reservation: a PG never
        // holds one target's slot while waiting for another's, so PGs
        // cannot deadlock on each other's reservations.
        let act = primary.act;
        let now = ctx.io.now();
        let Some((&osd, target)) = primary.backfill.iter_mut().find(|(_, t)| !t.complete) else {
            return;
        };
        // A target too full for backfill: wait without this OSD's slot,
        // so other PGs may backfill meanwhile.
        target.too_full = ctx.map.full_state(osd) >= BACKFILL_LIMIT;
        if target.too_full && target.reservation == Reservation::None {
            target.refused = Some(too_full(ctx, osd));
            if primary.backfill_slot {
                primary.backfill_slot = false;
                ctx.slots.release_backfill(self.id);
            }
            return;
        }
        if !primary.backfill_slot {
            if !ctx.slots.take_backfill(self.id) {
                return;
            }
            primary.backfill_slot = true;
        }
        let Some(target) = primary.backfill.get_mut(&osd) else {
            return;
        };
        match target.reservation {
            Reservation::None if now >= target.retry_at => {
                target.reservation = Reservation::Asked;
                ctx.send(osd, self.id, PgBody::Reserve { act });
            }
            Reservation::Granted => self.continue_step(ctx, osd),
            _ => {}
        }
    }

    pub(crate) fn got_reserved(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        result: Result<(), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            if result.is_ok() {
                ctx.send(from, self.id, PgBody::Release { act });
            }
            return;
        };
        let Some(target) = primary.backfill.get_mut(&from) else {
            return;
        };
        match result {
            Ok(()) => {
                target.reservation = Reservation::Granted;
                target.refused = None;
            }
            Err(e) => {
                tracing::info!(
                    "pg {}: osd.{from} refused a backfill reservation: {e}",
                    self.id
                );
                target.reservation = Reservation::None;
                target.retry_at = ctx.io.now() + ctx.opts.peering_retry * 5;
                target.refused = Some(e);
                return;
            }
        }
        self.continue_step(ctx, from);
    }

    /// Move target `osd`'s batch on as far as it can go now.
    fn continue_step(&mut self, ctx: &mut Ctx<'_>, osd: OsdId) {
        let store = ctx.io.store();
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let act = primary.act;
        let Some(target) = primary.backfill.get_mut(&osd) else {
            return;
        };
        if target.step.is_none() && ctx.map.full_state(osd) >= BACKFILL_LIMIT {
            // The target filled up since it granted the reservation: stop
            // before the next batch, give the reservation back and ask
            // again later (it refuses while the map says it is too full).
            target.reservation = Reservation::None;
            target.retry_at = ctx.io.now() + ctx.opts.peering_retry * 5;
            target.refused = Some(too_full(ctx, osd));
            target.too_full = true;
            tracing::info!(
                "pg {}: backfill of osd.{osd} paused: it is {}",
                self.id,
                ctx.map.full_state(osd)
            );
            ctx.send(osd, self.id, PgBody::Release { act });
            return;
        }
        if target.step.is_none() {
            // A batch is a recovery operation: it starts when the OSD's
            // budget (and, while clients are served, the pacer) allows.
            let now = ctx.io.now();
            if !ctx.slots.take(self.id, now) {
                ctx.slots.want(self.id);
                return;
            }
            ctx.slots.release(self.id, now);
            let after = target.done_upto.clone();
            let (names, done) = match scan(store, self.id, after.as_deref(), BACKFILL_BATCH) {
                Ok(listed) => listed,
                Err(e) => return self.retry_later(ctx, format!("backfill scan failed: {e}")),
            };
            let upto = if done {
                None
            } else {
                names.last().map(|(n, _)| n.clone())
            };
            target.step = Some(Step {
                upto,
                ..Step::default()
            });
        }
        let Some(step) = target.step.as_ref() else {
            return;
        };
        if step.stage != Stage::WaitWrites {
            return;
        }
        let upto = step.upto.clone();
        let busy = primary
            .objects
            .iter()
            .any(|(name, o)| o.pending_writes > 0 && target.in_range(name, upto.as_deref()));
        if busy {
            return; // resumed when those writes complete
        }
        // List again now that the range is quiet; objects created meanwhile
        // may make the batch end earlier.
        let after = target.done_upto.clone();
        let (listed, done) = match scan(store, self.id, after.as_deref(), BACKFILL_BATCH) {
            Ok(listed) => listed,
            Err(e) => return self.retry_later(ctx, format!("backfill scan failed: {e}")),
        };
        let upto = match (upto, done) {
            (upto, true) => upto,
            (None, false) => listed.last().map(|(n, _)| n.clone()),
            (Some(u), false) => listed.last().map(|(n, _)| n.clone().min(u)),
        };
        let local: Vec<(String, Version)> = listed
            .into_iter()
            .filter(|(n, _)| upto.as_deref().is_none_or(|u| n.as_str() <= u))
            .collect();
        let tid = ctx.id();
        let Some(step) = self
            .primary
            .as_mut()
            .and_then(|p| p.backfill.get_mut(&osd))
            .and_then(|t| t.step.as_mut())
        else {
            return;
        };
        step.local = local;
        step.upto = upto;
        step.stage = Stage::Scanning(tid);
        ctx.send(
            osd,
            self.id,
            PgBody::Scan {
                act,
                tid,
                after,
                max: BACKFILL_BATCH as u32,
            },
        );
    }

    pub(crate) fn got_scan_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        result: Result<(Vec<(String, Version)>, bool), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        let Some(step) = primary
            .backfill
            .get_mut(&from)
            .and_then(|t| t.step.as_mut())
            .filter(|s| s.stage == Stage::Scanning(tid))
        else {
            return;
        };
        let (remote, remote_done) = match result {
            Ok(listed) => listed,
            Err(e) => {
                return self.retry_later(ctx, format!("osd.{from} failed a backfill scan: {e}"))
            }
        };
        // The batch ends where the shorter of the two listings ends.
        let remote_end = (!remote_done)
            .then(|| remote.last().map(|(n, _)| n.clone()))
            .flatten();
        let upto = match (step.upto.take(), remote_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let within = |n: &str| upto.as_deref().is_none_or(|u| n <= u);
        step.local.retain(|(n, _)| within(n));
        let remote: std::collections::HashMap<&str, Version> = remote
            .iter()
            .filter(|(n, _)| within(n))
            .map(|(n, v)| (n.as_str(), *v))
            .collect();
        let to_push: Vec<String> = step
            .local
            .iter()
            .filter(|(n, v)| remote.get(n.as_str()) != Some(v))
            .map(|(n, _)| n.clone())
            .collect();
        let local: std::collections::HashSet<&str> =
            step.local.iter().map(|(n, _)| n.as_str()).collect();
        let mut removes: Vec<String> = remote
            .keys()
            .filter(|n| !local.contains(*n))
            .map(|n| n.to_string())
            .collect();
        removes.sort();
        // While clients are served, the batch ends at its first copies:
        // the rest of the range is compared again by the next batch.
        let mut to_push = to_push;
        let mut upto = upto;
        if ctx.slots.clients_busy(ctx.io.now()) && to_push.len() > BACKFILL_BUSY_COPIES {
            let mut names = to_push.clone();
            names.sort();
            let cut = names[BACKFILL_BUSY_COPIES - 1].clone();
            to_push.retain(|n| *n <= cut);
            removes.retain(|n| *n <= cut);
            step.local.retain(|(n, _)| *n <= cut);
            upto = Some(cut);
        }
        step.upto = upto;
        step.removes = removes;
        step.objects = to_push.len() as u64;
        step.reads = to_push.len();
        step.stage = Stage::Reading;
        if to_push.is_empty() {
            return self.send_backfill_pushes(ctx, from);
        }
        for oid in to_push {
            let id = ctx.id();
            let purpose = CopyPurpose::Backfill { target: from };
            self.waits.insert(
                id,
                Wait::Copy {
                    act,
                    oid: oid.clone(),
                    purpose,
                },
            );
            ctx.io
                .read_object(ObjectId::new(self.id, oid), Done { pg: self.id, id });
        }
    }

    pub(crate) fn backfill_copy_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        target: OsdId,
        oid: String,
        result: CopyResult,
    ) {
        let Some(step) = self
            .primary
            .as_mut()
            .filter(|p| p.act == act)
            .and_then(|p| p.backfill.get_mut(&target))
            .and_then(|t| t.step.as_mut())
            .filter(|s| s.stage == Stage::Reading)
        else {
            return;
        };
        step.reads -= 1;
        match result {
            Ok(Some(copy)) => step.copies.push(copy),
            Ok(None) => step.removes.push(oid),
            Err(CopyError::Damaged(e)) => {
                // Repair this copy first; the batch starts over after.
                if let Some(t) = self
                    .primary
                    .as_mut()
                    .and_then(|p| p.backfill.get_mut(&target))
                {
                    t.step = None;
                }
                return self.mark_damaged(ctx, &oid, &e);
            }
            Err(e) => {
                return self.retry_later(ctx, format!("cannot read {oid:?} to backfill: {e}"))
            }
        }
        if step.reads == 0 {
            self.send_backfill_pushes(ctx, target);
        }
    }

    fn send_backfill_pushes(&mut self, ctx: &mut Ctx<'_>, osd: OsdId) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let act = primary.act;
        let Some(step) = primary.backfill.get_mut(&osd).and_then(|t| t.step.as_mut()) else {
            return;
        };
        let mut copies = std::mem::take(&mut step.copies);
        copies.sort_by(|a, b| a.name.cmp(&b.name));
        let mut batches: Vec<Vec<ObjectCopy>> = Vec::new();
        let mut bytes = 0usize;
        for copy in copies {
            let len = copy.data.as_ref().map_or(0, |d| d.len());
            self.counters.recovery_bytes += len as u64;
            match batches.last_mut() {
                Some(batch) if bytes + len <= PUSH_BYTES => {
                    batch.push(copy);
                    bytes += len;
                }
                _ => {
                    batches.push(vec![copy]);
                    bytes = len;
                }
            }
        }
        if batches.is_empty() {
            batches.push(Vec::new());
        }
        let last = batches.len() - 1;
        let watermark = match &step.upto {
            Some(upto) => Backfill::Partial {
                done_upto: Some(upto.clone()),
            },
            None => Backfill::Complete,
        };
        step.stage = Stage::Pushing;
        for (i, objects) in batches.into_iter().enumerate() {
            let tid = ctx.id();
            let (removes, backfill_upto) = if i == last {
                (std::mem::take(&mut step.removes), Some(watermark.clone()))
            } else {
                (Vec::new(), None)
            };
            ctx.io.send(
                osd,
                cairn_wire::PgMessage {
                    pg: self.id,
                    epoch: ctx.map.epoch,
                    body: PgBody::Push {
                        act,
                        tid,
                        objects,
                        removes,
                        backfill_upto,
                    },
                },
            );
            step.pushes.push(tid);
            primary.pushes.insert(tid, Push::Backfill);
        }
    }

    pub(crate) fn backfill_push_acked(&mut self, ctx: &mut Ctx<'_>, from: OsdId, tid: u64) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let Some(target) = primary.backfill.get_mut(&from) else {
            return;
        };
        let Some(step) = target.step.as_mut() else {
            return;
        };
        step.pushes.retain(|&t| t != tid);
        if !step.pushes.is_empty() {
            return;
        }
        let Some(step) = target.step.take() else {
            return;
        };
        self.counters.backfilled_objects += step.objects;
        match step.upto {
            Some(upto) => target.done_upto = Some(upto),
            None => {
                target.complete = true;
                target.reservation = Reservation::None;
                ctx.send(from, self.id, PgBody::Release { act: primary.act });
                tracing::info!("pg {}: backfill of osd.{from} complete", self.id);
            }
        }
        if let Some(peer) = primary.peers.get_mut(&from) {
            peer.info.backfill = if target.complete {
                Backfill::Complete
            } else {
                Backfill::Partial {
                    done_upto: target.done_upto.clone(),
                }
            };
        }
        // Writes held for this batch may go now.
        let held: Vec<String> = primary
            .objects
            .iter()
            .filter(|(_, o)| !o.waiting.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for oid in held {
            self.wake_object(ctx, &oid);
        }
        self.kick_backfill(ctx);
    }

    /// Every target holds the whole PG: give back the slots and return to
    /// the up set as acting.
    fn finish_backfill(&mut self, ctx: &mut Ctx<'_>) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let act = primary.act;
        if primary.backfill_slot {
            primary.backfill_slot = false;
            ctx.slots.release_backfill(self.id);
        }
        let _ = act;
        if self.mapping.acting.osds != self.mapping.up && self.recovered() {
            tracing::info!(
                "pg {}: backfill done; asking to serve from the up set {:?}",
                self.id,
                self.mapping.up
            );
            ctx.request_pg_temp(self.id, Vec::new());
        }
    }
}
