//! Connections this OSD opens to its peers' cluster addresses, one per
//! peer, for the PG messages it sends them (peers answer on the
//! connections they open, except a catch-up before this OSD boots, which
//! they answer on this one).
//!
//! A message to a peer with no connection yet starts one and waits for it
//! (bounded); messages go out in the order they were sent. When a
//! connection fails — to connect, to write, or closed by the peer — it is
//! forgotten and the core is told the peer was reset, so no PG assumes a
//! stream of messages arrived whole when it did not.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use cairn_map::ClusterMap;
use cairn_types::{Entity, OsdId};
use cairn_wire::{connect, Message, PgMessage, Sender, WireError};
use parking_lot::Mutex;

use super::Osd;

/// Messages held per peer while its connection is being made; beyond it
/// the connection attempt counts as failed.
pub const MAX_PENDING_PER_PEER: usize = 65536;

enum Link {
    Connecting {
        addr: String,
        pending: Vec<Message>,
    },
    Up {
        addr: String,
        sender: Sender,
        generation: u64,
    },
}

pub(crate) struct Peers {
    me: OsdId,
    osd: Weak<Osd>,
    links: Mutex<HashMap<OsdId, Link>>,
    next_generation: Mutex<u64>,
}

impl Peers {
    pub fn new(me: OsdId, osd: Weak<Osd>) -> Self {
        Peers {
            me,
            osd,
            links: Mutex::new(HashMap::new()),
            next_generation: Mutex::new(1),
        }
    }

    /// Send `msg` to peer `to` (connecting first if needed).
    pub fn send(&self, to: OsdId, msg: PgMessage) {
        self.send_message(to, Message::Pg(msg));
    }

    /// Ping peer `to` on the same connection (its pong comes back on it).
    pub fn ping(&self, to: OsdId, nonce: u64) {
        self.send_message(to, Message::Ping { nonce });
    }

    /// Drop the connection to `to` (it stopped answering): the core is
    /// told, and the next message connects afresh.
    pub fn drop_link(&self, to: OsdId) {
        let Some(osd) = self.osd.upgrade() else {
            return;
        };
        if self.links.lock().remove(&to).is_some() {
            self.reset(&osd, to);
        }
    }

    fn send_message(&self, to: OsdId, msg: Message) {
        let Some(osd) = self.osd.upgrade() else {
            return;
        };
        let mut links = self.links.lock();
        match links.get_mut(&to) {
            Some(Link::Up { sender, .. }) => {
                if !sender.send(msg) {
                    links.remove(&to);
                    drop(links);
                    self.reset(&osd, to);
                }
            }
            Some(Link::Connecting { pending, .. }) => {
                if pending.len() >= MAX_PENDING_PER_PEER {
                    tracing::warn!("osd.{}: too many messages queued for osd.{to}", self.me);
                    links.remove(&to);
                    drop(links);
                    self.reset(&osd, to);
                } else {
                    pending.push(msg);
                }
            }
            None => {
                let map = osd.map.read().clone();
                let Some(addr) = map.osd_cluster_addr(to).map(str::to_string) else {
                    drop(links);
                    return self.reset(&osd, to);
                };
                links.insert(
                    to,
                    Link::Connecting {
                        addr: addr.clone(),
                        pending: vec![msg],
                    },
                );
                drop(links);
                let fsid = map.fsid.clone();
                tokio::spawn(connect_to(osd, to, addr, fsid));
            }
        }
    }

    /// Forget links to peers the map shows down or at a new cluster address.
    pub fn forget_stale(&self, map: &ClusterMap) {
        self.links.lock().retain(|osd, link| {
            let addr = match link {
                Link::Connecting { addr, .. } | Link::Up { addr, .. } => addr,
            };
            map.osd_cluster_addr(*osd) == Some(addr.as_str())
        });
    }

    fn reset(&self, osd: &Arc<Osd>, peer: OsdId) {
        let osd = osd.clone();
        // Outside any lock the caller may hold.
        tokio::spawn(async move {
            osd.with_core(|core, io| core.peer_reset(peer, io));
        });
    }

    fn next_generation(&self) -> u64 {
        let mut g = self.next_generation.lock();
        *g += 1;
        *g
    }
}

async fn connect_to(osd: Arc<Osd>, to: OsdId, addr: String, fsid: String) {
    let hello = Message::Hello {
        entity: Entity::Osd(osd.id()),
        fsid: Some(fsid),
    };
    let conn = match connect(&addr, hello).await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::debug!(
                "osd.{}: cannot connect to osd.{to} at {addr}: {e}",
                osd.id()
            );
            let mut links = osd.peers.links.lock();
            if matches!(links.get(&to), Some(Link::Connecting { addr: a, .. }) if *a == addr) {
                links.remove(&to);
            }
            drop(links);
            osd.with_core(|core, io| core.peer_reset(to, io));
            return;
        }
    };
    let generation = osd.peers.next_generation();
    {
        let mut links = osd.peers.links.lock();
        let pending = match links.remove(&to) {
            Some(Link::Connecting { addr: a, pending }) if a == addr => pending,
            other => {
                // Superseded while connecting (forgotten or replaced).
                if let Some(link) = other {
                    links.insert(to, link);
                }
                return;
            }
        };
        for msg in pending {
            conn.sender.send(msg);
        }
        links.insert(
            to,
            Link::Up {
                addr,
                sender: conn.sender.clone(),
                generation,
            },
        );
    }
    // Peers send nothing on this connection but pongs and answers to a
    // catch-up before boot (see `OsdIo::answer`); reading finds its end.
    let mut reader = conn.reader;
    let reason = loop {
        match reader.read().await {
            Ok(Message::Pong { .. }) => osd.heartbeats.pong(to, std::time::Instant::now()),
            Ok(Message::Pg(msg)) => osd.with_core(|core, io| core.peer_message(to, msg, io)),
            Ok(_) => continue,
            Err(WireError::Closed) => break "closed".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    tracing::debug!("osd.{}: connection to osd.{to} ended: {reason}", osd.id());
    let mut links = osd.peers.links.lock();
    if matches!(links.get(&to), Some(Link::Up { generation: g, .. }) if *g == generation) {
        links.remove(&to);
    }
    drop(links);
    osd.with_core(|core, io| core.peer_reset(to, io));
}
