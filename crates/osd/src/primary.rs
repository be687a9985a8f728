//! The primary's side of client operations.
//!
//! A mutation is checked against the map (right primary, current epoch),
//! deduplicated by request id, turned into one store transaction with its
//! PG log entry, submitted locally and sent to every replica while the PG
//! lock is held (so versions, local order and replication order agree), and
//! acknowledged only when the local commit and every replica's commit are in.
//! Reads, and mutations whose effect depends on the object's current state,
//! wait until the object has no write in flight.

use std::sync::Arc;

use bytes::Bytes;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction, MAX_OBJECT_SIZE};
use cairn_types::{Epoch, ReqId, Version};
use cairn_wire::{LogEntry, Message, ObjOp, OpError, OpOutput, OsdOp, OsdOpReply, RepOp, Sender};
use tokio::sync::oneshot;

use crate::pg::{Pg, Phase, VERSION_ATTR};
use crate::Osd;

pub(crate) fn reply(sender: &Sender, tid: u64, result: Result<Vec<OpOutput>, OpError>) {
    sender.send(Message::OsdOpReply(OsdOpReply { tid, result }));
}

pub(crate) fn reply_wrong_primary(ops: Vec<(OsdOp, Sender)>, epoch: Epoch) {
    for (op, sender) in ops {
        reply(&sender, op.tid, Err(OpError::WrongPrimary { epoch }));
    }
}

/// Does this request need the object's current state to build its transaction?
fn needs_object_state(ops: &[ObjOp]) -> bool {
    ops.iter().any(|op| {
        matches!(
            op,
            ObjOp::Zero { .. }
                | ObjOp::Remove
                | ObjOp::Create { .. }
                | ObjOp::OmapInsert { .. }
                | ObjOp::OmapRm { .. }
        ) || !op.is_mutation()
    })
}

fn store_error(e: StoreError) -> OpError {
    match e {
        StoreError::NotFound(_) => OpError::NotFound,
        StoreError::NoSpace => OpError::NoSpace,
        StoreError::Invalid(m) => OpError::Invalid(m),
        other => OpError::Io(other.to_string()),
    }
}

struct WriteInFlight {
    reqid: ReqId,
    oid: String,
    seq: u64,
    commit: cairn_store::Commit,
    replicas: Vec<oneshot::Receiver<Message>>,
    outputs: usize,
}

impl Osd {
    pub(crate) fn handle_client_op(self: &Arc<Self>, op: OsdOp, sender: &Sender) {
        let epoch = self.epoch();
        if op.epoch > epoch {
            match self.queue_for_map(op, sender) {
                None => return,
                Some(op) => return self.handle_client_op(op, sender),
            }
        }
        let is_write = op.ops.iter().any(ObjOp::is_mutation);
        if op.ops.is_empty() || (is_write && op.ops.iter().any(|o| !o.is_mutation())) {
            let msg = "a request must hold only reads or only mutations, and at least one op";
            return reply(sender, op.tid, Err(OpError::Invalid(msg.into())));
        }
        let map = self.map();
        match map.pool(op.pg.pool) {
            Some(pool) if map.object_pg(pool, &op.oid) == op.pg => {}
            Some(_) => {
                let msg = format!("object {:?} does not belong to pg {}", op.oid, op.pg);
                return reply(sender, op.tid, Err(OpError::Invalid(msg)));
            }
            None => return reply(sender, op.tid, Err(OpError::WrongPrimary { epoch })),
        }
        let Some(pg) = self.pg(op.pg).filter(|pg| pg.is_primary(self.id())) else {
            return reply(sender, op.tid, Err(OpError::WrongPrimary { epoch }));
        };
        if is_write {
            self.do_write(&pg, op, sender);
        } else {
            self.do_read(&pg, op, sender);
        }
    }

    /// Checks common to reads and writes, under the PG lock. Returns the op
    /// back if it may proceed now.
    fn admit(&self, st: &mut crate::pg::PgState, op: OsdOp, sender: &Sender) -> Option<OsdOp> {
        match st.phase {
            Phase::Active => {}
            Phase::Peering | Phase::Inactive => {
                st.waiting_active.push((op, sender.clone()));
                return None;
            }
            Phase::ReplicaWaiting | Phase::ReplicaActive(_) => {
                reply(
                    sender,
                    op.tid,
                    Err(OpError::WrongPrimary {
                        epoch: self.epoch(),
                    }),
                );
                return None;
            }
        }
        let needs_state = needs_object_state(&op.ops);
        if let Some(obj) = st.objects.get_mut(&op.oid) {
            if needs_state && obj.pending_writes > 0 {
                obj.waiting.push((op, sender.clone()));
                return None;
            }
        }
        Some(op)
    }

    fn do_read(self: &Arc<Self>, pg: &Arc<Pg>, op: OsdOp, sender: &Sender) {
        {
            let mut st = pg.state.lock();
            let Some(op) = self.admit(&mut st, op, sender) else {
                return;
            };
            drop(st);
            let store = self.store.clone();
            let oid = ObjectId::new(pg.id, op.oid.clone());
            let sender = sender.clone();
            tokio::spawn(async move {
                let result = execute_reads(store.as_ref(), &oid, &op.ops).await;
                reply(&sender, op.tid, result);
            });
        }
    }

    fn do_write(self: &Arc<Self>, pg: &Arc<Pg>, op: OsdOp, sender: &Sender) {
        let mut st = pg.state.lock();
        let Some(op) = self.admit(&mut st, op, sender) else {
            return;
        };
        // Exactly once: a resent request that was applied gets its outcome.
        if st.reqids.contains_key(&op.reqid) {
            if let Some(waiters) = st.inflight.get_mut(&op.reqid) {
                waiters.push((op.tid, sender.clone()));
            } else {
                reply(sender, op.tid, Ok(vec![OpOutput::None; op.ops.len()]));
            }
            return;
        }
        let epoch = self.epoch();
        let version = st.next_version(epoch);
        let oid = ObjectId::new(pg.id, op.oid.clone());
        let (mut txn, removed) = match build_mutation(self.store.as_ref(), &oid, &op.ops, version) {
            Ok(built) => built,
            Err(e) => return reply(sender, op.tid, Err(e)),
        };
        if let Err(e) = txn.validate() {
            return reply(sender, op.tid, Err(store_error(e)));
        }
        let entry = LogEntry {
            version,
            reqid: Some(op.reqid),
            oid: op.oid.clone(),
            removed,
        };
        let replica_txn = txn.clone();
        let saved_info = st.info;
        let saved_log_len = st.log.len();
        st.log_mutation(pg.id, &entry, &mut txn, self.opts.pg_log_max_entries);
        let commit = match self.store.submit(txn) {
            Ok(commit) => commit,
            Err(e) => {
                // Nothing was applied or sent: undo the in-memory log entry.
                st.info = saved_info;
                st.log.truncate(saved_log_len);
                st.reqids.remove(&op.reqid);
                return reply(sender, op.tid, Err(store_error(e)));
            }
        };
        let mut replicas = Vec::with_capacity(st.acting.osds.len());
        let mut broken = false;
        for &replica in st.acting.osds.iter().skip(1) {
            let generation = st.peer_generations.get(&replica).copied().unwrap_or(0);
            let tid = self.peers.next_tid();
            let repop = RepOp {
                tid,
                pg: pg.id,
                epoch: st.interval_epoch,
                entry: entry.clone(),
                txn: replica_txn.clone(),
            };
            match self
                .peers
                .send_on(replica, generation, tid, Message::RepOp(repop))
            {
                Ok(rx) => replicas.push(rx),
                Err(e) => {
                    tracing::info!("pg {}: replication to osd.{replica} broken: {e}", pg.id);
                    broken = true;
                }
            }
        }
        st.inflight.insert(op.reqid, vec![(op.tid, sender.clone())]);
        st.inflight_writes += 1;
        st.objects.entry(op.oid.clone()).or_default().pending_writes += 1;
        let seq = st.peering_seq;
        drop(st);
        let write = WriteInFlight {
            reqid: op.reqid,
            oid: op.oid,
            seq,
            commit,
            replicas,
            outputs: op.ops.len(),
        };
        let osd = self.clone();
        let pg = pg.clone();
        tokio::spawn(async move { osd.complete_write(pg, write, broken).await });
    }

    async fn complete_write(self: Arc<Self>, pg: Arc<Pg>, write: WriteInFlight, broken: bool) {
        let local = write.commit.await;
        let mut replicated = !broken;
        for rx in write.replicas {
            match rx.await {
                Ok(Message::RepOpReply { result: Ok(()), .. }) => {}
                Ok(Message::RepOpReply { result: Err(e), .. }) => {
                    tracing::info!("pg {}: replica refused a write: {e}", pg.id);
                    replicated = false;
                }
                _ => replicated = false,
            }
        }
        let result = match (&local, replicated) {
            (Ok(()), true) => Ok(vec![OpOutput::None; write.outputs]),
            (Err(StoreError::NoSpace), _) => Err(OpError::NoSpace),
            _ => Err(OpError::Retry {
                epoch: self.epoch(),
            }),
        };
        if let Err(e) = &local {
            tracing::error!("pg {}: local commit failed: {e}", pg.id);
        }
        let (waiters, ready, repeer) = {
            let mut st = pg.state.lock();
            st.inflight_writes -= 1;
            if st.inflight_writes == 0 {
                pg.drained.notify_waiters();
            }
            let waiters = st.inflight.remove(&write.reqid).unwrap_or_default();
            if result.is_err() {
                // The request may be resent and must then be applied again
                // unless peering finds it on every member.
                st.reqids.remove(&write.reqid);
            }
            let ready = match st.objects.get_mut(&write.oid) {
                Some(obj) => {
                    obj.pending_writes -= 1;
                    if obj.pending_writes == 0 {
                        let waiting = std::mem::take(&mut obj.waiting);
                        st.objects.remove(&write.oid);
                        waiting
                    } else {
                        Vec::new()
                    }
                }
                None => Vec::new(),
            };
            // A broken replication stream in an unchanged interval: re-peer,
            // which brings every member to one state before I/O resumes.
            let repeer = result.is_err() && st.peering_seq == write.seq && !st.retired;
            if repeer {
                st.peering_seq += 1;
                st.phase = Phase::Peering;
            }
            (waiters, ready, repeer.then_some(st.peering_seq))
        };
        for (tid, sender) in waiters {
            reply(&sender, tid, result.clone());
        }
        for (op, sender) in ready {
            self.handle_client_op(op, &sender);
        }
        if let Some(seq) = repeer {
            let osd = self.clone();
            tokio::spawn(async move { osd.peer_pg(pg, seq).await });
        }
    }
}

/// Turn a request's mutations into a store transaction. Returns the
/// transaction and whether it removes the object.
fn build_mutation(
    store: &dyn ObjectStore,
    oid: &ObjectId,
    ops: &[ObjOp],
    version: Version,
) -> Result<(Transaction, bool), OpError> {
    let mut txn = Transaction::new();
    let mut size = None;
    if needs_object_state(ops) {
        size = match store.stat(oid) {
            Ok(stat) => Some(stat.size),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(store_error(e)),
        };
    }
    let mut exists = size.is_some();
    for op in ops {
        match op {
            ObjOp::Write { offset, data } => {
                if offset.saturating_add(data.len() as u64) > MAX_OBJECT_SIZE {
                    return Err(OpError::Invalid(
                        "write past the maximum object size".into(),
                    ));
                }
                txn.write(oid, *offset, data.clone());
                let end = offset + data.len() as u64;
                size = Some(size.unwrap_or(0).max(end));
                exists = true;
            }
            ObjOp::Zero { offset, len } => {
                let Some(cur) = size.filter(|_| exists) else {
                    continue;
                };
                let end = offset.saturating_add(*len).min(cur);
                if *offset >= end {
                    continue;
                }
                if end == cur {
                    txn.truncate(oid, *offset);
                    size = Some(*offset);
                } else {
                    txn.zero(oid, *offset, end - offset);
                }
            }
            ObjOp::Truncate { size: new_size } => {
                txn.truncate(oid, *new_size);
                size = Some(*new_size);
                exists = true;
            }
            ObjOp::Remove => {
                if !exists {
                    return Err(OpError::NotFound);
                }
                txn.remove(oid);
                exists = false;
                size = None;
            }
            ObjOp::Create { exclusive } => {
                if exists && *exclusive {
                    return Err(OpError::Exists);
                }
                txn.touch(oid);
                exists = true;
                size = Some(size.unwrap_or(0));
            }
            ObjOp::SetAttr { key, value } => {
                if key.starts_with('_') {
                    return Err(OpError::Invalid(format!("attribute {key:?} is reserved")));
                }
                txn.set_attr(oid, key, value.clone());
                exists = true;
            }
            ObjOp::OmapSet { entries } => {
                txn.omap_set(oid, entries.clone());
                exists = true;
            }
            ObjOp::OmapInsert { entries } => {
                if exists {
                    let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
                    let found = store.omap_get(oid, &keys).map_err(store_error)?;
                    if !found.is_empty() {
                        return Err(OpError::Exists);
                    }
                }
                txn.omap_set(oid, entries.clone());
                exists = true;
            }
            ObjOp::OmapRm { keys } => {
                if exists {
                    txn.omap_rm(oid, keys.clone());
                }
            }
            _ => return Err(OpError::Invalid("read op in a write request".into())),
        }
    }
    if exists {
        let encoded = bincode::serialize(&version).unwrap_or_default();
        txn.set_attr(oid, VERSION_ATTR, Bytes::from(encoded));
    }
    let removed = !exists && ops.iter().any(|o| matches!(o, ObjOp::Remove));
    Ok((txn, removed))
}

/// Execute a read-only request.
pub(crate) async fn execute_reads(
    store: &dyn ObjectStore,
    oid: &ObjectId,
    ops: &[ObjOp],
) -> Result<Vec<OpOutput>, OpError> {
    let mut outputs = Vec::with_capacity(ops.len());
    for op in ops {
        let output = match op {
            ObjOp::Read { offset, len } => {
                if *len > (64 << 20) {
                    return Err(OpError::Invalid("read longer than 64 MiB".into()));
                }
                OpOutput::Data(store.read(oid, *offset, *len).await.map_err(store_error)?)
            }
            ObjOp::Stat => OpOutput::Stat {
                size: store.stat(oid).map_err(store_error)?.size,
            },
            ObjOp::GetAttr { key } => OpOutput::Attr(
                store
                    .get_attr(oid, key)
                    .map_err(store_error)?
                    .map(Bytes::from),
            ),
            ObjOp::OmapGet { keys } => {
                let found = store.omap_get(oid, keys).map_err(store_error)?;
                OpOutput::Omap(
                    found
                        .into_iter()
                        .map(|(k, v)| (k, Bytes::from(v)))
                        .collect(),
                )
            }
            ObjOp::OmapList { start_after, max } => {
                let list = store
                    .omap_list(oid, start_after.as_deref(), (*max).min(65536) as usize)
                    .map_err(store_error)?;
                OpOutput::Omap(list.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect())
            }
            _ => return Err(OpError::Invalid("mutation in a read request".into())),
        };
        outputs.push(output);
    }
    Ok(outputs)
}
