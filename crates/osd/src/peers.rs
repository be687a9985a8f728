//! Connections from this OSD to its peers, for requests it starts (RepOps,
//! peering queries). Replies come back on the same connection and are matched
//! by tid. When a connection fails, every request waiting on it fails at once,
//! and the connection's generation number changes, so a PG can tell that its
//! replication stream was broken (and must re-peer) rather than silently
//! continuing on a new connection that missed messages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_types::{Entity, OsdId};
use cairn_wire::{connect, Message, Sender, WireError};
use parking_lot::Mutex;
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error, Clone)]
pub enum PeerError {
    #[error("osd.{0} has no address in the map")]
    NoAddress(OsdId),
    #[error("osd.{0}: connection failed: {1}")]
    Connect(OsdId, String),
    #[error("osd.{0}: connection lost")]
    Lost(OsdId),
    #[error("osd.{0}: no reply in time")]
    Timeout(OsdId),
    #[error("osd.{0}: replication stream was reset")]
    Reset(OsdId),
}

pub struct PeerConn {
    pub generation: u64,
    sender: Sender,
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Message>>>>,
}

impl PeerConn {
    fn register(&self, tid: u64) -> Option<oneshot::Receiver<Message>> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().as_mut()?.insert(tid, tx);
        Some(rx)
    }
}

pub struct Peers {
    me: OsdId,
    conns: Arc<Mutex<HashMap<OsdId, Arc<PeerConn>>>>,
    next_tid: AtomicU64,
    next_generation: AtomicU64,
}

/// How long a peering request may take before the peer counts as failed.
pub const PEER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Peers {
    pub fn new(me: OsdId) -> Self {
        Self {
            me,
            conns: Arc::new(Mutex::new(HashMap::new())),
            next_tid: AtomicU64::new(1),
            next_generation: AtomicU64::new(1),
        }
    }

    pub fn next_tid(&self) -> u64 {
        self.next_tid.fetch_add(1, Ordering::Relaxed)
    }

    /// The existing connection to `osd`, if any (no connect: used on the
    /// write path, where a missing connection means the stream broke).
    pub fn existing(&self, osd: OsdId) -> Option<Arc<PeerConn>> {
        self.conns.lock().get(&osd).cloned()
    }

    /// The connection to `osd`, connecting if needed.
    pub async fn get(&self, osd: OsdId, map: &ClusterMap) -> Result<Arc<PeerConn>, PeerError> {
        if let Some(conn) = self.existing(osd) {
            return Ok(conn);
        }
        let addr = map
            .osd_addr(osd)
            .ok_or(PeerError::NoAddress(osd))?
            .to_string();
        let hello = Message::Hello {
            entity: Entity::Osd(self.me),
            fsid: Some(map.fsid.clone()),
        };
        let conn = connect(&addr, hello)
            .await
            .map_err(|e| PeerError::Connect(osd, e.to_string()))?;
        let peer = Arc::new(PeerConn {
            generation: self.next_generation.fetch_add(1, Ordering::Relaxed),
            sender: conn.sender,
            pending: Mutex::new(Some(HashMap::new())),
        });
        {
            let mut conns = self.conns.lock();
            if let Some(existing) = conns.get(&osd) {
                return Ok(existing.clone()); // lost a race; the other one wins
            }
            conns.insert(osd, peer.clone());
        }
        let reader_peer = peer.clone();
        let mut reader = conn.reader;
        let me = self.me;
        let registry = self.conns.clone();
        tokio::spawn(async move {
            loop {
                match reader.read().await {
                    Ok(msg) => {
                        let Some(tid) = reply_tid(&msg) else {
                            tracing::warn!("osd.{me}: unexpected message from osd.{osd}");
                            break;
                        };
                        let waiter = reader_peer
                            .pending
                            .lock()
                            .as_mut()
                            .and_then(|p| p.remove(&tid));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(msg);
                        }
                    }
                    Err(WireError::Closed) => break,
                    Err(e) => {
                        tracing::warn!("osd.{me}: bad message from osd.{osd}: {e}");
                        break;
                    }
                }
            }
            // Fail everything waiting, and forget this connection.
            reader_peer.pending.lock().take();
            let mut conns = registry.lock();
            if conns
                .get(&osd)
                .is_some_and(|c| c.generation == reader_peer.generation)
            {
                conns.remove(&osd);
            }
        });
        Ok(peer)
    }

    /// Send a request on an existing connection of a known generation.
    pub fn send_on(
        &self,
        osd: OsdId,
        generation: u64,
        tid: u64,
        msg: Message,
    ) -> Result<oneshot::Receiver<Message>, PeerError> {
        let conn = self.existing(osd).ok_or(PeerError::Reset(osd))?;
        if conn.generation != generation {
            return Err(PeerError::Reset(osd));
        }
        let rx = conn.register(tid).ok_or(PeerError::Lost(osd))?;
        if !conn.sender.send(msg) {
            return Err(PeerError::Lost(osd));
        }
        Ok(rx)
    }

    /// Send a request (connecting if needed) and wait for its reply.
    pub async fn request(
        &self,
        osd: OsdId,
        map: &ClusterMap,
        make: impl FnOnce(u64) -> Message,
    ) -> Result<Message, PeerError> {
        let conn = self.get(osd, map).await?;
        let tid = self.next_tid();
        let rx = conn.register(tid).ok_or(PeerError::Lost(osd))?;
        if !conn.sender.send(make(tid)) {
            return Err(PeerError::Lost(osd));
        }
        match tokio::time::timeout(PEER_REQUEST_TIMEOUT, rx).await {
            Ok(Ok(msg)) => Ok(msg),
            Ok(Err(_)) => Err(PeerError::Lost(osd)),
            Err(_) => Err(PeerError::Timeout(osd)),
        }
    }

    /// Drop connections to OSDs the map shows down, so the next use reconnects.
    pub fn forget_down(&self, map: &ClusterMap) {
        let mut conns = self.conns.lock();
        conns.retain(|osd, conn| {
            let keep = map.is_up(*osd);
            if !keep {
                conn.pending.lock().take();
            }
            keep
        });
    }
}

fn reply_tid(msg: &Message) -> Option<u64> {
    match msg {
        Message::RepOpReply { tid, .. }
        | Message::PgQueryReply { tid, .. }
        | Message::PgListReply { tid, .. }
        | Message::PgPullReply { tid, .. }
        | Message::PgActivateReply { tid, .. } => Some(*tid),
        _ => None,
    }
}
