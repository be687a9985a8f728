//! The OSD daemon: serves the objects of the placement groups it holds.
//!
//! The path of a client write through this crate:
//! [`Osd::serve`] accepts the client's connection → [`primary`] checks the
//! map epoch and that this OSD is the PG's primary, assigns the next PG
//! version, builds one store transaction (data + object version + PG log
//! entry + PG info), submits it locally and sends it as a `RepOp` to every
//! other acting member ([`replica`] applies it the same way) → the reply goes
//! to the client once the local commit and every replica's commit are in.
//!
//! [`peering`] runs whenever a PG's acting set changes: it finds the member
//! with the newest version, brings every member to exactly that state by a
//! whole-PG sync (by object version), and only then lets I/O in. [`mon_client`]
//! keeps the map current and reports PG states. What this crate must never do:
//! acknowledge a write before every acting member has committed it, or serve
//! from a member that has not caught up.

mod mon_client;
mod peering;
mod peers;
mod pg;
mod primary;
mod replica;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_store::ObjectStore;
use cairn_types::{Entity, Epoch, OsdId, PgId};
use cairn_wire::{Connection, Message, OsdOp, Sender, WireError};
use parking_lot::{Mutex, RwLock};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::peers::Peers;
use crate::pg::Pg;

/// OSD behaviour, from the `[osd]` section of the configuration.
#[derive(Clone, Debug)]
pub struct OsdOptions {
    pub id: OsdId,
    pub mon_addr: String,
    pub heartbeat_interval: Duration,
    pub pg_log_max_entries: usize,
    /// File holding the cluster fsid this OSD belongs to (written at first boot).
    pub fsid_file: Option<std::path::PathBuf>,
    /// Sent with every boot: CRUSH location, device class and size.
    pub crush: cairn_map::crush::DeviceReport,
}

#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("store: {0}")]
    Store(#[from] cairn_store::StoreError),
}

/// One OSD daemon.
pub struct Osd {
    pub(crate) opts: OsdOptions,
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) addr: SocketAddr,
    map: RwLock<Arc<ClusterMap>>,
    pub(crate) pgs: RwLock<HashMap<PgId, Arc<Pg>>>,
    pub(crate) peers: Peers,
    /// Client ops that carry a newer epoch than ours, waiting for that map.
    waiting_for_map: Mutex<Vec<(OsdOp, Sender)>>,
    /// Wakes the heartbeat loop early (a PG changed state).
    pub(crate) report_now: Notify,
    /// Bounds the PG syncs this OSD pulls at once, so recovery's memory and
    /// bandwidth stay bounded however many PGs need it.
    pub(crate) recovery_slots: tokio::sync::Semaphore,
}

/// PG syncs an OSD pulls concurrently.
pub const RECOVERY_MAX_ACTIVE: usize = 2;

impl Osd {
    /// Bind the OSD's address; the OSD is not yet serving.
    pub async fn bind(
        opts: OsdOptions,
        store: Arc<dyn ObjectStore>,
        bind_addr: &str,
    ) -> Result<(Arc<Self>, TcpListener), OsdError> {
        let listener = TcpListener::bind(bind_addr)
            .await
            .map_err(|source| OsdError::Listen {
                addr: bind_addr.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| OsdError::Listen {
            addr: bind_addr.to_string(),
            source,
        })?;
        let osd = Arc::new(Self {
            peers: Peers::new(opts.id),
            opts,
            store,
            addr,
            map: RwLock::new(Arc::new(ClusterMap::new(String::new()))),
            pgs: RwLock::new(HashMap::new()),
            waiting_for_map: Mutex::new(Vec::new()),
            report_now: Notify::new(),
            recovery_slots: tokio::sync::Semaphore::new(RECOVERY_MAX_ACTIVE),
        });
        Ok((osd, listener))
    }

    pub fn id(&self) -> OsdId {
        self.opts.id
    }

    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().clone()
    }

    /// Run the OSD: monitor session, heartbeats and the accept loop. Returns
    /// only if the listener fails.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let mon = self.clone();
        tokio::spawn(async move { mon.mon_session_loop().await });
        loop {
            let (stream, peer) = listener.accept().await?;
            let osd = self.clone();
            tokio::spawn(async move {
                match Connection::from_stream(stream) {
                    Ok(conn) => osd.serve_connection(conn).await,
                    Err(e) => tracing::debug!("accept from {peer}: {e}"),
                }
            });
        }
    }

    async fn serve_connection(self: Arc<Self>, mut conn: Connection) {
        let peer = conn.peer;
        let entity = match conn.reader.read().await {
            Ok(Message::Hello { entity, .. }) => entity,
            Ok(_) | Err(_) => {
                tracing::warn!("{peer}: connection did not start with hello; closing");
                return;
            }
        };
        loop {
            let msg = match conn.reader.read().await {
                Ok(msg) => msg,
                Err(WireError::Closed) => return,
                Err(e) => {
                    tracing::warn!("{entity} at {peer}: malformed message ({e}); closing");
                    return;
                }
            };
            match msg {
                Message::OsdOp(op) => self.handle_client_op(op, &conn.sender),
                Message::Ping { nonce } => {
                    conn.sender.send(Message::Pong { nonce });
                }
                Message::OsdAdmin { tid, cmd } => {
                    let result = match cmd {
                        cairn_wire::OsdAdminCommand::Perf => Ok(self.store.perf_dump()),
                    };
                    conn.sender.send(Message::OsdAdminReply { tid, result });
                }
                other => {
                    if let Entity::Osd(from) = entity {
                        self.handle_peer_request(from, other, &conn.sender);
                    } else {
                        tracing::warn!("{entity} at {peer}: unexpected message; closing");
                        return;
                    }
                }
            }
        }
    }

    /// Take a new map: PGs whose acting set changed start a new interval.
    pub(crate) fn handle_map(self: &Arc<Self>, map: ClusterMap) {
        let map = Arc::new(map);
        {
            let mut current = self.map.write();
            if map.epoch <= current.epoch {
                return;
            }
            *current = map.clone();
        }
        self.remove_deleted_pools(&map);
        tracing::debug!("osd.{} has map epoch {}", self.id(), map.epoch);
        self.peers.forget_down(&map);
        self.update_pgs(&map);
        let ready: Vec<(OsdOp, Sender)> = {
            let mut waiting = self.waiting_for_map.lock();
            let (ready, still): (Vec<_>, Vec<_>) =
                waiting.drain(..).partition(|(op, _)| op.epoch <= map.epoch);
            *waiting = still;
            ready
        };
        for (op, sender) in ready {
            self.handle_client_op(op, &sender);
        }
    }

    fn update_pgs(self: &Arc<Self>, map: &Arc<ClusterMap>) {
        let me = self.id();
        let mut pgs = self.pgs.write();
        pgs.retain(|pgid, pg| {
            let keep = map.pool(pgid.pool).is_some() && map.acting(*pgid).contains(me);
            if !keep {
                pg.retire(map.epoch);
            }
            keep
        });
        for pgid in map.all_pgs() {
            let acting = map.acting(pgid);
            if !acting.contains(me) {
                continue;
            }
            let pg = pgs
                .entry(pgid)
                .or_insert_with(|| Pg::load(self, pgid))
                .clone();
            if let Some(seq) = pg.new_interval(map, acting, me) {
                let osd = self.clone();
                tokio::spawn(async move { osd.peer_pg(pg, seq).await });
            }
        }
    }

    /// Delete the collections of pools the map no longer has (`pool rm`).
    fn remove_deleted_pools(&self, map: &ClusterMap) {
        let Ok(colls) = self.store.list_collections() else {
            return;
        };
        let mut txn = cairn_store::Transaction::new();
        for coll in colls.into_iter().filter(|c| map.pool(c.pool).is_none()) {
            txn.remove_collection(coll);
        }
        if txn.is_empty() {
            return;
        }
        tracing::info!(
            "osd.{}: removing {} PGs of deleted pools",
            self.id(),
            txn.ops.len()
        );
        match self.store.submit(txn) {
            Ok(commit) => {
                tokio::spawn(async move {
                    if let Err(e) = commit.await {
                        tracing::error!("removing deleted pools failed: {e}");
                    }
                });
            }
            Err(e) => tracing::error!("removing deleted pools failed: {e}"),
        }
    }

    pub(crate) fn pg(&self, pgid: PgId) -> Option<Arc<Pg>> {
        self.pgs.read().get(&pgid).cloned()
    }

    /// Hold `op` until a map of its epoch arrives. Returns the op back if
    /// that map arrived meanwhile (checked under the queue's lock, which
    /// [`Osd::handle_map`] takes after installing a map, so nothing is stranded).
    pub(crate) fn queue_for_map(&self, op: OsdOp, sender: &Sender) -> Option<OsdOp> {
        let mut waiting = self.waiting_for_map.lock();
        if self.map.read().epoch >= op.epoch {
            return Some(op);
        }
        waiting.push((op, sender.clone()));
        None
    }

    pub(crate) fn epoch(&self) -> Epoch {
        self.map.read().epoch
    }
}
