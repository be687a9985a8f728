//! The object store: where an OSD keeps the objects of its placement groups.
//!
//! This crate owns the [`ObjectStore`] trait, the [`Transaction`] that every
//! mutation goes through, and the backends behind the trait:
//!
//! - [`memstore::MemStore`]: in memory, for tests; loses everything on exit.
//! - [`filestore::FileStore`]: a file per object plus a write-ahead journal;
//!   nothing committed is lost under `kill -9`.
//!
//! [`conformance`] is the behaviour every backend must show; each backend's
//! tests run it. The store knows nothing about replication, PG logic or the
//! network: it applies transactions atomically, in submission order, and
//! reports when they are durable.
//!
//! # Contract
//! - `submit` fixes the order: transactions are applied in the order `submit`
//!   was called, and a later transaction observes every earlier one.
//! - A transaction is atomic: after a crash it is either wholly present or
//!   wholly absent. Once its [`Commit`] resolves `Ok`, it is durable and every
//!   read observes it. Before that, reads may or may not observe it.
//! - A failed durable sync puts the store into a failed state: the failing
//!   commit and every later `submit` return [`StoreError::Failed`]; the store
//!   never pretends a write it could not sync is durable.
//! - Collections exist implicitly while they hold objects, log entries or
//!   attributes; `RemoveCollection` removes all of them.

pub mod conformance;
pub mod delayed;
pub mod filestore;
pub mod memstore;
mod meta;
mod txn;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

pub use cairn_types::{PgId, Version};
pub use txn::{split_destination, Transaction, TxOp, INTERNAL_PREFIX};

/// A collection of objects; in an OSD, one per placement group.
pub type Collection = PgId;

/// Largest object size a store accepts (offset + length of any write).
pub const MAX_OBJECT_SIZE: u64 = 1 << 40;

/// An object's name within its collection.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ObjectId {
    pub coll: Collection,
    pub name: String,
}

impl ObjectId {
    pub fn new(coll: Collection, name: impl Into<String>) -> Self {
        Self {
            coll,
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.coll, self.name)
    }
}

/// What `stat` reports about one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectStat {
    pub size: u64,
}

/// Space and object counts of a whole store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreStats {
    /// Bytes the store may use in total (device or filesystem capacity).
    pub total_bytes: u64,
    /// Bytes currently allocated to object data and metadata.
    pub used_bytes: u64,
    pub objects: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("object {0} not found")]
    NotFound(ObjectId),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("no space left on the store")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// Stored data failed its checksum: never returned as data. The object
    /// can be repaired from a replica.
    #[error(
        "checksum mismatch in object {oid} at offset {offset} (device offset {device_offset:#x})"
    )]
    Checksum {
        oid: ObjectId,
        offset: u64,
        device_offset: u64,
    },
    /// A durable sync failed earlier; the store accepts no more writes.
    #[error("store failed and is read-only: {0}")]
    Failed(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A boxed future, so that the trait stays object-safe.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Resolves when a submitted transaction is durable (or has failed).
pub struct Commit {
    inner: CommitInner,
}

enum CommitInner {
    Ready(Option<Result<()>>),
    Pending(tokio::sync::oneshot::Receiver<Result<()>>),
}

impl Commit {
    /// A commit that is already durable (or already failed).
    pub fn ready(result: Result<()>) -> Self {
        Self {
            inner: CommitInner::Ready(Some(result)),
        }
    }

    /// A commit completed later through the returned sender.
    pub fn pending() -> (tokio::sync::oneshot::Sender<Result<()>>, Self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            tx,
            Self {
                inner: CommitInner::Pending(rx),
            },
        )
    }
}

impl Future for Commit {
    type Output = Result<()>;
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        match &mut self.inner {
            CommitInner::Ready(result) => Poll::Ready(
                result
                    .take()
                    .unwrap_or_else(|| Err(StoreError::Invalid("commit polled twice".into()))),
            ),
            CommitInner::Pending(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => Poll::Ready(Err(StoreError::Failed(
                    "store shut down before commit".into(),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// The object store interface. See the crate docs for the contract.
pub trait ObjectStore: Send + Sync + 'static {
    /// Queue a transaction. Validation errors (bad offsets, a failed store) are
    /// returned here and nothing is applied; otherwise the order is fixed now
    /// and the returned [`Commit`] resolves once the transaction is durable.
    fn submit(&self, txn: Transaction) -> Result<Commit>;

    /// From now on, do the common case of committing on the calling
    /// tokio runtime's event loop rather than on threads of the store's
    /// own (see each store). `Ok(false)`: this store has no such mode.
    /// Call inside the runtime whose thread submits.
    fn attach_to_loop(&self) -> Result<bool> {
        Ok(false)
    }

    /// Compression for the objects of `pool` from now on, over the store's
    /// own settings (`None`: the store's own). Stores that do not compress
    /// ignore it.
    fn set_pool_compression(
        &self,
        _pool: cairn_types::PoolId,
        _settings: Option<&cairn_types::compression::PoolCompression>,
    ) {
    }

    /// Read `len` bytes at `offset`. Holes read as zeros; the result is short
    /// only at the end of the object (empty if `offset >= size`). A store
    /// may hand out bytes it also caches (shared, never changed in place).
    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> BoxFuture<Result<Bytes>>;

    /// Whether an op on `oid` will find the object's metadata (or that it
    /// does not exist) in memory, so that running it reads no metadata
    /// from the device. Never blocks: a store may bring the metadata in
    /// from another cache of its own to say yes, but does not read the
    /// device for it. Stores holding everything in memory: always.
    fn meta_ready(&self, _oid: &ObjectId) -> bool {
        true
    }

    /// Bring `oid`'s metadata into memory ahead of an op on it. Blocking
    /// (it may read the device): for a thread that may wait, never an
    /// event loop. An error here is reported again by the op itself.
    fn load_meta(&self, _oid: &ObjectId) -> Result<()> {
        Ok(())
    }

    /// The unit a write rewrites whole: a write that covers only part of
    /// one reads the rest of it first (read-modify-write). 1: none.
    fn rewrite_unit(&self) -> u64 {
        1
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat>;

    /// One attribute; `Ok(None)` if the object exists without it.
    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>>;

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>>;

    /// The values of the given omap keys that exist.
    fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>>;

    /// Up to `max` omap entries with keys strictly after `start_after`, in key order.
    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>>;

    /// Names of the objects in a collection, sorted.
    fn list_objects(&self, coll: Collection) -> Result<Vec<String>>;

    /// Collections that currently exist, sorted.
    fn list_collections(&self) -> Result<Vec<Collection>>;

    /// The collection's log entries, in version order.
    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>>;

    /// A collection attribute (PG metadata such as `last_update`).
    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>>;

    fn statfs(&self) -> Result<StoreStats>;

    /// The backend's performance counters as a JSON object (`{}` if it
    /// keeps none), for `cairn osd perf`.
    fn perf_dump(&self) -> String {
        "{}".to_string()
    }
}

impl std::fmt::Debug for dyn ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectStore")
    }
}
