//! Compression: compressible data takes less space and reads back equal
//! (whole, in parts, after partial overwrites and a remount); incompressible
//! data is stored raw; modes that do not compress never do.

mod common;

use cairn_bluestore::{Algorithm, BlueStore, CompressionMode};
use cairn_store::ObjectStore;
use common::*;

const RAW: usize = 1 << 20;

fn used(store: &BlueStore) -> u64 {
    store.statfs().unwrap().used_bytes
}

async fn compresses(algorithm: Algorithm) {
    let mut s = MemStores::new(64 * MIB);
    s.mount.compression_mode = CompressionMode::Force;
    s.mount.compression_algorithm = algorithm;
    let store = s.open();
    let a = oid(C1, "text");
    let mut model = text(RAW);
    let before = used(&store);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    let p = store.perf();
    assert!(
        p.compressed_blobs >= 16,
        "{algorithm:?}: 1 MiB in 64 KiB blobs: {p:?}"
    );
    assert_eq!(p.compressed_raw_bytes, RAW as u64);
    assert!(
        p.compressed_stored_bytes < p.compressed_raw_bytes / 4,
        "{algorithm:?}: {p:?}"
    );
    let took = used(&store) - before;
    assert!(
        took < RAW as u64 / 4,
        "{algorithm:?}: 1 MiB of text took {took} bytes"
    );
    assert_bytes(&read_all(&*store, &a).await, &model, "whole");

    // Partial reads: inside a blob, across blob (64 KiB) and shard
    // (256 KiB) boundaries, odd offsets.
    for (off, len) in [
        (1usize, 10usize),
        (65_535, 2),
        (100_000, 200_000),
        (262_100, 300),
        (RAW - 7, 7),
    ] {
        assert_bytes(
            &read(&*store, &a, off as u64, len as u64).await,
            &model[off..off + len],
            &format!("{algorithm:?}: read {off}+{len}"),
        );
    }

    // Overwrite parts of compressed extents: small and unaligned (too small
    // to compress), one aligned block (a compressed blob cannot be
    // overwritten in place: not deferred), and a large compressible piece
    // across blobs.
    let deferred = store.perf().deferred_writes;
    let overwrites: Vec<(usize, Vec<u8>)> = vec![
        (70_001, pattern(1, 1000)),
        (8192, pattern(2, 4096)),
        (
            200_000,
            text(100_000)
                .iter()
                .map(|b| b.to_ascii_uppercase())
                .collect(),
        ),
        (RAW - 10, pattern(3, 20)),
    ];
    for (off, data) in &overwrites {
        let end = off + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[*off..end].copy_from_slice(data);
        commit(
            &*store,
            tx(|t| t.write(&a, *off as u64, bytes(data.clone()))),
        )
        .await;
        assert_bytes(
            &read_all(&*store, &a).await,
            &model,
            &format!(
                "{algorithm:?}: after overwriting {} bytes at {off}",
                data.len()
            ),
        );
    }
    assert_eq!(
        store.perf().deferred_writes,
        deferred,
        "compressed data is never overwritten in place"
    );
    assert!(
        store.perf().compressed_blobs > p.compressed_blobs,
        "the large overwrite compressed"
    );

    // Incompressible data is stored raw.
    let blobs = store.perf().compressed_blobs;
    let before = used(&store);
    let b = oid(C1, "random");
    let random = pattern(9, 256 * 1024);
    commit(&*store, tx(|t| t.write(&b, 0, bytes(random.clone())))).await;
    assert_eq!(
        store.perf().compressed_blobs,
        blobs,
        "{algorithm:?}: random data compressed"
    );
    assert_eq!(used(&store) - before, random.len() as u64);
    assert_bytes(&read_all(&*store, &b).await, &random, "random");

    drop(store);
    let store = s.open();
    assert_bytes(&read_all(&*store, &a).await, &model, "text after remount");
    assert_bytes(
        &read_all(&*store, &b).await,
        &random,
        "random after remount",
    );
    let report = store.fsck(true, false).unwrap();
    assert!(report.is_clean(), "{report:?}");
    // Compressed data written earlier reads back with compression off.
    drop(store);
    s.mount.compression_mode = CompressionMode::None;
    let store = s.open();
    assert_bytes(
        &read_all(&*store, &a).await,
        &model,
        "text with compression off",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lz4_compresses_and_reads_back() {
    compresses(Algorithm::Lz4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_compresses_and_reads_back() {
    compresses(Algorithm::Zstd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snappy_compresses_and_reads_back() {
    compresses(Algorithm::Snappy).await;
}

/// Mode `none` never compresses; `passive` compresses only data hinted
/// compressible and there are no hints yet, so it never does either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_none_and_passive_never_compress() {
    for mode in [CompressionMode::None, CompressionMode::Passive] {
        let mut s = MemStores::new(64 * MIB);
        s.mount.compression_mode = mode;
        let store = s.open();
        let a = oid(C1, "text");
        let data = text(RAW);
        let before = used(&store);
        commit(&*store, tx(|t| t.write(&a, 0, bytes(data.clone())))).await;
        assert_eq!(store.perf().compressed_blobs, 0, "{mode:?}");
        assert_eq!(used(&store) - before, RAW as u64, "{mode:?}");
        assert_bytes(&read_all(&*store, &a).await, &data, "text");
    }
}

/// Writes below `compression_min_blob_size` are stored raw even in force
/// mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_are_not_compressed() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.compression_mode = CompressionMode::Aggressive;
    let store = s.open();
    let a = oid(C1, "small");
    let data = text(4096);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(data.clone())))).await;
    assert_eq!(store.perf().compressed_blobs, 0);
    let big = text(16 * 1024);
    commit(&*store, tx(|t| t.write(&a, 65536, bytes(big.clone())))).await;
    assert_eq!(
        store.perf().compressed_blobs,
        1,
        "aggressive compresses like force"
    );
    let mut model = data;
    model.resize(65536, 0);
    model.extend_from_slice(&big);
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
}
