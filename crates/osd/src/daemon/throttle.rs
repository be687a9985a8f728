//! Back-pressure on clients: how many client ops, and how many of their
//! bytes, the OSD holds read but not yet answered.
//!
//! A connection with `client_message_cap` ops in flight, or any connection
//! while the OSD holds `client_ops_max` client ops or
//! `client_message_size_cap` bytes of them, is not read until an answer
//! frees room: a client that sends faster than
//! the OSD commits fills its socket and waits in TCP, and its requests are
//! never refused, dropped or reordered for it (Ceph's
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

    /// Wait until `client` may send another op.
    pub(crate) async fn room_for(&self, client: u64) {
        if self.has_room(client) {
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
            if self.has_room(client) {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            if !counted {
                counted = true;
                self.waits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "client connection {client}: no room ({} client ops, {} bytes at the OSD); \
                     not reading until an op is answered",
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

    /// `op` was read from `client`'s connection and goes to the core.
    pub(crate) fn admit(&self, client: u64, op: &OsdOp) {
        let bytes = op_bytes(op);
        let mut conns = self.conns.lock();
        let Some(conn) = conns.get_mut(&client) else {
            return;
        };
        // A tid sent again while in flight holds room once.
        match conn.in_flight.insert(op.tid, bytes) {
            Some(old) => {
                self.bytes.fetch_sub(old, Ordering::SeqCst);
            }
            None => {
                let total = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
                self.peak_total.fetch_max(total as u64, Ordering::Relaxed);
            }
        }
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
        let ops = conn.in_flight.len() as u64;
        self.peak_ops.fetch_max(ops, Ordering::Relaxed);
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
