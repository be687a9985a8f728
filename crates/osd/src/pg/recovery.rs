//! Log-based recovery on the primary: bring each missing object to the
//! version the log says, first on the primary (pulled from a member that
//! holds exactly that version), then on every acting member missing it
//! (pushed from the primary). Objects clients wait for go first. Each
//! object recovered takes one of the OSD's recovery slots
//! (`osd_recovery_max_active`), spaced by `osd_recovery_sleep`.
//!
//! An object that no reachable member holds at the needed version is
//! *unfound*: operations on it wait (reads of an object whose every copy
//! failed its checksum fail with an I/O error instead).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use cairn_store::{ObjectId, Transaction};
use cairn_types::{OsdId, Version};
use cairn_wire::{ActId, ObjectCopy, OpError, PgBody, PgInfo};

use super::backfill::BackfillTarget;
use super::log::Missing;
use super::persist;
use super::replica::install_copy;
use super::{reply, ClientOp, CopyPurpose, Ctx, PeerState, Pg, Phase, PrimaryState, Wait};
use crate::io::{CopyError, CopyResult, Done};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Unfound {
    /// Every member asked held it, but its copy failed its checksum.
    pub corrupt: bool,
}

/// A pull in flight.
#[derive(Debug)]
pub(crate) struct Pull {
    pub oid: String,
    pub need: Version,
    pub tried: BTreeSet<OsdId>,
    pub corrupt: usize,
}

/// What a push in flight is part of.
#[derive(Debug)]
pub(crate) enum Push {
    /// `oid` at `version` (`None`: a removal).
    Recovery {
        oid: String,
        version: Option<Version>,
    },
    Backfill,
}

impl PrimaryState {
    pub fn new(
        act: ActId,
        sources: BTreeMap<OsdId, (PgInfo, Missing)>,
        backfill: &[OsdId],
    ) -> Self {
        PrimaryState {
            act,
            peers: BTreeMap::new(),
            sources,
            inflight: BTreeMap::new(),
            objects: BTreeMap::new(),
            recovering: HashSet::new(),
            unfound: BTreeMap::new(),
            urgent: VecDeque::new(),
            backfill: backfill
                .iter()
                .map(|&o| (o, BackfillTarget::default()))
                .collect(),
            backfill_slot: false,
            pulls: HashMap::new(),
            pushes: HashMap::new(),
            push_waiting: HashMap::new(),
            tier: None,
        }
    }

    /// An acting member or backfill target finished activating.
    pub fn add_peer(&mut self, osd: OsdId, info: PgInfo, missing: Missing) {
        if let Some(target) = self.backfill.get_mut(&osd) {
            if let cairn_wire::Backfill::Partial { done_upto } = &info.backfill {
                target.done_upto = done_upto.clone();
            } else {
                target.complete = true;
            }
        }
        self.peers.insert(osd, PeerState { info, missing });
    }
}

impl Pg {
    /// Start whatever recovery the free slots allow.
    pub(crate) fn kick_recovery(&mut self, ctx: &mut Ctx<'_>) {
        if !matches!(self.phase, Phase::Active) || self.primary.is_none() {
            return;
        }
        self.pull_missing(ctx);
        self.push_missing(ctx);
        self.kick_backfill(ctx);
        self.return_to_up_order(ctx);
    }

    /// Recovered with the up set's members acting in another order (a
    /// current member stood in as primary): back to the up order.
    fn return_to_up_order(&mut self, ctx: &mut Ctx<'_>) {
        let no_backfill = self.primary.as_ref().is_some_and(|p| p.backfill.is_empty());
        if !no_backfill || !self.recovered() || self.mapping.acting.osds == self.mapping.up {
            return;
        }
        let mut acting = self.mapping.acting.osds.clone();
        let mut up = self.mapping.up.clone();
        acting.sort_unstable();
        up.sort_unstable();
        if acting == up {
            tracing::info!(
                "pg {}: recovered; back to the up order {:?}",
                self.id,
                self.mapping.up
            );
            ctx.request_pg_temp(self.id, Vec::new());
        }
    }

    /// Objects in `missing` to recover, those clients wait for first.
    /// An object under writes in flight waits for them: a copy read now
    /// might not see them (the store promises reads see a transaction
    /// only once it commits), and pushing it would mark an older copy
    /// recovered. The last write's completion kicks recovery again.
    fn recovery_order(&self, missing: impl Iterator<Item = String>) -> Vec<String> {
        let Some(primary) = self.primary.as_ref() else {
            return Vec::new();
        };
        let busy = |oid: &str| {
            primary.recovering.contains(oid)
                || primary.unfound.contains_key(oid)
                || primary
                    .objects
                    .get(oid)
                    .is_some_and(|o| o.pending_writes > 0)
        };
        let all: Vec<String> = missing.filter(|o| !busy(o)).collect();
        let mut order: Vec<String> = primary
            .urgent
            .iter()
            .filter(|o| all.contains(o))
            .cloned()
            .collect();
        order.extend(all.into_iter().filter(|o| !primary.urgent.contains(o)));
        order
    }

    /// Take a recovery slot for `oid`: unpaced if clients wait for it.
    /// Without one, the PG queues for the next (and recovery order puts
    /// the objects clients wait for first, so none is passed over).
    fn take_slot(&self, ctx: &mut Ctx<'_>, oid: &str) -> bool {
        let now = ctx.io.now();
        let urgent = self
            .primary
            .as_ref()
            .is_some_and(|p| p.urgent.iter().any(|o| o == oid));
        if urgent {
            if ctx.slots.take_urgent(self.id, now) {
                return true;
            }
            ctx.slots.want_urgent(self.id);
        } else if ctx.slots.take(self.id, now) {
            return true;
        }
        ctx.slots.want(self.id);
        false
    }

    fn pull_missing(&mut self, ctx: &mut Ctx<'_>) {
        let order = self.recovery_order(self.missing.keys().cloned());
        for oid in order {
            if !self.take_slot(ctx, &oid) {
                return;
            }
            let need = self.missing[&oid];
            if let Some(primary) = self.primary.as_mut() {
                primary.recovering.insert(oid.clone());
            }
            let pull = Pull {
                oid,
                need,
                tried: BTreeSet::new(),
                corrupt: 0,
            };
            self.send_pull(ctx, pull);
        }
    }

    /// Ask the next member that may hold `pull.oid` at `pull.need`; with
    /// none left, the object is unfound.
    fn send_pull(&mut self, ctx: &mut Ctx<'_>, pull: Pull) {
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        // Members that may hold it at exactly that version (the source
        // checks the version): acting members as they are now, then every
        // member heard from during peering as it was then (a backfill
        // target keeps what it held until backfill reaches it, and backfill
        // never overwrites an object the primary is missing).
        let holds = |info: &PgInfo, missing: &Missing| {
            info.last_update >= pull.need && !missing.contains_key(&pull.oid)
        };
        // (An acting member has every write since activation: only its
        // missing set says what it lacks.)
        let mut candidates: Vec<OsdId> = primary
            .peers
            .iter()
            .filter(|(o, p)| {
                !primary.backfill.contains_key(o) && !p.missing.contains_key(&pull.oid)
            })
            .map(|(&o, _)| o)
            .collect();
        for (&o, (i, m)) in &primary.sources {
            if !candidates.contains(&o) && holds(i, m) {
                candidates.push(o);
            }
        }
        // Last, copies not counted complete (backfill targets, strays): one
        // that fell behind the log may still hold this very version, maybe
        // as its only copy. A source answers only with exactly the version
        // asked, and a version is one write's result, so a copy taken from
        // it is that write's.
        for &o in primary.backfill.keys().chain(self.strays.keys()) {
            if !candidates.contains(&o) {
                candidates.push(o);
            }
        }
        let Some(source) = candidates
            .into_iter()
            .find(|o| !pull.tried.contains(o) && ctx.map.is_up(*o))
        else {
            // Every copy is known bad only if every member asked had a
            // damaged one and no member that may hold it is down.
            let pg = self.id;
            let someone_down = ctx.map.rw_intervals(pg).any(|iv| {
                iv.acting
                    .iter()
                    .any(|&o| !ctx.map.is_up(o) && !ctx.map.lost_since(o, iv.first))
            });
            let corrupt = pull.corrupt > 0 && pull.corrupt == pull.tried.len() && !someone_down;
            let damaged = if corrupt {
                " (every copy is damaged)"
            } else {
                ""
            };
            tracing::warn!(
                "pg {}: object {:?} at {} is unfound{damaged}; asked {:?}",
                self.id,
                pull.oid,
                pull.need,
                pull.tried
            );
            primary.recovering.remove(&pull.oid);
            primary
                .unfound
                .insert(pull.oid.clone(), super::recovery::Unfound { corrupt });
            ctx.slots.release(self.id, ctx.io.now());
            if corrupt {
                self.fail_reads(ctx, &pull.oid);
            }
            return;
        };
        let tid = ctx.id();
        let act = primary.act;
        ctx.send(
            source,
            self.id,
            PgBody::Pull {
                act,
                tid,
                objects: vec![(pull.oid.clone(), pull.need)],
            },
        );
        primary.pulls.insert(tid, (source, pull));
    }

    /// Fail the reads waiting on an object no copy of which can be read.
    fn fail_reads(&mut self, ctx: &mut Ctx<'_>, oid: &str) {
        let Some(obj) = self.primary.as_mut().and_then(|p| p.objects.get_mut(oid)) else {
            return;
        };
        let (reads, writes): (Vec<ClientOp>, Vec<ClientOp>) = std::mem::take(&mut obj.waiting)
            .into_iter()
            .partition(|op| !op.op.ops.iter().any(cairn_wire::ObjOp::is_mutation));
        obj.waiting = writes;
        for op in reads {
            reply(
                ctx,
                &op,
                Err(OpError::Io(format!("every copy of {oid:?} is damaged"))),
            );
        }
    }

    pub(crate) fn got_pull_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        result: Result<Vec<ObjectCopy>, String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        let Some((source, mut pull)) = primary.pulls.remove(&tid) else {
            return;
        };
        debug_assert_eq!(source, from);
        let copy = match result {
            Ok(mut copies)
                if copies.len() == 1
                    && copies[0].name == pull.oid
                    && copies[0].version == pull.need =>
            {
                copies.remove(0)
            }
            Ok(_) => {
                tracing::warn!(
                    "pg {}: osd.{from} sent the wrong copy of {:?}",
                    self.id,
                    pull.oid
                );
                pull.tried.insert(from);
                return self.send_pull(ctx, pull);
            }
            Err(e) => {
                tracing::info!(
                    "pg {}: pulling {:?} from osd.{from}: {e}",
                    self.id,
                    pull.oid
                );
                if e.contains("checksum") {
                    pull.corrupt += 1;
                }
                pull.tried.insert(from);
                return self.send_pull(ctx, pull);
            }
        };
        let bytes = copy.data.as_ref().map_or(0, |d| d.len() as u64);
        let mut txn = Transaction::new();
        install_copy(&mut txn, self.id, &copy);
        persist::missing_remove(&mut txn, self.id, std::slice::from_ref(&pull.oid));
        let oids = vec![pull.oid];
        if let Err(e) = self.submit(ctx, txn, Wait::PullCommit { act, oids }) {
            return self.retry_later(ctx, format!("cannot store a recovered object: {e}"));
        }
        self.counters.recovery_bytes += bytes;
    }

    pub(crate) fn pull_committed(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        oids: Vec<String>,
        result: Result<(), String>,
    ) {
        if self.primary.as_ref().map(|p| p.act) != Some(act) {
            return;
        }
        if let Err(e) = result {
            return self.retry_later(ctx, format!("storing recovered objects failed: {e}"));
        }
        for oid in &oids {
            self.missing.remove(oid);
            self.counters.recovered_objects += 1;
            if let Some(primary) = self.primary.as_mut() {
                primary.recovering.remove(oid);
                primary.urgent.retain(|o| o != oid);
            }
            ctx.slots.release(self.id, ctx.io.now());
        }
        for oid in &oids {
            self.wake_object(ctx, oid);
        }
        self.kick_recovery(ctx);
    }

    /// Objects the primary holds that acting members miss: read, then push.
    fn push_missing(&mut self, ctx: &mut Ctx<'_>) {
        let Some(primary) = self.primary.as_ref() else {
            return;
        };
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for peer in primary.peers.values() {
            wanted.extend(peer.missing.keys().cloned());
        }
        let order =
            self.recovery_order(wanted.into_iter().filter(|o| !self.missing.contains_key(o)));
        for oid in order {
            if !self.take_slot(ctx, &oid) {
                return;
            }
            let Some(primary) = self.primary.as_mut() else {
                return;
            };
            primary.recovering.insert(oid.clone());
            let act = primary.act;
            let id = ctx.id();
            let purpose = CopyPurpose::Recovery;
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

    /// A copy read by this PG is in.
    pub(crate) fn object_read(&mut self, ctx: &mut Ctx<'_>, wait: Wait, result: CopyResult) {
        if let Wait::Tier { act, oid, step } = wait {
            return self.flush_read(ctx, act, oid, step, result);
        }
        let Wait::Copy { act, oid, purpose } = wait else {
            unreachable!("pg {}: a commit completed as a read", self.id);
        };
        match purpose {
            CopyPurpose::Pull { key, index } => self.pull_copy_read(ctx, key, index, result),
            CopyPurpose::Scrub { key, index } => self.scrub_copy_read(ctx, key, index, result),
            CopyPurpose::Recovery => self.push_recovered(ctx, act, oid, result),
            CopyPurpose::Backfill { target } => {
                self.backfill_copy_read(ctx, act, target, oid, result)
            }
        }
    }

    fn push_recovered(&mut self, ctx: &mut Ctx<'_>, act: ActId, oid: String, result: CopyResult) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        let copy = match result {
            Ok(copy) => copy,
            Err(e) => {
                primary.recovering.remove(&oid);
                ctx.slots.release(self.id, ctx.io.now());
                if let CopyError::Damaged(e) = &e {
                    return self.mark_damaged(ctx, &oid, e);
                }
                return self.retry_later(ctx, format!("cannot read {oid:?} to recover it: {e}"));
            }
        };
        let version = copy.as_ref().map(|c| c.version);
        let targets: Vec<OsdId> = primary
            .peers
            .iter()
            .filter(|(_, p)| p.missing.contains_key(&oid))
            .map(|(&o, _)| o)
            .collect();
        // Writes to an object being recovered wait, and recovery waits for
        // writes in flight: the copy is at least what every member needs.
        let stale = primary.peers.iter().find_map(|(o, p)| {
            let need = *p.missing.get(&oid)?;
            version.filter(|&v| v < need).map(|v| (*o, v, need))
        });
        if let Some((osd, v, need)) = stale {
            debug_assert!(
                false,
                "pg {}: read {oid:?} at {v} to push, osd.{osd} needs {need}",
                self.id
            );
            primary.recovering.remove(&oid);
            ctx.slots.release(self.id, ctx.io.now());
            let why = format!("read {oid:?} at {v} to recover it, but osd.{osd} needs {need}");
            return self.retry_later(ctx, why);
        }
        for &target in &targets {
            let tid = ctx.id();
            let (objects, removes) = match &copy {
                Some(copy) => (vec![copy.clone()], Vec::new()),
                None => (Vec::new(), vec![oid.clone()]),
            };
            ctx.send(
                target,
                self.id,
                PgBody::Push {
                    act,
                    tid,
                    objects,
                    removes,
                    backfill_upto: None,
                },
            );
            primary.pushes.insert(
                tid,
                Push::Recovery {
                    oid: oid.clone(),
                    version,
                },
            );
        }
        self.counters.recovery_bytes += copy
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .map_or(0, |d| d.len() as u64)
            * targets.len() as u64;
        if targets.is_empty() {
            primary.recovering.remove(&oid);
            ctx.slots.release(self.id, ctx.io.now());
            self.kick_recovery(ctx);
        } else {
            primary.push_waiting.insert(oid, targets.len());
        }
    }

    pub(crate) fn got_push_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: OsdId,
        act: ActId,
        tid: u64,
        result: Result<(), String>,
    ) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return;
        };
        let Some(push) = primary.pushes.remove(&tid) else {
            return;
        };
        if let Err(e) = result {
            return self.retry_later(ctx, format!("osd.{from} refused a push: {e}"));
        }
        let (oid, version) = match push {
            Push::Backfill => return self.backfill_push_acked(ctx, from, tid),
            Push::Recovery { oid, version } => (oid, version),
        };
        if let Some(peer) = primary.peers.get_mut(&from) {
            // A write since the push was read would leave it missing at
            // that write's version (never the case while writes wait for
            // recovery; checked all the same): it is pushed again.
            let covered = match (peer.missing.get(&oid), version) {
                (Some(&need), Some(v)) => v >= need,
                _ => true,
            };
            if covered {
                peer.missing.remove(&oid);
                self.counters.recovered_objects += 1;
            } else {
                tracing::error!(
                    "pg {}: osd.{from} took {oid:?} at {version:?}, short of what it needs",
                    self.id
                );
            }
        }
        let left = primary.push_waiting.get_mut(&oid).map(|n| {
            *n -= 1;
            *n
        });
        if left == Some(0) {
            primary.push_waiting.remove(&oid);
            primary.recovering.remove(&oid);
            primary.urgent.retain(|o| o != &oid);
            ctx.slots.release(self.id, ctx.io.now());
            self.wake_object(ctx, &oid);
            self.kick_recovery(ctx);
        }
    }

    /// A client read found this OSD's copy of its object damaged: fetch a
    /// good copy from a member (the read waits for it), counted as a read
    /// repair.
    pub(crate) fn read_repair(&mut self, ctx: &mut Ctx<'_>, op: ClientOp, what: String) {
        let oid = op.op.oid.clone();
        if !self.count_damaged(ctx, &oid, &what) {
            return reply(ctx, &op, Err(OpError::Io(what)));
        }
        self.counters.repaired_objects += 1;
        let Some(primary) = self.primary.as_mut() else {
            return;
        };
        primary.urgent.push_back(oid.clone());
        primary.objects.entry(oid).or_default().waiting.push(op);
        self.kick_recovery(ctx);
    }

    /// This OSD's copy of `oid` failed its checksum while being read for
    /// recovery or backfill: count it missing, so it is fetched from a
    /// member that holds a good one.
    pub(crate) fn mark_damaged(&mut self, ctx: &mut Ctx<'_>, oid: &str, what: &str) {
        if self.count_damaged(ctx, oid, what) {
            self.kick_recovery(ctx);
        }
    }

    /// Record `oid` missing here (at its current version): false if that
    /// cannot be done.
    fn count_damaged(&mut self, ctx: &mut Ctx<'_>, oid: &str, what: &str) -> bool {
        tracing::warn!("pg {}: {what}; repairing {oid:?} from a member", self.id);
        let store = ctx.io.store();
        let version = match persist::object_version(store, &ObjectId::new(self.id, oid)) {
            Ok(Some(v)) => v,
            _ => return false,
        };
        self.missing.insert(oid.to_string(), version);
        let mut txn = Transaction::new();
        persist::missing_add(&mut txn, self.id, oid, version);
        self.submit(ctx, txn, Wait::Quiet).is_ok()
    }

    /// Every acting member holds every object (backfill targets, which
    /// are not acting, may still be behind).
    pub(crate) fn recovered(&self) -> bool {
        let Some(primary) = self.primary.as_ref() else {
            return false;
        };
        matches!(self.phase, Phase::Active)
            && self.missing.is_empty()
            && primary.unfound.is_empty()
            && primary
                .peers
                .iter()
                .filter(|(o, _)| !primary.backfill.contains_key(o))
                .all(|(_, p)| p.missing.is_empty())
    }
}
