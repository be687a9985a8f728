//! One conformance suite, run against every BlockDevice implementation.

mod common;

use std::sync::Arc;

use cairn_device::{block_on, AlignedBuf, DeviceError, BLOCK_SIZE};
use common::{pattern, TestDev};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime")
}

/// Random writes (driven by block_on from this plain thread), then reads
/// compared against a model of the device.
fn random_write_read(t: TestDev) {
    let dev = &t.dev;
    let size = dev.size();
    let blocks = size / BLOCK_SIZE;
    let mut model = vec![0u8; size as usize];
    let mut rng = SmallRng::seed_from_u64(1);
    let mut written = Vec::new();
    for i in 0..200u64 {
        let n = rng.gen_range(1..=16u64);
        let off = rng.gen_range(0..=blocks - n) * BLOCK_SIZE;
        let data = pattern(i, n);
        block_on(dev.write(off, AlignedBuf::from_slice(&data))).expect("write");
        model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        written.push((off, n * BLOCK_SIZE));
    }
    for (off, len) in written {
        let got = block_on(dev.read(off, len)).expect("read");
        assert_eq!(&got[..], &model[off as usize..(off + len) as usize]);
    }
    let all = block_on(dev.read(0, size)).expect("full read");
    assert!(all[..] == model[..], "full-device read differs from model");
}

/// 256 writes in flight at once on a multi-thread runtime, then 256 reads
/// in flight at once.
fn concurrent_ops(t: TestDev) {
    let rt = runtime();
    let dev = Arc::clone(&t.dev);
    rt.block_on(async move {
        let mut set = tokio::task::JoinSet::new();
        let mut checks = tokio::task::JoinSet::new();
        let futs: Vec<_> = (0..256u64)
            .map(|i| {
                dev.write(
                    i * 2 * BLOCK_SIZE,
                    AlignedBuf::from_slice(&pattern(1000 + i, 2)),
                )
            })
            .collect();
        for f in futs {
            set.spawn(f);
        }
        while let Some(r) = set.join_next().await {
            r.expect("join").expect("write");
        }
        let futs: Vec<_> = (0..256u64)
            .map(|i| {
                let f = dev.read(i * 2 * BLOCK_SIZE, 2 * BLOCK_SIZE);
                async move { (i, f.await) }
            })
            .collect();
        for f in futs {
            checks.spawn(async move {
                let (i, r) = f.await;
                let buf = r.expect("read");
                assert_eq!(&buf[..], &pattern(1000 + i, 2)[..]);
            });
        }
        while let Some(r) = checks.join_next().await {
            r.expect("join");
        }
        // Mixed: writers and readers of disjoint blocks racing.
        for i in 0..128u64 {
            let d = Arc::clone(&dev);
            checks.spawn(async move {
                let off = (600 + i) * BLOCK_SIZE;
                d.write(off, AlignedBuf::from_slice(&pattern(i, 1)))
                    .await
                    .expect("write");
                let got = d.read(off, BLOCK_SIZE).await.expect("read");
                assert_eq!(&got[..], &pattern(i, 1)[..]);
            });
        }
        while let Some(r) = checks.join_next().await {
            r.expect("join");
        }
    });
}

fn write_many(t: TestDev) {
    let dev = &t.dev;
    let writes: Vec<_> = (0..64u64)
        .map(|i| {
            (
                (i * 7 % 256) * 3 * BLOCK_SIZE,
                AlignedBuf::from_slice(&pattern(500 + i, 3)),
            )
        })
        .collect();
    let expect: Vec<_> = writes.iter().map(|(o, b)| (*o, b.clone())).collect();
    block_on(dev.write_many(writes)).expect("write_many");
    for (off, buf) in expect {
        let got = block_on(dev.read(off, buf.len() as u64)).expect("read");
        assert_eq!(got, buf);
    }
    block_on(dev.write_many(Vec::new())).expect("empty write_many");
    // One bad element fails the whole batch and writes nothing.
    let bad = vec![
        (0, AlignedBuf::from_slice(&pattern(9, 1))),
        (dev.size(), AlignedBuf::from_slice(&pattern(9, 1))),
    ];
    let before = block_on(dev.read(0, BLOCK_SIZE)).expect("read");
    let err = block_on(dev.write_many(bad)).expect_err("out of range batch");
    assert!(matches!(err, DeviceError::OutOfRange { .. }), "{err}");
    assert_eq!(block_on(dev.read(0, BLOCK_SIZE)).expect("read"), before);
}

/// Many writes (single blocks and runs, more than the window) from a
/// thread that blocks on them, from two threads in turn (each with its own
/// ring on a file device), then read back; one bad element fails the call
/// and writes nothing.
fn write_all_blocking(t: TestDev) {
    let dev = &t.dev;
    let mut rng = SmallRng::seed_from_u64(11);
    let blocks = dev.size() / BLOCK_SIZE;
    for (round, depth) in [(0u64, 32usize), (1, 4), (2, 1), (3, 10_000)] {
        let writes: Vec<_> = (0..300u64)
            .map(|i| {
                let len = if i % 5 == 0 { 3 } else { 1 };
                let block = (i * 7 + round) % (blocks / 4) * 4;
                (
                    block * BLOCK_SIZE,
                    AlignedBuf::from_slice(&pattern(round * 1000 + i + rng.gen_range(0..9), len)),
                )
            })
            .collect();
        // The last write to each place wins: keep those to compare.
        let mut expect = std::collections::BTreeMap::new();
        for (o, b) in &writes {
            for k in 0..b.len() as u64 / BLOCK_SIZE {
                let at = (k * BLOCK_SIZE) as usize;
                expect.insert(o + k * BLOCK_SIZE, b[at..at + BLOCK_SIZE as usize].to_vec());
            }
        }
        // Distinct places only: a bulk write's order on the device is not
        // its order in the list.
        let mut seen = std::collections::HashSet::new();
        let writes: Vec<_> = writes
            .into_iter()
            .filter(|(o, b)| {
                (0..b.len() as u64 / BLOCK_SIZE).all(|k| seen.insert(o + k * BLOCK_SIZE))
            })
            .collect();
        let expect: Vec<_> = expect
            .into_iter()
            .filter(|(o, _)| seen.contains(o))
            .collect();
        let dev2 = Arc::clone(dev);
        std::thread::spawn(move || {
            dev2.write_all_blocking(writes, depth)
                .expect("write_all_blocking");
            dev2.flush_blocking().expect("flush_blocking");
        })
        .join()
        .expect("writer thread");
        for (off, data) in expect {
            let got = block_on(dev.read(off, BLOCK_SIZE)).expect("read");
            assert_eq!(&got[..], &data[..], "block at {off} after round {round}");
        }
    }
    dev.write_all_blocking(Vec::new(), 8)
        .expect("nothing to write");
    let bad = vec![
        (0, AlignedBuf::from_slice(&pattern(9, 1))),
        (dev.size(), AlignedBuf::from_slice(&pattern(9, 1))),
    ];
    let before = block_on(dev.read(0, BLOCK_SIZE)).expect("read");
    let err = dev.write_all_blocking(bad, 8).expect_err("out of range");
    assert!(matches!(err, DeviceError::OutOfRange { .. }), "{err}");
    assert_eq!(block_on(dev.read(0, BLOCK_SIZE)).expect("read"), before);
}

fn bad_requests(t: TestDev) {
    let dev = &t.dev;
    let size = dev.size();
    let one = || AlignedBuf::zeroed(BLOCK_SIZE as usize);
    let misaligned =
        |r: Result<_, DeviceError>| assert!(matches!(r, Err(DeviceError::Misaligned { .. })));
    misaligned(block_on(dev.read(1, BLOCK_SIZE)).map(|_| ()));
    misaligned(block_on(dev.read(0, 100)).map(|_| ()));
    misaligned(block_on(dev.write(512, one())));
    misaligned(block_on(dev.discard(0, 10)));
    misaligned(block_on(dev.write_many(vec![(3, one())])));
    let oor = |r: Result<_, DeviceError>| match r {
        Err(DeviceError::OutOfRange { size: s, .. }) => assert_eq!(s, size),
        Err(e) => panic!("expected OutOfRange, got {e}"),
        Ok(_) => panic!("expected OutOfRange, got Ok"),
    };
    oor(block_on(dev.read(size, BLOCK_SIZE)).map(|_| ()));
    oor(block_on(dev.read(size - BLOCK_SIZE, 2 * BLOCK_SIZE)).map(|_| ()));
    oor(block_on(dev.read(u64::MAX - BLOCK_SIZE + 1, BLOCK_SIZE)).map(|_| ()));
    oor(block_on(dev.write(size, one())));
    oor(block_on(dev.discard(size - BLOCK_SIZE, 2 * BLOCK_SIZE)));
    let msg = block_on(dev.read(size, BLOCK_SIZE))
        .expect_err("oor")
        .to_string();
    assert!(msg.contains(&size.to_string()), "{msg}");
    // Still works, including the very last block and empty requests.
    let last = size - BLOCK_SIZE;
    block_on(dev.write(last, AlignedBuf::from_slice(&pattern(77, 1)))).expect("write");
    let got = block_on(dev.read(last, BLOCK_SIZE)).expect("read");
    assert_eq!(&got[..], &pattern(77, 1)[..]);
    assert!(block_on(dev.read(0, 0)).expect("empty read").is_empty());
    block_on(dev.write(0, AlignedBuf::zeroed(0))).expect("empty write");
    block_on(dev.discard(0, BLOCK_SIZE)).expect("discard");
}

fn flush(t: TestDev) {
    let dev = &t.dev;
    block_on(dev.flush()).expect("flush on clean device");
    block_on(dev.write(8 * BLOCK_SIZE, AlignedBuf::from_slice(&pattern(3, 4)))).expect("write");
    block_on(dev.flush()).expect("flush");
    block_on(dev.flush()).expect("flush again");
    let got = block_on(dev.read(8 * BLOCK_SIZE, 4 * BLOCK_SIZE)).expect("read");
    assert_eq!(&got[..], &pattern(3, 4)[..]);
}

fn fresh_reads_zero(t: TestDev) {
    let dev = &t.dev;
    let got = block_on(dev.read(0, dev.size())).expect("read");
    assert!(got.iter().all(|&b| b == 0), "fresh device not zero");
    block_on(dev.write(BLOCK_SIZE, AlignedBuf::from_slice(&pattern(5, 1)))).expect("write");
    let got = block_on(dev.read(2 * BLOCK_SIZE, 8 * BLOCK_SIZE)).expect("read");
    assert!(got.iter().all(|&b| b == 0), "unwritten range not zero");
}

/// Futures from a device can be driven from several plain threads at once.
fn plain_threads(t: TestDev) {
    let handles: Vec<_> = (0..4u64)
        .map(|k| {
            let dev = Arc::clone(&t.dev);
            std::thread::spawn(move || {
                for i in 0..32u64 {
                    let off = (k * 64 + i) * BLOCK_SIZE;
                    let data = pattern(k * 100 + i, 1);
                    block_on(dev.write(off, AlignedBuf::from_slice(&data))).expect("write");
                    let got = block_on(dev.read(off, BLOCK_SIZE)).expect("read");
                    assert_eq!(&got[..], &data[..]);
                }
                block_on(dev.flush()).expect("flush");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
}

macro_rules! conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn random_write_read() {
                super::random_write_read($make);
            }
            #[test]
            fn concurrent_ops() {
                super::concurrent_ops($make);
            }
            #[test]
            fn write_many() {
                super::write_many($make);
            }
            #[test]
            fn write_all_blocking() {
                super::write_all_blocking($make);
            }
            #[test]
            fn bad_requests() {
                super::bad_requests($make);
            }
            #[test]
            fn flush() {
                super::flush($make);
            }
            #[test]
            fn fresh_reads_zero() {
                super::fresh_reads_zero($make);
            }
            #[test]
            fn plain_threads() {
                super::plain_threads($make);
            }
        }
    };
}

conformance!(mem, common::mem());
conformance!(fault, common::fault());
conformance!(emulated_hdd, common::hdd());
conformance!(file_threads, common::file_threads());
conformance!(file_uring, common::file_uring());
conformance!(
    file_uring_qd1,
    common::file_dev(cairn_device::FileDeviceOptions {
        engine: cairn_device::IoEngine::Uring,
        queue_depth: 1,
        ..Default::default()
    })
);
conformance!(
    file_threads_buffered,
    common::file_dev(cairn_device::FileDeviceOptions {
        engine: cairn_device::IoEngine::Threads,
        direct: false,
        threads: 1,
        ..Default::default()
    })
);
