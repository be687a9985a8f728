//! The cache's own writes (promotions, marking objects clean, evictions):
//! made as ops of [`TIER_CLIENT`] through the ordinary write path, so they
//! are logged and replicated like any write; their answers come back here
//! instead of going to a connection. Also how every cache-pool write puts
//! the object's cache state into its transaction.

use cairn_store::ObjectId;
use cairn_types::ReqId;
use cairn_wire::{ObjOp, OpError, OpOutput, OsdOp};

use super::meta::{self, ObjMeta};
use super::{cache_of, kind, After, Kind, TierWrite, TIER_CLIENT};
use crate::pg::{reply, ClientOp, Ctx, Pg};

impl Pg {
    /// Write to the cache as the cache itself.
    pub(crate) fn internal_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: &str,
        ops: Vec<ObjOp>,
        write: TierWrite,
        after: After,
    ) {
        self.tier_lasting.next_tid += 1;
        let tid = self.tier_lasting.next_tid;
        let Some(tier) = self.tier_mut() else {
            return;
        };
        tier.internal.insert(tid, (oid.to_string(), write, after));
        let op = ClientOp {
            client: TIER_CLIENT,
            op: OsdOp {
                tid,
                reqid: ReqId {
                    client: TIER_CLIENT,
                    tid,
                },
                epoch: ctx.map.epoch,
                pg: self.id,
                oid: oid.to_string(),
                ops,
                ignore_overlay: true,
            },
            arrived: ctx.io.now(),
        };
        self.client_op(ctx, op);
    }

    /// Put the cache state of a write into its transaction; returns
    /// whether the object exists after it (a removal leaves a whiteout).
    #[allow(clippy::too_many_arguments)] // the write path's state, passed through
    pub(crate) fn apply_tier_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: &ObjectId,
        w: &TierWrite,
        version: cairn_types::Version,
        txn: &mut cairn_store::Transaction,
        exists: bool,
        ops: &[ObjOp],
    ) -> bool {
        let meta = if !exists && w.whiteout_on_remove {
            let since = w
                .meta
                .as_ref()
                .filter(|m| m.dirty && m.dirty_since != 0)
                .map_or_else(|| ctx.io.wall_secs(), |m| m.dirty_since);
            let meta = ObjMeta {
                dirty: true,
                whiteout: true,
                partial: None,
                dirty_since: since,
            };
            txn.touch(oid);
            txn.set_attr(
                oid,
                crate::pg::persist::VERSION_ATTR,
                crate::pg::persist::encode(&version),
            );
            txn.set_attr(oid, meta::TIER_ATTR, meta::encode(&meta));
            Some(meta)
        } else if exists {
            if let Some(m) = &w.meta {
                txn.set_attr(oid, meta::TIER_ATTR, meta::encode(m));
            }
            w.meta.clone()
        } else {
            None
        };
        let exists = exists || meta.is_some();
        let size = written_size(ops);
        let now = ctx.io.wall_secs();
        if let Some(ix) = self.tier_mut().and_then(|t| t.index.as_mut()) {
            ix.note_write(&oid.name, meta.as_ref(), exists, size, now);
        }
        exists
    }

    /// Hand the answers to this PG's own cache writes back to it.
    pub(crate) fn drain_tier_replies(&mut self, ctx: &mut Ctx<'_>) {
        while !ctx.tier_replies.is_empty() {
            let replies = std::mem::take(&mut ctx.tier_replies);
            for (pg, tid, result) in replies {
                debug_assert_eq!(pg, self.id, "a cache write answered to another PG");
                self.tier_reply(ctx, tid, result);
            }
        }
    }

    /// The tier write for an internal op (`None`: not ours).
    pub(crate) fn internal_tier_write(&self, tid: u64) -> Option<TierWrite> {
        let tier = self.primary.as_ref()?.tier.as_ref()?;
        tier.internal.get(&tid).map(|(_, w, _)| w.clone())
    }

    /// An internal write finished.
    pub(crate) fn tier_reply(
        &mut self,
        ctx: &mut Ctx<'_>,
        tid: u64,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        let Some((oid, _, after)) = self.tier_mut().and_then(|t| t.internal.remove(&tid)) else {
            tracing::warn!(
                "pg {}: an answer to cache write {tid}, which this term did not make",
                self.id
            );
            return;
        };
        if let Err(e) = &result {
            tracing::warn!("pg {}: cache write to {oid:?} failed: {e}", self.id);
        }
        tracing::debug!(
            "pg {}: cache write {tid} to {oid:?} done ({after:?}): {:?}",
            self.id,
            result.as_ref().map(|_| ())
        );
        match after {
            After::Replay(op) => {
                let base = cache_of(ctx, self.id.pool).map(|(b, _, _)| b);
                if let (Err(_), Some(base), Kind::Read) = (&result, base, kind(&op.op.ops)) {
                    // The cache could not take it (full): read it from the base.
                    self.proxy(ctx, base, op);
                } else if let Err(e) = result {
                    reply(ctx, &op, Err(e));
                    self.unbusy(ctx, &oid, None);
                } else {
                    self.unbusy(ctx, &oid, Some(op));
                }
            }
            After::Done { origin } => {
                if let Some(t) = self.tier_mut() {
                    t.origin_done(origin, result.is_ok());
                }
                self.unbusy(ctx, &oid, None);
                self.kick_sweep(ctx);
            }
        }
    }
}

/// The object size a request leaves: exact (`true`) or at least.
fn written_size(ops: &[ObjOp]) -> Option<(u64, bool)> {
    let mut size: Option<(u64, bool)> = None;
    for op in ops {
        match op {
            ObjOp::Write { offset, data } => {
                let end = offset + data.len() as u64;
                size = Some(match size {
                    Some((s, exact)) => (s.max(end), exact),
                    None => (end, false),
                });
            }
            ObjOp::Truncate { size: s } => size = Some((*s, true)),
            ObjOp::CopyPut(c) => size = Some((c.data.len() as u64, true)),
            ObjOp::Remove => size = Some((0, true)),
            _ => {}
        }
    }
    size
}
