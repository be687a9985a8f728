//! The BlueStore-class object store: object data on a raw block device (or
//! a preallocated file) with no filesystem in the data path, metadata in a
//! key-value store (RocksDB in production).
//!
//! What it owns, by module, in the order a write meets them:
//!
//! - [`store`]: [`BlueStore`], the [`cairn_store::ObjectStore`] behind the
//!   OSD; mount and unmount.
//! - `builder`, `write`: turning a transaction into device writes and one
//!   key-value batch — the deferred path for small overwrites (data in the
//!   commit journal, applied in place later), the
//!   direct copy-on-write path for everything else, read-modify-write of
//!   partial blocks.
//! - `pipeline`, `commit`, `journal`: group commit (new data, one device
//!   flush, one durable journal record per group, several in flight, the
//!   batch then written to the key-value store unsynced and synced in the
//!   background), applying deferred writes, handing released space back.
//! - `onode`: objects' metadata and sharded extent maps; blobs.
//! - `allocator`, `rangeset`: free space, durable and in memory.
//! - `checksum`, `compression`: what protects and shrinks stored bytes.
//! - `cache`: onode and data buffer caches.
//! - `read`: the read path with checksum verification.
//! - `keys`: the key-value schema; `label`: the superblock; `mount`: mkfs
//!   and mount; [`fsck`]: the consistency check.
//!
//! It must never acknowledge a transaction before its data and metadata are
//! durable, never return data that fails its checksum, and never hand out
//! space that may still be read or overwritten by a pending deferred write.

mod allocator;
pub mod autotune;
mod builder;
mod cache;
pub mod checksum;
mod commit;
pub mod compression;
mod deferred;
pub mod fsck;
mod journal;
mod keys;
mod kvsync;
pub mod label;
mod loop_commit;
mod mount;
mod onode;
pub mod options;
mod perf;
mod pipeline;
mod rangeset;
mod read;
mod record;
mod state;
pub mod store;
mod write;

pub use checksum::ChecksumType;
pub use compression::{Algorithm, CompressionMode};
pub use label::{Label, Superblock};
pub use mount::{mkfs, read_label, MIN_DEVICE_BYTES};
pub use options::{CacheOptions, MkfsOptions, MountOptions};
pub use perf::PerfSnapshot;
pub use store::BlueStore;
