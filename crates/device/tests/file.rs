//! FileDevice specifics: creation, opening, discard, shutdown with requests
//! in flight, and the (ignored) engine benchmark.

mod common;

use std::os::unix::fs::MetadataExt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cairn_device::{
    block_on, open_device, AlignedBuf, BlockDevice, DeviceError, FileDevice, FileDeviceOptions,
    IoEngine, BLOCK_SIZE,
};
use common::{open_direct_or_buffered, pattern};

const B: u64 = BLOCK_SIZE;

fn engines() -> [FileDeviceOptions; 2] {
    [
        FileDeviceOptions {
            engine: IoEngine::Threads,
            ..Default::default()
        },
        FileDeviceOptions {
            engine: IoEngine::Uring,
            ..Default::default()
        },
    ]
}

#[test]
fn create_file_preallocates_real_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, 10 * B + 1).expect("create");
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.len(), 11 * B, "size rounds up to the block size");
    assert!(
        meta.blocks() * 512 >= 11 * B,
        "file is sparse: {} blocks",
        meta.blocks()
    );
    let dev = open_direct_or_buffered(&path, FileDeviceOptions::default()).expect("open");
    assert_eq!(dev.size(), 11 * B);
    assert!(!dev.is_block_device());
    let all = block_on(dev.read(0, 11 * B)).expect("read");
    assert!(all.iter().all(|&b| b == 0));

    // Recreating truncates and reallocates.
    drop(dev);
    FileDevice::create_file(&path, 4 * B).expect("recreate");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 4 * B);
}

#[test]
fn create_file_refuses_non_regular_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = FileDevice::create_file(dir.path(), B).expect_err("directory");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[test]
fn size_rounds_down_and_open_errors_name_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("odd");
    std::fs::write(&path, vec![1u8; (3 * B + 100) as usize]).expect("write");
    let dev = open_device(
        &path,
        FileDeviceOptions {
            direct: false,
            ..Default::default()
        },
    )
    .expect("open");
    assert_eq!(dev.size(), 3 * B);

    let missing = dir.path().join("missing");
    let err = FileDevice::open(&missing, FileDeviceOptions::default()).expect_err("missing");
    assert!(matches!(err, DeviceError::Open { .. }));
    assert!(err.to_string().contains("missing"), "{err}");
    let err = FileDevice::open(dir.path(), FileDeviceOptions::default()).expect_err("dir");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[test]
fn discard_punches_holes_only_when_enabled() {
    for base in engines() {
        for enabled in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("dev");
            FileDevice::create_file(&path, 64 * B).expect("create");
            let opts = FileDeviceOptions {
                discard: enabled,
                ..base.clone()
            };
            let dev = open_direct_or_buffered(&path, opts).expect("open");
            block_on(dev.write(0, AlignedBuf::from_slice(&pattern(1, 64)))).expect("write");
            block_on(dev.flush()).expect("flush");
            block_on(dev.discard(16 * B, 16 * B)).expect("discard");
            let got = block_on(dev.read(0, 64 * B)).expect("read");
            let want = pattern(1, 64);
            assert_eq!(&got[..16 * 4096], &want[..16 * 4096]);
            assert_eq!(&got[32 * 4096..], &want[32 * 4096..]);
            let mid = &got[16 * 4096..32 * 4096];
            if enabled {
                assert!(
                    mid.iter().all(|&b| b == 0),
                    "{:?}: hole not zero",
                    base.engine
                );
            } else {
                assert_eq!(mid, &want[16 * 4096..32 * 4096], "{:?}", base.engine);
            }
        }
    }
}

/// Drop a device with hundreds of requests queued or in the kernel: every
/// future resolves (to its real outcome or Closed) and nothing hangs.
#[test]
fn drop_with_requests_in_flight_does_not_hang() {
    for mut opts in engines() {
        opts.queue_depth = 8;
        opts.threads = 2;
        let engine = opts.engine;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("dev");
            FileDevice::create_file(&path, 1024 * B).expect("create");
            let dev = open_direct_or_buffered(&path, opts).expect("open");
            let mut futs: Vec<cairn_device::BoxFuture<Result<(), DeviceError>>> = Vec::new();
            for i in 0..512u64 {
                futs.push(dev.write(i * B, AlignedBuf::from_slice(&pattern(i, 1))));
                let r = dev.read(i * B, B);
                futs.push(Box::pin(async move { r.await.map(|_| ()) }));
            }
            futs.push(dev.flush());
            drop(dev);
            let (mut ok, mut closed) = (0, 0);
            for f in futs {
                match block_on(f) {
                    Ok(()) => ok += 1,
                    Err(DeviceError::Closed) => closed += 1,
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            let _ = tx.send((ok, closed));
        });
        let (ok, closed) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{engine:?}: drop with requests in flight hung"));
        assert_eq!(ok + closed, 2 * 512 + 1);
        eprintln!("{engine:?}: {ok} completed, {closed} closed");
    }
}

/// Many requests submitted while the uring queue is tiny: they wait, they
/// do not fail.
#[test]
fn uring_backlog_never_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, 2048 * B).expect("create");
    let opts = FileDeviceOptions {
        engine: IoEngine::Uring,
        queue_depth: 2,
        ..Default::default()
    };
    let dev = open_direct_or_buffered(&path, opts).expect("open");
    let writes: Vec<_> = (0..2048u64)
        .map(|i| (i * B, AlignedBuf::from_slice(&pattern(i, 1))))
        .collect();
    block_on(dev.write_many(writes)).expect("write_many through a 2-deep ring");
    let futs: Vec<_> = (0..2048u64).map(|i| dev.read(i * B, B)).collect();
    for (i, f) in futs.into_iter().enumerate() {
        assert_eq!(&block_on(f).expect("read")[..], &pattern(i as u64, 1)[..]);
    }
    // One large request, bigger than any single chunk the test files use.
    let all = block_on(dev.read(0, 2048 * B)).expect("big read");
    assert_eq!(&all[..B as usize], &pattern(0, 1)[..]);
}

/// Raw block device path taken from `CAIRN_TEST_BLOCKDEV` (its content is
/// destroyed!); skipped when unset. E.g. with a loop device:
/// `CAIRN_TEST_BLOCKDEV=/dev/loop0 cargo test -p cairn-device --test file block_device`.
#[test]
fn block_device_from_env() {
    let Some(path) = std::env::var_os("CAIRN_TEST_BLOCKDEV") else {
        eprintln!("CAIRN_TEST_BLOCKDEV unset; skipping");
        return;
    };
    let expect = {
        let f = std::fs::File::open(&path).expect("open");
        use std::io::{Seek, SeekFrom};
        let mut f = f;
        f.seek(SeekFrom::End(0)).expect("seek") / B * B
    };
    for base in engines() {
        let opts = FileDeviceOptions {
            discard: true,
            ..base
        };
        let dev = open_direct_or_buffered(std::path::Path::new(&path), opts).expect("open");
        assert!(dev.is_block_device());
        assert_eq!(dev.size(), expect);
        block_on(dev.write(0, AlignedBuf::from_slice(&pattern(1, 16)))).expect("write");
        block_on(dev.flush()).expect("flush");
        let got = block_on(dev.read(0, 16 * B)).expect("read");
        assert_eq!(&got[..], &pattern(1, 16)[..]);
        // Discard support varies by device; it must not fail on a loop device.
        block_on(dev.discard(0, 16 * B)).expect("discard");
    }
}

/// 4 KiB random I/O IOPS for both engines at QD1 and QD32 on a 1 GiB
/// preallocated O_DIRECT file. Run with
/// `cargo test -p cairn-device --release -- --ignored --nocapture engines_compared`.
#[test]
#[ignore]
fn engines_compared() {
    const SIZE: u64 = 1 << 30;
    const SECS: u64 = 3;
    let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
    let path = dir.path().join("bench");
    FileDevice::create_file(&path, SIZE).expect("create 1 GiB");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Fill once so reads hit written (not unwritten-extent) blocks.
    {
        let dev = FileDevice::open(&path, FileDeviceOptions::default()).expect("open");
        let chunk = 8u64 << 20;
        for off in (0..SIZE).step_by(chunk as usize) {
            block_on(dev.write(off, AlignedBuf::from_slice(&vec![0xA5; chunk as usize])))
                .expect("fill");
        }
        block_on(dev.flush()).expect("flush");
    }
    for opts in engines() {
        let dev: std::sync::Arc<dyn BlockDevice> =
            std::sync::Arc::new(FileDevice::open(&path, opts.clone()).expect("open O_DIRECT"));
        for write in [true, false] {
            for qd in [1u64, 32] {
                let ops = rt.block_on(run(dev.clone(), write, qd, Duration::from_secs(SECS)));
                println!(
                    "engine={:?} {} qd={qd}: {:.0} IOPS",
                    opts.engine,
                    if write { "randwrite" } else { "randread" },
                    ops as f64 / SECS as f64
                );
            }
        }
    }
}

async fn run(dev: std::sync::Arc<dyn BlockDevice>, write: bool, qd: u64, dur: Duration) -> u64 {
    use rand::{Rng, SeedableRng};
    let deadline = Instant::now() + dur;
    let blocks = dev.size() / BLOCK_SIZE;
    let mut set = tokio::task::JoinSet::new();
    for t in 0..qd {
        let dev = dev.clone();
        set.spawn(async move {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
            let mut n = 0u64;
            while Instant::now() < deadline {
                let off = rng.gen_range(0..blocks) * BLOCK_SIZE;
                if write {
                    dev.write(off, AlignedBuf::zeroed(4096))
                        .await
                        .expect("write");
                } else {
                    dev.read(off, BLOCK_SIZE).await.expect("read");
                }
                n += 1;
            }
            n
        });
    }
    let mut total = 0;
    while let Some(n) = set.join_next().await {
        total += n.expect("join");
    }
    total
}

/// A loop ring's durable writes complete on the task that awaits them and
/// read back through the device; more than its depth in flight, or a bad
/// range, is refused without touching the device.
#[test]
fn loop_ring_writes_complete_on_the_loop_and_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, 64 * B).expect("create");
    let dev = open_direct_or_buffered(&path, FileDeviceOptions::default()).expect("open");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ring = dev
            .loop_ring()
            .expect("a file device has a loop ring")
            .expect("ring");
        // One block, then eight blocks, then one again, all in flight.
        let writes = [(1u64, 0u64, 1u64), (2, 4 * B, 8), (3, 20 * B, 1)];
        for &(token, offset, blocks) in &writes {
            let data = AlignedBuf::from_slice(&pattern(token, blocks));
            ring.submit(token, offset, data).expect("submit");
        }
        assert!(matches!(
            ring.submit(9, 1, AlignedBuf::zeroed(B as usize)),
            Err(DeviceError::Misaligned { .. })
        ));
        assert!(matches!(
            ring.submit(9, 64 * B, AlignedBuf::zeroed(B as usize)),
            Err(DeviceError::OutOfRange { .. })
        ));
        let mut done = Vec::new();
        while done.len() < writes.len() {
            for (token, result) in ring.completions().await {
                result.expect("durable write");
                done.push(token);
            }
        }
        done.sort();
        assert_eq!(done, vec![1, 2, 3]);
        assert_eq!(ring.in_flight(), 0);
        for &(token, offset, blocks) in &writes {
            let back = dev.read(offset, blocks * B).await.expect("read");
            assert!(back[..] == pattern(token, blocks)[..], "write {token}");
        }
        // The depth bound.
        for token in 0..cairn_device::LOOP_RING_DEPTH as u64 {
            let data = AlignedBuf::from_slice(&pattern(token, 1));
            ring.submit(token, token * B, data)
                .expect("within the depth");
        }
        let past = ring.submit(100, 40 * B, AlignedBuf::zeroed(B as usize));
        assert!(past.is_err(), "a write past the depth is refused");
        let drained = ring.drain_blocking();
        assert_eq!(drained.len(), cairn_device::LOOP_RING_DEPTH);
        assert!(drained.iter().all(|(_, r)| r.is_ok()));
    });
}

/// Reads made by the tasks of one turn of an event loop reach the kernel
/// in one `io_uring_enter`, and each still returns its own block; off an
/// async runtime, or blocked in `block_on` on one, a read enters at once.
#[test]
fn reads_of_one_loop_turn_share_a_submit() {
    const READS: u64 = 32;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, READS * B).expect("create");
    let opts = FileDeviceOptions {
        engine: IoEngine::Uring,
        queue_depth: READS as u32,
        ..Default::default()
    };
    let dev = std::sync::Arc::new(open_direct_or_buffered(&path, opts).expect("open"));
    for i in 0..READS {
        let data = AlignedBuf::from_slice(&pattern(i, 1));
        block_on(dev.write(i * B, data)).expect("write");
    }
    let before = dev.submit_calls();
    let back = block_on(dev.read(3 * B, B)).expect("read off a runtime");
    assert!(back[..] == pattern(3, 1)[..]);
    assert_eq!(
        dev.submit_calls(),
        before + 1,
        "a read off a runtime enters at once"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let before = dev.submit_calls();
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..READS {
            let dev = dev.clone();
            set.spawn(async move { (i, dev.read(i * B, B).await) });
        }
        let mut seen = 0;
        while let Some(joined) = set.join_next().await {
            let (i, read) = joined.expect("read task");
            let back = read.expect("read");
            assert!(back[..] == pattern(i, 1)[..], "block {i}");
            seen += 1;
        }
        assert_eq!(seen, READS);
        let calls = dev.submit_calls() - before;
        assert!(
            calls < READS / 4,
            "{READS} reads of one turn took {calls} submits"
        );
        // Made (and so submitted) on the loop with a read of another task
        // in flight, then awaited in `block_on`: entered as the thread
        // blocks, not left to a task that cannot run.
        let other = {
            let dev = dev.clone();
            tokio::spawn(async move { dev.read(0, READS * B).await })
        };
        tokio::task::yield_now().await;
        let before = dev.submit_calls();
        let read = dev.read(5 * B, B);
        let back = block_on(read).expect("read in block_on");
        assert!(back[..] == pattern(5, 1)[..]);
        assert_eq!(dev.submit_calls(), before + 1);
        other.await.expect("task").expect("other read");
    });
}
