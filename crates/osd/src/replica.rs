//! Requests from peer OSDs: replicated writes (`RepOp`), and the peering
//! requests a primary sends (query, list, pull, activate).
//!
//! A replica applies RepOps in the order they arrive on the primary's
//! connection, only for the interval the primary activated it in, and only
//! from the OSD its own map names primary — so a stale primary can never
//! change it.

use std::sync::Arc;

use bytes::Bytes;
use cairn_store::ObjectId;
use cairn_types::{OsdId, PgId};
use cairn_wire::{Message, ObjectCopy, PgContents, PgInfo, RepOp, Sender};

use crate::pg::{Phase, INFO_ATTR, VERSION_ATTR};
use crate::Osd;

/// Data bytes after which a pull reply stops adding objects.
pub(crate) const PULL_REPLY_BYTES: usize = 8 << 20;

impl Osd {
    pub(crate) fn handle_peer_request(
        self: &Arc<Self>,
        from: OsdId,
        msg: Message,
        sender: &Sender,
    ) {
        match msg {
            Message::RepOp(repop) => self.handle_repop(from, repop, sender),
            Message::PgQuery { tid, pg, .. } => {
                let info = self.local_info(pg);
                sender.send(Message::PgQueryReply { tid, info });
            }
            Message::PgList { tid, pg } => {
                let result = self.list_pg(pg);
                sender.send(Message::PgListReply { tid, result });
            }
            Message::PgPull { tid, pg, names } => {
                let osd = self.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    let result = osd.copy_objects(pg, &names).await;
                    sender.send(Message::PgPullReply { tid, result });
                });
            }
            Message::PgActivate {
                tid,
                pg,
                epoch,
                info,
            } => {
                let osd = self.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    let result = osd.activate_replica(from, pg, epoch, info).await;
                    if let Err(e) = &result {
                        tracing::info!("pg {pg}: activation by osd.{from} failed: {e}");
                    }
                    sender.send(Message::PgActivateReply { tid, result });
                });
            }
            other => tracing::warn!(
                "osd.{}: unexpected message from osd.{from}: {other:?}",
                self.id()
            ),
        }
    }

    fn handle_repop(self: &Arc<Self>, from: OsdId, repop: RepOp, sender: &Sender) {
        let RepOp {
            tid,
            pg: pgid,
            epoch,
            entry,
            mut txn,
        } = repop;
        let refuse = |why: String| {
            sender.send(Message::RepOpReply {
                tid,
                pg: pgid,
                result: Err(why),
            });
        };
        let Some(pg) = self.pg(pgid) else {
            return refuse(format!("osd.{} does not hold pg {pgid}", self.id()));
        };
        let commit = {
            let mut st = pg.state.lock();
            if st.phase != Phase::ReplicaActive(epoch) || st.acting.primary() != Some(from) {
                return refuse(format!(
                    "pg {pgid} not active for osd.{from} at epoch {epoch}"
                ));
            }
            if entry.version <= st.info.last_update {
                return refuse(format!("pg {pgid}: stale version {}", entry.version));
            }
            st.log_mutation(pgid, &entry, &mut txn, self.opts.pg_log_max_entries);
            self.store.submit(txn)
        };
        let sender = sender.clone();
        tokio::spawn(async move {
            let result = match commit {
                Ok(commit) => commit.await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = &result {
                tracing::error!("pg {pgid}: replicated write failed: {e}");
            }
            sender.send(Message::RepOpReply {
                tid,
                pg: pgid,
                result,
            });
        });
    }

    pub(crate) fn local_info(&self, pgid: PgId) -> PgInfo {
        if let Some(pg) = self.pg(pgid) {
            return pg.state.lock().info;
        }
        match self.store.coll_get_attr(pgid, INFO_ATTR) {
            Ok(Some(bytes)) => bincode::deserialize(&bytes).unwrap_or_default(),
            _ => PgInfo {
                pg: Some(pgid),
                ..PgInfo::default()
            },
        }
    }

    /// Every object of the PG with its version, the log and the info.
    pub(crate) fn list_pg(&self, pgid: PgId) -> Result<PgContents, String> {
        let names = self.store.list_objects(pgid).map_err(|e| e.to_string())?;
        let mut objects = Vec::with_capacity(names.len());
        for name in names {
            let oid = ObjectId::new(pgid, name);
            let version = self
                .store
                .get_attr(&oid, VERSION_ATTR)
                .map_err(|e| e.to_string())?
                .and_then(|v| bincode::deserialize(&v).ok())
                .unwrap_or_default();
            objects.push((oid.name, version));
        }
        let log = self
            .store
            .read_log(pgid)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(v, e)| (v, Bytes::from(e)))
            .collect();
        Ok(PgContents {
            info: self.local_info(pgid),
            objects,
            log,
        })
    }

    /// Copies of the named objects, in order, stopping once the reply holds
    /// [`PULL_REPLY_BYTES`] (always at least one object): the puller asks
    /// again for the rest.
    async fn copy_objects(&self, pgid: PgId, names: &[String]) -> Result<Vec<ObjectCopy>, String> {
        let mut copies = Vec::with_capacity(names.len());
        let mut bytes = 0usize;
        for name in names {
            if bytes >= PULL_REPLY_BYTES {
                break;
            }
            let oid = ObjectId::new(pgid, name.clone());
            let size = match self.store.stat(&oid) {
                Ok(stat) => stat.size,
                Err(cairn_store::StoreError::NotFound(_)) => {
                    copies.push(ObjectCopy {
                        name: name.clone(),
                        data: None,
                        attrs: vec![],
                        omap: vec![],
                    });
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            };
            let data = self
                .store
                .read(&oid, 0, size)
                .await
                .map_err(|e| e.to_string())?;
            bytes += data.len();
            let attrs = self.store.get_attrs(&oid).map_err(|e| e.to_string())?;
            let omap = self
                .store
                .omap_list(&oid, None, usize::MAX)
                .map_err(|e| e.to_string())?;
            copies.push(ObjectCopy {
                name: name.clone(),
                data: Some(data),
                attrs: attrs
                    .into_iter()
                    .map(|(k, v)| (k, Bytes::from(v)))
                    .collect(),
                omap: omap.into_iter().map(|(k, v)| (k, Bytes::from(v))).collect(),
            });
        }
        Ok(copies)
    }

    /// The primary `from` activates this replica for its interval at `epoch`:
    /// catch up with the primary first if our state differs.
    async fn activate_replica(
        self: &Arc<Self>,
        from: OsdId,
        pgid: PgId,
        epoch: cairn_types::Epoch,
        primary_info: PgInfo,
    ) -> Result<(), String> {
        let map = self.map();
        if map.epoch < epoch {
            return Err(format!(
                "osd.{} has map {} < {epoch}; retry",
                self.id(),
                map.epoch
            ));
        }
        if map.acting(pgid).primary() != Some(from) {
            return Err(format!(
                "osd.{from} is not the primary of {pgid} at epoch {}",
                map.epoch
            ));
        }
        let pg = self
            .pg(pgid)
            .ok_or_else(|| format!("osd.{} does not hold {pgid}", self.id()))?;
        let seq = {
            let mut st = pg.state.lock();
            if !matches!(st.phase, Phase::ReplicaWaiting | Phase::ReplicaActive(_)) {
                return Err(format!("pg {pgid} is not a replica on osd.{}", self.id()));
            }
            // No RepOps until the catch-up below is done.
            st.phase = Phase::ReplicaWaiting;
            st.peering_seq
        };
        if pg.state.lock().info.last_update != primary_info.last_update {
            self.sync_from(&pg, from, &map).await?;
        }
        let mut st = pg.state.lock();
        if st.peering_seq != seq || st.acting.primary() != Some(from) {
            return Err(format!("pg {pgid} changed interval during activation"));
        }
        st.phase = Phase::ReplicaActive(epoch);
        Ok(())
    }
}
