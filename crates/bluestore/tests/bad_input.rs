//! Bad input to mkfs and mount: each is refused with an error that says
//! what is wrong, and a refused mkfs changes nothing.

mod common;

use std::sync::Arc;

use cairn_bluestore::{
    mkfs, read_label, BlueStore, Label, MkfsOptions, MountOptions, MIN_DEVICE_BYTES,
};
use cairn_device::{BlockDevice, FaultDevice, FaultOn, MemDevice};
use cairn_kv::{Batch, Kv, MemKv};
use cairn_store::{ObjectStore, StoreError};
use common::*;

fn mount(device: &Arc<MemDevice>, kv: &Arc<MemKv>) -> cairn_store::Result<Arc<BlueStore>> {
    let d: Arc<dyn BlockDevice> = device.clone();
    let k: Arc<dyn Kv> = kv.clone();
    BlueStore::mount(d, k, MountOptions::default())
}

/// The message of an `Invalid` error.
#[track_caller]
fn invalid<T>(r: cairn_store::Result<T>) -> String {
    match r {
        Err(StoreError::Invalid(msg)) => msg,
        Err(e) => panic!("expected Invalid, got {e:?}"),
        Ok(_) => panic!("expected Invalid, got Ok"),
    }
}

/// The message of a `Corrupt` error.
#[track_caller]
fn corrupt<T>(r: cairn_store::Result<T>) -> String {
    match r {
        Err(StoreError::Corrupt(msg)) => msg,
        Err(e) => panic!("expected Corrupt, got {e:?}"),
        Ok(_) => panic!("expected Corrupt, got Ok"),
    }
}

#[track_caller]
fn untouched(device: &MemDevice, kv: &MemKv, before: &[u8]) {
    assert!(device.to_vec() == before, "device changed");
    assert!(kv.is_empty(), "database changed");
}

#[test]
fn mkfs_refuses_a_small_device() {
    let size = MIN_DEVICE_BYTES / 2;
    let device = MemDevice::new(size);
    let kv = MemKv::new();
    let msg = invalid(mkfs(&device, &kv, &MkfsOptions::default()));
    assert!(msg.contains(&size.to_string()), "{msg}");
    assert!(msg.contains("too small"), "{msg}");
    untouched(&device, &kv, &vec![0; size as usize]);
    // Just big enough works.
    let device = MemDevice::new(MIN_DEVICE_BYTES);
    mkfs(&device, &kv, &MkfsOptions::default()).unwrap();
}

#[test]
fn mkfs_refuses_bad_options() {
    let device = MemDevice::new(32 * MIB);
    let kv = MemKv::new();
    let blank = device.to_vec();
    let bad = [
        (3000, 256 * KIB, "min_alloc_size"),
        (0, 256 * KIB, "min_alloc_size"),
        (2048, 256 * KIB, "min_alloc_size"),
        (12288, 12288 * 20, "min_alloc_size"),
        (4096, 100_000, "shard size"),
        (64 * KIB, 32 * KIB, "shard size"),
        (4096, 128 * MIB, "shard size"),
    ];
    for (au, shard, what) in bad {
        let opts = MkfsOptions {
            min_alloc_size: au,
            shard_size: shard,
            force: true,
            ..MkfsOptions::default()
        };
        let msg = invalid(mkfs(&device, &kv, &opts));
        assert!(msg.contains(what), "au {au} shard {shard}: {msg}");
        untouched(&device, &kv, &blank);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkfs_refuses_a_formatted_device_unless_forced() {
    let mut s = MemStores::new(32 * MIB);
    let a = oid(C1, "a");
    let data = pattern(1, 100_000);
    let id = {
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(data.clone())))).await;
        store.superblock().id()
    };
    let image = s.device.to_vec();
    let keys = s.kv.len();

    // With its own database, and with a fresh one: refused.
    for kv in [s.kv.clone(), Arc::new(MemKv::new())] {
        let msg = invalid(mkfs(&*s.device, &*kv, &MkfsOptions::default()));
        assert!(
            msg.contains(&format!("already holds Cairn store {id}")),
            "{msg}"
        );
    }
    assert!(s.device.to_vec() == image, "device changed");
    assert_eq!(s.kv.len(), keys, "database changed");
    let store = s.open();
    assert_bytes(
        &read_all(&*store, &a).await,
        &data,
        "data after a refused mkfs",
    );
    drop(store);

    // Forced: a new, empty store.
    let forced = MkfsOptions {
        force: true,
        ..MkfsOptions::default()
    };
    let sb = mkfs(&*s.device, &*s.kv, &forced).unwrap();
    assert_ne!(sb.id(), id);
    assert_eq!(read_label(&*s.device).unwrap(), Label::Store(sb.clone()));
    let store = s.open();
    assert_eq!(store.superblock().id(), sb.id());
    assert!(matches!(store.stat(&a), Err(StoreError::NotFound(_))));
    assert!(store.list_collections().unwrap().is_empty());
    let st = store.statfs().unwrap();
    assert_eq!((st.used_bytes, st.objects), (0, 0));
    assert!(store.fsck(true, false).unwrap().is_clean());
}

#[test]
fn mkfs_refuses_foreign_data_unless_forced() {
    let device = MemDevice::new(32 * MIB);
    let mut block = vec![0u8; 4096];
    block[..4].copy_from_slice(b"XFSB");
    block[100..110].copy_from_slice(b"not cairn!");
    device.write_sync(0, &block).unwrap();
    let image = device.to_vec();
    let kv = MemKv::new();
    assert_eq!(read_label(&device).unwrap(), Label::Foreign);
    let msg = invalid(mkfs(&device, &kv, &MkfsOptions::default()));
    assert!(msg.contains("not a Cairn store"), "{msg}");
    untouched(&device, &kv, &image);
    let forced = MkfsOptions {
        force: true,
        ..MkfsOptions::default()
    };
    mkfs(&device, &kv, &forced).unwrap();
    assert!(matches!(read_label(&device).unwrap(), Label::Store(_)));
}

#[test]
fn mkfs_refuses_a_database_in_use() {
    let device = MemDevice::new(32 * MIB);
    let kv = MemKv::new();
    let mut b = Batch::new();
    b.put(b"somebody".to_vec(), b"else".to_vec());
    kv.write(b, true).unwrap();
    let msg = invalid(mkfs(&device, &kv, &MkfsOptions::default()));
    assert!(msg.contains("not empty"), "{msg}");
    assert!(device.to_vec().iter().all(|&b| b == 0), "device changed");
    assert_eq!(kv.len(), 1);
}

#[test]
fn mkfs_fails_cleanly_when_the_label_cannot_be_read() {
    let device = FaultDevice::new(32 * MIB);
    device.inject_eio(0..4096, FaultOn::Reads);
    let kv = MemKv::new();
    match mkfs(&device, &kv, &MkfsOptions::default()) {
        Err(StoreError::Io(_)) => {}
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert!(kv.is_empty());
    device.clear_faults();
    assert_eq!(read_label(&device).unwrap(), Label::Blank);
}

#[test]
fn mount_refuses_a_blank_device() {
    let device = Arc::new(MemDevice::new(32 * MIB));
    let kv = Arc::new(MemKv::new());
    let msg = corrupt(mount(&device, &kv));
    assert!(msg.contains("not formatted"), "{msg}");
}

#[test]
fn mount_refuses_another_stores_database() {
    let mut one = MemStores::new(32 * MIB);
    let mut two = MemStores::new(32 * MIB);
    let id1 = one.open().superblock().id();
    let id2 = two.open().superblock().id();
    assert_ne!(id1, id2);
    let msg = corrupt(mount(&one.device, &two.kv));
    assert!(msg.contains(&id1) && msg.contains(&id2), "{msg}");
    let msg = corrupt(mount(&two.device, &one.kv));
    assert!(msg.contains(&id1) && msg.contains(&id2), "{msg}");
    // A database that is not a store's at all.
    let msg = corrupt(mount(&one.device, &Arc::new(MemKv::new())));
    assert!(msg.contains("no superblock"), "{msg}");
    // Both still mount with their own.
    one.open();
    two.open();
}

#[test]
fn mount_refuses_a_corrupt_label() {
    let mut s = MemStores::new(32 * MIB);
    drop(s.open());
    let label = s.device.read_sync(0, 4096).unwrap().to_vec();
    // A flipped byte in the superblock body: its checksum fails.
    let mut bad = label.clone();
    bad[20] ^= 0x01;
    s.device.write_sync(0, &bad).unwrap();
    let msg = corrupt(mount(&s.device, &s.kv));
    assert!(msg.contains("checksum"), "{msg}");
    assert!(read_label(&*s.device).is_err());
    // A damaged magic: not our label at all.
    let mut bad = label.clone();
    bad[0] ^= 0x01;
    s.device.write_sync(0, &bad).unwrap();
    let msg = corrupt(mount(&s.device, &s.kv));
    assert!(msg.contains("label"), "{msg}");
    // Restored, it mounts again.
    s.device.write_sync(0, &label).unwrap();
    s.open();
}

#[test]
fn mount_refuses_a_shrunk_device() {
    let mut s = MemStores::new(32 * MIB);
    drop(s.open());
    let mut image = s.device.to_vec();
    image.truncate(24 * MIB as usize);
    let shrunk = Arc::new(MemDevice::from_vec(image));
    let msg = corrupt(mount(&shrunk, &s.kv));
    assert!(msg.contains("shrank"), "{msg}");
}

#[test]
fn mount_refuses_a_corrupt_free_list() {
    let mut s = MemStores::new(32 * MIB);
    drop(s.open());
    let key = |o: u64| {
        let mut k = vec![b'F'];
        k.extend_from_slice(&o.to_be_bytes());
        k
    };
    // An entry overlapping the one mkfs wrote, and an unaligned one.
    for (offset, len) in [(8192u64, 4096u64), (4096 * 3 + 1, 4096)] {
        let mut b = Batch::new();
        b.put(key(offset), len.to_be_bytes().to_vec());
        s.kv.write(b, true).unwrap();
        let msg = corrupt(mount(&s.device, &s.kv));
        assert!(msg.contains("free list"), "{msg}");
        let mut b = Batch::new();
        b.delete(key(offset));
        s.kv.write(b, true).unwrap();
    }
    s.open();
}
