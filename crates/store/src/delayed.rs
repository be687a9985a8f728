//! [`DelayedCommits`]: a store whose transactions reach it only a fixed
//! time after they were submitted, for fault tests (`osd.debug_commit_delay_ms`).
//!
//! It makes one OSD's commits lag behind its peers', so a test can kill a
//! primary whose replicas have committed a write it has not (or the
//! reverse) and check that nothing acknowledged is lost. A held
//! transaction is not on the device: a `kill -9` loses it, as a crash
//! loses a commit still in the device queue. Order is kept (one line,
//! first in first out), and reads go to the store underneath, so they may
//! not see a held transaction yet, even the submitter's own synchronous
//! reads: the [`ObjectStore`] contract allows that before a commit, and the
//! real backends are kinder (they show a submitted transaction at once).
//! Never a production setting.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_types::Version;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::{
    BoxFuture, Collection, Commit, ObjectId, ObjectStat, ObjectStore, Result, StoreError,
    StoreStats, Transaction,
};

/// Transactions held at once; past it `submit` refuses.
pub const HELD_MAX: usize = 65536;

struct Held {
    txn: Transaction,
    due: Instant,
    done: oneshot::Sender<Result<()>>,
}

/// See the module docs.
pub struct DelayedCommits {
    inner: Arc<dyn ObjectStore>,
    delay: Duration,
    line: mpsc::UnboundedSender<Held>,
    held: Arc<AtomicUsize>,
}

impl DelayedCommits {
    /// Wrap `inner`: every transaction is submitted to it `delay` after
    /// its own `submit`, by a thread of its own.
    pub fn new(inner: Arc<dyn ObjectStore>, delay: Duration) -> std::io::Result<Self> {
        let (line, mut rx) = mpsc::unbounded_channel::<Held>();
        let held = Arc::new(AtomicUsize::new(0));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let store = inner.clone();
        let count = held.clone();
        std::thread::Builder::new()
            .name("delayed-commits".into())
            .spawn(move || {
                rt.block_on(async move {
                    while let Some(held) = rx.recv().await {
                        tokio::time::sleep_until(held.due).await;
                        count.fetch_sub(1, Ordering::Relaxed);
                        match store.submit(held.txn) {
                            Ok(commit) => {
                                tokio::spawn(async move {
                                    let _ = held.done.send(commit.await);
                                });
                            }
                            Err(e) => {
                                let _ = held.done.send(Err(e));
                            }
                        }
                    }
                })
            })?;
        Ok(Self {
            inner,
            delay,
            line,
            held,
        })
    }
}

impl ObjectStore for DelayedCommits {
    fn submit(&self, txn: Transaction) -> Result<Commit> {
        if self.held.fetch_add(1, Ordering::Relaxed) >= HELD_MAX {
            self.held.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::Invalid(format!(
                "{HELD_MAX} transactions are already held back"
            )));
        }
        let (done, commit) = Commit::pending();
        let held = Held {
            txn,
            due: Instant::now() + self.delay,
            done,
        };
        if self.line.send(held).is_err() {
            self.held.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::Failed(
                "the delayed-commit thread is gone".into(),
            ));
        }
        Ok(commit)
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> BoxFuture<Result<Bytes>> {
        self.inner.read(oid, offset, len)
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        self.inner.stat(oid)
    }

    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get_attr(oid, key)
    }

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        self.inner.get_attrs(oid)
    }

    fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
        self.inner.omap_get(oid, keys)
    }

    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner.omap_list(oid, start_after, max)
    }

    fn list_objects(&self, coll: Collection) -> Result<Vec<String>> {
        self.inner.list_objects(coll)
    }

    fn list_collections(&self) -> Result<Vec<Collection>> {
        self.inner.list_collections()
    }

    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>> {
        self.inner.read_log(coll)
    }

    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.coll_get_attr(coll, key)
    }

    fn statfs(&self) -> Result<StoreStats> {
        self.inner.statfs()
    }

    fn perf_dump(&self) -> String {
        self.inner.perf_dump()
    }

    fn set_pool_compression(
        &self,
        pool: cairn_types::PoolId,
        settings: Option<&cairn_types::compression::PoolCompression>,
    ) {
        self.inner.set_pool_compression(pool, settings);
    }
}
