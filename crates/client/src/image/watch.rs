//! Watches: an open image's lease on its header object, so that admin
//! commands know who has the image open and refuse to pull it away.
//!
//! Every [`super::Image::open`] registers a watch: an omap entry
//! `watch.<client>.<cookie>` on `rbd_header.<id>` holding a
//! [`WatchEntry`], renewed every third of `client.watch_timeout_ms`. A
//! watch not renewed within its timeout (by the wall clock of whoever looks
//! at it) is expired: its holder is presumed dead. Clients and admin hosts
//! must keep their clocks within a few seconds of each other, as Ceph's do.
//!
//! An image handle issues I/O only while its lease holds (its last renewal
//! was sent less than the timeout ago, less a tenth for clock drift); past
//! that, I/O waits for the next renewal rather than write to an image that
//! an admin may be removing. Every renewal is guarded by the value it
//! replaces: once an admin evicted the watch (`--force` on an expired one)
//! or removed the image, the key is gone, the renewal fails, the handle is
//! lost for good and every later I/O fails with an error saying so. A key
//! still there with another value (a renewal applied after its answer was
//! given up on, or a header PG gone back to an older copy) is still this
//! handle's watch, and is renewed.
//!
//! Removing or shrinking first sets `admin_op` on the header, then lists
//! the watches: a watch registers only while `admin_op` is absent, so the
//! two cannot pass each other. Writes a client sent before its lease ran
//! out can still be in flight when it is evicted: fencing those needs the
//! OSDs to refuse them (exclusive lock with blocklisting, not built yet).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError, OpOutput};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::{ClientError, Cluster};

/// Omap key prefix of watches on an image header.
pub const WATCH_PREFIX: &str = "watch.";
/// Omap key of the admin operation (remove, shrink) in progress.
pub const ADMIN_OP_KEY: &str = "admin_op";
/// Most watches listed per omap page.
const LIST_PAGE: u32 = 256;
/// Most renewals guarded by a value found in place of the last one
/// written, in one [`Lease::renew`], before the watch counts as lost.
const RENEW_ATTEMPTS: usize = 3;

/// What a watch entry holds (JSON in the omap value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEntry {
    /// `client.<id>` of the holder.
    pub client: String,
    /// Who holds it: program, pid and host.
    pub desc: String,
    pub timeout_ms: u64,
    /// Wall clock of the last renewal, ms since the Unix epoch.
    pub renewed_ms: u64,
}

/// A watch as an admin command sees it.
#[derive(Clone, Debug, Serialize)]
pub struct Watcher {
    pub key: String,
    #[serde(flatten)]
    pub entry: WatchEntry,
    /// Milliseconds since its last renewal (by this host's clock).
    pub age_ms: u64,
    pub expired: bool,
    #[serde(skip)]
    raw: Bytes,
}

/// The admin operation recorded on a header while it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminOp {
    /// `remove` or `shrink`.
    pub op: String,
    pub by: String,
    pub started_ms: u64,
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

static ROLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Name what this process is, for the watches and admin-op records it
/// leaves (e.g. `cairn nbd rbd/vol`); the first call wins.
pub fn set_process_role(role: impl Into<String>) {
    let _ = ROLE.set(role.into());
}

/// This process, for watch and admin-op entries: `cairn nbd rbd/vol (pid
/// 12, host a)`; without a role, the program's name.
pub fn describe_process() -> String {
    let role = ROLE.get().cloned().unwrap_or_else(|| {
        std::env::args()
            .next()
            .and_then(|p| {
                std::path::Path::new(&p)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unknown".into())
    });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{role} (pid {}, host {host})", std::process::id())
}

/// The output of the request's omap read, wherever it is in the outputs.
pub(super) fn omap_output(outputs: Vec<OpOutput>) -> Vec<(String, Bytes)> {
    outputs
        .into_iter()
        .find_map(|o| match o {
            OpOutput::Omap(entries) => Some(entries),
            _ => None,
        })
        .unwrap_or_default()
}

/// Every watch on a header, oldest key first.
pub async fn list(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
) -> Result<Vec<Watcher>, ClientError> {
    let now = unix_ms();
    let mut out = Vec::new();
    let mut after = WATCH_PREFIX.to_string();
    loop {
        let ops = vec![ObjOp::OmapList {
            start_after: Some(after.clone()),
            max: LIST_PAGE,
        }];
        let page = match cluster.op(pool, header, ops).await {
            Ok(outputs) => omap_output(outputs),
            Err(ClientError::Op(OpError::NotFound)) => Vec::new(),
            Err(e) => return Err(e),
        };
        let full = page.len() == LIST_PAGE as usize;
        for (key, raw) in page {
            if !key.starts_with(WATCH_PREFIX) {
                return Ok(out);
            }
            let entry: WatchEntry = serde_json::from_slice(&raw).map_err(|e| {
                ClientError::Protocol(format!("watch {key:?} on {header}: undecodable entry: {e}"))
            })?;
            let age_ms = now.saturating_sub(entry.renewed_ms);
            after = key.clone();
            out.push(Watcher {
                key,
                expired: age_ms > entry.timeout_ms,
                age_ms,
                entry,
                raw,
            });
        }
        if !full {
            return Ok(out);
        }
    }
}

/// Drop an expired watch, unless it was renewed since `w` was read.
/// Returns false if it was renewed (its holder is alive).
pub async fn evict(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    w: &Watcher,
) -> Result<bool, ClientError> {
    let ops = vec![
        ObjOp::OmapCmp {
            key: w.key.clone(),
            value: Some(w.raw.clone()),
        },
        ObjOp::OmapRm {
            keys: vec![w.key.clone()],
        },
    ];
    match cluster.op(pool, header, ops).await {
        Ok(_) => Ok(true),
        Err(ClientError::Op(OpError::Mismatch(_))) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One image handle's watch, and the lease its I/O runs under.
pub(crate) struct Lease {
    pub key: String,
    pub timeout: Duration,
    /// The entry as last written (the next renewal's guard).
    value: Mutex<Bytes>,
    base: Instant,
    /// I/O may be issued until this many ms after `base`.
    valid_until_ms: AtomicU64,
    /// Why the handle can never do I/O again.
    lost: Mutex<Option<String>>,
    /// `lost` is set (read on every I/O without the lock).
    is_lost: AtomicBool,
    changed: Notify,
}

impl Lease {
    /// Register a watch on `header` for `client`. Fails with
    /// [`OpError::Mismatch`] if the header is not image `name`'s any more
    /// or an admin operation is under way.
    pub async fn register(
        cluster: &Cluster,
        pool: PoolId,
        header: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Lease, ClientError> {
        let key = format!(
            "{WATCH_PREFIX}{:016x}.{:08x}",
            cluster.client_id(),
            rand::random::<u32>()
        );
        let lease = Lease {
            key,
            timeout,
            value: Mutex::new(Bytes::new()),
            base: Instant::now(),
            valid_until_ms: AtomicU64::new(0),
            lost: Mutex::new(None),
            is_lost: AtomicBool::new(false),
            changed: Notify::new(),
        };
        let (sent, entry) = lease.entry(cluster);
        let ops = vec![
            ObjOp::OmapCmp {
                key: ADMIN_OP_KEY.into(),
                value: None,
            },
            ObjOp::OmapCmp {
                key: "name".into(),
                value: Some(Bytes::copy_from_slice(name.as_bytes())),
            },
            ObjOp::OmapSet {
                entries: vec![(lease.key.clone(), entry.clone())],
            },
        ];
        cluster.op(pool, header, ops).await?;
        lease.renewed(sent, entry);
        Ok(lease)
    }

    fn entry(&self, cluster: &Cluster) -> (Instant, Bytes) {
        let entry = WatchEntry {
            client: format!("client.{:016x}", cluster.client_id()),
            desc: describe_process(),
            timeout_ms: self.timeout.as_millis() as u64,
            renewed_ms: unix_ms(),
        };
        // A struct of strings and integers always serializes.
        let json = serde_json::to_vec(&entry).unwrap_or_default();
        (Instant::now(), Bytes::from(json))
    }

    fn renewed(&self, sent: Instant, entry: Bytes) {
        *self.value.lock() = entry;
        let margin = self.timeout / 10;
        let until = sent.saturating_duration_since(self.base) + self.timeout - margin;
        self.valid_until_ms
            .store(until.as_millis() as u64, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Renew once. `Ok(false)`: the watch is gone (evicted, or the image
    /// removed) and the lease is lost for good.
    ///
    /// The key is this handle's alone, and only an eviction or the image's
    /// removal takes it away; so a key found holding another value than
    /// the last renewal's is still this watch. That happens when an earlier
    /// renewal was applied but its answer never came (an op timeout), or
    /// when the header's PG went back to an older copy (an admin declared
    /// the OSDs holding the newer one lost). The renewal is then guarded
    /// by the value found, a bounded number of times.
    pub async fn renew(
        &self,
        cluster: &Cluster,
        pool: PoolId,
        header: &str,
    ) -> Result<bool, ClientError> {
        let mut guard = self.value.lock().clone();
        for _ in 0..RENEW_ATTEMPTS {
            let (sent, entry) = self.entry(cluster);
            let ops = vec![
                ObjOp::OmapCmp {
                    key: self.key.clone(),
                    value: Some(guard.clone()),
                },
                ObjOp::OmapSet {
                    entries: vec![(self.key.clone(), entry.clone())],
                },
            ];
            match cluster.op(pool, header, ops).await {
                Ok(_) => {
                    self.renewed(sent, entry);
                    return Ok(true);
                }
                Err(ClientError::Op(OpError::Mismatch(_))) => {}
                Err(e) => return Err(e),
            }
            let get = vec![ObjOp::OmapGet {
                keys: vec![self.key.clone()],
            }];
            let found = match cluster.op(pool, header, get).await {
                Ok(outputs) => omap_output(outputs)
                    .into_iter()
                    .find(|(k, _)| *k == self.key),
                Err(ClientError::Op(OpError::NotFound)) => None,
                Err(e) => return Err(e),
            };
            let Some((_, value)) = found else {
                break;
            };
            tracing::warn!(
                "{header}: watch {} holds another value than its last renewal (a renewal \
                 answered late, or the header's PG went back to an older copy); renewing it",
                self.key
            );
            guard = value;
        }
        self.lose(format!(
            "the watch on {header} is gone: the image was removed, or this client's \
             lease ran out and an admin evicted it"
        ));
        Ok(false)
    }

    pub fn lose(&self, why: String) {
        *self.lost.lock() = Some(why);
        self.is_lost.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    pub fn is_lost(&self) -> bool {
        self.is_lost.load(Ordering::Acquire)
    }

    /// Wait until I/O may be issued: the lease holds. Fails once it is lost.
    /// The common case costs two atomic loads and a clock read.
    pub async fn hold(&self) -> Result<(), String> {
        let now = self.base.elapsed().as_millis() as u64;
        if !self.is_lost() && now < self.valid_until_ms.load(Ordering::Acquire) {
            return Ok(());
        }
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(why) = self.lost.lock().clone() {
                return Err(why);
            }
            let now = self.base.elapsed().as_millis() as u64;
            if now < self.valid_until_ms.load(Ordering::Acquire) {
                return Ok(());
            }
            tracing::debug!("{}: lease ran out, I/O waits for a renewal", self.key);
            changed.await;
        }
    }

    /// The value last written: what an unwatch must match.
    pub fn value(&self) -> Bytes {
        self.value.lock().clone()
    }
}

/// Remove a watch if it still holds `value` (it may have been evicted).
pub(crate) async fn drop_watch(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    key: String,
    value: Bytes,
) -> Result<(), ClientError> {
    let ops = vec![
        ObjOp::OmapCmp {
            key: key.clone(),
            value: Some(value),
        },
        ObjOp::OmapRm { keys: vec![key] },
    ];
    match cluster.op(pool, header, ops).await {
        Ok(_) | Err(ClientError::Op(OpError::Mismatch(_) | OpError::NotFound)) => Ok(()),
        Err(e) => Err(e),
    }
}
