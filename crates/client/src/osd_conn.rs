//! One client connection to one OSD: requests are matched to replies by
//! tid; when the connection fails every waiting request learns at once.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_types::{Entity, OsdId};
use cairn_wire::{connect, Message, OsdOp, OsdOpReply, Sender, WireError};
use parking_lot::Mutex;
use tokio::sync::oneshot;

pub(crate) struct OsdConn {
    pub addr: String,
    sender: Sender,
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<OsdOpReply>>>>,
}

impl OsdConn {
    pub async fn open(osd: OsdId, addr: &str, client: u64) -> Result<Arc<Self>, WireError> {
        let hello = Message::Hello {
            entity: Entity::Client(client),
            fsid: None,
        };
        let conn = connect(addr, hello).await?;
        let this = Arc::new(Self {
            addr: addr.to_string(),
            sender: conn.sender,
            pending: Mutex::new(Some(HashMap::new())),
        });
        let reader_this = this.clone();
        let mut reader = conn.reader;
        tokio::spawn(async move {
            loop {
                match reader.read().await {
                    Ok(Message::OsdOpReply(reply)) => {
                        let waiter = reader_this
                            .pending
                            .lock()
                            .as_mut()
                            .and_then(|p| p.remove(&reply.tid));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(reply);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("connection to osd.{osd} ended: {e}");
                        break;
                    }
                }
            }
            reader_this.pending.lock().take();
        });
        Ok(this)
    }

    pub fn is_alive(&self) -> bool {
        self.pending.lock().is_some() && !self.sender.is_closed()
    }

    /// Send an op; the receiver fails if the connection dies first.
    pub fn send(&self, op: OsdOp) -> Option<oneshot::Receiver<OsdOpReply>> {
        let (tx, rx) = oneshot::channel();
        let tid = op.tid;
        self.pending.lock().as_mut()?.insert(tid, tx);
        if !self.sender.send(Message::OsdOp(op)) {
            self.forget(tid);
            return None;
        }
        Some(rx)
    }

    pub fn forget(&self, tid: u64) {
        if let Some(p) = self.pending.lock().as_mut() {
            p.remove(&tid);
        }
    }
}
