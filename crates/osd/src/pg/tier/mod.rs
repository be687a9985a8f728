//! Cache tiering on a cache pool's primary: which client ops run here,
//! which are passed to the base pool (proxied), which first bring the
//! object here (promote), and the flushes and evictions that send dirty
//! objects back and drop clean ones ([`flush`]).
//!
//! The primary is the one place an object of the cache is decided on: a
//! client op on an object with a tier step in flight (a proxied op, a
//! promotion, a flush, an eviction) waits for it, so the base pool and the
//! cache never disagree about an object in a way a client could see. The
//! one exception is a flush of the agent or of a sweep: ops that run on
//! the cache's copy go on beside it, and the flush then marks clean (or
//! evicts) only if the object is still at the version it sent. No new
//! step starts on an object while a base op of an earlier primary term
//! may still land.
//! What the cache holds of each object is in its `_tier` attribute
//! ([`meta`]), written in the same transaction as the data and replicated
//! with it; a removal is kept as a whiteout until flushed. A write to an
//! object the cache does not hold is taken as a *partial* object (only the
//! written ranges) instead of promoting the whole object first; the rest
//! is fetched when something else needs it.
//!
//! Writes this module makes in the cache (promotions, marking clean,
//! evictions) go through the ordinary write path as ops of the internal
//! client [`TIER_CLIENT`], so they are logged and replicated like any
//! write. It must never acknowledge a client write before the ordinary
//! path does, nor evict an object that is dirty.

pub mod agent;
pub mod flush;
pub mod fullness;
pub mod hitset;
pub mod index;
mod internal;
pub mod meta;
mod promote;
mod proxy;
mod stats;

use std::collections::{HashMap, VecDeque};

use cairn_map::{CacheMode, TierParams};
use cairn_store::ObjectId;
use cairn_types::{PoolId, ReqId, Version};
use cairn_wire::{ActId, ObjOp, OpError, OpOutput, TierStat};

use super::{reply, ClientOp, Ctx, Pg, Wait};
use crate::io::{ClientId, Done};
use hitset::HitSets;
use meta::{CacheState, ObjMeta};

/// The client id of the cache's own writes; no connection has it.
pub(crate) const TIER_CLIENT: ClientId = u64::MAX;

/// Client ops waiting on objects with a tier step in flight, per PG, at
/// most; beyond it they are refused with `Retry` (the client resends).
pub const MAX_TIER_WAITING: usize = 4096;

/// How a cache-pool write changes the object's `_tier` attribute.
#[derive(Clone, Debug, Default)]
pub(crate) struct TierWrite {
    /// Written with the data (`None`: unchanged).
    pub meta: Option<ObjMeta>,
    /// Start from nothing: the object here (a whiteout) is replaced.
    pub fresh: bool,
    /// A request that removes the object leaves a whiteout instead.
    pub whiteout_on_remove: bool,
    /// Applied only if the object is still at this version, else answered
    /// with nothing done: how a flush marks clean (or evicts) only what it
    /// flushed, while clients went on writing.
    pub if_version: Option<Version>,
}

/// What a finished internal write continues with.
#[derive(Debug)]
pub(crate) enum After {
    /// A promotion is in: run the client op that asked for it.
    Replay(ClientOp),
    /// A flush or an eviction is done.
    Done { origin: Origin },
}

/// Who asked for a flush or an eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A client op on the object (a draining cache).
    Client,
    /// `flush-evict-all`.
    Sweep,
    /// The agent, flushing or evicting.
    AgentFlush,
    AgentEvict,
}

/// The step a base-pool op or a local read was for.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Client ops on one object passed to the base pool as one op (one,
    /// or writes batched by [`proxy`]): its result is their answers.
    Proxy(Vec<ClientOp>),
    /// The whole object read from the base pool, to promote it (`fill`:
    /// the partial object here, whose holes it fills).
    Promote { op: ClientOp, fill: Option<ObjMeta> },
    /// The object read here, to flush it.
    FlushRead { evict: bool, origin: Origin },
    /// The base pool's copy read, to flush a partial object in many
    /// pieces as one span ([`flush::FLUSH_SPAN_PIECES`]); `data` is the
    /// cache's copy as read at `version`.
    FlushFill {
        evict: bool,
        origin: Origin,
        meta: ObjMeta,
        version: Version,
        data: bytes::Bytes,
    },
    /// The object sent to the base pool.
    FlushPut {
        evict: bool,
        origin: Origin,
        meta: ObjMeta,
        /// The version of the object that was sent.
        version: Version,
    },
}

#[derive(Debug, Default)]
struct Busy {
    waiting: VecDeque<ClientOp>,
    /// A step of this term holds the object (else only ops waiting for
    /// an earlier term's base op to land).
    stepping: bool,
    /// The step is a flush of the agent or a sweep: client ops that run
    /// on the cache's copy go on meanwhile (the flush then marks clean
    /// only the version it sent); the others wait.
    lets_local: bool,
}

/// Cache-tier state of a PG that outlives a primary term.
#[derive(Debug, Default)]
pub(crate) struct Lasting {
    /// Tids of the cache's own writes: never reused, so an answer from an
    /// earlier term cannot be taken for one of this term.
    pub next_tid: u64,
    /// Base-pool ops in flight per object, by the primary term that sent
    /// them: no new step starts on an object with one of an earlier term
    /// (it may still land).
    pub base_inflight: HashMap<String, Vec<ActId>>,
}

impl Lasting {
    /// Has `oid` a base op of a term other than `act` in flight?
    pub fn earlier_base_op(&self, oid: &str, act: Option<ActId>) -> bool {
        self.base_inflight
            .get(oid)
            .is_some_and(|acts| acts.iter().any(|a| Some(*a) != act))
    }
}

/// A cache PG's tiering state on its primary.
#[derive(Debug, Default)]
pub(crate) struct TierPg {
    pub hit_sets: HitSets,
    busy: HashMap<String, Busy>,
    /// Internal writes in flight, by tid.
    pub internal: HashMap<u64, (String, TierWrite, After)>,
    /// The objects here (loaded once the PG holds all its objects;
    /// `None` before).
    pub index: Option<index::Index>,
    pub counters: TierStat,
    pub sweep: Option<flush::Sweep>,
    /// Evictions waiting for reads of their object running on the store
    /// ([`super::state::ObjState::reads`]): (who asked, the version to evict).
    evict_after_reads: HashMap<String, (Origin, Option<Version>)>,
    /// The agent's flushes and evictions in flight.
    pub agent_flushing: usize,
    pub agent_evicting: usize,
    /// When the agent runs next ([`crate::io::OsdIo::now`]).
    pub agent_at: std::time::Duration,
    /// The object whose waiting ops are being replayed ([`Pg::unbusy`]),
    /// and the writes to it gathering to be proxied as one op.
    gathering: Option<String>,
    gather: Option<proxy::Gather>,
    /// What this PG held when it last made its stats (which the
    /// monitor's pool totals count), for [`fullness::levels`].
    pub reported: Option<fullness::Contents>,
}

impl TierPg {
    fn waiting(&self) -> usize {
        self.busy.values().map(|b| b.waiting.len()).sum()
    }

    pub fn stat(&self) -> Option<TierStat> {
        let index = self.index.as_ref()?;
        let mut st = self.counters.clone();
        st.dirty = index.dirty();
        st.objects = index.objects();
        st.bytes = index.bytes();
        st.dirty_bytes = index.dirty_bytes();
        st.whiteouts = index.whiteouts();
        let sweeping = self.sweep.as_ref().is_some_and(|s| !s.finished());
        st.flushing |= sweeping || self.agent_flushing > 0;
        st.evicting |= sweeping || self.agent_evicting > 0;
        Some(st)
    }

    /// A flush or eviction asked for by `origin` ended.
    pub fn origin_done(&mut self, origin: Origin, ok: bool) {
        match origin {
            Origin::Client => {}
            Origin::Sweep => {
                if let Some(s) = self.sweep.as_mut() {
                    s.one_done(ok);
                }
            }
            Origin::AgentFlush => self.agent_flushing = self.agent_flushing.saturating_sub(1),
            Origin::AgentEvict => self.agent_evicting = self.agent_evicting.saturating_sub(1),
        }
    }
}

/// What kind of request this is, for tiering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    /// Only `Write` ops: may be taken as a partial object.
    WriteOnly,
    /// Only removals, zeroing and truncation: may be proxied as they are.
    Shrink,
    /// Any other mutation: needs the whole object.
    Other,
}

fn kind(ops: &[ObjOp]) -> Kind {
    if !ops.iter().any(ObjOp::is_mutation) {
        return Kind::Read;
    }
    if ops.iter().all(|o| matches!(o, ObjOp::Write { .. })) {
        return Kind::WriteOnly;
    }
    if ops.iter().all(|o| {
        matches!(
            o,
            ObjOp::Remove | ObjOp::Zero { .. } | ObjOp::Truncate { .. }
        )
    }) {
        return Kind::Shrink;
    }
    Kind::Other
}

/// Does the request create the object if it is absent?
fn creates(ops: &[ObjOp]) -> bool {
    ops.iter().any(|o| {
        matches!(
            o,
            ObjOp::Write { .. }
                | ObjOp::Truncate { .. }
                | ObjOp::Create { .. }
                | ObjOp::SetAttr { .. }
                | ObjOp::OmapSet { .. }
                | ObjOp::OmapInsert { .. }
                | ObjOp::CopyPut(_)
        )
    })
}

/// The tiering of this PG's pool, if it is a cache: (base, mode, params).
pub(crate) fn cache_of(ctx: &Ctx<'_>, pool: PoolId) -> Option<(PoolId, CacheMode, TierParams)> {
    let p = ctx.map.pool(pool)?;
    let base = p.tier.tier_of?;
    Some((base, p.tier.cache_mode, p.tier.params.clone()))
}

impl Pg {
    /// The tiering state, made on first use (primary only).
    pub(crate) fn tier_mut(&mut self) -> Option<&mut TierPg> {
        let primary = self.primary.as_mut()?;
        Some(primary.tier.get_or_insert_with(Default::default).as_mut())
    }

    fn act(&self) -> Option<ActId> {
        self.primary.as_ref().map(|p| p.act)
    }

    /// A client op (admitted) on a cache pool's PG.
    pub(crate) fn tier_client_op(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) {
        let Some((base, mode, params)) = cache_of(ctx, self.id.pool) else {
            return self.run_local(ctx, op, None);
        };
        let oid = op.op.oid.clone();
        let now = ctx.io.wall_secs();
        let full = self.tier_full(ctx);
        let Some(tier) = self.tier_mut() else {
            return self.run_local(ctx, op, None);
        };
        if let Some(ix) = tier.index.as_mut() {
            ix.touch(&oid, now);
        }
        let old_base_op = self.tier_lasting.earlier_base_op(&oid, self.act());
        let Some(tier) = self.primary.as_mut().and_then(|p| p.tier.as_deref_mut()) else {
            return self.run_local(ctx, op, None);
        };
        let busy = tier.busy.get(&oid);
        let flushing = busy.is_some_and(|b| b.lets_local) && mode != CacheMode::None;
        if (busy.is_some() && !flushing) || old_base_op {
            return self.tier_wait(ctx, op);
        }
        let seen = tier.hit_sets.hit(
            &oid,
            now,
            u64::from(params.hit_set_period),
            params.hit_set_count as usize,
        );
        let state = match meta::read_state(ctx.io.store(), &ObjectId::new(self.id, oid.clone())) {
            Ok(state) => state,
            Err(why) => return reply(ctx, &op, Err(OpError::Io(why))),
        };
        let kind = kind(&op.op.ops);
        if self.gathering_for(&oid) {
            // Writes to this object are gathering to go to the base pool:
            // one that joins them is proxied too; anything else waits for
            // them to land.
            let joins = kind == Kind::WriteOnly
                && matches!(state, CacheState::Absent)
                && (full || mode == CacheMode::None);
            if !joins {
                self.send_gathered(ctx);
                return self.tier_wait(ctx, op);
            }
        }
        if flushing {
            // Only what runs on the cache's copy goes on beside a flush.
            let local = match &state {
                CacheState::Whole(_) | CacheState::Whiteout(_) => true,
                CacheState::Partial(_) => kind == Kind::WriteOnly,
                CacheState::Absent => false,
            };
            if !local {
                return self.tier_wait(ctx, op);
            }
        }
        if mode == CacheMode::None {
            // Draining: nothing new stays here.
            return match state {
                CacheState::Absent => self.proxy(ctx, base, op),
                s if s.is_dirty() => self.flush(ctx, &oid, true, Some(op), Origin::Client),
                _ => self.evict(ctx, &oid, Some(op), Origin::Client),
            };
        }
        let promote_after = |recency: u32| recency == 0 || seen >= recency as usize;
        tracing::debug!(
            "pg {}: {oid:?} {kind:?} ({}) on {state:?}, full {full}",
            self.id,
            op.op.reqid
        );
        match state {
            CacheState::Whole(meta) => self.run_local(ctx, op, Some(meta)),
            CacheState::Whiteout(meta) => self.on_whiteout(ctx, op, meta),
            CacheState::Partial(meta) if kind == Kind::WriteOnly => {
                self.run_local(ctx, op, Some(meta))
            }
            CacheState::Partial(meta) => self.promote(ctx, base, op, Some(meta)),
            // At its target the cache takes no new object: the base pool
            // serves it (clients slow to the base pool's pace, never hang).
            CacheState::Absent if full => self.proxy(ctx, base, op),
            CacheState::Absent => match (kind, mode) {
                (Kind::Read, CacheMode::Writeback)
                    if promote_after(params.min_read_recency_for_promote) =>
                {
                    self.promote(ctx, base, op, None)
                }
                (Kind::Read, _) => self.proxy(ctx, base, op),
                (Kind::WriteOnly, CacheMode::Writeback) => {
                    if let Some(tier) = self.tier_mut() {
                        tier.counters.partial_writes += 1;
                    }
                    self.run_local(ctx, op, Some(partial_meta()))
                }
                (Kind::Shrink, CacheMode::Writeback) => self.proxy(ctx, base, op),
                (_, CacheMode::Writeback)
                    if !promote_after(params.min_write_recency_for_promote) =>
                {
                    self.proxy(ctx, base, op)
                }
                _ => self.promote(ctx, base, op, None),
            },
        }
    }

    /// Hold `op` until its object's tier step is over.
    fn tier_wait(&mut self, ctx: &mut Ctx<'_>, op: ClientOp) {
        let Some(tier) = self.tier_mut() else {
            return self.run_local(ctx, op, None);
        };
        if tier.waiting() >= MAX_TIER_WAITING {
            let epoch = ctx.map.epoch;
            return reply(ctx, &op, Err(OpError::Retry { epoch }));
        }
        let oid = op.op.oid.clone();
        tier.busy.entry(oid).or_default().waiting.push_back(op);
    }

    /// An op on an object removed here and not yet flushed.
    fn on_whiteout(&mut self, ctx: &mut Ctx<'_>, op: ClientOp, meta: ObjMeta) {
        let ops = &op.op.ops;
        if kind(ops) == Kind::Read || !creates(ops) {
            // As on an object that does not exist.
            let guard_fails = ops
                .iter()
                .any(|o| matches!(o, ObjOp::OmapCmp { value: Some(_), .. }));
            let reads =
                kind(ops) == Kind::Read && ops.iter().any(|o| !matches!(o, ObjOp::OmapCmp { .. }));
            let removes = ops.iter().any(|o| matches!(o, ObjOp::Remove));
            let result = if guard_fails {
                Err(OpError::Mismatch(format!("{:?} does not exist", op.op.oid)))
            } else if reads || removes {
                Err(OpError::NotFound)
            } else {
                Ok(vec![OpOutput::None; ops.len()])
            };
            return reply(ctx, &op, result);
        }
        let meta = ObjMeta {
            dirty: true,
            whiteout: false,
            partial: None,
            dirty_since: if meta.dirty {
                meta.dirty_since
            } else {
                ctx.io.wall_secs()
            },
        };
        let write = TierWrite {
            meta: Some(meta),
            fresh: true,
            whiteout_on_remove: true,
            ..TierWrite::default()
        };
        self.do_write_tiered(ctx, op, Some(write));
    }

    /// Run the op on the cache's copy; `meta`: the object's state here.
    fn run_local(&mut self, ctx: &mut Ctx<'_>, op: ClientOp, meta: Option<ObjMeta>) {
        if kind(&op.op.ops) == Kind::Read {
            return self.do_read(ctx, op, true);
        }
        let now = ctx.io.wall_secs();
        let old = meta.clone().unwrap_or_default();
        let mut new = ObjMeta {
            dirty: true,
            whiteout: false,
            partial: old.partial.clone(),
            dirty_since: if old.dirty && old.dirty_since != 0 {
                old.dirty_since
            } else {
                now
            },
        };
        if let Some(extents) = new.partial.as_mut() {
            for o in &op.op.ops {
                if let ObjOp::Write { offset, data } = o {
                    meta::add_extent(extents, *offset, data.len() as u64);
                }
            }
        }
        let write = TierWrite {
            meta: (meta.as_ref() != Some(&new)).then_some(new),
            fresh: false,
            whiteout_on_remove: true,
            ..TierWrite::default()
        };
        self.do_write_tiered(ctx, op, Some(write));
    }

    /// Mark `oid` busy and send `ops` to the base pool.
    pub(crate) fn base_op(
        &mut self,
        ctx: &mut Ctx<'_>,
        base: PoolId,
        oid: String,
        ops: Vec<ObjOp>,
        reqid: Option<ReqId>,
        step: Step,
    ) {
        let Some(act) = self.act() else {
            return self.abandon(ctx, step);
        };
        if let Some(tier) = self.tier_mut() {
            tier.busy.entry(oid.clone()).or_default().stepping = true;
        }
        self.tier_lasting
            .base_inflight
            .entry(oid.clone())
            .or_default()
            .push(act);
        let id = ctx.id();
        self.waits.insert(
            id,
            Wait::Tier {
                act,
                oid: oid.clone(),
                step,
            },
        );
        ctx.io
            .tier_op(base, oid, ops, reqid, Done { pg: self.id, id });
    }

    /// A step that cannot go on (the PG stopped serving): its client op
    /// is resent by the client.
    fn abandon(&mut self, ctx: &mut Ctx<'_>, step: Step) {
        let epoch = ctx.map.epoch;
        match step {
            Step::Proxy(ops) => {
                for op in &ops {
                    reply(ctx, op, Err(OpError::Retry { epoch }));
                }
            }
            Step::Promote { op, .. } => reply(ctx, &op, Err(OpError::Retry { epoch })),
            _ => {}
        }
    }

    /// A base-pool op (or, for a flush, the local read) finished.
    pub(crate) fn tier_done(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        oid: String,
        step: Step,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        self.base_op_ended(&oid, act);
        if self.act() != Some(act) {
            // From an earlier term: clients resend to this one, and ops
            // that waited for this one to land may go on.
            self.abandon(ctx, step);
            let free = self
                .primary
                .as_ref()
                .and_then(|p| p.tier.as_ref())
                .is_some_and(|t| t.busy.get(&oid).is_some_and(|b| !b.stepping));
            if free && !self.tier_lasting.earlier_base_op(&oid, self.act()) {
                self.unbusy(ctx, &oid, None);
            }
            return;
        }
        match step {
            Step::Proxy(ops) => {
                self.proxied(ctx, ops, result);
                self.unbusy(ctx, &oid, None);
            }
            Step::Promote { op, fill } => self.promoted(ctx, oid, op, fill, result),
            Step::FlushPut {
                evict,
                origin,
                meta,
                version,
            } => self.flushed(ctx, oid, (evict, origin), meta, version, result),
            step @ Step::FlushFill { .. } => self.flush_filled(ctx, oid, step, result),
            Step::FlushRead { .. } => {
                unreachable!("pg {}: a flush read came as a base op", self.id)
            }
        }
    }

    pub fn is_active(&self) -> bool {
        matches!(self.phase, super::Phase::Active)
    }

    /// One base op on `oid` of term `act` answered.
    fn base_op_ended(&mut self, oid: &str, act: ActId) {
        if let Some(acts) = self.tier_lasting.base_inflight.get_mut(oid) {
            if let Some(i) = acts.iter().position(|a| *a == act) {
                acts.swap_remove(i);
            }
            if acts.is_empty() {
                self.tier_lasting.base_inflight.remove(oid);
            }
        }
    }

    /// `oid`'s tier step is over: run `first`, then the ops that waited
    /// (pure writes among them that the base pool is to take go to it
    /// together: [`proxy`]).
    pub(crate) fn unbusy(&mut self, ctx: &mut Ctx<'_>, oid: &str, first: Option<ClientOp>) {
        // A batch of another object's replay (this one runs inside it)
        // goes first, in the order its ops came.
        self.send_gathered(ctx);
        let Some(tier) = self.tier_mut() else {
            if let Some(op) = first {
                self.client_op(ctx, op);
            }
            return;
        };
        let waiting = tier.busy.remove(oid).map(|b| b.waiting).unwrap_or_default();
        let outer = tier.gathering.replace(oid.to_string());
        for op in first.into_iter().chain(waiting) {
            self.client_op(ctx, op);
        }
        self.send_gathered(ctx);
        if let Some(tier) = self.tier_mut() {
            tier.gathering = outer;
        }
    }
}

impl TierPg {
    /// The client ops this state holds (waiting on busy objects, or on a
    /// promotion), for a PG that stops being primary to hold again.
    pub(crate) fn into_held_ops(self) -> Vec<ClientOp> {
        let mut ops: Vec<ClientOp> = Vec::new();
        for (_, (_, _, after)) in self.internal {
            if let After::Replay(op) = after {
                ops.push(op);
            }
        }
        for (_, busy) in self.busy {
            ops.extend(busy.waiting);
        }
        ops.extend(self.gather.into_iter().flat_map(proxy::Gather::into_ops));
        ops
    }
}

fn partial_meta() -> ObjMeta {
    ObjMeta {
        dirty: true,
        whiteout: false,
        partial: Some(Vec::new()),
        dirty_since: 0,
    }
}
