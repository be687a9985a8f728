//! A client's handle on the cluster: the monitor session and the objecter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_types::{Entity, OsdId, PoolId, ReqId};
use cairn_wire::{connect, Message, MonCommand, ObjOp, OpError, OpOutput, OsdOp, Sender};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use crate::osd_conn::OsdConn;
use crate::ClientError;

/// Client behaviour, from the `[client]` section of the configuration.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub mon_addr: String,
    /// Fail an operation not done in this time; `None` waits as a disk does.
    pub op_timeout: Option<Duration>,
}

type MonWaiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<String, String>>>>>;

pub struct Cluster {
    opts: ClientOptions,
    client_id: u64,
    next_tid: AtomicU64,
    map_rx: watch::Receiver<Arc<ClusterMap>>,
    mon_sender: Mutex<Option<Sender>>,
    mon_waiters: MonWaiters,
    osds: Mutex<HashMap<OsdId, Arc<OsdConn>>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Cluster {
    /// Connect to the monitor and wait for the first map.
    pub async fn connect(opts: ClientOptions) -> Result<Arc<Self>, ClientError> {
        let unreachable = |reason: String| ClientError::MonUnreachable {
            addr: opts.mon_addr.clone(),
            reason,
        };
        let client_id = rand::random::<u64>() | 1;
        let hello = Message::Hello {
            entity: Entity::Client(client_id),
            fsid: None,
        };
        let connecting = connect(&opts.mon_addr, hello);
        let mut conn = tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .map_err(|_| unreachable("timed out".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        conn.sender.send(Message::Subscribe { have: 0 });
        let first = loop {
            match conn
                .reader
                .read()
                .await
                .map_err(|e| unreachable(e.to_string()))?
            {
                Message::MapUpdate { map } => break map,
                _ => continue,
            }
        };
        let (map_tx, map_rx) = watch::channel(Arc::new(*first));
        let cluster = Arc::new(Self {
            opts,
            client_id,
            next_tid: AtomicU64::new(1),
            map_rx,
            mon_sender: Mutex::new(Some(conn.sender.clone())),
            mon_waiters: Arc::new(Mutex::new(HashMap::new())),
            osds: Mutex::new(HashMap::new()),
            connecting: tokio::sync::Mutex::new(()),
        });
        let waiters = cluster.mon_waiters.clone();
        let weak = Arc::downgrade(&cluster);
        tokio::spawn(async move {
            let mut reader = conn.reader;
            loop {
                match reader.read().await {
                    Ok(Message::MapUpdate { map }) => {
                        map_tx.send_if_modified(|current| {
                            let newer = map.epoch > current.epoch;
                            if newer {
                                *current = Arc::new(*map);
                            }
                            newer
                        });
                    }
                    Ok(Message::MonReply { tid, result }) => {
                        if let Some(w) = waiters.lock().remove(&tid) {
                            let _ = w.send(result);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!("monitor session ended: {e}");
                        break;
                    }
                }
            }
            waiters.lock().clear();
            if let Some(cluster) = weak.upgrade() {
                cluster.mon_sender.lock().take();
            }
        });
        Ok(cluster)
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    pub fn map(&self) -> Arc<ClusterMap> {
        self.map_rx.borrow().clone()
    }

    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// Wait until the map is at least `epoch`.
    pub async fn wait_for_epoch(&self, epoch: u32) -> Result<Arc<ClusterMap>, ClientError> {
        let mut rx = self.map_rx.clone();
        loop {
            let map = rx.borrow_and_update().clone();
            if map.epoch >= epoch {
                return Ok(map);
            }
            rx.changed().await.map_err(|_| ClientError::MonLost)?;
        }
    }

    /// Run an admin command on the monitor; the reply is JSON.
    pub async fn mon_command(&self, cmd: MonCommand) -> Result<serde_json::Value, ClientError> {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.mon_waiters.lock().insert(tid, tx);
        let sent = match &*self.mon_sender.lock() {
            Some(sender) => sender.send(Message::MonCommand { tid, cmd }),
            None => false,
        };
        if !sent {
            self.mon_waiters.lock().remove(&tid);
            return Err(ClientError::MonLost);
        }
        let reply = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .map_err(|_| ClientError::Timeout)?
            .map_err(|_| ClientError::MonLost)?;
        let text = reply.map_err(ClientError::Command)?;
        serde_json::from_str(&text).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Resolve a pool name in the current map.
    pub fn pool_id(&self, name: &str) -> Result<PoolId, ClientError> {
        self.map()
            .pool_by_name(name)
            .map(|p| p.id)
            .ok_or_else(|| ClientError::NoSuchPool(name.to_string()))
    }

    async fn osd_conn(&self, osd: OsdId, map: &ClusterMap) -> Option<Arc<OsdConn>> {
        let addr = map.osd_addr(osd)?;
        if let Some(conn) = self.osds.lock().get(&osd) {
            if conn.addr == addr && conn.is_alive() {
                return Some(conn.clone());
            }
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.osds.lock().get(&osd) {
            if conn.addr == addr && conn.is_alive() {
                return Some(conn.clone());
            }
        }
        match OsdConn::open(osd, addr, self.client_id).await {
            Ok(conn) => {
                self.osds.lock().insert(osd, conn.clone());
                Some(conn)
            }
            Err(e) => {
                tracing::debug!("cannot connect to osd.{osd} at {addr}: {e}");
                None
            }
        }
    }

    /// Run `ops` on object `oid` of pool `pool`, resending as needed until
    /// it completes (or the op timeout passes). Mutations apply exactly once.
    pub async fn op(
        &self,
        pool: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        match self.opts.op_timeout {
            None => self.op_inner(pool, oid, ops).await,
            Some(limit) => tokio::time::timeout(limit, self.op_inner(pool, oid, ops))
                .await
                .map_err(|_| ClientError::Timeout)?,
        }
    }

    async fn op_inner(
        &self,
        pool_id: PoolId,
        oid: &str,
        ops: Vec<ObjOp>,
    ) -> Result<Vec<OpOutput>, ClientError> {
        let reqid = ReqId {
            client: self.client_id,
            tid: self.next_tid.fetch_add(1, Ordering::Relaxed),
        };
        let mut map_rx = self.map_rx.clone();
        loop {
            let map = map_rx.borrow_and_update().clone();
            let pool = map
                .pool(pool_id)
                .ok_or_else(|| ClientError::NoSuchPool(format!("id {pool_id}")))?;
            let pg = map.object_pg(pool, oid);
            let acting = map.acting(pg);
            let Some(primary) = acting.primary() else {
                // No member up: hold the op until the map changes.
                map_rx.changed().await.map_err(|_| ClientError::MonLost)?;
                continue;
            };
            let Some(conn) = self.osd_conn(primary, &map).await else {
                wait_change_or(&mut map_rx, Duration::from_millis(200)).await;
                continue;
            };
            let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
            let op = OsdOp {
                tid,
                reqid,
                epoch: map.epoch,
                pg,
                oid: oid.to_string(),
                ops: ops.clone(),
            };
            let Some(mut rx) = conn.send(op) else {
                wait_change_or(&mut map_rx, Duration::from_millis(100)).await;
                continue;
            };
            loop {
                tokio::select! {
                    reply = &mut rx => {
                        match reply.map(|r| r.result) {
                            Ok(Ok(outputs)) => return Ok(outputs),
                            Ok(Err(OpError::WrongPrimary { epoch } | OpError::Retry { epoch })) => {
                                if epoch > map.epoch {
                                    let _ = tokio::time::timeout(
                                        Duration::from_secs(5),
                                        self.wait_for_epoch(epoch),
                                    ).await;
                                } else {
                                    wait_change_or(&mut map_rx, Duration::from_millis(50)).await;
                                }
                            }
                            Ok(Err(e)) => return Err(ClientError::Op(e)),
                            Err(_) => {
                                // Connection lost: the OSD died or restarted.
                                wait_change_or(&mut map_rx, Duration::from_millis(100)).await;
                            }
                        }
                        break;
                    }
                    changed = map_rx.changed() => {
                        if changed.is_err() {
                            return Err(ClientError::MonLost);
                        }
                        let new_map = map_rx.borrow().clone();
                        let moved = new_map.pool(pool_id).map(|_| new_map.acting(pg)) != Some(acting.clone());
                        if moved {
                            conn.forget(tid);
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Wait for a map change or `limit`, whichever is first.
async fn wait_change_or(rx: &mut watch::Receiver<Arc<ClusterMap>>, limit: Duration) {
    let _ = tokio::time::timeout(limit, rx.changed()).await;
}
