//! Flushing (sending a dirty object back to the base pool, then marking
//! it clean or evicting it) and evicting (dropping a clean object), one
//! object at a time per call; and the sweep of `cairn osd tier
//! flush-evict-all`, which does both for every object of the PG, a few at
//! a time behind client I/O.

use std::collections::VecDeque;

use cairn_store::ObjectId;
use cairn_types::Version;
use cairn_wire::{ActId, ObjOp, ObjectData, OpError, OpOutput};
use serde::Serialize;

use super::meta::{self, ObjMeta, TIER_ATTR};
use super::{cache_of, After, Origin, Step, TierWrite};
use crate::io::{CopyResult, Done};
use crate::pg::{ClientOp, Ctx, Pg, Wait};

/// Objects a sweep flushes or evicts at once, per PG.
pub const SWEEP_PARALLEL: usize = 4;

/// A partial object in more pieces than this is flushed as one write of
/// the span they cover, its holes read from the base pool first: one
/// read and one sequential write there instead of a write per piece. On a
/// spinning base each piece is a seek (~6 ms): a few hundred scattered
/// 4 KiB blocks were seconds of disk time per replica, and every commit
/// on those disks queued behind them.
pub const FLUSH_SPAN_PIECES: usize = 16;

/// A flush-evict-all sweep of one PG.
#[derive(Debug, Default, Serialize)]
pub struct Sweep {
    #[serde(skip)]
    queue: VecDeque<String>,
    pub remaining: usize,
    pub in_flight: usize,
    pub flushed: u64,
    pub evicted: u64,
    pub failed: u64,
}

impl Sweep {
    pub fn finished(&self) -> bool {
        self.queue.is_empty() && self.in_flight == 0
    }

    pub(crate) fn one_done(&mut self, ok: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if !ok {
            self.failed += 1;
        }
    }
}

impl Pg {
    /// Mark `oid` busy, with `then` the first op to run once it is free.
    fn hold_object(&mut self, oid: &str, then: Option<ClientOp>, lets_local: bool) {
        if let Some(tier) = self.tier_mut() {
            let busy = tier.busy.entry(oid.to_string()).or_default();
            busy.stepping = true;
            busy.lets_local = lets_local;
            if let Some(op) = then {
                busy.waiting.push_front(op);
            }
        }
    }

    /// Flush `oid` (dirty) to the base pool; evict it after if `evict`.
    pub(crate) fn flush(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: &str,
        evict: bool,
        then: Option<ClientOp>,
        origin: Origin,
    ) {
        let Some(act) = self.primary.as_ref().map(|p| p.act) else {
            return;
        };
        // A flush of the agent or a sweep lets client ops on the cache's
        // copy go on; one a client op waits for holds the object.
        let lets_local = then.is_none() && origin != Origin::Client;
        self.hold_object(oid, then, lets_local);
        let id = ctx.id();
        self.waits.insert(
            id,
            Wait::Tier {
                act,
                oid: oid.to_string(),
                step: Step::FlushRead { evict, origin },
            },
        );
        ctx.io.read_object(
            ObjectId::new(self.id, oid.to_string()),
            Done { pg: self.id, id },
        );
    }

    /// The object to flush was read here: send it to the base pool.
    pub(crate) fn flush_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        act: ActId,
        oid: String,
        step: Step,
        result: CopyResult,
    ) {
        let Step::FlushRead { evict, origin } = step else {
            unreachable!("pg {}: a base op completed as a local read", self.id);
        };
        if self.primary.as_ref().map(|p| p.act) != Some(act) {
            return;
        }
        let fail = |pg: &mut Pg, ctx: &mut Ctx<'_>, why: String| {
            tracing::warn!("pg {}: cannot flush {oid:?}: {why}", pg.id);
            let error = OpError::Io(format!("cannot flush {oid:?}: {why}"));
            pg.tier_step_failed(ctx, &oid, origin, error);
        };
        let copy = match result {
            Ok(Some(copy)) => copy,
            Ok(None) => return fail(self, ctx, "it is gone".into()),
            Err(e) => return fail(self, ctx, e.to_string()),
        };
        let meta: ObjMeta = match copy.attrs.iter().find(|(k, _)| k == TIER_ATTR) {
            Some((_, v)) => match crate::pg::persist::decode(v) {
                Ok(m) => m,
                Err(e) => return fail(self, ctx, format!("its cache state is undecodable: {e}")),
            },
            None => ObjMeta {
                dirty: true,
                ..ObjMeta::default()
            },
        };
        let Some((base, _, _)) = cache_of(ctx, self.id.pool) else {
            return fail(self, ctx, "the pool is no longer a cache tier".into());
        };
        let Some(data) = copy.data else {
            return fail(self, ctx, "its copy holds no data".into());
        };
        if let Some(extents) = meta.partial.as_ref().filter(|_| !meta.whiteout) {
            if extents.len() > FLUSH_SPAN_PIECES {
                let version = copy.version;
                return self.base_op(
                    ctx,
                    base,
                    oid,
                    vec![ObjOp::CopyGet],
                    None,
                    Step::FlushFill {
                        evict,
                        origin,
                        meta,
                        version,
                        data,
                    },
                );
            }
        }
        let ops = if meta.whiteout {
            vec![ObjOp::Remove]
        } else if let Some(extents) = &meta.partial {
            let mut ops: Vec<ObjOp> = extents
                .iter()
                .filter(|(off, _)| (*off as usize) < data.len())
                .map(|&(off, len)| {
                    let end = ((off + len) as usize).min(data.len());
                    ObjOp::Write {
                        offset: off,
                        data: data.slice(off as usize..end),
                    }
                })
                .collect();
            if ops.is_empty() {
                ops.push(ObjOp::Create { exclusive: false });
            }
            ops
        } else {
            vec![ObjOp::CopyPut(ObjectData {
                data,
                attrs: copy
                    .attrs
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with('_'))
                    .collect(),
                omap: copy.omap,
            })]
        };
        self.base_op(
            ctx,
            base,
            oid,
            ops,
            None,
            Step::FlushPut {
                evict,
                origin,
                meta,
                version: copy.version,
            },
        );
    }

    /// The base pool's copy of a partial object in many pieces came back:
    /// send the span the pieces cover, holes from that copy, as one write.
    pub(crate) fn flush_filled(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: String,
        step: Step,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        let Step::FlushFill {
            evict,
            origin,
            meta,
            version,
            data,
        } = step
        else {
            unreachable!("pg {}: another step came as a flush fill", self.id);
        };
        let base_data = match result {
            Ok(mut out) => match out.pop() {
                Some(OpOutput::Copy(copy)) => copy.data,
                other => {
                    let why = format!("the base pool answered a copy of {oid:?} with {other:?}");
                    return self.tier_step_failed(ctx, &oid, origin, OpError::Io(why));
                }
            },
            // Never flushed: the pieces go to a new object.
            Err(OpError::NotFound) => bytes::Bytes::new(),
            Err(e) => {
                tracing::warn!("pg {}: reading {oid:?} to flush it failed: {e}", self.id);
                return self.tier_step_failed(ctx, &oid, origin, e);
            }
        };
        let Some((base, _, _)) = cache_of(ctx, self.id.pool) else {
            let why = "the pool is no longer a cache tier".to_string();
            return self.tier_step_failed(ctx, &oid, origin, OpError::Io(why));
        };
        let extents = meta.partial.as_deref().unwrap_or(&[]);
        let ops = span_write(extents, &data, &base_data);
        self.base_op(
            ctx,
            base,
            oid,
            ops,
            None,
            Step::FlushPut {
                evict,
                origin,
                meta,
                version,
            },
        );
    }

    /// The base pool took (or refused) a flushed object.
    pub(crate) fn flushed(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: String,
        (evict, origin): (bool, Origin),
        meta: ObjMeta,
        version: Version,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        tracing::debug!(
            "pg {}: flushed {oid:?} at {version} (evict {evict}, {origin:?}, {meta:?}): {:?}",
            self.id,
            result.as_ref().map(|_| ())
        );
        match result {
            Ok(_) => {}
            // A whiteout of an object the base pool never had.
            Err(OpError::NotFound) if meta.whiteout => {}
            Err(e) => {
                tracing::warn!(
                    "pg {}: flushing {oid:?} to the base pool failed: {e}",
                    self.id
                );
                return self.tier_step_failed(ctx, &oid, origin, e);
            }
        }
        if let Some(tier) = self.tier_mut() {
            tier.counters.flushes += 1;
            if origin == Origin::Sweep {
                if let Some(s) = tier.sweep.as_mut() {
                    s.flushed += 1;
                }
            }
        }
        if evict {
            // Client ops went on beside the flush; none may start on the
            // object while it leaves the cache.
            if let Some(busy) = self.tier_mut().and_then(|t| t.busy.get_mut(&oid)) {
                busy.lets_local = false;
            }
            return self.evict_now(ctx, &oid, origin, Some(version));
        }
        let clean = ObjMeta {
            dirty: false,
            dirty_since: 0,
            ..meta
        };
        let write = TierWrite {
            meta: Some(clean),
            if_version: Some(version),
            ..TierWrite::default()
        };
        let ops = vec![ObjOp::Create { exclusive: false }];
        self.internal_write(ctx, &oid, ops, write, After::Done { origin });
    }

    /// Evict `oid` (clean), then run `then`.
    pub(crate) fn evict(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: &str,
        then: Option<ClientOp>,
        origin: Origin,
    ) {
        self.hold_object(oid, then, false);
        self.evict_now(ctx, oid, origin, None);
    }

    /// Remove `oid` from the cache (if still at `if_version`, when given).
    fn evict_now(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: &str,
        origin: Origin,
        if_version: Option<Version>,
    ) {
        let reading = self
            .primary
            .as_ref()
            .and_then(|p| p.objects.get(oid))
            .is_some_and(|o| o.reads > 0);
        if reading {
            // A read that started while the object was here must find it:
            // the eviction goes once the reads end ([`Pg::reads_drained`]).
            if let Some(tier) = self.tier_mut() {
                let earlier = tier
                    .evict_after_reads
                    .insert(oid.to_string(), (origin, if_version));
                assert!(
                    earlier.is_none(),
                    "pg {}: two evictions of {oid:?} at once",
                    self.id
                );
            }
            return;
        }
        if let Some(tier) = self.tier_mut() {
            tier.counters.evicts += 1;
            if origin == Origin::Sweep {
                if let Some(s) = tier.sweep.as_mut() {
                    s.evicted += 1;
                }
            }
        }
        let write = TierWrite {
            if_version,
            ..TierWrite::default()
        };
        self.internal_write(ctx, oid, vec![ObjOp::Remove], write, After::Done { origin });
    }

    /// The last read of `oid` running on the store ended: an eviction
    /// waiting for it goes.
    pub(crate) fn reads_drained(&mut self, ctx: &mut Ctx<'_>, oid: &str) {
        let waiting = self
            .primary
            .as_mut()
            .and_then(|p| p.tier.as_mut())
            .and_then(|t| t.evict_after_reads.remove(oid));
        if let Some((origin, if_version)) = waiting {
            self.evict_now(ctx, oid, origin, if_version);
        }
    }

    /// A flush or eviction could not be done: the object stays as it is;
    /// a client op that waited for it gets the error (done again, it
    /// would only fail again).
    fn tier_step_failed(&mut self, ctx: &mut Ctx<'_>, oid: &str, origin: Origin, error: OpError) {
        let mut first = None;
        if let Some(t) = self.tier_mut() {
            t.origin_done(origin, false);
            if origin == Origin::Client {
                first = t.busy.get_mut(oid).and_then(|b| b.waiting.pop_front());
            }
        }
        if let Some(op) = first {
            crate::pg::reply(ctx, &op, Err(error));
        }
        self.unbusy(ctx, oid, None);
        self.kick_sweep(ctx);
    }

    /// Start flushing and evicting every object of this PG.
    pub(crate) fn start_sweep(&mut self, ctx: &mut Ctx<'_>) -> Result<(), String> {
        if self.primary.is_none() {
            return Err(format!("pg {} is not active here", self.id));
        }
        let running = self
            .primary
            .as_ref()
            .and_then(|p| p.tier.as_ref())
            .and_then(|t| t.sweep.as_ref())
            .is_some_and(|s| !s.finished());
        if running {
            return Ok(()); // one sweep at a time: this one goes on
        }
        let names = ctx
            .io
            .store()
            .list_objects(self.id)
            .map_err(|e| format!("pg {}: cannot list objects: {e}", self.id))?;
        let queue: VecDeque<String> = names
            .into_iter()
            .filter(|n| !crate::pg::persist::is_internal(n))
            .collect();
        if let Some(tier) = self.tier_mut() {
            tier.sweep = Some(Sweep {
                remaining: queue.len(),
                queue,
                ..Sweep::default()
            });
        }
        self.kick_sweep(ctx);
        Ok(())
    }

    /// Start the next objects of a sweep, up to [`SWEEP_PARALLEL`].
    pub(crate) fn kick_sweep(&mut self, ctx: &mut Ctx<'_>) {
        let mut passes = 0;
        loop {
            let Some(tier) = self.tier_mut() else {
                return;
            };
            let Some(sweep) = tier.sweep.as_mut() else {
                return;
            };
            if sweep.in_flight >= SWEEP_PARALLEL || passes > sweep.queue.len() {
                return;
            }
            let Some(oid) = sweep.queue.pop_front() else {
                return;
            };
            passes += 1;
            let blocked = tier.busy.contains_key(&oid)
                || self.tier_lasting.base_inflight.contains_key(&oid)
                || self.missing.contains_key(&oid);
            let Some(tier) = self.primary.as_mut().and_then(|p| p.tier.as_deref_mut()) else {
                return;
            };
            if blocked {
                // A client op has it, or this OSD lacks its newest version:
                // come back to it.
                if let Some(s) = tier.sweep.as_mut() {
                    s.queue.push_back(oid);
                }
                continue;
            }
            let pending = self
                .primary
                .as_ref()
                .and_then(|p| p.objects.get(&oid))
                .is_some_and(|o| o.pending_writes > 0);
            if pending {
                if let Some(s) = self.tier_mut().and_then(|t| t.sweep.as_mut()) {
                    s.queue.push_back(oid);
                }
                continue;
            }
            let state = meta::read_state(ctx.io.store(), &ObjectId::new(self.id, oid.clone()));
            let pg = self.id;
            let Some(sweep) = self.tier_mut().and_then(|t| t.sweep.as_mut()) else {
                return;
            };
            sweep.remaining = sweep.queue.len();
            match state {
                Ok(meta::CacheState::Absent) => continue,
                Ok(s) => {
                    sweep.in_flight += 1;
                    passes = 0;
                    if s.is_dirty() {
                        self.flush(ctx, &oid, true, None, Origin::Sweep);
                    } else {
                        self.evict(ctx, &oid, None, Origin::Sweep);
                    }
                }
                Err(why) => {
                    tracing::warn!("pg {pg}: sweep: {why}");
                    sweep.failed += 1;
                }
            }
        }
    }
}

/// One write of the span `extents` cover: their bytes from `cached` (the
/// partial object here), the holes between them from `base` (zeros past
/// its end). No extent within `cached`: only the object's existence.
fn span_write(extents: &[(u64, u64)], cached: &[u8], base: &[u8]) -> Vec<ObjOp> {
    let pieces: Vec<(usize, usize)> = extents
        .iter()
        .filter(|(off, _)| (*off as usize) < cached.len())
        .map(|&(off, len)| (off as usize, ((off + len) as usize).min(cached.len())))
        .collect();
    let (Some(&(lo, _)), Some(hi)) = (pieces.first(), pieces.iter().map(|p| p.1).max()) else {
        return vec![ObjOp::Create { exclusive: false }];
    };
    let mut span = vec![0u8; hi - lo];
    if base.len() > lo {
        let end = base.len().min(hi);
        span[..end - lo].copy_from_slice(&base[lo..end]);
    }
    for (start, end) in pieces {
        span[start - lo..end - lo].copy_from_slice(&cached[start..end]);
    }
    vec![ObjOp::Write {
        offset: lo as u64,
        data: bytes::Bytes::from(span),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(ops: &[ObjOp]) -> (u64, Vec<u8>) {
        match ops {
            [ObjOp::Write { offset, data }] => (*offset, data.to_vec()),
            other => panic!("not one write: {other:?}"),
        }
    }

    #[test]
    fn a_span_takes_pieces_from_the_cache_and_holes_from_the_base() {
        let cached: Vec<u8> = (0..64u8).collect();
        let base = vec![0xAAu8; 40];
        let (off, data) = written(&span_write(&[(8, 4), (20, 4), (44, 8)], &cached, &base));
        assert_eq!(off, 8);
        assert_eq!(data.len(), 44);
        assert_eq!(&data[..4], &cached[8..12]);
        assert!(data[4..12].iter().all(|&b| b == 0xAA), "hole from the base");
        assert_eq!(&data[12..16], &cached[20..24]);
        assert!(data[16..32].iter().all(|&b| b == 0xAA));
        assert!(
            data[32..36].iter().all(|&b| b == 0),
            "past the base's end: zeros"
        );
        assert_eq!(&data[36..44], &cached[44..52]);
    }

    #[test]
    fn pieces_past_the_cached_data_are_cut_or_dropped() {
        let cached = vec![7u8; 16];
        let (off, data) = written(&span_write(&[(4, 4), (12, 8), (30, 2)], &cached, &[]));
        assert_eq!((off, data.len()), (4, 12));
        assert!(matches!(
            span_write(&[(20, 4)], &cached, &[]).as_slice(),
            [ObjOp::Create { .. }]
        ));
    }
}
