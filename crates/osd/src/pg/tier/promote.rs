//! Promotion: the whole object read from the base pool (`CopyGet`) and
//! written here as the cache's own write, then the client op that asked
//! for it run on it. A partial object keeps what was written here and
//! takes only its holes from the base pool's copy.
//!
//! Must never overwrite what a client wrote here with the base pool's
//! older bytes.

use cairn_types::PoolId;
use cairn_wire::{ObjOp, ObjectData, OpError, OpOutput};

use super::meta::{self, ObjMeta};
use super::{After, Step, TierWrite};
use crate::pg::{reply, ClientOp, Ctx, Pg};

impl Pg {
    /// Bring the whole object here, then run `op`.
    pub(super) fn promote(
        &mut self,
        ctx: &mut Ctx<'_>,
        base: PoolId,
        op: ClientOp,
        fill: Option<ObjMeta>,
    ) {
        let oid = op.op.oid.clone();
        self.base_op(
            ctx,
            base,
            oid,
            vec![ObjOp::CopyGet],
            None,
            Step::Promote { op, fill },
        );
    }

    pub(super) fn promoted(
        &mut self,
        ctx: &mut Ctx<'_>,
        oid: String,
        op: ClientOp,
        fill: Option<ObjMeta>,
        result: Result<Vec<OpOutput>, OpError>,
    ) {
        tracing::debug!(
            "pg {}: promote {oid:?} (fill {:?}): base answered {}",
            self.id,
            fill,
            match &result {
                Ok(out) => match out.last() {
                    Some(OpOutput::Copy(c)) => format!("{} bytes", c.data.len()),
                    other => format!("{other:?}"),
                },
                Err(e) => e.to_string(),
            }
        );
        let copy = match result {
            Ok(mut out) => match out.pop() {
                Some(OpOutput::Copy(copy)) => Some(copy),
                other => {
                    let why = format!("the base pool answered a copy of {oid:?} with {other:?}");
                    reply(ctx, &op, Err(OpError::Io(why)));
                    return self.unbusy(ctx, &oid, None);
                }
            },
            Err(OpError::NotFound) => None,
            Err(e) => {
                tracing::warn!("pg {}: promoting {oid:?} failed: {e}", self.id);
                reply(ctx, &op, Err(e));
                return self.unbusy(ctx, &oid, None);
            }
        };
        let (ops, meta) = match (copy, fill) {
            // Nowhere: the op runs on an absent object here, before the
            // ops that came after it (a write holds them in `admit`).
            (None, None) => {
                let waiting = self
                    .tier_mut()
                    .and_then(|t| t.busy.remove(&oid))
                    .map(|b| b.waiting)
                    .unwrap_or_default();
                self.run_local(ctx, op, None);
                for later in waiting {
                    self.client_op(ctx, later);
                }
                return;
            }
            (None, Some(meta)) => (
                vec![ObjOp::Create { exclusive: false }],
                ObjMeta {
                    partial: None,
                    ..meta
                },
            ),
            (Some(copy), None) => (vec![ObjOp::CopyPut(copy)], ObjMeta::default()),
            (Some(copy), Some(meta)) => (
                fill_ops(&copy, &meta),
                ObjMeta {
                    partial: None,
                    ..meta
                },
            ),
        };
        if let Some(tier) = self.tier_mut() {
            tier.counters.promotes += 1;
        }
        let write = TierWrite {
            meta: Some(meta),
            fresh: false,
            whiteout_on_remove: false,
            ..TierWrite::default()
        };
        self.internal_write(ctx, &oid, ops, write, After::Replay(op));
    }
}

/// The ops that fill a partial object's holes from the base pool's copy.
fn fill_ops(copy: &ObjectData, meta: &ObjMeta) -> Vec<ObjOp> {
    let size = copy.data.len() as u64;
    let extents = meta.partial.as_deref().unwrap_or(&[]);
    let mut ops: Vec<ObjOp> = meta::holes(extents, size)
        .into_iter()
        .map(|(off, len)| ObjOp::Write {
            offset: off,
            data: copy.data.slice(off as usize..(off + len) as usize),
        })
        .collect();
    for (key, value) in &copy.attrs {
        ops.push(ObjOp::SetAttr {
            key: key.clone(),
            value: value.clone(),
        });
    }
    if !copy.omap.is_empty() {
        ops.push(ObjOp::OmapSet {
            entries: copy.omap.clone(),
        });
    }
    ops.push(ObjOp::Create { exclusive: false });
    ops
}
