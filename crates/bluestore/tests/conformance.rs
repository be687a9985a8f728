//! The object-store conformance suite on BlueStore: in memory, on files
//! with RocksDB, and with settings that force every path (no deferred
//! writes; everything deferred; 64 KiB allocation units; compression;
//! xxhash64 and no checksums).

mod common;

use std::sync::Arc;

use cairn_bluestore::{Algorithm, ChecksumType, CompressionMode};
use cairn_store::conformance::Harness;
use cairn_store::ObjectStore;
use common::{FileStores, MemStores, MIB};

impl Harness for MemStores {
    fn open(&mut self) -> Arc<dyn ObjectStore> {
        MemStores::open(self)
    }
    fn durable(&self) -> bool {
        true
    }
}

impl Harness for FileStores {
    fn open(&mut self) -> Arc<dyn ObjectStore> {
        FileStores::open(self)
    }
    fn durable(&self) -> bool {
        true
    }
}

mod memory {
    use super::*;
    cairn_store::conformance_tests!(MemStores::new(64 * MIB));
}

mod files_rocksdb {
    use super::*;
    cairn_store::conformance_tests!(FileStores::new(64 * MIB));
}

fn variant(f: impl FnOnce(&mut MemStores)) -> MemStores {
    let mut s = MemStores::new(64 * MIB);
    f(&mut s);
    s
}

mod direct_only {
    use super::*;
    cairn_store::conformance_tests!(variant(|s| s.mount.deferred_max_bytes = 0));
}

mod all_deferred {
    use super::*;
    cairn_store::conformance_tests!(variant(|s| s.mount.deferred_max_bytes = 64 * MIB));
}

mod large_units {
    use super::*;
    cairn_store::conformance_tests!(variant(|s| {
        s.mkfs.min_alloc_size = 64 << 10;
        s.mkfs.shard_size = 256 << 10;
    }));
}

mod compressed_zstd_xxhash {
    use super::*;
    cairn_store::conformance_tests!(variant(|s| {
        s.mount.compression_mode = CompressionMode::Force;
        s.mount.compression_algorithm = Algorithm::Zstd;
        s.mount.checksum = ChecksumType::Xxhash64;
        s.mount.compression_min_blob_size = 4096;
    }));
}

mod compressed_snappy_no_csum {
    use super::*;
    cairn_store::conformance_tests!(variant(|s| {
        s.mount.compression_mode = CompressionMode::Aggressive;
        s.mount.compression_algorithm = Algorithm::Snappy;
        s.mount.checksum = ChecksumType::None;
    }));
}
