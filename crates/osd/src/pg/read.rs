//! Client reads on the primary: run on the store away from the event
//! loop, answered when the store is done. A cache pool's reads are counted
//! per object while they run, so that an eviction waits for them
//! ([`super::state::ObjState::reads`]).
//!
//! Must never answer a read from a copy it found damaged: the read is
//! repaired first (or, if peering started meanwhile, resent).

use cairn_store::ObjectId;
use cairn_wire::{ActId, OpError};

use super::{reply, ClientOp, Ctx, Pg, Wait};
use crate::io::{Done, ReadFailure, ReadResult};

impl Pg {
    /// Read from the store; `counted`: in its object's
    /// [`super::state::ObjState::reads`] until done (a cache pool's read, which an
    /// eviction waits for).
    pub(crate) fn do_read(&mut self, ctx: &mut Ctx<'_>, op: ClientOp, counted: bool) {
        let Some(primary) = self.primary.as_mut() else {
            return self.hold(ctx, op);
        };
        let act = primary.act;
        if counted {
            match primary.objects.get_mut(&op.op.oid) {
                Some(obj) => obj.reads += 1,
                None => {
                    let obj = primary.objects.entry(op.op.oid.clone()).or_default();
                    obj.reads = 1;
                }
            }
        }
        let id = ctx.id();
        let oid = ObjectId::new(self.id, op.op.oid.clone());
        let ops = op.op.ops.clone();
        self.waits.insert(id, Wait::Read { act, op, counted });
        ctx.io.read(oid, ops, Done { pg: self.id, id });
    }

    /// A counted read of `oid` in term `act` ended: the last one lets an
    /// eviction waiting for it go.
    fn read_ended(&mut self, ctx: &mut Ctx<'_>, act: ActId, oid: &str) {
        let Some(primary) = self.primary.as_mut().filter(|p| p.act == act) else {
            return; // the term's object states went with it
        };
        let Some(obj) = primary.objects.get_mut(oid) else {
            unreachable!("pg {}: a counted read of {oid:?} not counted", self.id);
        };
        assert!(obj.reads > 0, "pg {}: reads of {oid:?} below zero", self.id);
        obj.reads -= 1;
        if obj.reads > 0 {
            return;
        }
        if obj.pending_writes == 0 && obj.waiting.is_empty() {
            primary.objects.remove(oid);
        }
        self.reads_drained(ctx, oid);
    }

    /// A client read finished. One that began in an earlier primary term
    /// is answered `Retry` (the client resends): the store may have
    /// changed under it since, in ways that term's bookkeeping no longer
    /// guards (an eviction of the new term, a split moving its object).
    pub(crate) fn read_done(
        &mut self,
        ctx: &mut Ctx<'_>,
        (act, counted): (ActId, bool),
        op: ClientOp,
        result: ReadResult,
    ) {
        if self.primary.as_ref().map(|p| p.act) != Some(act) {
            let epoch = ctx.map.epoch;
            return reply(ctx, &op, Err(OpError::Retry { epoch }));
        }
        let result = match result {
            Ok(outputs) => Ok(outputs),
            Err(ReadFailure::Op(e)) => Err(e),
            Err(ReadFailure::Damaged(what)) => {
                // Repaired first (the object becomes missing here, so an
                // eviction waiting for this read queues behind the repair).
                let oid = counted.then(|| op.op.oid.clone());
                self.read_repair(ctx, op, what);
                if let Some(oid) = oid {
                    self.read_ended(ctx, act, &oid);
                }
                return;
            }
        };
        if counted {
            self.read_ended(ctx, act, &op.op.oid);
        }
        reply(ctx, &op, result);
    }
}
