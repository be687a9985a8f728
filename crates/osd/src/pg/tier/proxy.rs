//! Client ops passed to the base pool (proxied): reads of objects the
//! cache does not hold, and writes it does not take (at its target, or
//! draining). The base pool's answer is the client's.
//!
//! An object has one base op in flight at a time, so the base pool applies
//! its ops in the order they came. Pure writes that queued behind a step
//! on their object go on together, in their order, as *one* base op
//! ([`Gather`]): a hot object the cache cannot take costs a base-pool round
//! trip per batch, not per write (on a spinning base pool a round trip is
//! tens to hundreds of milliseconds, and a write queued sixteen deep
//! waited for sixteen of them).
//!
//! A batch carries its first write's request id, so a resend of that one
//! is answered from the base pool's log. A resend of another write of the
//! batch is applied again. Only writes of data are batched, and a client
//! resends only writes it had not seen answered, which were in flight
//! together with any later write to the same range; so applying it again
//! leaves bytes one of the orders the client allowed could have left.

use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError, OpOutput};

use super::{kind, Kind, Step};
use crate::pg::{reply, ClientOp, Ctx, Pg};

/// Client writes in one batched base op, at most.
pub const PROXY_BATCH_OPS_MAX: usize = 32;
/// Bytes of data in one batched base op, at most (a lone write larger
/// than this still goes, alone).
pub const PROXY_BATCH_BYTES_MAX: usize = 1 << 20;

/// Pure writes to one object gathering into one base op while the ops
/// that waited on the object are replayed ([`Pg::unbusy`]).
#[derive(Debug)]
pub(crate) struct Gather {
    base: PoolId,
    oid: String,
    ops: Vec<ClientOp>,
    bytes: usize,
}

fn data_bytes(op: &ClientOp) -> usize {
    op.op
        .ops
        .iter()
        .map(|o| match o {
            ObjOp::Write { data, .. } => data.len(),
            _ => 0,
        })
        .sum()
}

impl Pg {
    /// Pass the op to the base pool; its answer is the client's. A pure
    /// write to the object whose waiting ops are being replayed joins
    /// their batch instead of going alone.
    pub(super) fn proxy(&mut self, ctx: &mut Ctx<'_>, base: PoolId, op: ClientOp) {
        let write_only = kind(&op.op.ops) == Kind::WriteOnly;
        let Some(tier) = self.tier_mut() else {
            return self.send_proxy(ctx, base, vec![op]);
        };
        let gathering = tier.gathering.as_deref() == Some(op.op.oid.as_str());
        if !(write_only && gathering) {
            return self.send_proxy(ctx, base, vec![op]);
        }
        let bytes = data_bytes(&op);
        match tier.gather.as_mut() {
            Some(g)
                if g.oid == op.op.oid
                    && g.base == base
                    && g.ops.len() < PROXY_BATCH_OPS_MAX
                    && g.bytes + bytes <= PROXY_BATCH_BYTES_MAX =>
            {
                g.bytes += bytes;
                g.ops.push(op);
            }
            Some(_) => {
                // The batch is full: it goes, and this write waits for it.
                self.send_gathered(ctx);
                self.tier_wait(ctx, op);
            }
            None => {
                tier.gather = Some(Gather {
                    base,
                    oid: op.op.oid.clone(),
                    ops: vec![op],
                    bytes,
                });
            }
        }
    }

    /// Is a batch of writes to `oid` gathering (so an op on it that does
    /// not join must wait for the batch)?
    pub(super) fn gathering_for(&self, oid: &str) -> bool {
        self.primary
            .as_ref()
            .and_then(|p| p.tier.as_ref())
            .and_then(|t| t.gather.as_ref())
            .is_some_and(|g| g.oid == oid)
    }

    /// Send the writes gathered so far, if any, as one base op.
    pub(super) fn send_gathered(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(g) = self.tier_mut().and_then(|t| t.gather.take()) {
            self.send_proxy(ctx, g.base, g.ops);
        }
    }

    /// One base op with `ops`' object ops in their order; it carries the
    /// first op's request id.
    fn send_proxy(&mut self, ctx: &mut Ctx<'_>, base: PoolId, ops: Vec<ClientOp>) {
        let Some(first) = ops.first() else {
            return;
        };
        let oid = first.op.oid.clone();
        let reqid = first.op.reqid;
        assert!(
            ops.iter().all(|o| o.op.oid == oid),
            "pg {}: a proxied batch mixes objects",
            self.id
        );
        if let Some(tier) = self.tier_mut() {
            let reads = ops.iter().filter(|o| kind(&o.op.ops) == Kind::Read).count() as u64;
            tier.counters.proxied_reads += reads;
            tier.counters.proxied_writes += ops.len() as u64 - reads;
            if reads < ops.len() as u64 {
                tier.counters.proxied_write_batches += 1;
            }
        }
        let obj_ops: Vec<ObjOp> = ops.iter().flat_map(|o| o.op.ops.iter().cloned()).collect();
        self.base_op(ctx, base, oid, obj_ops, Some(reqid), Step::Proxy(ops));
    }

    /// The base pool answered a proxied op (or a batch): each client gets
    /// its own ops' outputs, or the error.
    pub(super) fn proxied(
        &mut self,
        ctx: &mut Ctx<'_>,
        ops: Vec<ClientOp>,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        tracing::debug!(
            "pg {}: {} ops on {:?} proxied: {:?}",
            self.id,
            ops.len(),
            ops.first().map(|o| &o.op.oid),
            result.as_ref().map(Vec::len)
        );
        match result {
            Ok(outputs) => {
                let want: usize = ops.iter().map(|o| o.op.ops.len()).sum();
                if outputs.len() != want {
                    let why = format!(
                        "the base pool answered {} outputs for {want} ops",
                        outputs.len()
                    );
                    for op in &ops {
                        reply(ctx, op, Err(OpError::Io(why.clone())));
                    }
                    return;
                }
                let mut outputs = outputs.into_iter();
                for op in &ops {
                    let mine: Vec<OpOutput> = outputs.by_ref().take(op.op.ops.len()).collect();
                    reply(ctx, op, Ok(mine));
                }
            }
            Err(e) => {
                for op in &ops {
                    reply(ctx, op, Err(e.clone()));
                }
            }
        }
    }
}

impl Gather {
    /// The client ops gathered, for a PG that stops being primary.
    pub(crate) fn into_ops(self) -> Vec<ClientOp> {
        self.ops
    }
}
