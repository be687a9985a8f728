//! Back-pressure on clients: how many client ops, and how many of their
//! bytes, the OSD holds read but not yet answered.
//!
//! A connection with `client_message_cap` ops in flight, or any connection
//! while the OSD holds `client_ops_max` client ops or
//! `client_message_size_cap` bytes of them, is not read until an answer
//! frees room. Two connections may both read one more op for the last
//! slot; the OSD-wide count is taken atomically at admission, so the
//! second waits in its reader, not in the core. A client that sends
//! faster than the OSD commits fills its socket and waits in TCP, and its
//! requests are never refused, dropped or reordered for it (Ceph's
//! `osd_client_message_cap` and `osd_client_message_size_cap`). Every op
//! the core takes is answered exactly once (an interval change answers the
//! ops it drops with `Retry` or `WrongPrimary`), so every op's room comes
//! back; a connection that closes gives back all of its own.
//!
//! Must never: count an op twice, or keep room for a closed connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cairn_wire::{ObjOp, OsdOp, Sender};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// The bounds, from the `[osd]` section.
#[derive(Clone, Copy, Debug)]
pub struct ClientLimits {
    /// Ops one connection may have in flight (at least 1).
    pub ops_per_connection: usize,
    /// Bytes of client ops in flight over every connection.
    pub bytes: u64,
    /// Client ops in flight over every connection (at least 1).
    pub ops: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            ops_per_connection: 256,
            bytes: 512 << 20,
            ops: 1024,
        }
    }
}

/// One client connection: where its answers go, and its ops in flight by
/// tid with the bytes each holds.
struct Conn {
    sender: Sender,
    in_flight: HashMap<u64, u64>,
}

/// Every client connection of one OSD and what they hold.
pub(crate) struct Clients {
    limits: ClientLimits,
    conns: Mutex<HashMap<u64, Conn>>,
    bytes: AtomicU64,
    /// Ops in flight over every connection.
    ops: AtomicUsize,
    /// The most ops in flight over every connection at once.
    peak_total: AtomicU64,
    /// Woken when room is given back while a connection waits for it.
    freed: Notify,
    /// Connections waiting for room: answers wake `freed` only then, so
    /// the common case takes no lock for it.
    waiting: AtomicUsize,
    /// Times a connection was not read for want of room.
    waits: AtomicU64,
    /// The most ops one connection ever had in flight.
    peak_ops: AtomicU64,
}

/// Bytes an op holds while in flight: its data and a nominal header.
fn op_bytes(op: &OsdOp) -> u64 {
    let data: usize = op
        .ops
        .iter()
        .map(|o| match o {
            ObjOp::Write { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    (data + op.oid.len() + 64) as u64
}

impl Clients {
    pub(crate) fn new(limits: ClientLimits) -> Self {
        Self {
            limits: ClientLimits {
                ops_per_connection: limits.ops_per_connection.max(1),
                ops: limits.ops.max(1),
                ..limits
            },
            conns: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
            ops: AtomicUsize::new(0),
            peak_total: AtomicU64::new(0),
            freed: Notify::new(),
            waiting: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            peak_ops: AtomicU64::new(0),
        }
    }

    pub(crate) fn open(&self, client: u64, sender: Sender) {
        let conn = Conn {
            sender,
            in_flight: HashMap::new(),
        };
        self.conns.lock().insert(client, conn);
    }

    /// The connection is gone: its ops give their room back (their
    /// answers, if any come, go nowhere).
    pub(crate) fn close(&self, client: u64) {
        if let Some(conn) = self.conns.lock().remove(&client) {
            let held: u64 = conn.in_flight.values().sum();
            self.bytes.fetch_sub(held, Ordering::SeqCst);
            self.ops.fetch_sub(conn.in_flight.len(), Ordering::SeqCst);
            self.wake_waiters();
        }
    }

    /// Room was given back: wake the connections waiting for it.
    fn wake_waiters(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_waiters();
        }
    }

    /// Wait until `client` may send another op: a soft check before its
    /// connection is read, so that a client over the bounds waits in TCP.
    /// Two connections may both pass it for the last slot; [`Self::admit`]
    /// is where the OSD-wide op count is taken, atomically.
    pub(crate) async fn room_for(&self, client: u64) {
        self.wait_for(client, || self.has_room(client)).await;
    }

    /// Wait until `ready` holds, woken whenever room is given back.
    async fn wait_for(&self, client: u64, mut ready: impl FnMut() -> bool) {
        if ready() {
            return;
        }
        // Counted before the check below, so that room given back after
        // it sees a waiter and wakes `freed`, which is enabled by then.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut counted = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if ready() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            if !counted {
                counted = true;
                self.waits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "client connection {client}: no room ({} client ops, {} bytes at the OSD); \
                     waiting until an op is answered",
                    self.ops.load(Ordering::Relaxed),
                    self.bytes.load(Ordering::Relaxed)
                );
            }
            freed.await;
        }
    }

    /// May `client` send another op now?
    fn has_room(&self, client: u64) -> bool {
        let ops = self
            .conns
            .lock()
            .get(&client)
            .map_or(0, |c| c.in_flight.len());
        ops < self.limits.ops_per_connection
            && self.ops.load(Ordering::SeqCst) < self.limits.ops
            && self.bytes.load(Ordering::SeqCst) < self.limits.bytes
    }

    /// `op` was read from `client`'s connection: wait until the OSD holds
    /// fewer than `client_ops_max` client ops, then count it as in flight
    /// (it goes to the core next). The count is taken under the connection
    /// table's lock, so two connections never both take the last slot.
    pub(crate) async fn admit(&self, client: u64, op: &OsdOp) {
        let bytes = op_bytes(op);
        let mut taken = false;
        self.wait_for(client, || {
            taken = self.try_admit(client, op.tid, bytes);
            taken
        })
        .await;
        debug_assert!(taken);
    }

    /// Count `tid` as in flight if there is room (or it already is: a tid
    /// sent again while in flight holds room once). False: no room yet.
    fn try_admit(&self, client: u64, tid: u64, bytes: u64) -> bool {
        let mut conns = self.conns.lock();
        let Some(conn) = conns.get_mut(&client) else {
            // Closed: nothing is held for it.
            return true;
        };
        match conn.in_flight.get_mut(&tid) {
            Some(old) => {
                self.bytes.fetch_sub(*old, Ordering::SeqCst);
                *old = bytes;
            }
            None => {
                if self.ops.load(Ordering::SeqCst) >= self.limits.ops {
                    return false;
                }
                conn.in_flight.insert(tid, bytes);
                let total = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(
                    total <= self.limits.ops,
                    "{total} client ops in flight over a cap of {}",
                    self.limits.ops
                );
                self.peak_total.fetch_max(total as u64, Ordering::Relaxed);
            }
        }
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
        let ops = conn.in_flight.len() as u64;
        self.peak_ops.fetch_max(ops, Ordering::Relaxed);
        true
    }

    /// Send an answer to `client`; if it answers an op in flight, that
    /// op's room comes back.
    pub(crate) fn answer(&self, client: u64, tid: u64, msg: cairn_wire::Message) {
        let mut conns = self.conns.lock();
        let Some(conn) = conns.get_mut(&client) else {
            return;
        };
        conn.sender.send(msg);
        if let Some(bytes) = conn.in_flight.remove(&tid) {
            drop(conns);
            self.bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.ops.fetch_sub(1, Ordering::SeqCst);
            self.wake_waiters();
        }
    }

    /// Counters for `cairn osd perf`.
    pub(crate) fn counters(&self) -> [(&'static str, u64); 5] {
        [
            (
                "client_ops_in_flight",
                self.ops.load(Ordering::Relaxed) as u64,
            ),
            ("client_ops_peak", self.peak_total.load(Ordering::Relaxed)),
            ("client_bytes_in_flight", self.bytes.load(Ordering::Relaxed)),
            ("client_throttle_waits", self.waits.load(Ordering::Relaxed)),
            (
                "client_ops_peak_per_connection",
                self.peak_ops.load(Ordering::Relaxed),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use cairn_types::{PgId, ReqId};
    use cairn_wire::{Message, OsdOp, Sender};

    use super::{ClientLimits, Clients};

    fn op(tid: u64) -> OsdOp {
        OsdOp {
            tid,
            reqid: ReqId { client: 1, tid },
            epoch: 1,
            pg: PgId::new(1, 0),
            oid: "obj".into(),
            ops: Vec::new(),
            ignore_overlay: false,
        }
    }

    /// Two connections that both passed the soft check for the OSD's last
    /// slot: one takes it, the other waits for an answer, and the count
    /// never passes the cap.
    #[tokio::test]
    async fn the_last_slot_goes_to_one_connection() {
        let clients = Arc::new(Clients::new(ClientLimits {
            ops_per_connection: 8,
            bytes: 1 << 30,
            ops: 1,
        }));
        clients.open(1, Sender::spawn(tokio::io::sink()));
        clients.open(2, Sender::spawn(tokio::io::sink()));
        clients.room_for(1).await;
        clients.room_for(2).await;
        clients.admit(1, &op(10)).await;

        let second = tokio::spawn({
            let clients = clients.clone();
            async move { clients.admit(2, &op(20)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "a second op took the only slot");
        assert_eq!(clients.ops.load(super::Ordering::SeqCst), 1);

        clients.answer(1, 10, Message::Ping { nonce: 0 });
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the waiting op is admitted once the slot is answered")
            .expect("admit task");
        assert_eq!(clients.ops.load(super::Ordering::SeqCst), 1);
        assert_eq!(clients.peak_total.load(super::Ordering::SeqCst), 1);
    }

    /// A tid sent again while in flight holds its room once.
    #[tokio::test]
    async fn a_resent_tid_holds_room_once() {
        let clients = Clients::new(ClientLimits {
            ops_per_connection: 8,
            bytes: 1 << 30,
            ops: 1,
        });
        clients.open(1, Sender::spawn(tokio::io::sink()));
        clients.admit(1, &op(10)).await;
        clients.admit(1, &op(10)).await;
        assert_eq!(clients.ops.load(super::Ordering::SeqCst), 1);
        clients.close(1);
        assert_eq!(clients.ops.load(super::Ordering::SeqCst), 0);
        assert_eq!(clients.bytes.load(super::Ordering::SeqCst), 0);
    }
}
