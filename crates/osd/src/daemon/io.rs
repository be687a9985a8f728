//! The daemon's [`OsdIo`]: store operations become tokio tasks that call
//! back into the core; messages go to peer and client connections; monitor
//! requests go on the monitor session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{Message, ObjOp, OsdOpReply, PgMessage};

use super::Osd;
use crate::io::{copy_object, execute_reads, ClientId, Done, OsdIo};

pub(crate) struct DaemonIo<'a> {
    pub osd: Arc<Osd>,
    /// The peer connection the event being handled came on, if any: where
    /// [`OsdIo::answer`] replies.
    pub incoming: Option<(OsdId, &'a cairn_wire::Sender)>,
}

impl OsdIo for DaemonIo<'_> {
    fn store(&self) -> &dyn ObjectStore {
        self.osd.store.as_ref()
    }

    fn now(&self) -> Duration {
        self.osd.start.elapsed()
    }

    fn submit(&mut self, txn: Transaction, done: Done) -> Result<(), StoreError> {
        let commit = self.osd.store.submit(txn)?;
        let osd = self.osd.clone();
        tokio::spawn(async move {
            let result = commit.await;
            if let Err(StoreError::Failed(why)) = &result {
                tracing::error!("osd.{}: the store failed ({why}); stopping", osd.id());
                std::process::exit(1);
            }
            osd.with_core(|core, io| core.committed(done, result, io));
        });
        Ok(())
    }

    fn read(&mut self, oid: ObjectId, ops: Vec<ObjOp>, done: Done) {
        let osd = self.osd.clone();
        tokio::spawn(async move {
            let result = execute_reads(osd.store.as_ref(), &oid, &ops).await;
            osd.with_core(|core, io| core.read_done(done, result, io));
        });
    }

    fn read_object(&mut self, oid: ObjectId, done: Done) {
        let osd = self.osd.clone();
        tokio::spawn(async move {
            let result = copy_object(osd.store.as_ref(), &oid).await;
            osd.with_core(|core, io| core.object_read(done, result, io));
        });
    }

    fn tier_op(
        &mut self,
        pool: cairn_types::PoolId,
        oid: String,
        ops: Vec<ObjOp>,
        reqid: Option<cairn_types::ReqId>,
        done: Done,
    ) {
        let osd = self.osd.clone();
        tokio::spawn(async move {
            let result = osd.tier_client.op(pool, &oid, ops, reqid).await;
            osd.with_core(|core, io| core.tier_done(done, result, io));
        });
    }

    fn send(&mut self, to: OsdId, msg: PgMessage) {
        self.osd.peers.send(to, msg);
    }

    fn answer(&mut self, to: OsdId, msg: PgMessage) {
        match &self.incoming {
            Some((from, sender)) if *from == to => {
                sender.send(Message::Pg(msg));
            }
            _ => self.osd.peers.send(to, msg),
        }
    }

    fn reply(&mut self, client: ClientId, reply: OsdOpReply) {
        let tid = reply.tid;
        self.osd
            .clients
            .answer(client, tid, Message::OsdOpReply(reply));
    }

    fn request_up_thru(&mut self, epoch: Epoch) {
        let id = self.osd.id();
        if let Some(mon) = self.osd.mon.lock().as_ref() {
            mon.send(Message::OsdUpThru { id, epoch });
        }
    }

    fn request_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>) {
        let id = self.osd.id();
        if let Some(mon) = self.osd.mon.lock().as_ref() {
            mon.send(Message::PgTemp { id, pg, osds });
        }
    }
}

/// The interface the core is built with: it only reads the store.
pub(crate) struct LoadIo {
    pub store: Arc<dyn ObjectStore>,
    pub start: Instant,
}

impl OsdIo for LoadIo {
    fn store(&self) -> &dyn ObjectStore {
        self.store.as_ref()
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn submit(&mut self, _txn: Transaction, _done: Done) -> Result<(), StoreError> {
        Err(StoreError::Invalid("the OSD is still loading".into()))
    }

    fn read(&mut self, _oid: ObjectId, _ops: Vec<ObjOp>, _done: Done) {}

    fn read_object(&mut self, _oid: ObjectId, _done: Done) {}

    fn tier_op(
        &mut self,
        _pool: cairn_types::PoolId,
        _oid: String,
        _ops: Vec<ObjOp>,
        _reqid: Option<cairn_types::ReqId>,
        _done: Done,
    ) {
        unreachable!("no client op runs while the OSD loads its PGs");
    }

    fn send(&mut self, _to: OsdId, _msg: PgMessage) {}

    fn reply(&mut self, _client: ClientId, _reply: OsdOpReply) {}

    fn request_up_thru(&mut self, _epoch: Epoch) {}

    fn request_pg_temp(&mut self, _pg: PgId, _osds: Vec<OsdId>) {}
}
