//! Crash consistency under `kill -9`: a child process runs random
//! transactions against a BlueStore on a real file (O_DIRECT) with RocksDB,
//! reporting each acknowledged one; the parent kills it with SIGKILL at a
//! random moment, remounts, and checks the store against a model:
//!
//! - every acknowledged transaction is present and complete, and nothing
//!   half-applied is visible: the store equals the model after exactly some
//!   prefix of the submitted transactions, at least as long as the
//!   acknowledged ones (transactions commit in submission order);
//! - deep fsck is clean: no leaked or doubly used space, every checksum good.
//!
//! Then the child continues on the recovered store and is killed again.
//! `CAIRN_CRASH_ITERATIONS` sets the number of kills (default 4).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_bluestore::{mkfs, BlueStore, MkfsOptions, MountOptions};
use cairn_device::{BlockDevice, FileDevice, FileDeviceOptions};
use cairn_kv::{Kv, RocksKv, RocksKvOptions};
use cairn_store::conformance::{dump, first_difference};
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectId, ObjectStore, PgId, Transaction, Version};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_DIR: &str = "CAIRN_CRASH_CHILD_DIR";
const CHILD_SEED: &str = "CAIRN_CRASH_CHILD_SEED";
const CHILD_START: &str = "CAIRN_CRASH_CHILD_START";
/// Most transactions the child keeps in flight.
const IN_FLIGHT: usize = 16;
const DEVICE_BYTES: u64 = 128 << 20;

/// `inline`: see `MountOptions::inline_commits`.
fn open(dir: &Path, create: bool, inline: bool) -> Arc<BlueStore> {
    let block = dir.join("block");
    if create {
        FileDevice::create_file(&block, DEVICE_BYTES).expect("block file");
    }
    let device: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::open(&block, FileDeviceOptions::default()).expect("device"));
    let opts = RocksKvOptions {
        create,
        block_cache_bytes: 8 << 20,
        ..Default::default()
    };
    let kv: Arc<dyn Kv> = Arc::new(RocksKv::open(&dir.join("db"), &opts).expect("RocksDB"));
    if create {
        mkfs(device.as_ref(), kv.as_ref(), &MkfsOptions::default()).expect("mkfs");
    }
    let opts = MountOptions {
        inline_commits: inline,
        ..MountOptions::default()
    };
    BlueStore::mount(device, kv, opts).expect("mount")
}

/// Transaction `index` of the workload `seed`: the same every time, so the
/// parent can rebuild what the child submitted.
fn txn(seed: u64, index: u64) -> Transaction {
    let mut rng = StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut t = Transaction::new();
    for _ in 0..rng.gen_range(1..=3) {
        let coll = PgId::new(1, rng.gen_range(0..2));
        let oid = ObjectId::new(coll, format!("obj{}", rng.gen_range(0..6)));
        match rng.gen_range(0..20) {
            0..=6 => {
                // Small aligned overwrite: the deferred path once allocated.
                let off = rng.gen_range(0..256u64) * 4096;
                t.write(&oid, off, fill(&mut rng, 4096));
            }
            7..=11 => {
                let off = rng.gen_range(0..1u64 << 20);
                let len = rng.gen_range(1..96 << 10);
                t.write(&oid, off, fill(&mut rng, len));
            }
            12 => {
                t.truncate(&oid, rng.gen_range(0..1u64 << 20));
            }
            13 => {
                let off = rng.gen_range(0..1u64 << 20);
                t.zero(&oid, off, rng.gen_range(1..64 << 10));
            }
            14 => {
                t.remove(&oid);
            }
            15 | 16 => {
                t.set_attr(&oid, "v", fill(&mut rng, 16));
            }
            17 | 18 => {
                let key = format!("k{}", rng.gen_range(0..8));
                t.omap_set(&oid, vec![(key, fill(&mut rng, 32))]);
            }
            _ => {
                t.log_append(coll, Version::new(1, index), fill(&mut rng, 24));
            }
        }
    }
    t
}

fn fill(rng: &mut StdRng, len: usize) -> Bytes {
    let b: u8 = rng.gen();
    Bytes::from(
        (0..len)
            .map(|i| b.wrapping_add((i / 512) as u8))
            .collect::<Vec<_>>(),
    )
}

/// The child: run transactions from `START` on, printing `ack N` for each
/// acknowledged one, until killed. Ignored unless run by the parent.
#[test]
#[ignore = "the child process of kill9_mid_workload_loses_nothing_acknowledged"]
fn crash_child_workload() {
    let (Ok(dir), Ok(seed), Ok(start)) = (
        std::env::var(CHILD_DIR),
        std::env::var(CHILD_SEED),
        std::env::var(CHILD_START),
    ) else {
        return;
    };
    let seed: u64 = seed.parse().expect("seed");
    let start: u64 = start.parse().expect("start");
    // Rounds take turns at how records are written: by their submitter
    // (inline commits: a run of submissions from this one thread then
    // commits on it), by the record threads, and by the event loop (the
    // store attached to a one-thread runtime, as in an OSD; groups with new
    // data still go through the commit thread).
    let mode = (seed + start) % 3;
    let store = open(Path::new(&dir), false, mode == 0);
    let rt = if mode == 2 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    }
    .enable_all()
    .build()
    .expect("runtime");
    rt.block_on(async move {
        if mode == 2 {
            assert!(
                store.attach_to_loop().expect("attach"),
                "a file device has a loop ring"
            );
        }
        let mut pending = std::collections::VecDeque::new();
        for index in start.. {
            let commit = store.submit(txn(seed, index)).expect("submit");
            pending.push_back((index, commit));
            if pending.len() >= IN_FLIGHT {
                if let Some((i, c)) = pending.pop_front() {
                    c.await.expect("commit");
                    println!("ack {i}");
                }
            }
        }
    });
}

#[test]
fn kill9_mid_workload_loses_nothing_acknowledged() {
    let iterations: u64 = std::env::var("CAIRN_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let dir = tempfile::tempdir().expect("tempdir");
    let seed: u64 = rand::random();
    eprintln!("workload seed {seed}");
    drop(open(dir.path(), true, true));
    let model = MemStore::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut applied = 0u64; // transactions in the model (and in the store)
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..iterations {
        let kill_after = rng.gen_range(10..200u64);
        let acked = run_child_until(dir.path(), seed, applied, kill_after);
        eprintln!("round {round}: killed after ack {acked:?} (started at {applied})");
        let store = open(dir.path(), false, true);
        rt.block_on(async {
            let got = dump(&*store, &[]).await.expect("dump the store");
            // The store holds exactly a prefix: at least every acknowledged
            // transaction, at most those that were in flight too.
            let least = acked.map_or(applied, |a| a + 1);
            let mut last_diff = None;
            let mut matched = None;
            for k in applied..=least + IN_FLIGHT as u64 {
                if k > applied {
                    model.submit(txn(seed, k - 1)).expect("model").await.expect("model");
                }
                if k < least {
                    continue;
                }
                let want = dump(&model, &[]).await.expect("dump the model");
                match first_difference(&want, &got) {
                    None => {
                        matched = Some(k);
                        break;
                    }
                    Some(d) => last_diff = Some(format!("prefix {k}: {d}")),
                }
            }
            // The model now holds exactly the matching prefix.
            applied = matched.unwrap_or_else(|| {
                panic!("round {round}: the store is no prefix ≥ {least} of the workload: {last_diff:?}")
            });
        });
        let report = store.fsck(true, false).expect("fsck");
        assert!(report.is_clean(), "round {round}: fsck: {report:?}");
        drop(store);
    }
}

/// Start the child at transaction `start`, kill it with SIGKILL once it has
/// acknowledged `kill_after` transactions; return the last acknowledged.
fn run_child_until(dir: &Path, seed: u64, start: u64, kill_after: u64) -> Option<u64> {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "crash_child_workload",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_SEED, seed.to_string())
        .env(CHILD_START, start.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    let mut last = None;
    let ack = |line: String, last: &mut Option<u64>| {
        if let Some(n) = line.strip_prefix("ack ") {
            let n: u64 = n.trim().parse().expect("ack number");
            assert!(last.is_none_or(|l| n == l + 1), "acks out of order");
            *last = Some(n);
        }
    };
    let mut seen = 0;
    for line in lines.by_ref() {
        let Ok(line) = line else { break };
        seen += u64::from(line.starts_with("ack "));
        ack(line, &mut last);
        if seen >= kill_after {
            break;
        }
    }
    // Let a few more commits start, then kill without warning.
    std::thread::sleep(Duration::from_millis(seen % 7));
    child.kill().expect("kill -9 the child");
    // Acknowledgements printed before the kill are still in the pipe.
    for line in lines.map_while(Result::ok) {
        ack(line, &mut last);
    }
    let status = child.wait().expect("reap the child");
    assert!(!status.success(), "the child finished on its own: {status}");
    last
}
