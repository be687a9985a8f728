//! FaultDevice: injected EIO, flush failures, counters and crash images.

mod common;

use cairn_device::{
    block_on, AlignedBuf, BlockDevice, CrashPolicy, DeviceError, FaultDevice, FaultOn, MemDevice,
    BLOCK_SIZE,
};
use common::pattern;

const B: u64 = BLOCK_SIZE;

fn is_eio(r: Result<(), DeviceError>) -> bool {
    matches!(&r, Err(e @ DeviceError::Io { .. }) if e.raw_os_error() == Some(libc::EIO))
}

fn write(dev: &FaultDevice, off: u64, data: &[u8]) -> Result<(), DeviceError> {
    block_on(dev.write(off, AlignedBuf::from_slice(data)))
}

fn read(dev: &FaultDevice, off: u64, len: u64) -> Result<AlignedBuf, DeviceError> {
    block_on(dev.read(off, len))
}

#[test]
fn eio_only_on_chosen_ranges() {
    let dev = FaultDevice::new(64 * B);
    write(&dev, 0, &pattern(1, 64)).expect("seed");
    dev.inject_eio(8 * B..10 * B, FaultOn::Reads);
    dev.inject_eio(20 * B..21 * B, FaultOn::Writes);
    dev.inject_eio(30 * B..31 * B, FaultOn::Both);

    // Reads: only ranges touching a Reads/Both fault fail.
    assert!(read(&dev, 0, 8 * B).is_ok());
    assert!(read(&dev, 10 * B, 10 * B).is_ok());
    assert!(is_eio(read(&dev, 9 * B, B).map(|_| ())));
    assert!(is_eio(read(&dev, 4 * B, 8 * B).map(|_| ())));
    assert!(read(&dev, 20 * B, B).is_ok(), "write-only fault hit a read");
    assert!(is_eio(read(&dev, 30 * B, B).map(|_| ())));
    let msg = read(&dev, 8 * B, B).expect_err("eio").to_string();
    assert!(
        msg.contains("read") && msg.contains(&(8 * B).to_string()),
        "{msg}"
    );

    // Writes: a failing write changes nothing.
    assert!(
        write(&dev, 8 * B, &pattern(2, 1)).is_ok(),
        "read-only fault hit a write"
    );
    assert!(is_eio(write(&dev, 19 * B, &pattern(3, 2))));
    assert_eq!(
        &read(&dev, 19 * B, 2 * B).expect("read")[..],
        &pattern(1, 64)[19 * 4096..21 * 4096]
    );
    assert!(is_eio(write(&dev, 30 * B, &pattern(3, 1))));
    assert!(write(&dev, 31 * B, &pattern(3, 1)).is_ok());
    assert_eq!(dev.injected_errors(), 6);

    // write_many: good elements applied, first error returned.
    let r = block_on(dev.write_many(vec![
        (40 * B, AlignedBuf::from_slice(&pattern(4, 1))),
        (20 * B, AlignedBuf::from_slice(&pattern(5, 1))),
        (41 * B, AlignedBuf::from_slice(&pattern(6, 1))),
    ]));
    assert!(is_eio(r));
    assert_eq!(
        &read(&dev, 40 * B, B).expect("read")[..],
        &pattern(4, 1)[..]
    );
    assert_eq!(
        &read(&dev, 41 * B, B).expect("read")[..],
        &pattern(6, 1)[..]
    );
    assert_eq!(dev.injected_errors(), 7);

    dev.clear_faults();
    assert!(read(&dev, 0, 64 * B).is_ok());
    assert!(write(&dev, 30 * B, &pattern(7, 1)).is_ok());
    assert_eq!(dev.injected_errors(), 7);
}

#[test]
fn counters_and_failed_flush() {
    let dev = FaultDevice::new(16 * B);
    write(&dev, 0, &pattern(1, 2)).expect("write");
    block_on(dev.write_many(vec![
        (4 * B, AlignedBuf::from_slice(&pattern(2, 1))),
        (5 * B, AlignedBuf::from_slice(&pattern(3, 1))),
    ]))
    .expect("write_many");
    assert_eq!(dev.writes(), 3);
    assert_eq!(dev.unflushed(), 3);

    dev.fail_flush_once();
    assert!(is_eio(block_on(dev.flush())));
    assert_eq!(
        dev.unflushed(),
        3,
        "failed flush must not make writes durable"
    );
    assert_eq!(
        dev.crash_image(0, CrashPolicy::DropAll).to_vec(),
        vec![0; 16 * 4096]
    );

    block_on(dev.flush()).expect("second flush succeeds");
    assert_eq!(dev.flushes(), 2);
    assert_eq!(dev.unflushed(), 0);
    assert_eq!(dev.injected_errors(), 1);
    let img = dev.crash_image(0, CrashPolicy::DropAll).to_vec();
    assert_eq!(&img[..2 * 4096], &pattern(1, 2)[..]);
    assert_eq!(&img[5 * 4096..6 * 4096], &pattern(3, 1)[..]);
}

/// Flushed content, plus unflushed writes W1 (4 blocks at 8) and W2
/// (2 blocks at 10, overlapping W1's last two blocks), plus W3 (1 block
/// at 20). Returns the device and the durable image.
fn history() -> (FaultDevice, Vec<u8>) {
    let dev = FaultDevice::new(32 * B);
    write(&dev, 0, &pattern(100, 32)).expect("base");
    block_on(dev.flush()).expect("flush");
    let durable = pattern(100, 32);
    write(&dev, 8 * B, &pattern(1, 4)).expect("w1");
    write(&dev, 10 * B, &pattern(2, 2)).expect("w2");
    write(&dev, 20 * B, &pattern(3, 1)).expect("w3");
    assert_eq!(dev.unflushed(), 3);
    (dev, durable)
}

fn blk(v: &[u8], i: u64) -> &[u8] {
    &v[(i * B) as usize..((i + 1) * B) as usize]
}

#[test]
fn crash_drop_all_and_keep_all() {
    let (dev, durable) = history();
    assert_eq!(dev.crash_image(1, CrashPolicy::DropAll).to_vec(), durable);
    let keep = dev.crash_image(1, CrashPolicy::KeepAll).to_vec();
    assert_eq!(keep, dev.current_image().to_vec());
    let mut expect = durable.clone();
    expect[8 * 4096..12 * 4096].copy_from_slice(&pattern(1, 4));
    expect[10 * 4096..12 * 4096].copy_from_slice(&pattern(2, 2));
    expect[20 * 4096..21 * 4096].copy_from_slice(&pattern(3, 1));
    assert_eq!(keep, expect);
}

/// Expected image when each write's survival is given by `keep`.
fn apply(durable: &[u8], keep: [bool; 3]) -> Vec<u8> {
    let mut img = durable.to_vec();
    let writes = [
        (8u64, pattern(1, 4)),
        (10, pattern(2, 2)),
        (20, pattern(3, 1)),
    ];
    for ((off, data), k) in writes.iter().zip(keep) {
        if k {
            let s = (off * B) as usize;
            img[s..s + data.len()].copy_from_slice(data);
        }
    }
    img
}

#[test]
fn crash_random_is_whole_writes_and_deterministic() {
    let (dev, durable) = history();
    let mut seen = std::collections::HashSet::new();
    for seed in 0..64 {
        let img = dev.crash_image(seed, CrashPolicy::Random).to_vec();
        assert_eq!(img, dev.crash_image(seed, CrashPolicy::Random).to_vec());
        let combo = (0..8u8)
            .map(|m| [m & 1 != 0, m & 2 != 0, m & 4 != 0])
            .find(|k| apply(&durable, *k) == img)
            .expect("image is not a whole-write subset of the history");
        seen.insert(combo);
    }
    assert!(
        seen.len() >= 6,
        "random policy explored only {} outcomes",
        seen.len()
    );
}

#[test]
fn crash_torn_mixes_blocks_deterministically() {
    let (dev, durable) = history();
    let w1 = pattern(1, 4);
    let w2 = pattern(2, 2);
    let mut torn_seen = false;
    for seed in 0..64 {
        let img = dev.crash_image(seed, CrashPolicy::Torn).to_vec();
        assert_eq!(img, dev.crash_image(seed, CrashPolicy::Torn).to_vec());
        // Outside the unflushed writes: exactly durable.
        for i in (0..32).filter(|i| !(8..12).contains(i) && *i != 20) {
            assert_eq!(blk(&img, i), blk(&durable, i));
        }
        // Each block of each write: old or one of the writes covering it.
        for i in 8..12u64 {
            let b = blk(&img, i);
            let new1 = blk(&w1, i - 8);
            let ok = b == blk(&durable, i) || b == new1 || (i >= 10 && b == blk(&w2, i - 10));
            assert!(ok, "seed {seed} block {i} has foreign content");
        }
        if (8..10).any(|i| blk(&img, i) == blk(&w1, i - 8))
            && (8..10).any(|i| blk(&img, i) == blk(&durable, i))
        {
            torn_seen = true;
        }
        let b20 = blk(&img, 20);
        assert!(b20 == blk(&durable, 20) || b20 == &pattern(3, 1)[..]);
    }
    assert!(torn_seen, "no seed tore W1's first two blocks");
    let a = dev.crash_image(1, CrashPolicy::Torn).to_vec();
    assert!((2..40).any(|s| dev.crash_image(s, CrashPolicy::Torn).to_vec() != a));
}

#[test]
fn remount_from_crash_image_and_crash_again() {
    let (dev, durable) = history();
    let img: MemDevice = dev.crash_image(9, CrashPolicy::KeepAll);
    let dev2 = FaultDevice::from_image(img);
    assert_eq!(dev2.size(), 32 * B);
    assert_eq!(dev2.unflushed(), 0);
    let keep = dev.current_image().to_vec();
    assert_eq!(read(&dev2, 0, 32 * B).expect("read")[..], keep[..]);
    write(&dev2, 0, &pattern(50, 1)).expect("write");
    let again = dev2.crash_image(3, CrashPolicy::DropAll).to_vec();
    assert_eq!(again, keep);
    assert_ne!(again, durable);
    block_on(dev2.flush()).expect("flush");
    let third = dev2.crash_image(3, CrashPolicy::DropAll).to_vec();
    assert_eq!(blk(&third, 0), &pattern(50, 1)[..]);
}
