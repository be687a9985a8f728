//! The client's monitor session: the map subscription and admin commands.
//!
//! Owns the connection to the monitor and the sending half of the map watch
//! the objecter reads. A lost session (monitor killed, restarted, network
//! cut) is re-established in the background with backoff, resubscribing
//! from the epoch the client has; meanwhile the objecter keeps routing with
//! the map it has, as a Ceph client does. The session ends only when the
//! [`Cluster`](crate::Cluster) that owns it is dropped.
//!
//! It must never block I/O: nothing on the op path waits for the monitor
//! unless the map itself says an op cannot proceed.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_types::Entity;
use cairn_wire::{connect, Connection, Message, MonCommand, Sender, WireError};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use crate::ClientError;

/// How long to wait for the monitor to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnect backoff: first delay and cap.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

type Waiters = Mutex<HashMap<u64, oneshot::Sender<Result<String, String>>>>;

/// What the session shares with its owner.
pub(crate) struct MonSession {
    addr: String,
    client_id: u64,
    /// The connection's sender while a session is up.
    sender: watch::Sender<Option<Sender>>,
    /// Admin commands waiting for their reply, by transaction id.
    waiters: Waiters,
}

impl MonSession {
    /// Connect, subscribe and wait for the first map. Fails if the monitor
    /// cannot be reached now: a client that has never seen a map has
    /// nothing to route with.
    /// Connect and wait for the first map, both within `limit`.
    pub async fn open(
        addr: &str,
        client_id: u64,
        limit: Duration,
    ) -> Result<(Arc<Self>, Connection, ClusterMap), ClientError> {
        let unreachable = |reason: String| ClientError::MonUnreachable {
            addr: addr.to_string(),
            reason,
        };
        let dial_limit = CONNECT_TIMEOUT.min(limit);
        let mut conn = tokio::time::timeout(dial_limit, dial(addr, client_id, 0))
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no connection within {:.1} s",
                    dial_limit.as_secs_f64()
                ))
            })?
            .map_err(|e| unreachable(e.to_string()))?;
        let first_map = async {
            loop {
                match conn.reader.read().await {
                    Ok(Message::MapUpdate { map }) => break Ok(*map),
                    Ok(_) => continue,
                    Err(e) => break Err(unreachable(e.to_string())),
                }
            }
        };
        let first = tokio::time::timeout(limit, first_map).await.map_err(|_| {
            unreachable(format!(
                "it accepted the connection but sent no map within {:.1} s (stopped or overloaded?)",
                limit.as_secs_f64()
            ))
        })??;
        let (sender, _) = watch::channel(Some(conn.sender.clone()));
        let session = Arc::new(Self {
            addr: addr.to_string(),
            client_id,
            sender,
            waiters: Mutex::new(HashMap::new()),
        });
        Ok((session, conn, first))
    }

    /// Run sessions until `owner` is dropped: serve `conn` (from [`open`]),
    /// then reconnect whenever the session is lost. Holds `map_tx`, so the
    /// map watch stays open as long as the owner lives.
    ///
    /// [`open`]: MonSession::open
    pub async fn run<T: Send + Sync + 'static>(
        self: Arc<Self>,
        owner: Weak<T>,
        conn: Connection,
        map_tx: watch::Sender<Arc<ClusterMap>>,
    ) {
        let mut conn = Some(conn);
        let mut delay = BACKOFF_MIN;
        loop {
            if let Some(conn) = conn.take() {
                let reason = self.serve(conn, &map_tx).await;
                self.sender.send_replace(None);
                // Replies to commands sent on the lost session will never come.
                self.waiters.lock().clear();
                tracing::warn!("monitor session at {} lost: {reason}", self.addr);
                delay = BACKOFF_MIN;
            }
            if owner.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(delay).await;
            if owner.strong_count() == 0 {
                return;
            }
            let have = map_tx.borrow().epoch;
            match tokio::time::timeout(CONNECT_TIMEOUT, dial(&self.addr, self.client_id, have))
                .await
            {
                Ok(Ok(new)) => {
                    tracing::info!("monitor session at {} re-established", self.addr);
                    self.sender.send_replace(Some(new.sender.clone()));
                    conn = Some(new);
                }
                Ok(Err(e)) => tracing::debug!("monitor at {} unreachable: {e}", self.addr),
                Err(_) => tracing::debug!("monitor at {} unreachable: timed out", self.addr),
            }
            delay = (delay * 2).min(BACKOFF_MAX);
        }
    }

    /// Read one session until it fails, publishing newer maps.
    async fn serve(&self, conn: Connection, map_tx: &watch::Sender<Arc<ClusterMap>>) -> WireError {
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
                    if let Some(waiter) = self.waiters.lock().remove(&tid) {
                        let _ = waiter.send(result);
                    }
                }
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    /// Send an admin command and wait for its reply, waiting up to `limit`
    /// in all (including for a lost session to come back). A command whose
    /// session is lost before the reply fails with `MonLost`: it is not
    /// resent, since the monitor may have applied it.
    pub async fn command(
        &self,
        tid: u64,
        cmd: MonCommand,
        limit: Duration,
    ) -> Result<String, ClientError> {
        let run = async {
            let mut sessions = self.sender.subscribe();
            let sender = sessions
                .wait_for(Option::is_some)
                .await
                .map_err(|_| ClientError::MonLost)?
                .clone();
            let (tx, rx) = oneshot::channel();
            self.waiters.lock().insert(tid, tx);
            let sent = sender.is_some_and(|s| s.send(Message::MonCommand { tid, cmd }));
            if !sent {
                self.waiters.lock().remove(&tid);
                return Err(ClientError::MonLost);
            }
            rx.await.map_err(|_| ClientError::MonLost)
        };
        let reply = tokio::time::timeout(limit, run).await;
        self.waiters.lock().remove(&tid);
        reply
            .map_err(|_| {
                ClientError::Timeout(format!(
                    "the monitor at {} did not answer the command within {:.1} s",
                    self.addr,
                    limit.as_secs_f64()
                ))
            })??
            .map_err(ClientError::Command)
    }
}

/// Open a connection to the monitor and subscribe to maps newer than `have`.
async fn dial(addr: &str, client_id: u64, have: u32) -> Result<Connection, WireError> {
    let hello = Message::Hello {
        entity: Entity::Client(client_id),
        fsid: None,
    };
    let conn = connect(addr, hello).await?;
    if !conn.sender.send(Message::Subscribe { have }) {
        return Err(WireError::Closed);
    }
    Ok(conn)
}
