//! One placement group on this OSD, as a state machine: it owns the PG's
//! persistent state here (info, log, missing set), its interval and role,
//! and, as primary, peering, client operations, recovery and backfill.
//!
//! It reaches the world only through [`Ctx`] (store, peers, clients,
//! monitor, clock) and hears back through the calls [`crate::OsdCore`]
//! makes on it, so it runs the same in the daemon and in the simulation.
//!
//! What it must never do: acknowledge a write before every acting member
//! and backfill target has committed it; serve (or go active) before it has
//! heard, for every earlier interval that may have acknowledged writes, from
//! a member of that interval holding a complete copy; serve an object that
//! a member of the acting set is missing.

mod backfill;
mod catch_up;
mod ctx;
pub mod log;
mod mutation;
mod ops;
mod peering;
pub mod persist;
mod read;
mod recovery;
mod replica;
mod scrub;
mod split;
mod state;
mod stats;
pub(crate) mod tier;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use cairn_map::PgMapping;
use cairn_store::Transaction;
use cairn_types::{Epoch, OsdId, PgId, Version};
use cairn_wire::{ActId, OpError, OsdOpReply, PgBody, PgInfo, PgMessage};

use crate::io::{Done, OsdIo};
use log::{Missing, PgLog};

pub(crate) use backfill::BackfillTarget;
pub(crate) use ctx::{Ctx, MonRequests};
pub(crate) use ops::Inflight;
pub(crate) use state::{ClientOp, CopyPurpose, Counters, PeerState, Phase, PrimaryState, Wait};

/// This OSD's part in the PG's current interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    /// An acting member or a backfill target.
    Replica,
    /// Not in the up or acting set: holds data only for peering to ask about.
    Stray,
}

/// Client ops a PG holds while not serving; beyond it they are refused
/// (the client retries).
pub const MAX_WAITING_OPS: usize = 4096;

pub struct Pg {
    pub id: PgId,
    pub(crate) info: PgInfo,
    pub(crate) log: PgLog,
    pub(crate) missing: Missing,
    /// Why this OSD's copy could not be read; it is then treated as blank.
    pub(crate) damaged: Option<String>,
    /// Does this OSD hold a copy (its collection exists)?
    pub(crate) holds: bool,
    pub(crate) mapping: PgMapping,
    pub(crate) interval_since: Epoch,
    /// Did this OSD see the interval begin at `interval_since` (maps taken
    /// one after the other), rather than find it changed after a gap?
    pub(crate) interval_seen_begin: bool,
    pub(crate) role: Role,
    /// Peering attempt within the interval.
    pub(crate) attempt: u32,
    pub(crate) phase: Phase,
    pub(crate) primary: Option<Box<PrimaryState>>,
    /// The primary and activation this member accepts RepOps for.
    pub(crate) replica_act: Option<(OsdId, ActId)>,
    pub(crate) waits: foldhash::HashMap<u64, Wait>,
    /// Transactions submitted and not yet durable.
    pub(crate) uncommitted: usize,
    /// Peering requests held until every submitted transaction is durable
    /// (a member reports only what it would still hold after a crash).
    pub(crate) deferred: Vec<(OsdId, PgMessage)>,
    pub(crate) waiting_active: VecDeque<ClientOp>,
    /// Members not in the up or acting set that told the primary they hold
    /// data of the PG.
    pub(crate) strays: BTreeMap<OsdId, PgInfo>,
    pub(crate) counters: Counters,
    /// Client requests taken as primary since this OSD started.
    pub(crate) client_io: cairn_wire::ClientIo,
    /// Cache-tier state that outlives a primary term.
    pub(crate) tier_lasting: tier::Lasting,
    pub(crate) objects_estimate: u64,
    /// What peering learned, kept until activation.
    pub(crate) peered: Option<Box<peering::Peered>>,
    /// When a stalled peering step is tried again.
    pub(crate) retry_at: Duration,
    /// Pulls from the primary being answered.
    pub(crate) pull_answers: HashMap<u64, replica::PullAnswer>,
    /// The scrub running here as primary.
    pub(crate) scrub: Option<Box<scrub::Scrub>>,
    /// A scrub asked for: (deep, repair).
    pub(crate) scrub_requested: Option<(bool, bool)>,
    /// Scrub maps being built here.
    pub(crate) scrub_builds: HashMap<u64, scrub::MapBuild>,
    /// What the last scrub found (and repair has not fixed yet).
    pub(crate) inconsistent: Vec<cairn_wire::Inconsistent>,
    /// When this peering attempt began and when each step ended (for the
    /// log line that says where the time to active went).
    pub(crate) peering_steps: peering::Steps,
}

impl Pg {
    /// The PG as this OSD's store holds it (blank if it holds nothing, or
    /// damaged if what it holds cannot be read), in a pool of `pg_num` PGs.
    pub(crate) fn load(id: PgId, io: &dyn OsdIo, pg_num: u32) -> Pg {
        let (info, log, missing, damaged, holds) = match persist::load(io.store(), id) {
            Ok(Some(loaded)) => (loaded.info, loaded.log, loaded.missing, None, true),
            Ok(None) => (
                PgInfo::empty(id, pg_num),
                PgLog::default(),
                Missing::new(),
                None,
                false,
            ),
            Err(e) => {
                tracing::error!(
                    "{e}; this OSD's copy is not served and will be rebuilt from peers"
                );
                (
                    PgInfo::empty(id, pg_num),
                    PgLog::default(),
                    Missing::new(),
                    Some(e.to_string()),
                    true,
                )
            }
        };
        let mut pg = Pg::from_parts(id, info, log, missing, holds);
        pg.damaged = damaged;
        pg.recount(io);
        pg
    }

    /// A PG in no interval yet, with this persistent state.
    pub(crate) fn from_parts(
        id: PgId,
        info: PgInfo,
        log: PgLog,
        missing: Missing,
        holds: bool,
    ) -> Pg {
        Pg {
            id,
            info,
            log,
            missing,
            damaged: None,
            holds,
            mapping: PgMapping {
                up: Vec::new(),
                acting: cairn_map::Acting {
                    osds: Vec::new(),
                    incarnations: Vec::new(),
                },
                up_incarnations: Vec::new(),
                size: 0,
                min_size: 0,
                pg_num: 0,
            },
            interval_since: 0,
            interval_seen_begin: false,
            role: Role::Stray,
            attempt: 0,
            phase: Phase::Idle,
            primary: None,
            replica_act: None,
            waits: Default::default(),
            uncommitted: 0,
            deferred: Vec::new(),
            waiting_active: VecDeque::new(),
            strays: BTreeMap::new(),
            counters: Counters::default(),
            client_io: Default::default(),
            tier_lasting: Default::default(),
            objects_estimate: 0,
            peered: None,
            retry_at: Duration::ZERO,
            pull_answers: HashMap::new(),
            scrub: None,
            scrub_requested: None,
            scrub_builds: HashMap::new(),
            inconsistent: Vec::new(),
            peering_steps: peering::Steps::default(),
        }
    }

    /// Does the object named `name` belong to this PG under the current
    /// map? (After a split, a peer or client that has not caught up may
    /// still name the parent.)
    pub(crate) fn owns(&self, ctx: &Ctx<'_>, name: &str) -> bool {
        ctx.map
            .pool(self.id.pool)
            .is_some_and(|pool| ctx.map.object_pg(pool, name) == self.id)
    }

    /// The entries this member's log holds, and the entries of the PG's
    /// history they stand for (more once a catch-up was compacted).
    pub fn log_size(&self) -> (usize, usize) {
        (self.log.len(), self.log.weight())
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Where this copy's log ends.
    pub fn last_update(&self) -> Version {
        self.info.last_update
    }

    /// Does this OSD's copy count as a complete one?
    pub(crate) fn usable(&self) -> bool {
        self.damaged.is_none() && self.info.backfill.is_complete()
    }

    /// Take a new map. `contiguous`: it directly follows the previous one
    /// (otherwise epochs were missed and any of them may have changed the
    /// interval).
    pub(crate) fn advance_map(&mut self, ctx: &mut Ctx<'_>, contiguous: bool) {
        let mapping = ctx.map.mapping(self.id);
        if contiguous && mapping == self.mapping {
            match &self.phase {
                Phase::WaitUpThru => self.check_up_thru(ctx),
                // An OSD it waits for came back (it may hold no copy to
                // notify about) or was declared lost: peer again.
                Phase::Down { blocked_by, .. }
                    if blocked_by
                        .iter()
                        .any(|&o| ctx.map.is_up(o) || ctx.map.lost_since(o, 0)) =>
                {
                    self.restart_peering(ctx)
                }
                // The monitor may have forgotten intervals strays were
                // kept for.
                Phase::Active
                    if self.role == Role::Primary && !self.strays.is_empty() && self.is_clean() =>
                {
                    self.remove_strays(ctx)
                }
                _ => {}
            }
            return;
        }
        self.new_interval(ctx, mapping, contiguous);
    }

    fn new_interval(&mut self, ctx: &mut Ctx<'_>, mapping: PgMapping, seen_begin: bool) {
        let epoch = ctx.map.epoch;
        tracing::debug!(
            "osd.{} pg {}: interval at {epoch}: up {:?} acting {:?}",
            ctx.me,
            self.id,
            mapping.up,
            mapping.acting.osds
        );
        self.mapping = mapping;
        self.interval_since = epoch;
        self.interval_seen_begin = seen_begin;
        self.attempt = 0;
        self.replica_act = None;
        self.role = if self.mapping.primary() == Some(ctx.me) {
            Role::Primary
        } else if self.mapping.contains(ctx.me) {
            Role::Replica
        } else {
            Role::Stray
        };
        self.stop_primary(ctx, OpError::Retry { epoch });
        // A reservation this OSD granted as backfill target was for the
        // ended interval's primary.
        ctx.slots.release_remote(self.id);
        if self.role != Role::Primary {
            let waiting: Vec<ClientOp> = self.waiting_active.drain(..).collect();
            for op in waiting {
                reply(ctx, &op, Err(OpError::WrongPrimary { epoch }));
            }
            self.strays.clear();
        }
        match self.role {
            Role::Primary => self.start_peering(ctx),
            Role::Replica => {}
            // Down, it could not be asked what it holds (a primary hearing
            // of it would peer again without it): it tells the primary once
            // the map records it up (`notify_if_stray`).
            Role::Stray if ctx.map.is_up(ctx.me) => self.notify_primary(ctx),
            Role::Stray => {}
        }
    }

    /// This OSD came up with the map of `epoch`: as a stray whose interval
    /// did not begin with it (it notified then), tell the primary what it
    /// holds.
    pub(crate) fn notify_if_stray(&mut self, ctx: &mut Ctx<'_>, epoch: Epoch) {
        if self.role == Role::Stray && self.interval_since != epoch {
            self.notify_primary(ctx);
        }
    }

    /// End whatever this OSD did as primary: in-flight writes fail with
    /// `error` (the client resends), recovery stops and its slots return.
    pub(crate) fn stop_primary(&mut self, ctx: &mut Ctx<'_>, error: OpError) {
        self.phase = Phase::Idle;
        self.abort_scrub(ctx);
        let Some(primary) = self.primary.take() else {
            return;
        };
        let mut primary = primary;
        let tier = primary.tier.take();
        for inflight in primary.inflight.into_values() {
            for (client, tid) in inflight.clients {
                if client == tier::TIER_CLIENT {
                    continue; // its client op is held again below
                }
                ctx.io.reply(
                    client,
                    OsdOpReply {
                        tid,
                        result: Err(error.clone()),
                    },
                );
            }
        }
        for obj in primary.objects.into_values() {
            self.waiting_active.extend(obj.waiting);
        }
        // The cache's own writes of this term are not redone: whatever
        // they were for starts again from the client op that asked.
        self.waiting_active
            .retain(|op| op.client != tier::TIER_CLIENT);
        if let Some(tier) = tier {
            self.waiting_active.extend(tier.into_held_ops());
        }
        ctx.slots.release_pg(self.id);
        if primary.backfill_slot {
            ctx.slots.release_backfill(self.id);
        }
        for &target in primary.backfill.keys() {
            ctx.send(target, self.id, PgBody::Release { act: primary.act });
        }
    }

    /// Submit `txn` for this PG; `wait` says what its commit is for.
    pub(crate) fn submit(
        &mut self,
        ctx: &mut Ctx<'_>,
        txn: Transaction,
        wait: Wait,
    ) -> Result<(), cairn_store::StoreError> {
        let id = ctx.id();
        ctx.io.submit(txn, Done { pg: self.id, id })?;
        self.uncommitted += 1;
        self.holds = true;
        self.waits.insert(id, wait);
        Ok(())
    }

    /// A started store operation finished.
    pub(crate) fn take_wait(&mut self, id: u64) -> Option<Wait> {
        self.waits.remove(&id)
    }

    /// One of this PG's transactions is durable.
    pub(crate) fn committed(&mut self, ctx: &mut Ctx<'_>, wait: Wait, result: Result<(), String>) {
        self.uncommitted -= 1;
        match wait {
            Wait::WriteCommit { act, version } => self.write_committed(ctx, act, version, result),
            Wait::RepCommit {
                primary,
                act,
                version,
            } => ctx.send(
                primary,
                self.id,
                PgBody::RepOpReply {
                    act,
                    version,
                    result,
                },
            ),
            Wait::ReplicaActivated {
                primary,
                act,
                arrived,
                merged,
                entries,
            } => {
                tracing::info!(
                    "pg {}: activation {act} from osd.{primary} durable after {} ms, \
                     merged in {} µs ({} log entries taken as {}, {} objects missing)",
                    self.id,
                    ctx.now().saturating_sub(arrived).as_millis(),
                    merged.as_micros(),
                    entries.0,
                    entries.1,
                    self.missing.len()
                );
                let result = result.map(|()| {
                    let missing = self.missing.iter().map(|(k, v)| (k.clone(), *v)).collect();
                    (self.info.clone(), missing)
                });
                ctx.send(primary, self.id, PgBody::Activated { act, result });
            }
            Wait::PrimaryActivated { act } => self.activation_committed(ctx, act, result),
            Wait::PushCommit { primary, act, tid } => {
                ctx.send(primary, self.id, PgBody::PushReply { act, tid, result })
            }
            Wait::PullCommit { act, oids } => self.pull_committed(ctx, act, oids, result),
            Wait::Quiet => {
                if let Err(e) = result {
                    tracing::error!("pg {}: commit failed: {e}", self.id);
                }
            }
            Wait::Read { .. } | Wait::Copy { .. } | Wait::Tier { .. } => {
                unreachable!("pg {}: a read completed as a commit", self.id)
            }
        }
        if self.uncommitted == 0 && !self.deferred.is_empty() {
            for (from, msg) in std::mem::take(&mut self.deferred) {
                self.handle_message(ctx, from, msg);
            }
        }
    }

    /// A message from peer `from` about this PG.
    pub(crate) fn handle_message(&mut self, ctx: &mut Ctx<'_>, from: OsdId, msg: PgMessage) {
        match msg.body {
            PgBody::Query { query_epoch } => {
                if self.uncommitted > 0 {
                    self.deferred.push((
                        from,
                        PgMessage {
                            body: PgBody::Query { query_epoch },
                            ..msg
                        },
                    ));
                    return;
                }
                self.answer_query(ctx, from, query_epoch);
            }
            PgBody::GetLog { query_epoch } => {
                if self.uncommitted > 0 {
                    self.deferred.push((
                        from,
                        PgMessage {
                            body: PgBody::GetLog { query_epoch },
                            ..msg
                        },
                    ));
                    return;
                }
                self.answer_get_log(ctx, from, query_epoch);
            }
            PgBody::Info {
                query_epoch,
                info,
                missing,
                damaged,
            } => self.got_info(ctx, from, query_epoch, info, missing, damaged),
            PgBody::Notify { info } => self.got_notify(ctx, from, info),
            PgBody::Log {
                query_epoch,
                info,
                entries,
            } => self.got_log(ctx, from, query_epoch, info, entries),
            PgBody::Activate {
                act,
                info,
                base,
                entries,
                backfill,
            } => {
                let activation = replica::Activation {
                    act,
                    auth: info,
                    base,
                    entries,
                    backfill,
                };
                self.activate_replica(ctx, from, activation)
            }
            PgBody::Activated { act, result } => self.got_activated(ctx, from, act, result),
            PgBody::RepOp { act, entry, txn } => self.apply_repop(ctx, from, act, entry, txn),
            PgBody::RepOpReply {
                act,
                version,
                result,
            } => self.got_repop_reply(ctx, from, act, version, result),
            PgBody::Push {
                act,
                tid,
                objects,
                removes,
                backfill_upto,
            } => self.apply_push(ctx, from, act, tid, objects, removes, backfill_upto),
            PgBody::PushReply { act, tid, result } => {
                self.got_push_reply(ctx, from, act, tid, result)
            }
            PgBody::Pull { act, tid, objects } => self.answer_pull(ctx, from, act, tid, objects),
            PgBody::PullReply { act, tid, result } => {
                self.got_pull_reply(ctx, from, act, tid, result)
            }
            PgBody::Scan {
                act,
                tid,
                after,
                max,
            } => self.answer_scan(ctx, from, act, tid, after, max),
            PgBody::ScanReply { act, tid, result } => {
                self.got_scan_reply(ctx, from, act, tid, result)
            }
            PgBody::Reserve { act } => self.answer_reserve(ctx, from, act),
            PgBody::Reserved { act, result } => self.got_reserved(ctx, from, act, result),
            PgBody::Release { act } => self.got_release(ctx, from, act),
            PgBody::Remove => self.remove_stray(ctx, from),
            PgBody::ScrubRequest {
                act,
                tid,
                after,
                upto,
                deep,
            } => self.answer_scrub_request(ctx, from, act, tid, after, upto, deep),
            PgBody::ScrubMap { act, tid, result } => {
                self.got_scrub_map(ctx, from, act, tid, result)
            }
            PgBody::CatchUp { base } => self.answer_catch_up(ctx, from, base),
            // Taken by the core while it catches up (`OsdCore::peer_message`).
            PgBody::CatchUpLog { .. } => {}
        }
    }

    /// The connection to `osd` was lost: requests on it will not be
    /// answered.
    pub(crate) fn peer_reset(&mut self, ctx: &mut Ctx<'_>, osd: OsdId) {
        match &self.phase {
            Phase::Active | Phase::Activating { .. } => {
                let waited_for =
                    matches!(&self.phase, Phase::Activating { waiting } if waiting.contains(&osd));
                let involved = waited_for
                    || self.primary.as_ref().is_some_and(|p| {
                        p.peers.contains_key(&osd) || p.sources.contains_key(&osd)
                    });
                if involved {
                    tracing::info!(
                        "pg {}: lost the connection to osd.{osd}; peering again",
                        self.id
                    );
                    self.restart_peering(ctx);
                }
            }
            Phase::GetInfo(_) | Phase::GetLog { .. } => {
                // Unanswered requests are sent again by the retry timer.
            }
            _ => {}
        }
        if self.replica_act.is_some_and(|(p, _)| p == osd) {
            // RepOps may have been lost: accept no more until re-activated.
            self.replica_act = None;
        }
        if self.mapping.primary() == Some(osd) {
            // Its release of a backfill reservation may have been lost; it
            // asks again if it still needs one.
            ctx.slots.release_remote(self.id);
        }
    }

    /// Periodic work: peering retries, scrubs.
    pub(crate) fn tick(&mut self, ctx: &mut Ctx<'_>) {
        if matches!(self.phase, Phase::Active) {
            self.maybe_scrub(ctx);
            if ctx.map.pool(self.id.pool).is_some_and(|p| p.is_cache()) {
                self.tier_agent_tick(ctx);
            }
        }
        if let Phase::GetInfo(get) = &self.phase {
            if ctx.now() >= get.retry_at {
                self.resend_queries(ctx);
            }
        }
        if let Phase::GetLog { auth } = self.phase {
            let due = self.retry_due(ctx);
            if due {
                ctx.send(
                    auth,
                    self.id,
                    PgBody::GetLog {
                        query_epoch: self.interval_since,
                    },
                );
            }
        }
        if matches!(
            self.phase,
            Phase::Incomplete { .. } | Phase::WaitActing { .. } | Phase::Retry { .. }
        ) && self.retry_due(ctx)
        {
            self.restart_peering(ctx);
        }
    }

    /// Count the PG's objects again (for stats).
    pub(crate) fn recount(&mut self, io: &dyn OsdIo) {
        if let Ok(names) = io.store().list_objects(self.id) {
            self.objects_estimate =
                names.iter().filter(|n| !persist::is_internal(n)).count() as u64;
        }
    }

    /// Client ops waiting in this PG.
    pub(crate) fn waiting_ops(&self) -> usize {
        self.waiting_active.len()
            + self
                .primary
                .as_ref()
                .map_or(0, |p| p.objects.values().map(|o| o.waiting.len()).sum())
    }

    /// Is the PG's work done for the current map: active with every acting
    /// member complete and nothing to backfill?
    pub fn is_clean(&self) -> bool {
        matches!(self.phase, Phase::Active)
            && self.recovered()
            && self.mapping.acting.osds == self.mapping.up
            && self.mapping.acting.osds.len() as u32 >= self.mapping.size
    }
}

/// Reply to a waiting client op.
pub(crate) fn reply(
    ctx: &mut Ctx<'_>,
    op: &ClientOp,
    result: Result<Vec<cairn_wire::OpOutput>, OpError>,
) {
    ctx.reply_to(
        op.op.pg,
        op.client,
        OsdOpReply {
            tid: op.op.tid,
            result,
        },
    );
}
