//! Client operations on the primary.
//!
//! An op is admitted only while the PG is active with at least min_size
//! acting members, and only once its object is whole: missing here (it
//! waits for recovery, which takes that object first), missing on a member
//! or inside a backfill batch in flight (writes wait), or under writes in
//! flight when the op depends on the object's state. A mutation becomes
//! one store transaction with its log entry, is submitted here and sent as
//! a RepOp to every acting member and backfill target at once, and is
//! acknowledged when all of them and the local store have committed it.
//! A request id already in the log is answered from it, never applied
//! twice.
//!
//! While the map records a member that would store the data as full, a
//! mutation that may add data is refused at once with `NoSpace` (no
//! waiting: the client sees the error); removes, truncates, zeroing and
//! omap key removals still run, since they are how space comes back.

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_map::FullState;
use cairn_store::{ObjectId, ObjectStore};
use cairn_types::{OsdId, PgId, Version};
use cairn_wire::{ActId, LogEntry, LogOp, ObjOp, OpError, OpOutput, PgBody};

use super::mutation::{self, needs_object_state};
use super::persist;
use super::{reply, tier, ClientOp, Ctx, Pg, Phase, Wait, MAX_WAITING_OPS};
use crate::io::store_error;

/// A write in flight on the primary.
#[derive(Debug)]
pub(crate) struct Inflight {
    pub oid: String,
    /// The client requests waiting for it (a resend adds one).
    pub clients: Vec<(crate::io::ClientId, u64)>,
    pub outputs: usize,
    pub waiting_on: BTreeSet<OsdId>,
    /// When the local commit came (`None`: not yet).
    pub local_at: Option<Duration>,
    /// When the first request for it reached this OSD, when it was
    /// submitted, and which member committed last and when (for slow-op
    /// reports).
    pub arrived: Duration,
    pub submitted: Duration,
    pub last_ack: Option<(OsdId, Duration)>,
}

/// Most bytes of omap a request may set while an OSD of the PG is full.
const FULL_METADATA_MAX: usize = 4096;

/// May this request run while an OSD of the PG is full? Requests that only
/// free space (removing an object, truncating, zeroing, removing omap keys)
/// and small omap-only changes: an image's watch renewal or an admin
/// operation's record is a few hundred bytes, and refusing them would stop
/// clients from reading (their lease lapses) and admins from removing
/// data, the way out of full. The full ratio's headroom absorbs them.
fn allowed_when_full(ops: &[ObjOp]) -> bool {
    let mut metadata = 0usize;
    ops.iter().all(|op| match op {
        ObjOp::Remove
        | ObjOp::Truncate { .. }
        | ObjOp::Zero { .. }
        | ObjOp::OmapRm { .. }
        | ObjOp::OmapCmp { .. } => true,
        ObjOp::OmapSet { entries } => {
            metadata += entries
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
            metadata <= FULL_METADATA_MAX
        }
        _ => false,
    })
}

impl Pg {
    /// A client op routed to this PG (its epoch and placement checked).
    pub(crate) fn client_op(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) {
        if self.role != super::Role::Primary {
            let epoch = ctx.map.epoch;
            return reply(ctx, &op, Err(OpError::WrongPrimary { epoch }));
        }
        let Some(op) = self.admit(ctx, op) else {
            return;
        };
        if op.client == tier::TIER_CLIENT {
            let Some(write) = self.internal_tier_write(op.op.tid) else {
                // Made in an earlier primary term: not redone.
                tracing::debug!("pg {}: dropping a cache write of an earlier term", self.id);
                return;
            };
            return self.do_write_tiered(ctx, op, Some(write));
        }
        let mutation = op.op.ops.iter().any(ObjOp::is_mutation);
        if tier::cache_of(ctx, self.id.pool).is_some() {
            // A resend of a mutation applied here gets its outcome from
            // the log, whatever the cache holds of its object now.
            if !(mutation && self.log.find_reqid(&op.op.reqid).is_some()) {
                return self.tier_client_op(ctx, op);
            }
        }
        if mutation {
            self.do_write_tiered(ctx, op, None);
        } else {
            self.do_read(ctx, op, false);
        }
    }

    /// Hold `op` until the PG serves; refuse it if too many wait.
    pub(super) fn hold(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) {
        if self.waiting_active.len() >= MAX_WAITING_OPS {
            let epoch = ctx.map.epoch;
            return reply(ctx, &op, Err(OpError::Retry { epoch }));
        }
        self.waiting_active.push_back(op);
    }

    /// Returns the op if it may run now; otherwise it waits.
    fn admit(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) -> Option<ClientOp> {
        let serving = matches!(self.phase, Phase::Active)
            && self.mapping.acting.osds.len() as u32 >= self.mapping.min_size;
        if !serving {
            self.hold(ctx, op);
            return None;
        }
        let is_write = op.op.ops.iter().any(ObjOp::is_mutation);
        if is_write && !allowed_when_full(&op.op.ops) {
            if let Some(osd) = self.full_member(ctx, &op.op.oid) {
                // A resent request already applied gets its outcome.
                if self.log.find_reqid(&op.op.reqid).is_none() {
                    tracing::debug!("pg {}: {:?} refused: osd.{osd} is full", self.id, op.op.oid);
                    return self.fail(ctx, op, OpError::NoSpace);
                }
            }
        }
        let oid = op.op.oid.clone();
        let missing_here = self.missing.contains_key(&oid);
        let Some(primary) = self.primary.as_mut() else {
            self.hold(ctx, op);
            return None;
        };
        if let Some(unfound) = primary.unfound.get(&oid) {
            if !unfound.corrupt {
                // Its holders are away: wait for them.
                primary.objects.entry(oid).or_default().waiting.push(op);
                return None;
            }
            if !is_write {
                let why = format!("every copy of {oid:?} is damaged");
                return self.fail(ctx, op, OpError::Io(why));
            }
            // Every copy is damaged: an overwrite is taken as it comes.
            self.forget_damaged(ctx, &oid);
            return self.admit(ctx, op);
        }
        if is_write && self.scrub.as_ref().is_some_and(|s| s.blocks(&oid)) {
            primary.objects.entry(oid).or_default().waiting.push(op);
            return None;
        }
        // A write to an object some members miss goes ahead (they get the
        // log entry only, and recovery brings them the newer object) as
        // long as at least min_size acting members hold it; otherwise, and
        // while the object is being copied, it waits for recovery.
        let lacking = primary
            .peers
            .iter()
            .filter(|(o, p)| !primary.backfill.contains_key(o) && p.missing.contains_key(&oid))
            .count();
        let holding = self.mapping.acting.osds.len() - lacking;
        let degraded = is_write
            && (primary.recovering.contains(&oid)
                || (lacking > 0 && (holding as u32) < self.mapping.min_size)
                || primary.backfill.values().any(|b| b.blocks(&oid)));
        if missing_here || degraded {
            if !primary.urgent.contains(&oid) {
                primary.urgent.push_back(oid.clone());
            }
            primary.objects.entry(oid).or_default().waiting.push(op);
            self.kick_recovery(ctx);
            return None;
        }
        // On a cache every op depends on the object's cache state.
        let cache = ctx.map.pool(self.id.pool).is_some_and(|p| p.is_cache());
        if cache || needs_object_state(&op.op.ops) {
            if let Some(obj) = primary.objects.get_mut(&oid) {
                if obj.pending_writes > 0 {
                    obj.waiting.push(op);
                    return None;
                }
            }
        }
        Some(op)
    }

    /// A member that would store a write to `oid` and that the map records
    /// as full: an acting member, or a backfill target already holding
    /// `oid`'s part of the PG. Map lookups only; no store calls.
    fn full_member(&self, ctx: &Ctx<'_>, oid: &str) -> Option<OsdId> {
        let full = |osd: &OsdId| ctx.map.full_state(*osd) == FullState::Full;
        if let Some(&osd) = self.mapping.acting.osds.iter().find(|o| full(o)) {
            return Some(osd);
        }
        let primary = self.primary.as_ref()?;
        primary
            .backfill
            .iter()
            .find(|(osd, target)| target.covers(oid) && full(osd))
            .map(|(osd, _)| *osd)
    }

    /// Stop waiting for a good copy of `oid` (there is none): it is no
    /// longer missing anywhere, so an overwrite can go to every member.
    fn forget_damaged(&mut self, ctx: &mut Ctx<'_>, oid: &str) {
        tracing::warn!(
            "pg {}: overwriting {oid:?}, whose every copy was damaged",
            self.id
        );
        if let Some(primary) = self.primary.as_mut() {
            primary.unfound.remove(oid);
            for peer in primary.peers.values_mut() {
                peer.missing.remove(oid);
            }
        }
        if self.missing.remove(oid).is_some() {
            let mut txn = cairn_store::Transaction::new();
            persist::missing_remove(&mut txn, self.id, &[oid.to_string()]);
            if let Err(e) = self.submit(ctx, txn, Wait::Quiet) {
                tracing::error!("pg {}: {e}", self.id);
            }
        }
    }

    fn fail(&mut self, ctx: &mut Ctx<'_>, op: ClientOp, error: OpError) -> Option<ClientOp> {
        reply(ctx, &op, Err(error));
        None
    }

    /// Run an op held in this PG again. The core checked its placement on
    /// arrival; a split since may have moved its object to a child PG, and
    /// then the client resends it there.
    fn replay_op(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) {
        if !self.owns(ctx, &op.op.oid) {
            let epoch = ctx.map.epoch;
            return reply(ctx, &op, Err(OpError::WrongPrimary { epoch }));
        }
        self.client_op(ctx, op);
    }

    /// Run every op held while the PG did not serve.
    pub(crate) fn release_waiting(&mut self, ctx: &mut Ctx<'_>) {
        let waiting: Vec<ClientOp> = self.waiting_active.drain(..).collect();
        for op in waiting {
            self.replay_op(ctx, op);
        }
    }

    /// Run the ops waiting on `oid`.
    pub(crate) fn wake_object(&mut self, ctx: &mut Ctx<'_>, oid: &str) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let waiting = match primary.objects.get_mut(oid) {
            Some(obj) => {
                let waiting = std::mem::take(&mut obj.waiting);
                if obj.pending_writes == 0 && obj.reads == 0 {
                    primary.objects.remove(oid);
                }
                waiting
            }
            None => return,
        };
        for op in waiting {
            self.replay_op(ctx, op);
        }
    }

    /// Apply a mutation; `tier`: how it changes the object's cache state
    /// (on a cache pool).
    pub(crate) fn do_write_tiered(
        &mut self,
        ctx: &mut Ctx<'_>,
        op: ClientOp,
        tier: Option<tier::TierWrite>,
    ) {
        let internal = op.client == tier::TIER_CLIENT;
        // Exactly once: a request already applied gets its outcome.
        if let Some(version) = self.log.find_reqid(&op.op.reqid).filter(|_| !internal) {
            let primary = self
                .primary
                .as_mut()
                .expect("admitted ops run only while active");
            match primary.inflight.get_mut(&version) {
                Some(inflight) => inflight.clients.push((op.client, op.op.tid)),
                None => {
                    tracing::debug!(
                        "pg {}: {:?} resent as {}: applied at {version}",
                        self.id,
                        op.op.oid,
                        op.op.reqid
                    );
                    let outputs = vec![OpOutput::None; op.op.ops.len()];
                    reply(ctx, &op, Ok(outputs));
                }
            }
            return;
        }
        let epoch = ctx.map.epoch.max(self.info.last_update.epoch);
        let version = Version::new(epoch, self.info.last_update.counter + 1);
        let oid = ObjectId::new(self.id, op.op.oid.clone());
        let store = ctx.io.store();
        let prior = match self.current_version(store, &oid) {
            Ok(prior) => prior,
            Err(e) => return reply(ctx, &op, Err(OpError::Io(e))),
        };
        if let Some(want) = tier.as_ref().and_then(|t| t.if_version) {
            if prior != Some(want) {
                tracing::debug!(
                    "pg {}: {:?} at {prior:?}, not {want}: left as it is",
                    self.id,
                    op.op.oid
                );
                // Written since it was flushed: it stays as it is (dirty),
                // and the agent waits a flush age before trying it again.
                let now = ctx.io.wall_secs();
                if let Some(ix) = self.tier_mut().and_then(|t| t.index.as_mut()) {
                    ix.flushed_stale(&op.op.oid, now);
                }
                let outputs = vec![OpOutput::None; op.op.ops.len()];
                return reply(ctx, &op, Ok(outputs));
            }
        }
        let fresh = tier.as_ref().is_some_and(|t| t.fresh);
        let (mut data, mut exists) =
            match mutation::build_mutation(store, &oid, &op.op.ops, version, fresh) {
                Ok(built) => built,
                Err(e) => return reply(ctx, &op, Err(e)),
            };
        if let Some(t) = &tier {
            exists = self.apply_tier_write(ctx, &oid, t, version, &mut data, exists, &op.op.ops);
        }
        if let Err(e) = data.validate() {
            return reply(ctx, &op, Err(store_error(e)));
        }
        let entry = LogEntry {
            version,
            prior_version: prior.unwrap_or(Version::ZERO),
            reqid: (!internal).then_some(op.op.reqid),
            oid: op.op.oid.clone(),
            op: if exists { LogOp::Modify } else { LogOp::Delete },
            superseded: Vec::new(),
        };
        let replica_txn = data.clone();
        let mut txn = data;
        let trim = self.prepare_append(ctx, &entry, &mut txn);
        let Some(act) = self.primary.as_ref().map(|p| p.act) else {
            unreachable!("admitted ops run only while active");
        };
        if let Err(e) = self.submit(ctx, txn, Wait::WriteCommit { act, version }) {
            // Nothing was applied or sent.
            return reply(ctx, &op, Err(store_error(e)));
        }
        self.finish_append(entry.clone(), trim);
        let primary = self.primary.as_mut().expect("checked above");
        let mut waiting_on = BTreeSet::new();
        for (&peer, state) in primary.peers.iter_mut() {
            let lacks = state.missing.contains_key(&entry.oid);
            if lacks {
                // It gets the entry only; recovery brings the object at
                // this version (or nothing, if removed: it removes its copy).
                match entry.op {
                    LogOp::Modify => {
                        state.missing.insert(entry.oid.clone(), version);
                    }
                    LogOp::Delete => {
                        state.missing.remove(&entry.oid);
                    }
                }
            }
            let covered = !lacks
                && primary
                    .backfill
                    .get(&peer)
                    .is_none_or(|b| b.covers(&entry.oid));
            ctx.io.send(
                peer,
                cairn_wire::PgMessage {
                    pg: self.id,
                    epoch: ctx.map.epoch,
                    body: PgBody::RepOp {
                        act,
                        entry: entry.clone(),
                        txn: covered.then(|| replica_txn.clone()),
                    },
                },
            );
            waiting_on.insert(peer);
        }
        primary.inflight.insert(
            version,
            Inflight {
                oid: op.op.oid.clone(),
                clients: vec![(op.client, op.op.tid)],
                outputs: op.op.ops.len(),
                waiting_on,
                local_at: None,
                arrived: op.arrived,
                submitted: ctx.io.now(),
                last_ack: None,
            },
        );
        let obj = primary.objects.entry(op.op.oid).or_default();
        obj.pending_writes += 1;
        obj.version = Some(if exists { version } else { Version::ZERO });
    }

    /// The object's version as of every write submitted so far (`None`:
    /// it does not exist).
    fn current_version(
        &self,
        store: &dyn ObjectStore,
        oid: &ObjectId,
    ) -> Result<Option<Version>, String> {
        let pending = self
            .primary
            .as_ref()
            .and_then(|p| p.objects.get(&oid.name))
            .and_then(|o| o.version);
        match pending {
            Some(v) if v == Version::ZERO => Ok(None),
            Some(v) => Ok(Some(v)),
            None => persist::object_version(store, oid),
        }
    }

    pub(crate) fn write_committed(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        version: Version,
        result: Result<(), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        if let Err(e) = result {
            tracing::error!("pg {}: local commit of {version} failed: {e}", self.id);
            return self.retry_later(ctx, format!("local commit failed: {e}"));
        }
        if let Some(inflight) = primary.inflight.get_mut(&version) {
            inflight.local_at = Some(ctx.io.now());
        }
        self.maybe_complete(ctx, version);
    }

    pub(crate) fn got_repop_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        version: Version,
        result: Result<(), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        if let Err(e) = result {
            return self.retry_later(ctx, format!("osd.{from} refused write {version}: {e}"));
        }
        if let Some(inflight) = primary.inflight.get_mut(&version) {
            if inflight.waiting_on.remove(&from) {
                inflight.last_ack = Some((from, ctx.io.now()));
            }
        }
        self.maybe_complete(ctx, version);
    }

    fn maybe_complete(&mut self, ctx: &mut Ctx<'_>, version: Version) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        let done = primary
            .inflight
            .get(&version)
            .is_some_and(|i| i.local_at.is_some() && i.waiting_on.is_empty());
        if !done {
            return;
        }
        let Some(inflight) = primary.inflight.remove(&version) else {
            return;
        };
        tracing::debug!("pg {}: {:?} written at {version}", self.id, inflight.oid);
        report_if_slow(self.id, ctx, version, &inflight);
        let now = ctx.io.now();
        ctx.write_times.add(
            inflight.arrived,
            inflight.submitted,
            inflight.local_at.unwrap_or(now),
            inflight.last_ack.map(|(_, at)| at),
            now,
        );
        ctx.slots
            .client_write(now, now.saturating_sub(inflight.arrived));
        for (client, tid) in inflight.clients {
            let outputs = vec![OpOutput::None; inflight.outputs];
            ctx.reply_to(
                self.id,
                client,
                cairn_wire::OsdOpReply {
                    tid,
                    result: Ok(outputs),
                },
            );
        }
        if let Some(obj) = primary.objects.get_mut(&inflight.oid) {
            obj.pending_writes -= 1;
            if obj.pending_writes == 0 {
                obj.version = None;
                self.wake_object(ctx, &inflight.oid);
                // Recovery of an object waits for writes in flight on it.
                let wanted = self.primary.as_ref().is_some_and(|p| {
                    p.peers
                        .values()
                        .any(|peer| peer.missing.contains_key(&inflight.oid))
                });
                if wanted {
                    self.kick_recovery(ctx);
                } else {
                    self.kick_backfill(ctx);
                }
                self.maybe_scrub(ctx);
            }
        }
    }
}

/// Say where a write slower than `osd_op_complaint_time` spent its time:
/// held before it ran (peering, recovery of its object, writes ahead of
/// it), its local commit, and the slowest member's commit.
fn report_if_slow(pg: PgId, ctx: &Ctx<'_>, version: Version, w: &Inflight) {
    let now = ctx.io.now();
    let total = now.saturating_sub(w.arrived);
    let limit = ctx.opts.op_complaint_time;
    if limit.is_zero() || total < limit {
        return;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let held = w.submitted.saturating_sub(w.arrived);
    let local = w.local_at.unwrap_or(now).saturating_sub(w.submitted);
    let member = match w.last_ack {
        Some((osd, at)) => format!(
            "osd.{osd} committed last after {:.0} ms",
            ms(at.saturating_sub(w.submitted))
        ),
        None => "no other member".to_string(),
    };
    tracing::warn!(
        "pg {}: slow write to {:?} at {version}: {:.0} ms in all; held {:.0} ms before it ran, \
         local commit {:.0} ms, {member}",
        pg,
        w.oid,
        ms(total),
        ms(held),
        ms(local)
    );
}
