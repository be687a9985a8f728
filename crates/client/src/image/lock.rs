//! Exclusive lock: one writer per image at a time (the `exclusive-lock`
//! feature, on by default).
//!
//! The lock is an omap entry `lock` on the header naming its holder's
//! client and watch. A handle takes it before its first write, discard or
//! zeroing (reads need no lock) and gives it back when closed. Handles of
//! one client share it (they are fenced together anyway).
//!
//! A second writer finds the lock held:
//! - held by a live handle (its watch is renewed): the write waits, as a
//!   disk would, until the holder closes the image or dies;
//! - held by a dead one (its watch expired or gone): the writer *fences*
//!   the holder before taking the lock over: it blocklists the holder's
//!   client at the monitor, waits until its own map has that epoch, and
//!   only then swaps the lock. Every op it sends afterwards carries that
//!   epoch, and an OSD holds an op until it has the op's epoch, so no OSD
//!   that serves the new writer still accepts the old one's writes;
//! - `cairn image lock break` does the same to a live holder, on an
//!   admin's word.
//!
//! A fenced client's ops fail with `Blocklisted`; its handle is then lost
//! for good (every later I/O fails).

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use bytes::Bytes;
use cairn_types::PoolId;
use cairn_wire::{MonCommand, ObjOp, OpError};
use serde::{Deserialize, Serialize};

use super::watch::{self, unix_ms, ADMIN_OP_KEY};
use super::{omap_of, Image};
use crate::{ClientError, Cluster};

/// Omap key of the lock on a header.
pub const LOCK_KEY: &str = "lock";
/// Omap key of the image's features (comma-separated).
pub const FEATURES_KEY: &str = "features";
pub const EXCLUSIVE_LOCK: &str = "exclusive-lock";
/// Every feature an image can have.
pub const KNOWN_FEATURES: &[&str] = &[EXCLUSIVE_LOCK];
/// How long a fenced client stays blocklisted (Ceph's default: an hour).
pub const BLOCKLIST_EXPIRE_S: u64 = 3600;

/// The lock entry (JSON in the omap value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// `client.<id>`, for people.
    pub client: String,
    pub client_id: u64,
    /// The holder's watch key: while it is renewed, the holder is alive.
    pub watch: String,
    pub desc: String,
    pub acquired_ms: u64,
}

/// Locks held by this process, per (client, header): how many handles
/// share it, and the entry this process wrote (what giving it back must
/// match, so a late give-back never removes a newer entry).
static HELD: StdMutex<Option<Held>> = StdMutex::new(None);

/// (client, header) → (handles sharing the lock, the entry written).
type Held = HashMap<(u64, String), (usize, Bytes)>;

fn with_held<T>(f: impl FnOnce(&mut Held) -> T) -> T {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    f(held.get_or_insert_with(HashMap::new))
}

/// Join this client's hold on the lock, if it has one.
fn join(key: &(u64, String)) -> bool {
    with_held(|m| match m.get_mut(key) {
        Some((n, _)) => {
            *n += 1;
            true
        }
        None => false,
    })
}

/// Leave it; the entry to remove if this was the last handle.
fn leave(key: &(u64, String)) -> Option<Bytes> {
    with_held(|m| {
        let (n, raw) = m.get_mut(key)?;
        *n = n.saturating_sub(1);
        if *n > 0 {
            return None;
        }
        let raw = raw.clone();
        m.remove(key);
        Some(raw)
    })
}

/// Parse a feature list (`exclusive-lock`, `none`), as `image create
/// --image-feature` takes it.
pub fn parse_features(text: &str) -> Result<Vec<String>, ClientError> {
    let mut out = Vec::new();
    for f in text.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        if f == "none" {
            continue;
        }
        if !KNOWN_FEATURES.contains(&f) {
            return Err(ClientError::Invalid(format!(
                "unknown image feature '{f}' (known: {}, or none)",
                KNOWN_FEATURES.join(", ")
            )));
        }
        if !out.iter().any(|o| o == f) {
            out.push(f.to_string());
        }
    }
    Ok(out)
}

/// Remove the lock if it is still the entry `mine` this process wrote.
pub(super) async fn give_back(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    mine: Bytes,
) -> Result<(), ClientError> {
    swap(cluster, pool, header, Some(mine), None).await?;
    Ok(())
}

async fn read_lock(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
) -> Result<Option<(LockEntry, Bytes)>, ClientError> {
    let ops = vec![ObjOp::OmapGet {
        keys: vec![LOCK_KEY.into()],
    }];
    let out = match cluster.op(pool, header, ops).await {
        Ok(out) => omap_of(out),
        Err(ClientError::Op(OpError::NotFound)) => return Ok(None),
        Err(e) => return Err(e),
    };
    match out.into_iter().next() {
        None => Ok(None),
        Some((_, raw)) => {
            let entry = serde_json::from_slice(&raw).map_err(|e| {
                ClientError::Protocol(format!("{header}: undecodable {LOCK_KEY}: {e}"))
            })?;
            Ok(Some((entry, raw)))
        }
    }
}

/// Fence `holder`: blocklist its client and wait until this client's map
/// has the epoch that does it.
async fn fence(cluster: &Cluster, holder: &LockEntry, why: String) -> Result<(), ClientError> {
    let reply = cluster
        .mon_command(MonCommand::BlocklistAdd {
            client: holder.client_id,
            expire_s: BLOCKLIST_EXPIRE_S,
            reason: why,
        })
        .await?;
    let epoch = reply["epoch"]
        .as_u64()
        .ok_or_else(|| ClientError::Protocol(format!("blocklist reply without epoch: {reply}")))?;
    cluster.wait_for_epoch(epoch as u32).await?;
    tracing::warn!(
        "fenced {} ({}) at epoch {epoch}",
        holder.client,
        holder.desc
    );
    Ok(())
}

/// Swap the lock from `old` (as read) to `new`; false if it changed meanwhile.
async fn swap(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    old: Option<Bytes>,
    new: Option<Bytes>,
) -> Result<bool, ClientError> {
    let mut ops = vec![ObjOp::OmapCmp {
        key: LOCK_KEY.into(),
        value: old,
    }];
    if new.is_some() {
        ops.push(ObjOp::OmapCmp {
            key: ADMIN_OP_KEY.into(),
            value: None,
        });
    }
    ops.push(match new {
        Some(v) => ObjOp::OmapSet {
            entries: vec![(LOCK_KEY.into(), v)],
        },
        None => ObjOp::OmapRm {
            keys: vec![LOCK_KEY.into()],
        },
    });
    match cluster.op(pool, header, ops).await {
        Ok(_) => Ok(true),
        Err(ClientError::Op(OpError::Mismatch(_))) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Is the holder's watch alive (renewed within its timeout)?
async fn holder_alive(
    cluster: &Cluster,
    pool: PoolId,
    header: &str,
    holder: &LockEntry,
) -> Result<bool, ClientError> {
    let watchers = watch::list(cluster, pool, header).await?;
    Ok(watchers.iter().any(|w| w.key == holder.watch && !w.expired))
}

impl Image {
    /// Take the exclusive lock before a mutation (once per handle; a no-op
    /// for images without the feature).
    pub(super) async fn ensure_lock(&self) -> Result<(), ClientError> {
        if !self.needs_lock.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let _one = self.locking.lock().await;
        if !self.needs_lock.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let me = self.cluster.client_id();
        let key = (me, self.header.clone());
        if join(&key) {
            self.needs_lock
                .store(false, std::sync::atomic::Ordering::Release);
            *self.holds_lock.lock() = true;
            return Ok(());
        }
        let (pool, header) = (self.pool, self.header.as_str());
        let poll = (self.lease.timeout / 3).min(Duration::from_secs(1));
        let mine = LockEntry {
            client: format!("client.{me:016x}"),
            client_id: me,
            watch: self.lease.key.clone(),
            desc: watch::describe_process(),
            acquired_ms: unix_ms(),
        };
        let mine = Bytes::from(serde_json::to_vec(&mine).unwrap_or_default());
        let mut waiting_logged = false;
        loop {
            self.lease.hold().await.map_err(ClientError::Busy)?;
            let current = read_lock(&self.cluster, pool, header).await?;
            let taken = match &current {
                None => swap(&self.cluster, pool, header, None, Some(mine.clone())).await?,
                Some((holder, _)) if holder.client_id == me => {
                    // A handle of this client that is gone (lost or
                    // dropped without closing): ours to take back.
                    let old = current.as_ref().map(|(_, raw)| raw.clone());
                    swap(&self.cluster, pool, header, old, Some(mine.clone())).await?
                }
                Some((holder, raw)) => {
                    if holder_alive(&self.cluster, pool, header, holder).await? {
                        if !waiting_logged {
                            tracing::warn!(
                                "{header}: the exclusive lock is held by {} ({}); writes wait \
                                 until it closes the image or dies (`cairn image lock break` \
                                 fences it)",
                                holder.client,
                                holder.desc
                            );
                            waiting_logged = true;
                        }
                        tokio::time::sleep(poll).await;
                        continue;
                    }
                    let why = format!(
                        "lock of {header} taken over from a dead holder by client.{me:016x}"
                    );
                    fence(&self.cluster, holder, why).await?;
                    swap(
                        &self.cluster,
                        pool,
                        header,
                        Some(raw.clone()),
                        Some(mine.clone()),
                    )
                    .await?
                }
            };
            if taken {
                with_held(|m| m.insert(key.clone(), (1, mine.clone())));
                *self.holds_lock.lock() = true;
                self.needs_lock
                    .store(false, std::sync::atomic::Ordering::Release);
                tracing::info!("{header}: exclusive lock taken");
                return Ok(());
            }
        }
    }

    /// Stop holding the lock; `Some(entry)` if this was the client's last
    /// handle holding it, and [`give_back`] must remove that entry.
    pub(super) fn let_go(&self) -> Option<Bytes> {
        if !std::mem::take(&mut *self.holds_lock.lock()) {
            return None;
        }
        leave(&(self.cluster.client_id(), self.header.clone()))
    }

    /// The lock's holder, if any.
    pub async fn lock_holder(
        cluster: &std::sync::Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<Option<LockEntry>, ClientError> {
        let info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let header = super::header_oid(&info.id);
        Ok(read_lock(cluster, pool, &header).await?.map(|(e, _)| e))
    }

    /// Fence the lock's holder (alive or not) and remove the lock: `cairn
    /// image lock break`. Returns the holder that was fenced.
    pub async fn break_lock(
        cluster: &std::sync::Arc<Cluster>,
        pool_name: &str,
        name: &str,
    ) -> Result<LockEntry, ClientError> {
        let info = Self::info(cluster, pool_name, name).await?;
        let pool = cluster.pool_id(pool_name)?;
        let header = super::header_oid(&info.id);
        let Some((holder, raw)) = read_lock(cluster, pool, &header).await? else {
            return Err(ClientError::Invalid(format!(
                "image {pool_name}/{name} is not locked"
            )));
        };
        let why = format!("lock of {pool_name}/{name} broken by an admin");
        fence(cluster, &holder, why).await?;
        if !swap(cluster, pool, &header, Some(raw), None).await? {
            return Err(ClientError::Busy(format!(
                "the lock of {pool_name}/{name} changed hands meanwhile; look again"
            )));
        }
        Ok(holder)
    }
}
