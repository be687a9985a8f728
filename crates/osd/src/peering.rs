//! Peering: bring every member of a PG's acting set to one state before the
//! PG serves I/O in a new interval.
//!
//! The primary waits for its in-flight writes to finish, asks every member
//! for its PG info, takes the member with the newest `last_update` as
//! authoritative, pulls the PG from it if that is not itself, then activates
//! each replica (which pulls from the primary if it differs). A member that
//! fails to answer makes the attempt fail; it is retried until the interval
//! changes. Sync here is whole-PG by object version — log-based recovery and
//! backfill replace it in a later issue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_map::ClusterMap;
use cairn_store::{ObjectId, Transaction, TxOp};
use cairn_types::{OsdId, Version};
use cairn_wire::{Message, PgContents, PgInfo};

use crate::pg::{Pg, Phase, INFO_ATTR};
use crate::Osd;

/// Objects fetched per pull request.
const PULL_BATCH: usize = 16;

impl Osd {
    /// Peer `pg` for peering number `seq`, retrying until active or superseded.
    pub(crate) async fn peer_pg(self: Arc<Self>, pg: Arc<Pg>, seq: u64) {
        loop {
            // Wait for in-flight writes: their versions must be settled.
            loop {
                let notified = pg.drained.notified();
                {
                    let st = pg.state.lock();
                    if st.peering_seq != seq {
                        return;
                    }
                    if st.inflight_writes == 0 {
                        break;
                    }
                }
                notified.await;
            }
            match self.try_peer(&pg, seq).await {
                Ok(()) => return,
                Err(e) => {
                    if pg.state.lock().peering_seq != seq {
                        return;
                    }
                    tracing::info!("pg {}: peering attempt failed: {e}; retrying", pg.id);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }

    async fn try_peer(self: &Arc<Self>, pg: &Arc<Pg>, seq: u64) -> Result<(), String> {
        let map = self.map();
        let (acting, epoch, min_size) = {
            let st = pg.state.lock();
            if st.peering_seq != seq {
                return Ok(());
            }
            (st.acting.osds.clone(), st.interval_epoch, st.min_size)
        };
        if (acting.len() as u32) < min_size {
            let mut st = pg.state.lock();
            if st.peering_seq == seq {
                tracing::info!(
                    "pg {}: {} of min_size {min_size} members up; holding I/O",
                    pg.id,
                    acting.len()
                );
                st.phase = Phase::Inactive;
            }
            self.report_now.notify_one();
            return Ok(());
        }
        // Find the authoritative member.
        let mut best: (OsdId, Version) = (self.id(), pg.state.lock().info.last_update);
        for &member in acting.iter().skip(1) {
            let reply = self
                .peers
                .request(member, &map, |tid| Message::PgQuery {
                    tid,
                    pg: pg.id,
                    epoch,
                })
                .await
                .map_err(|e| e.to_string())?;
            let Message::PgQueryReply { info, .. } = reply else {
                return Err(format!("osd.{member}: unexpected reply to query"));
            };
            if info.last_update > best.1 {
                best = (member, info.last_update);
            }
        }
        if best.0 != self.id() {
            tracing::info!(
                "pg {}: osd.{} is authoritative at {}; pulling",
                pg.id,
                best.0,
                best.1
            );
            self.sync_from(pg, best.0, &map).await?;
        }
        // Activate the replicas on the connections RepOps will use.
        let info = pg.state.lock().info;
        let mut generations = HashMap::new();
        for &member in acting.iter().skip(1) {
            let conn = self
                .peers
                .get(member, &map)
                .await
                .map_err(|e| e.to_string())?;
            let reply = self
                .peers
                .request(member, &map, |tid| Message::PgActivate {
                    tid,
                    pg: pg.id,
                    epoch,
                    info,
                })
                .await
                .map_err(|e| e.to_string())?;
            match reply {
                Message::PgActivateReply { result: Ok(()), .. } => {}
                Message::PgActivateReply { result: Err(e), .. } => return Err(e),
                _ => return Err(format!("osd.{member}: unexpected reply to activate")),
            }
            generations.insert(member, conn.generation);
        }
        let waiting = {
            let mut st = pg.state.lock();
            if st.peering_seq != seq {
                return Ok(());
            }
            for (&member, &generation) in &generations {
                match self.peers.existing(member) {
                    Some(c) if c.generation == generation => {}
                    _ => return Err(format!("connection to osd.{member} reset during peering")),
                }
            }
            st.peer_generations = generations;
            st.phase = Phase::Active;
            std::mem::take(&mut st.waiting_active)
        };
        tracing::debug!("pg {}: active at epoch {epoch} with {:?}", pg.id, acting);
        self.report_now.notify_one();
        for (op, sender) in waiting {
            self.handle_client_op(op, &sender);
        }
        Ok(())
    }

    /// Make this OSD's copy of `pg` identical to `source`'s: objects (by
    /// version), log and info.
    pub(crate) async fn sync_from(
        self: &Arc<Self>,
        pg: &Arc<Pg>,
        source: OsdId,
        map: &ClusterMap,
    ) -> Result<(), String> {
        let _slot = self
            .recovery_slots
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let reply = self
            .peers
            .request(source, map, |tid| Message::PgList { tid, pg: pg.id })
            .await
            .map_err(|e| e.to_string())?;
        let remote: PgContents = match reply {
            Message::PgListReply { result, .. } => result?,
            _ => return Err(format!("osd.{source}: unexpected reply to list")),
        };
        let local = self.list_pg(pg.id)?;
        let local_versions: HashMap<&str, Version> = local
            .objects
            .iter()
            .map(|(n, v)| (n.as_str(), *v))
            .collect();
        let remote_names: HashSet<&str> = remote.objects.iter().map(|(n, _)| n.as_str()).collect();
        let to_pull: Vec<String> = remote
            .objects
            .iter()
            .filter(|(name, version)| local_versions.get(name.as_str()) != Some(version))
            .map(|(name, _)| name.clone())
            .collect();
        let to_remove: Vec<&str> = local_versions
            .keys()
            .copied()
            .filter(|n| !remote_names.contains(n))
            .collect();
        tracing::info!(
            "pg {}: syncing from osd.{source}: {} objects to copy, {} to remove",
            pg.id,
            to_pull.len(),
            to_remove.len()
        );
        let mut commits = Vec::new();
        let mut remaining: &[String] = &to_pull;
        while !remaining.is_empty() {
            let batch = &remaining[..remaining.len().min(PULL_BATCH)];
            let reply = self
                .peers
                .request(source, map, |tid| Message::PgPull {
                    tid,
                    pg: pg.id,
                    names: batch.to_vec(),
                })
                .await
                .map_err(|e| e.to_string())?;
            let copies = match reply {
                Message::PgPullReply { result, .. } => result?,
                _ => return Err(format!("osd.{source}: unexpected reply to pull")),
            };
            if copies.is_empty() {
                return Err(format!("osd.{source}: empty pull reply"));
            }
            remaining = &remaining[copies.len().min(remaining.len())..];
            let mut txn = Transaction::new();
            for copy in copies {
                let oid = ObjectId::new(pg.id, copy.name);
                txn.remove(&oid);
                let Some(data) = copy.data else { continue };
                txn.touch(&oid);
                if !data.is_empty() {
                    txn.write(&oid, 0, data);
                }
                for (key, value) in copy.attrs {
                    txn.set_attr(&oid, &key, value);
                }
                if !copy.omap.is_empty() {
                    txn.omap_set(&oid, copy.omap);
                }
            }
            commits.push(self.store.submit(txn).map_err(|e| e.to_string())?);
        }
        // Last: removals, the source's log and info, in one transaction.
        let mut txn = Transaction::new();
        for name in to_remove {
            txn.remove(&ObjectId::new(pg.id, name));
        }
        txn.log_trim(pg.id, Version::new(u32::MAX, u64::MAX));
        for (version, entry) in &remote.log {
            txn.push(TxOp::LogAppend {
                coll: pg.id,
                version: *version,
                entry: entry.clone(),
            });
        }
        let info = PgInfo {
            pg: Some(pg.id),
            ..remote.info
        };
        txn.coll_set_attr(
            pg.id,
            INFO_ATTR,
            Bytes::from(bincode::serialize(&info).unwrap_or_default()),
        );
        commits.push(self.store.submit(txn).map_err(|e| e.to_string())?);
        for commit in commits {
            commit.await.map_err(|e| e.to_string())?;
        }
        let entries: Vec<(Version, Vec<u8>)> =
            remote.log.iter().map(|(v, e)| (*v, e.to_vec())).collect();
        let objects = remote.objects.len() as u64;
        let mut st = pg.state.lock();
        st.reset_log(&entries);
        st.info = info;
        st.objects_estimate = objects;
        Ok(())
    }
}
