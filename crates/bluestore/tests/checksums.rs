//! Checksums: a corrupted block on the device is an error naming the
//! object and the logical offset of the bad block, never data; the rest of
//! the object and the store keep working; deep fsck finds it.
//!
//! Corruption is made by flipping a byte of the device image under a
//! stopped store, located by searching the device for the bytes written.

mod common;

use cairn_bluestore::{Algorithm, BlueStore, ChecksumType, CompressionMode};
use cairn_store::{ObjectId, ObjectStore, StoreError};
use common::*;

const BLOCK: usize = 4096;

/// The device offset of `needle` (unique bytes written earlier).
fn locate(s: &MemStores, needle: &[u8]) -> u64 {
    let image = s.device.to_vec();
    let at = find(&image, needle).expect("written bytes are on the device");
    assert!(
        find(&image[at + 1..], needle).is_none(),
        "needle is not unique"
    );
    at as u64
}

/// Flip one byte of the (stopped) store's device.
fn flip(s: &MemStores, at: u64) {
    let mut b = s.device.read_sync(at & !4095, 4096).unwrap().to_vec();
    b[(at & 4095) as usize] ^= 0x5a;
    s.device.write_sync(at & !4095, &b).unwrap();
}

#[track_caller]
fn expect_checksum_error(
    r: cairn_store::Result<bytes::Bytes>,
    o: &ObjectId,
    offset: u64,
    phys: u64,
) {
    match r {
        Err(StoreError::Checksum {
            oid,
            offset: at,
            device_offset,
        }) => {
            assert_eq!(&oid, o, "names the object");
            assert_eq!(at, offset, "names the logical offset of the bad block");
            assert_eq!(device_offset, phys, "names the device offset");
        }
        Err(e) => panic!("expected a checksum error, got {e:?}"),
        Ok(_) => panic!("corrupt data was returned as data"),
    }
}

async fn corrupt_block_is_caught(csum: ChecksumType) {
    let mut s = MemStores::new(64 * MIB);
    s.mount.checksum = csum;
    let a = oid(C1, "a");
    let b = oid(C1, "b");
    let da = pattern(1, 64 * 1024);
    let db = pattern(2, 64 * 1024);
    {
        let store = s.open();
        commit(
            &*store,
            tx(|t| {
                t.write(&a, 0, bytes(da.clone()))
                    .write(&b, 0, bytes(db.clone()))
            }),
        )
        .await;
    }
    // Block 5 of `a`.
    let bad = 5 * BLOCK;
    let phys = locate(&s, &da[bad..bad + 64]);
    assert_eq!(phys % 4096, 0, "blocks are block-aligned on the device");
    flip(&s, phys + 100);

    let store = s.open();
    expect_checksum_error(
        store.read(&a, 0, da.len() as u64).await,
        &a,
        bad as u64,
        phys,
    );
    assert_eq!(store.perf().checksum_errors, 1);
    // Other blocks of the object, and other objects, read fine.
    assert_bytes(
        &read(&*store, &a, 0, bad as u64).await,
        &da[..bad],
        "blocks 0-4",
    );
    let after = (bad + BLOCK) as u64;
    assert_bytes(
        &read(&*store, &a, after, 64 * 1024 - after).await,
        &da[bad + BLOCK..],
        "blocks 6-15",
    );
    assert_bytes(&read_all(&*store, &b).await, &db, "other object");
    // A few bytes inside the bad block: still an error, same block offset.
    expect_checksum_error(
        store.read(&a, bad as u64 + 200, 10).await,
        &a,
        bad as u64,
        phys,
    );
    assert_eq!(store.perf().checksum_errors, 2);

    // Shallow fsck does not read data; deep fsck finds the block.
    let shallow = store.fsck(false, false).unwrap();
    assert!(shallow.is_clean(), "{shallow:?}");
    let deep = store.fsck(true, false).unwrap();
    assert_eq!(deep.errors.len(), 1, "{deep:?}");
    assert!(
        deep.errors[0].contains(&a.to_string()) && deep.errors[0].contains(&format!("{phys:#x}")),
        "{:?}",
        deep.errors
    );

    // A write that must read the bad block (partial overwrite) fails and
    // changes nothing.
    let r = store.submit(tx(|t| t.write(&a, bad as u64 + 10, bytes(vec![1; 10]))));
    assert!(
        matches!(r, Err(StoreError::Checksum { .. })),
        "read-modify-write of a bad block: {:?}",
        r.map(|_| ())
    );
    // Overwriting the whole block (what recovery from a replica does)
    // needs no read, and repairs it.
    let fresh = pattern(3, BLOCK);
    commit(
        &*store,
        tx(|t| t.write(&a, bad as u64, bytes(fresh.clone()))),
    )
    .await;
    let mut want = da.clone();
    want[bad..bad + BLOCK].copy_from_slice(&fresh);
    assert_bytes(&read_all(&*store, &a).await, &want, "after repair");
    drop(store);
    let store = s.open();
    assert_bytes(
        &read_all(&*store, &a).await,
        &want,
        "after repair and remount",
    );
    let deep = store.fsck(true, false).unwrap();
    assert!(deep.is_clean(), "{deep:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_block_is_a_checksum_error_crc32c() {
    corrupt_block_is_caught(ChecksumType::Crc32c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_block_is_a_checksum_error_xxhash64() {
    corrupt_block_is_caught(ChecksumType::Xxhash64).await;
}

/// With `ChecksumType::None` there is nothing to catch corruption: the
/// corrupted byte is returned as data and deep fsck finds nothing. That is
/// the documented cost of turning checksums off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_checksums_corruption_is_returned_as_data() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.checksum = ChecksumType::None;
    let a = oid(C1, "a");
    let da = pattern(1, 64 * 1024);
    {
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(da.clone())))).await;
    }
    let phys = locate(&s, &da[3 * BLOCK..3 * BLOCK + 64]);
    flip(&s, phys + 7);
    let store = s.open();
    let got = read_all(&*store, &a).await;
    let mut want = da.clone();
    want[3 * BLOCK + 7] ^= 0x5a;
    assert_bytes(&got, &want, "the corrupted byte comes back");
    assert_eq!(store.perf().checksum_errors, 0);
    assert!(store.fsck(true, false).unwrap().is_clean());
}

/// Blobs keep the checksum type they were written with: turning checksums
/// off later does not stop old data from being verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_keep_their_checksum_type_across_mounts() {
    let mut s = MemStores::new(64 * MIB);
    let a = oid(C1, "a");
    let da = pattern(1, 64 * 1024);
    {
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(da.clone())))).await;
    }
    let phys = locate(&s, &da[..64]);
    flip(&s, phys + 1);
    s.mount.checksum = ChecksumType::None;
    let store = s.open();
    expect_checksum_error(store.read(&a, 0, 10).await, &a, 0, phys);
}

/// A compressed blob is checked as stored (compressed) bytes; the error
/// names the blob's first logical byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_compressed_blob_is_a_checksum_error() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.compression_mode = CompressionMode::Force;
    s.mount.compression_algorithm = Algorithm::Zstd;
    let a = oid(C1, "a");
    let data = text(256 * 1024);
    let data_start = {
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(data.clone())))).await;
        assert!(store.perf().compressed_blobs >= 1);
        store.superblock().data_start
    };
    // Nothing but compressed blobs in data space (after the label and the
    // journal): the first non-zero byte there starts the first blob.
    let image = s.device.to_vec();
    let from = data_start as usize;
    let phys = data_start + image[from..].iter().position(|&b| b != 0).unwrap() as u64;
    assert_eq!(phys % 4096, 0);
    flip(&s, phys + 3);
    let store = s.open();
    expect_checksum_error(store.read(&a, 100, 10).await, &a, 0, phys);
    assert_eq!(store.perf().checksum_errors, 1);
    // Later blobs (64 KiB each) still read.
    assert_bytes(
        &read(&*store, &a, 64 * 1024, 192 * 1024).await,
        &data[64 * 1024..],
        "other blobs",
    );
    let deep = store.fsck(true, false).unwrap();
    assert_eq!(deep.errors.len(), 1, "{deep:?}");
}

/// Deep fsck reads every live block, also of blobs an overwrite or zero
/// has partly released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_fsck_checks_partly_released_blobs() {
    let mut s = MemStores::new(64 * MIB);
    let a = oid(C1, "a");
    let da = pattern(1, 64 * 1024);
    {
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(da.clone())))).await;
        // Zeroing whole blocks in the middle releases their units: the
        // blob is now partly released.
        commit(&*store, tx(|t| t.zero(&a, 16384, 8192))).await;
        assert!(store.fsck(true, false).unwrap().is_clean());
    }
    let phys = locate(&s, &da[BLOCK * 9..BLOCK * 9 + 64]);
    flip(&s, phys + 1);
    let store: std::sync::Arc<BlueStore> = s.open();
    expect_checksum_error(
        store.read(&a, 0, 64 * 1024).await,
        &a,
        9 * BLOCK as u64,
        phys,
    );
    let deep = store.fsck(true, false).unwrap();
    assert_eq!(
        deep.errors.len(),
        1,
        "deep fsck misses the bad block: {deep:?}"
    );
    assert!(deep.errors[0].contains(&format!("{phys:#x}")), "{deep:?}");
}
