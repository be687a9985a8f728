//! [`OsdCore`]: one OSD's logic without any I/O of its own — its map, its
//! PGs, the operations and messages held for a newer map, and the recovery
//! budget. Every event (a map, a client op, a peer message, a completion,
//! a tick) is a method call that runs to completion and acts through the
//! [`OsdIo`] it is given; nothing here blocks, sleeps or spawns.
//!
//! It checks what arrives before any PG sees it: a client op must carry
//! only reads or only mutations, name a valid object of the PG it is sent
//! to, and reach that PG's primary; an op or peering message from a newer
//! map waits (bounded) for that map. While the map records this OSD as
//! backfillfull or full, it refuses backfill reservations.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use cairn_map::{ClusterMap, FullState};
use cairn_store::{StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{ObjOp, OpError, OsdOp, OsdOpReply, PgBody, PgMessage, PgStat};

use crate::io::{ClientId, CopyResult, Done, OsdIo, ReadResult};
use crate::pace::Pacer;
use crate::pg::tier::fullness::TierUsage;
use crate::pg::{ClientOp, Ctx, MonRequests, Pg, Role, Wait};
use crate::slots::Slots;

mod catch_up;
pub use catch_up::CATCH_UP_PER_PRIMARY;

/// OSD behaviour the core needs, from the `[osd]` configuration.
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// Log entries kept per PG (`osd_max_pg_log_entries`).
    pub pg_log_max_entries: usize,
    /// Objects in recovery at once on this OSD (`osd_recovery_max_active`).
    pub recovery_max_active: usize,
    /// Pause between starting recovery operations (`osd_recovery_sleep`).
    pub recovery_sleep: Duration,
    /// Pause between starting recovery operations while clients are
    /// served (one at a time then): the shortest the pacer keeps.
    pub recovery_sleep_busy: Duration,
    /// The longest pause the pacer may stretch that to while client writes
    /// are slower than `recovery_slowdown_pct` of their usual p99 (not
    /// above `recovery_sleep_busy`: a fixed pause).
    pub recovery_sleep_busy_max: Duration,
    /// Client writes' p99 allowed during recovery, in percent of their p99
    /// without it.
    pub recovery_slowdown_pct: u32,
    /// PGs backfilling at once, as primary and as target (`osd_max_backfills`).
    pub max_backfills: usize,
    /// Unanswered peering requests are sent again after this long.
    pub peering_retry: Duration,
    /// A PG is scrubbed after this long since its last scrub (0: never
    /// by schedule; `osd_scrub_interval`).
    pub scrub_interval: Duration,
    /// A PG is deep-scrubbed after this long since its last deep scrub
    /// (0: never by schedule; `osd_deep_scrub_interval`).
    pub deep_scrub_interval: Duration,
    /// PGs scrubbing at once with this OSD as primary (`osd_max_scrubs`).
    pub max_scrubs: usize,
    /// A client write slower than this, from its arrival here to its
    /// acknowledgement, is logged with where its time went (zero: never;
    /// Ceph's `osd_op_complaint_time`).
    pub op_complaint_time: Duration,
    /// A deliberate bug, so tests can show the simulation's checker finds
    /// what it causes. Never set outside tests.
    #[doc(hidden)]
    pub planted_bug: Option<PlantedBug>,
}

/// Bugs a test may plant (see [`CoreOptions::planted_bug`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// The primary forgets one object of each member's missing set at
    /// activation, so log recovery never brings it to that member.
    ForgetReplicaMissing,
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            pg_log_max_entries: 3000,
            recovery_max_active: 3,
            recovery_sleep: Duration::ZERO,
            recovery_sleep_busy: Duration::from_millis(20),
            recovery_sleep_busy_max: Duration::from_secs(1),
            recovery_slowdown_pct: 200,
            max_backfills: 1,
            peering_retry: Duration::from_secs(2),
            scrub_interval: Duration::from_secs(24 * 3600),
            deep_scrub_interval: Duration::from_secs(7 * 24 * 3600),
            max_scrubs: 1,
            op_complaint_time: Duration::from_secs(1),
            planted_bug: None,
        }
    }
}

/// Ops and messages from newer maps held at most; beyond it, ops are
/// refused (the client retries) and messages dropped (the sender retries).
pub const MAX_HELD: usize = 16384;

/// Longest object name a client may use.
pub const MAX_OID_LEN: usize = 1024;

enum Held {
    Op(ClientId, OsdOp),
    Msg(OsdId, PgMessage),
}

pub struct OsdCore {
    id: OsdId,
    opts: CoreOptions,
    map: Arc<ClusterMap>,
    pgs: BTreeMap<PgId, Pg>,
    held: VecDeque<Held>,
    next_id: u64,
    slots: Slots,
    /// Where client writes spent their time here as primary.
    write_times: crate::WriteTimes,
    requests: MonRequests,
    stat_rounds: u64,
    /// The cache pools' totals, from the monitor.
    tier_usage: TierUsage,
    /// The catch-up before boot, while it runs.
    catch_up: Option<catch_up::CatchUp>,
}

impl OsdCore {
    /// The core of OSD `id` over the store `io` gives, with every PG the
    /// store holds loaded (a PG whose state cannot be read is loaded as
    /// damaged: not served, rebuilt from peers).
    /// Runtime configuration: from now on the core works with `opts`
    /// (recovery, backfill and scrub limits, pacing, log length, slow-op
    /// reports). Nothing already started is undone.
    pub fn set_options(&mut self, opts: CoreOptions) {
        self.slots.set_limits(
            opts.recovery_max_active,
            opts.recovery_sleep,
            opts.max_backfills,
            opts.max_scrubs,
        );
        self.slots.pacer_mut().set_limits(
            opts.recovery_sleep_busy,
            opts.recovery_sleep_busy_max,
            opts.recovery_slowdown_pct,
        );
        self.opts = CoreOptions {
            planted_bug: self.opts.planted_bug,
            ..opts
        };
    }

    /// The options the core works with now.
    pub fn options(&self) -> &CoreOptions {
        &self.opts
    }

    pub fn new(id: OsdId, opts: CoreOptions, io: &mut dyn OsdIo) -> Self {
        let mut pgs = BTreeMap::new();
        match io.store().list_collections() {
            Ok(colls) => {
                for pg in colls {
                    // The pg_num comes with the first map (see `split_pgs`).
                    pgs.insert(pg, Pg::load(pg, io, 0));
                }
            }
            Err(e) => tracing::error!("osd.{id}: cannot list the store's PGs: {e}"),
        }
        let slots = Slots::new(
            opts.recovery_max_active,
            opts.recovery_sleep,
            Pacer::new(
                opts.recovery_sleep_busy,
                opts.recovery_sleep_busy_max,
                opts.recovery_slowdown_pct,
            ),
            opts.max_backfills,
            opts.max_scrubs,
        );
        OsdCore {
            id,
            opts,
            map: Arc::new(ClusterMap::before_first()),
            pgs,
            held: VecDeque::new(),
            next_id: 0,
            slots,
            write_times: crate::WriteTimes::default(),
            requests: MonRequests::default(),
            stat_rounds: 0,
            tier_usage: TierUsage::default(),
            catch_up: None,
        }
    }

    /// Where client writes spent their time here as primary, so far.
    pub fn write_times(&self) -> crate::WriteTimes {
        self.write_times
    }

    pub fn id(&self) -> OsdId {
        self.id
    }

    pub fn map(&self) -> &Arc<ClusterMap> {
        &self.map
    }

    /// Refuse (with the reason) or accept backfill onto this OSD.
    pub fn set_refuse_backfill(&mut self, why: Option<String>) {
        self.slots.set_refuse_backfill(why);
    }

    /// Run `f` on PG `pg` (if this OSD has it) with a context.
    fn with_pg<R>(
        &mut self,
        pg: PgId,
        io: &mut dyn OsdIo,
        f: impl FnOnce(&mut Pg, &mut Ctx<'_>) -> R,
    ) -> Option<R> {
        let pg = self.pgs.get_mut(&pg)?;
        let mut ctx = Ctx {
            me: self.id,
            map: &self.map,
            opts: &self.opts,
            io,
            next_id: &mut self.next_id,
            slots: &mut self.slots,
            write_times: &mut self.write_times,
            requests: &mut self.requests,
            agent_flushes: 0,
            tier_usage: &self.tier_usage,
            tier_replies: Vec::new(),
        };
        let r = f(pg, &mut ctx);
        pg.drain_tier_replies(&mut ctx);
        Some(r)
    }

    /// Run `f` on every PG.
    fn each_pg(&mut self, io: &mut dyn OsdIo, mut f: impl FnMut(&mut Pg, &mut Ctx<'_>)) {
        let agent_flushes = self.pgs.values().map(Pg::agent_flushes).sum();
        let mut ctx = Ctx {
            me: self.id,
            map: &self.map,
            opts: &self.opts,
            io,
            next_id: &mut self.next_id,
            slots: &mut self.slots,
            write_times: &mut self.write_times,
            requests: &mut self.requests,
            agent_flushes,
            tier_usage: &self.tier_usage,
            tier_replies: Vec::new(),
        };
        for pg in self.pgs.values_mut() {
            f(pg, &mut ctx);
            pg.drain_tier_replies(&mut ctx);
        }
    }

    /// Take a newer map.
    pub fn handle_map(&mut self, map: Arc<ClusterMap>, io: &mut dyn OsdIo) {
        if map.epoch <= self.map.epoch {
            return;
        }
        let contiguous = map.epoch == self.map.epoch + 1;
        let booted = !self.map.is_up(self.id) && map.is_up(self.id);
        self.map = map;
        self.refuse_backfill_if_full();
        self.remove_deleted(io);
        self.split_pgs(io);
        let me = self.id;
        let new: Vec<PgId> = self
            .map
            .all_pgs()
            .filter(|pg| !self.pgs.contains_key(pg) && self.map.mapping(*pg).contains(me))
            .collect();
        for pg in new {
            let pg_num = self.map.pool(pg.pool).map_or(0, |p| p.pg_num);
            self.pgs.insert(pg, Pg::load(pg, io, pg_num));
        }
        self.each_pg(io, |pg, ctx| pg.advance_map(ctx, contiguous));
        if booted {
            // A stray tells its primary what it holds only once up: one
            // down could not be asked (see `Pg::new_interval`).
            let epoch = self.map.epoch;
            self.each_pg(io, |pg, ctx| pg.notify_if_stray(ctx, epoch));
        }
        let held = std::mem::take(&mut self.held);
        for item in held {
            match item {
                Held::Op(client, op) => self.client_op(client, op, io),
                Held::Msg(from, msg) => self.peer_message(from, msg, io),
            }
        }
        self.kick_wanting(io);
    }

    /// Take no backfill while the map records this OSD as backfillfull or
    /// full. The monitor is the one judge of fullness (the ratios are its
    /// configuration, and `status` shows the same verdict), so the OSD
    /// acts on the map rather than on its own statfs; primaries check the
    /// same map before every backfill batch, so a reservation granted
    /// before the OSD filled up stops at the next batch.
    fn refuse_backfill_if_full(&mut self) {
        let state = self.map.full_state(self.id);
        let why = (state >= FullState::Backfillfull)
            .then(|| format!("osd.{} is {state} (backfill_toofull)", self.id));
        self.slots.set_refuse_backfill(why);
    }

    /// Drop the PGs of pools the map no longer has, and their data.
    fn remove_deleted(&mut self, io: &mut dyn OsdIo) {
        let gone: Vec<PgId> = self
            .pgs
            .keys()
            .copied()
            .filter(|pg| self.map.pool(pg.pool).is_none_or(|p| pg.seed >= p.pg_num))
            .collect();
        if gone.is_empty() {
            return;
        }
        tracing::info!(
            "osd.{}: removing {} PGs of deleted pools",
            self.id,
            gone.len()
        );
        let mut txn = Transaction::new();
        for pg in &gone {
            self.pgs.remove(pg);
            txn.remove_collection(*pg);
        }
        let done = Done { pg: gone[0], id: 0 };
        if let Err(e) = io.submit(txn, done) {
            tracing::error!("osd.{}: removing deleted pools failed: {e}", self.id);
        }
    }

    /// Split every copy made for a smaller pg_num than its pool's now,
    /// before any PG sees the map (see `pg::split`); a blank PG just
    /// takes the new pg_num.
    fn split_pgs(&mut self, io: &mut dyn OsdIo) {
        let splits: Vec<(PgId, u32)> = self
            .pgs
            .values()
            .filter_map(|pg| {
                let pg_num = self.map.pool(pg.id.pool)?.pg_num;
                (pg.info.pg_num < pg_num).then_some((pg.id, pg_num))
            })
            .collect();
        for (id, pg_num) in splits {
            let old = self.pgs.get(&id).map_or(0, |pg| pg.info.pg_num);
            let clash = (old > 0)
                .then(|| {
                    (id.seed + old..pg_num)
                        .step_by(old as usize)
                        .map(|seed| PgId::new(id.pool, seed))
                        .find(|child| self.pgs.get(child).is_some_and(|c| c.holds))
                })
                .flatten();
            if let Some(child) = clash {
                // Children appear only by a split, which happens once.
                debug_assert!(false, "pg {id}: child {child} exists before the split");
                tracing::error!(
                    "osd.{}: cannot split pg {id}: pg {child} already holds data here",
                    self.id
                );
                continue;
            }
            let children = self
                .with_pg(id, io, |pg, ctx| pg.split(ctx, pg_num))
                .unwrap_or_default();
            for child in children {
                self.pgs.insert(child.id, child);
            }
        }
    }

    fn hold(&mut self, item: Held, io: &mut dyn OsdIo) {
        if self.held.len() < MAX_HELD {
            self.held.push_back(item);
            return;
        }
        if let Held::Op(client, op) = item {
            let epoch = self.map.epoch;
            io.reply(
                client,
                OsdOpReply {
                    tid: op.tid,
                    result: Err(OpError::Retry { epoch }),
                },
            );
        }
    }

    /// A client's operation.
    pub fn client_op(&mut self, client: ClientId, op: OsdOp, io: &mut dyn OsdIo) {
        if op.epoch > self.map.epoch {
            return self.hold(Held::Op(client, op), io);
        }
        self.slots.client_op(io.now());
        let epoch = self.map.epoch;
        let refuse = |io: &mut dyn OsdIo, tid, error| {
            io.reply(
                client,
                OsdOpReply {
                    tid,
                    result: Err(error),
                },
            );
        };
        if let Err(why) = check_op(&op) {
            return refuse(io, op.tid, OpError::Invalid(why));
        }
        // Fenced: held ops were admitted before, every later one is refused.
        if self.map.blocklist.contains(op.reqid.client) {
            tracing::debug!(
                "op from blocklisted client.{:016x} refused",
                op.reqid.client
            );
            return refuse(io, op.tid, OpError::Blocklisted);
        }
        match self.map.pool(op.pg.pool) {
            // Its ops go to the cache over it: the client's map is older.
            Some(pool) if pool.tier.overlay.is_some() && !op.ignore_overlay => {
                return refuse(io, op.tid, OpError::WrongPrimary { epoch });
            }
            Some(pool) if self.map.object_pg(pool, &op.oid) == op.pg => {}
            // Sent before a split moved the object to another PG.
            Some(_) if op.epoch < epoch => {
                return refuse(io, op.tid, OpError::WrongPrimary { epoch });
            }
            Some(_) => {
                let why = format!("object {:?} does not belong to pg {}", op.oid, op.pg);
                return refuse(io, op.tid, OpError::Invalid(why));
            }
            None => return refuse(io, op.tid, OpError::WrongPrimary { epoch }),
        }
        let tid = op.tid;
        let routed = self.with_pg(op.pg, io, |pg, ctx| {
            if pg.role() == Role::Primary {
                pg.client_io.count(&op.ops);
                let arrived = ctx.now();
                pg.client_op(
                    ctx,
                    ClientOp {
                        client,
                        op,
                        arrived,
                    },
                );
                true
            } else {
                false
            }
        });
        if routed != Some(true) {
            refuse(io, tid, OpError::WrongPrimary { epoch });
        }
        self.kick_wanting(io);
    }

    /// A message from peer OSD `from`.
    pub fn peer_message(&mut self, from: OsdId, msg: PgMessage, io: &mut dyn OsdIo) {
        if let PgBody::CatchUpLog { base, result } = msg.body {
            return self.got_catch_up_log(from, msg.pg, base, result, io);
        }
        let needs_map = matches!(
            msg.body,
            PgBody::Query { .. }
                | PgBody::GetLog { .. }
                | PgBody::Activate { .. }
                | PgBody::Notify { .. }
                | PgBody::Remove
        );
        if needs_map && msg.epoch > self.map.epoch {
            return self.hold(Held::Msg(from, msg), io);
        }
        let pgid = msg.pg;
        if let (PgBody::CatchUp { base }, false) = (&msg.body, self.pgs.contains_key(&pgid)) {
            let why = format!("osd.{} holds no copy of pg {pgid}", self.id);
            let body = PgBody::CatchUpLog {
                base: base.clone(),
                result: Err(why),
            };
            let epoch = self.map.epoch;
            return io.answer(
                from,
                PgMessage {
                    pg: pgid,
                    epoch,
                    body,
                },
            );
        }
        if !self.pgs.contains_key(&pgid) {
            let exists = self
                .map
                .pool(pgid.pool)
                .is_some_and(|p| pgid.seed < p.pg_num);
            if !exists || !needs_map {
                return;
            }
            // Asked about a PG this OSD never held: answer as a blank stray.
            let pg_num = self.map.pool(pgid.pool).map_or(0, |p| p.pg_num);
            self.pgs.insert(pgid, Pg::load(pgid, io, pg_num));
            self.with_pg(pgid, io, |pg, ctx| pg.advance_map(ctx, false));
        }
        self.with_pg(pgid, io, |pg, ctx| pg.handle_message(ctx, from, msg));
        self.kick_wanting(io);
    }

    /// The connection to peer `osd` was lost.
    pub fn peer_reset(&mut self, osd: OsdId, io: &mut dyn OsdIo) {
        self.catch_up_reset(osd);
        self.each_pg(io, |pg, ctx| pg.peer_reset(ctx, osd));
        self.kick_wanting(io);
    }

    /// A transaction submitted with `done` is durable (or failed).
    pub fn committed(&mut self, done: Done, result: Result<(), StoreError>, io: &mut dyn OsdIo) {
        if let Err(e) = &result {
            tracing::error!("osd.{}: pg {}: commit failed: {e}", self.id, done.pg);
        }
        let result = result.map_err(|e| e.to_string());
        self.with_pg(done.pg, io, |pg, ctx| {
            if let Some(wait) = pg.take_wait(done.id) {
                pg.committed(ctx, wait, result);
            }
        });
        self.kick_wanting(io);
    }

    /// A client read started with `done` finished.
    pub fn read_done(&mut self, done: Done, result: ReadResult, io: &mut dyn OsdIo) {
        self.with_pg(done.pg, io, |pg, ctx| match pg.take_wait(done.id) {
            Some(Wait::Read { act, op, counted }) => pg.read_done(ctx, (act, counted), op, result),
            Some(other) => unreachable!("pg {}: read completion for {other:?}", pg.id),
            None => {}
        });
        self.kick_wanting(io);
    }

    /// A cache tier's op on its base pool, started with `done`, finished.
    pub fn tier_done(
        &mut self,
        done: Done,
        result: Result<Vec<cairn_wire::OpOutput>, OpError>,
        io: &mut dyn OsdIo,
    ) {
        self.with_pg(done.pg, io, |pg, ctx| match pg.take_wait(done.id) {
            Some(Wait::Tier { act, oid, step }) => pg.tier_done(ctx, act, oid, step, result),
            Some(other) => unreachable!("pg {}: base-pool answer for {other:?}", pg.id),
            None => {}
        });
        self.kick_wanting(io);
    }

    /// Start flushing and evicting every object of the PGs of cache pool
    /// `pool` this OSD is primary for and that are active; returns them.
    pub fn tier_flush_evict_all(
        &mut self,
        pool: cairn_types::PoolId,
        io: &mut dyn OsdIo,
    ) -> Result<Vec<PgId>, String> {
        match self.map.pool(pool) {
            Some(p) if p.is_cache() => {}
            Some(p) => return Err(format!("pool '{}' is not a cache tier", p.name)),
            None => return Err(format!("no pool {pool}")),
        }
        let pgs: Vec<PgId> = self
            .pgs
            .values()
            .filter(|pg| pg.id.pool == pool && pg.role() == Role::Primary && pg.is_active())
            .map(|pg| pg.id)
            .collect();
        for &pg in &pgs {
            if let Some(Err(e)) = self.with_pg(pg, io, |pg, ctx| pg.start_sweep(ctx)) {
                return Err(e);
            }
        }
        self.kick_wanting(io);
        Ok(pgs)
    }

    /// The sweeps of cache pool `pool`'s PGs this OSD is primary for.
    pub fn tier_sweeps(&self, pool: cairn_types::PoolId) -> Vec<(PgId, serde_json::Value)> {
        self.pgs
            .values()
            .filter(|pg| pg.id.pool == pool && pg.role() == Role::Primary)
            .map(|pg| (pg.id, pg.sweep_status()))
            .collect()
    }

    /// An object copy started with `done` was read.
    pub fn object_read(&mut self, done: Done, result: CopyResult, io: &mut dyn OsdIo) {
        self.with_pg(done.pg, io, |pg, ctx| {
            if let Some(wait) = pg.take_wait(done.id) {
                pg.object_read(ctx, wait, result);
            }
        });
        self.kick_wanting(io);
    }

    /// Periodic work: peering retries, recovery and backfill waiting for
    /// a slot or a reservation.
    pub fn tick(&mut self, io: &mut dyn OsdIo) {
        self.each_pg(io, |pg, ctx| {
            pg.tick(ctx);
            pg.kick_recovery(ctx);
        });
    }

    fn kick_wanting(&mut self, io: &mut dyn OsdIo) {
        let wanting = self.slots.take_wanting(io.now());
        for pg in wanting {
            self.with_pg(pg, io, |pg, ctx| pg.kick_recovery(ctx));
        }
    }

    /// Scrub PG `pg` (this OSD must be its primary); `repair`: rewrite the
    /// bad copies found.
    pub fn request_scrub(
        &mut self,
        pg: PgId,
        deep: bool,
        repair: bool,
        io: &mut dyn OsdIo,
    ) -> Result<(), String> {
        let id = self.id;
        self.with_pg(pg, io, |pg, ctx| pg.request_scrub(ctx, deep, repair))
            .unwrap_or_else(|| Err(format!("osd.{id} does not hold pg {pg}")))
    }

    /// Recovery this OSD did since it started, over every PG it holds.
    pub fn counters(&self) -> cairn_wire::RecoveryCounters {
        let mut total = cairn_wire::RecoveryCounters::default();
        for pg in self.pgs.values() {
            let c = pg.counters;
            total.recovered_objects += c.recovered_objects;
            total.backfilled_objects += c.backfilled_objects;
            total.recovery_bytes += c.recovery_bytes;
            total.repaired_objects += c.repaired_objects;
        }
        total
    }

    /// The monitor's totals of each cache pool, received at `now`
    /// ([`OsdIo::now`]): the tiering agents judge fullness by them.
    pub fn set_tier_usage(&mut self, pools: Vec<cairn_wire::TierPoolUsage>, now: Duration) {
        self.tier_usage.set(pools, now);
    }

    /// The state of every PG this OSD is primary for.
    pub fn stats(&mut self, io: &dyn OsdIo) -> Vec<PgStat> {
        self.stat_rounds += 1;
        let recount = self.stat_rounds % 5 == 1;
        let mut stats = Vec::new();
        for pg in self.pgs.values_mut() {
            if pg.role() != Role::Primary {
                continue;
            }
            if recount {
                pg.recount(io);
            }
            let mut stat = pg.stat();
            if self.map.pool(pg.id.pool).is_some_and(|p| p.is_cache()) {
                stat.tier = pg.tier_stat(io.store(), self.map.epoch, io.wall_secs());
            }
            stats.push(stat);
        }
        stats
    }

    /// The PGs this OSD holds a copy of or serves, for tests and tools.
    pub fn pgs(&self) -> impl Iterator<Item = &Pg> {
        self.pgs.values()
    }

    pub fn pg(&self, pg: PgId) -> Option<&Pg> {
        self.pgs.get(&pg)
    }

    /// Has this OSD asked the monitor for `up_thru` through `epoch`?
    pub fn asked_up_thru(&self) -> Epoch {
        self.requests.up_thru
    }

    /// PGs holding this OSD's backfill slots: as primary, and as target.
    pub fn backfills(&self) -> (Vec<PgId>, Vec<PgId>) {
        self.slots.backfills()
    }

    /// Pending operations and messages held for a newer map.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Client ops waiting in this OSD's PGs, for bounds checks.
    pub fn waiting_ops(&self) -> HashMap<PgId, usize> {
        self.pgs
            .iter()
            .map(|(id, pg)| (*id, pg.waiting_ops()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Reject malformed client requests.
fn check_op(op: &OsdOp) -> Result<(), String> {
    if op.ops.is_empty() {
        return Err("a request must hold at least one op".into());
    }
    // Guards go with either kind.
    let guards = op
        .ops
        .iter()
        .filter(|o| matches!(o, ObjOp::OmapCmp { .. }))
        .count();
    let writes = op.ops.iter().filter(|o| o.is_mutation()).count();
    if writes != 0 && writes + guards != op.ops.len() {
        return Err("a request must hold only reads or only mutations (and guards)".into());
    }
    if op.oid.is_empty() || op.oid.len() > MAX_OID_LEN {
        return Err(format!("object names are 1 to {MAX_OID_LEN} bytes"));
    }
    if op.oid.chars().any(char::is_control) {
        return Err("object names may not hold control characters".into());
    }
    if op
        .ops
        .iter()
        .any(|o| matches!(o, ObjOp::SetAttr { key, .. } if key.starts_with('_')))
    {
        return Err("attributes starting with '_' are reserved".into());
    }
    Ok(())
}
