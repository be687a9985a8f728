//! Cache tiering under failures: one client runs a random workload of
//! writes, reads, zeroing and removals on objects of a pool with a
//! writeback cache over it, checked op by op against a model, while OSDs
//! (each holds cache and base PGs) are killed with `kill -9` and
//! restarted, and flush-evict-all sweeps run. Then every object is read
//! back through the cache, flushed, and read back from the base pool
//! alone: nothing acknowledged is lost, nothing stale is read.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{ClientError, Cluster};
use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError, OpOutput};
use common::writes::{blocking, wait_all_clean, within};
use common::TestCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const OBJECTS: usize = 24;
const MAX_SIZE: u64 = 96 << 10;
const RUN: Duration = Duration::from_secs(40);
const OP_LIMIT: Duration = Duration::from_secs(90);

/// The model's view of one object: `None` if absent.
type Model = BTreeMap<String, Option<Vec<u8>>>;

async fn read(c: &Cluster, pool: PoolId, oid: &str, direct: bool) -> Option<Vec<u8>> {
    let ops = vec![ObjOp::Read {
        offset: 0,
        len: 1 << 20,
    }];
    let done = if direct {
        c.op_ignoring_overlay(pool, oid, ops).await
    } else {
        c.op(pool, oid, ops).await
    };
    match done {
        Ok(out) => match out.into_iter().next() {
            Some(OpOutput::Data(d)) => Some(d.to_vec()),
            other => panic!("read of {oid}: {other:?}"),
        },
        Err(ClientError::Op(OpError::NotFound)) => None,
        Err(e) => panic!("read of {oid}: {e}"),
    }
}

/// Apply a Zero to the model as the OSD does: clipped to the size; a range
/// reaching the end truncates.
fn zero(data: &mut Vec<u8>, offset: u64, len: u64) {
    let size = data.len() as u64;
    let end = (offset + len).min(size);
    if offset >= end {
        return;
    }
    if end == size {
        data.truncate(offset as usize);
    } else {
        data[offset as usize..end as usize].fill(0);
    }
}

async fn one_op(c: &Cluster, pool: PoolId, model: &mut Model, rng: &mut StdRng, step: u64) {
    let oid = format!("t{}", rng.gen_range(0..OBJECTS));
    let current = model.get(&oid).cloned().flatten();
    match rng.gen_range(0..10) {
        0..=3 => {
            let offset = rng.gen_range(0..MAX_SIZE / 4096) * 4096;
            let len = (rng.gen_range(1..=8) * 4096).min(MAX_SIZE - offset);
            let data: Vec<u8> = (0..len)
                .map(|i| (step as u8).wrapping_add((i / 7) as u8) | 1)
                .collect();
            let ops = vec![ObjOp::Write {
                offset,
                data: Bytes::from(data.clone()),
            }];
            within("write", OP_LIMIT, c.op(pool, &oid, ops))
                .await
                .expect("write");
            let mut obj = current.unwrap_or_default();
            let end = (offset + len) as usize;
            if obj.len() < end {
                obj.resize(end, 0);
            }
            obj[offset as usize..end].copy_from_slice(&data);
            model.insert(oid, Some(obj));
        }
        4..=6 => {
            let got = within("read", OP_LIMIT, read(c, pool, &oid, false)).await;
            assert_eq!(
                got.as_ref().map(Vec::len),
                current.as_ref().map(Vec::len),
                "step {step}: size of {oid}"
            );
            assert!(
                got == current,
                "step {step}: {oid} read back differs from the model"
            );
        }
        7 | 8 => {
            let offset = rng.gen_range(0..MAX_SIZE / 4096) * 4096;
            let len = rng.gen_range(1..=6) * 4096;
            let ops = vec![ObjOp::Zero { offset, len }];
            within("zero", OP_LIMIT, c.op(pool, &oid, ops))
                .await
                .expect("zero");
            if let Some(mut obj) = current {
                zero(&mut obj, offset, len);
                model.insert(oid, Some(obj));
            }
        }
        _ => {
            let done = within("remove", OP_LIMIT, c.op(pool, &oid, vec![ObjOp::Remove])).await;
            match (done, current.is_some()) {
                (Ok(_), true) => {}
                (Err(ClientError::Op(OpError::NotFound)), false) => {}
                (other, exists) => {
                    panic!("step {step}: remove of {oid} (exists: {exists}): {other:?}")
                }
            }
            model.insert(oid, None);
        }
    }
}

/// The thread that kills and restarts OSDs. Stopped and joined when
/// dropped, so a failing test's cluster is the test's to tear down (and
/// its logs are kept) rather than a detached thread's.
struct Chaos {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u32>>,
}

impl Chaos {
    fn start(cluster: Arc<TestCluster>, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut rng = StdRng::seed_from_u64(seed ^ 0xfeed);
                let mut kills = 0;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(rng.gen_range(1500..3000)));
                    let osd = format!("osd.{}", rng.gen_range(0..3));
                    cluster.kill9(&osd);
                    kills += 1;
                    std::thread::sleep(Duration::from_millis(rng.gen_range(500..2500)));
                    if rng.gen_bool(0.5) {
                        // A sweep while the OSD is down; it may not finish.
                        let _ = cluster.cairn(&[
                            "osd",
                            "tier",
                            "flush-evict-all",
                            "cache",
                            "--wait",
                            "5",
                        ]);
                    }
                    cluster.restart_missing();
                }
                kills
            }
        });
        Chaos {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop; the number of kills.
    fn finish(mut self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("joined once");
        thread.join().expect("chaos thread")
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_pool_loses_nothing_while_osds_are_killed() {
    let cluster = Arc::new(TestCluster::up(3));
    for pool in ["base", "cache"] {
        cluster.ok(&[
            "pool",
            "create",
            pool,
            "--pg-num",
            "8",
            "--size",
            "3",
            "--min-size",
            "2",
        ]);
    }
    cluster.ok(&["osd", "tier", "add", "base", "cache"]);
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "writeback"]);
    for (k, v) in [
        ("target_max_objects", "16"),
        ("hit_set_period", "1"),
        ("hit_set_count", "2"),
        ("min_read_recency_for_promote", "1"),
        ("min_write_recency_for_promote", "1"),
        ("cache_target_dirty_ratio", "0.2"),
        ("cache_target_full_ratio", "0.5"),
        ("cache_min_flush_age", "1"),
        ("cache_min_evict_age", "1"),
    ] {
        cluster.ok(&["pool", "set", "cache", k, v]);
    }
    cluster.ok(&["osd", "tier", "set-overlay", "base", "cache"]);
    let c = cluster.client().await;
    let base = c.pool_id("base").expect("base");
    c.wait_for_epoch(cluster.status()["epoch"].as_u64().expect("epoch") as u32)
        .await
        .expect("map");

    let seed: u64 = std::env::var("CAIRN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (CAIRN_TEST_SEED to repeat the workload)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: Model = BTreeMap::new();

    let chaos = Chaos::start(cluster.clone(), seed);
    let start = Instant::now();
    let mut step = 0u64;
    while start.elapsed() < RUN {
        step += 1;
        one_op(&c, base, &mut model, &mut rng, step).await;
    }
    let kills = blocking("chaos", move || chaos.finish()).await;
    eprintln!("{step} ops, {kills} OSD kills");
    assert!(kills >= 5, "only {kills} kills in {RUN:?}");
    assert!(step >= 200, "only {step} ops in {RUN:?}");
    wait_all_clean(&cluster).await;

    for (oid, want) in &model {
        let got = within("read back", OP_LIMIT, read(&c, base, oid, false)).await;
        assert!(
            &got == want,
            "{oid} through the cache differs from the model"
        );
    }
    let out = blocking("flush-evict-all", {
        let cluster = cluster.clone();
        move || cluster.ok(&["osd", "tier", "flush-evict-all", "cache"])
    })
    .await;
    eprintln!("{out}");
    for (oid, want) in &model {
        let got = within("base read", OP_LIMIT, read(&c, base, oid, true)).await;
        assert!(
            &got == want,
            "{oid} in the base pool differs from the model after the flush"
        );
    }
}
