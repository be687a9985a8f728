//! `LoopReader`: reads submitted and reaped on the event loop that made
//! them, what it declines, and what becomes of reads in flight when it or
//! its loop goes away.

mod common;

use std::sync::Arc;

use cairn_device::{
    block_on, AlignedBuf, BlockDevice, DeviceError, FileDevice, FileDeviceOptions, IoEngine,
    LoopReader, BLOCK_SIZE, LOOP_READ_DEPTH,
};
use common::{open_direct_or_buffered, pattern};

const B: u64 = BLOCK_SIZE;
const BLOCKS: u64 = 128;

/// A uring device of `BLOCKS` blocks, block `i` holding `pattern(i, 1)`.
fn device(dir: &tempfile::TempDir) -> Arc<FileDevice> {
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, BLOCKS * B).expect("create");
    let opts = FileDeviceOptions {
        engine: IoEngine::Uring,
        ..Default::default()
    };
    let dev = Arc::new(open_direct_or_buffered(&path, opts).expect("open"));
    let writes = (0..BLOCKS)
        .map(|i| (i * B, AlignedBuf::from_slice(&pattern(i, 1))))
        .collect();
    block_on(dev.write_many(writes)).expect("write");
    dev
}

fn loop_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Block `i` and the next `n - 1`, as the device holds them.
fn blocks(i: u64, n: u64) -> Vec<u8> {
    (i..i + n).flat_map(|k| pattern(k, 1)).collect()
}

#[test]
fn reads_on_the_loop_are_entered_once_per_turn_and_reaped_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = device(&dir);
    let engine_calls = dev.submit_calls();
    loop_runtime().block_on(async {
        let reader = Arc::new(dev.loop_reader().expect("a uring device").expect("reader"));
        let mut set = tokio::task::JoinSet::new();
        for i in 0..32u64 {
            let reader = reader.clone();
            // Single blocks and runs of up to 4.
            let n = 1 + i % 4;
            let at = (i * 3) % (BLOCKS - 4);
            set.spawn(async move {
                let read = reader.read(at * B, n * B).expect("taken on the loop");
                (at, n, read.await)
            });
        }
        while let Some(joined) = set.join_next().await {
            let (at, n, read) = joined.expect("task");
            let back = read.expect("read");
            assert!(back[..] == blocks(at, n)[..], "blocks {at}+{n}");
        }
        assert_eq!(reader.reads(), 32);
        let enters = reader.submit_calls();
        assert!(enters < 8, "32 reads of one turn took {enters} enters");
    });
    assert_eq!(
        dev.submit_calls(),
        engine_calls,
        "the engine's ring was not used"
    );
}

#[test]
fn a_loop_reader_declines_what_its_loop_cannot_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = device(&dir);
    let rt = loop_runtime();
    let reader = rt.block_on(async { dev.loop_reader().expect("uring").expect("reader") });
    let reader = Arc::new(reader);
    rt.block_on(async {
        // Another thread: declined.
        let r = reader.clone();
        let other = std::thread::spawn(move || r.read(0, B).is_none());
        assert!(other.join().expect("thread"), "taken on another thread");
        // The loop's thread held in `block_on`: declined (its task cannot
        // run to submit or reap).
        let inside = block_on(async { reader.read(0, B).is_none() });
        assert!(inside, "taken inside block_on");
        // Out of range: taken, and fails naming the range.
        let err = reader.read(BLOCKS * B, B).expect("taken").await;
        assert!(
            matches!(err, Err(DeviceError::OutOfRange { .. })),
            "{err:?}"
        );
        // Full: the read past the bound is declined, the rest complete.
        let mut reads = Vec::new();
        for i in 0..LOOP_READ_DEPTH as u64 {
            let at = i % BLOCKS;
            reads.push((at, reader.read(at * B, B).expect("within the bound")));
        }
        assert!(reader.read(0, B).is_none(), "taken past the bound");
        for (at, read) in reads {
            assert!(read.await.expect("read")[..] == pattern(at, 1)[..]);
        }
        assert!(reader.read(0, B).is_some(), "room again once reaped");
    });
    // Off the loop's runtime altogether: declined.
    assert!(reader.read(0, B).is_none(), "taken off the runtime");
}

#[test]
fn reads_in_flight_finish_when_the_reader_or_its_loop_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = device(&dir);
    // The reader dropped: its task finishes the reads in flight, then ends.
    loop_runtime().block_on(async {
        let reader = dev.loop_reader().expect("uring").expect("reader");
        let reads: Vec<_> = (0..16u64)
            .map(|i| (i, reader.read(i * B, B).expect("taken")))
            .collect();
        drop(reader);
        for (i, read) in reads {
            assert!(read.await.expect("read after the drop")[..] == pattern(i, 1)[..]);
        }
    });
    // The loop gone with reads in flight: the reader's drop waits for the
    // kernel, and each read ends, with its data or as closed.
    let rt = loop_runtime();
    let (reader, reads): (LoopReader, Vec<_>) = rt.block_on(async {
        let reader = dev.loop_reader().expect("uring").expect("reader");
        let reads = (0..16u64)
            .map(|i| (i, reader.read(i * B, B).expect("taken")))
            .collect();
        (reader, reads)
    });
    drop(rt);
    drop(reader);
    for (i, read) in reads {
        match block_on(read) {
            Ok(back) => assert!(back[..] == pattern(i, 1)[..], "block {i}"),
            Err(DeviceError::Closed) => {}
            Err(e) => panic!("block {i}: {e}"),
        }
    }
}
