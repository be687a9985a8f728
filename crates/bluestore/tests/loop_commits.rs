//! Commits on the event loop (`loop_commit`): a store attached to a
//! one-thread runtime, as an OSD's is, with many transactions in flight of
//! every kind (small overwrites whose records the loop writes, large
//! writes with new data that go through the commit thread, metadata only),
//! equals a model of the same workload, before and after a remount; and
//! the loop really wrote records and their key-value batches, or, when the
//! key-value store would stall, left the batches to a record thread.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use cairn_bluestore::BlueStore;
use cairn_store::conformance::{dump, first_difference};
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectStore, PgId, Transaction, Version};
use common::{oid, pattern, FileStores};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const IN_FLIGHT: usize = 32;
const TXNS: u64 = 3000;

/// Transaction `index`; `mixed`: of every kind, else only small
/// overwrites of allocated blocks and metadata (what the loop commits).
fn txn(rng: &mut StdRng, index: u64, mixed: bool) -> Transaction {
    let coll = PgId::new(1, rng.gen_range(0..2));
    let o = oid(coll, &format!("obj{}", rng.gen_range(0..8)));
    let mut t = Transaction::new();
    let kind = if mixed { rng.gen_range(0..20) } else { 0 };
    match kind {
        0..=13 => {
            let off = rng.gen_range(0..64u64) * 4096;
            t.write(&o, off, Bytes::from(pattern(index, 4096)));
        }
        14..=15 => {
            let len = rng.gen_range(64 << 10..256 << 10);
            t.write(
                &o,
                rng.gen_range(0..16u64) * 4096,
                Bytes::from(pattern(index, len)),
            );
        }
        16 => {
            t.zero(&o, rng.gen_range(0..64u64) * 4096, 8192);
        }
        17 => {
            t.omap_set(
                &o,
                vec![(format!("k{index}"), Bytes::from(pattern(index, 40)))],
            );
        }
        _ => {
            t.write(&o, 0, Bytes::from(pattern(index, 512)));
            t.log_append(
                coll,
                Version::new(1, index + 1),
                Bytes::from(pattern(index, 24)),
            );
        }
    }
    t
}

async fn run(store: &Arc<BlueStore>, model: &MemStore, seed: u64, mixed: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pending = VecDeque::new();
    for index in 0..TXNS {
        let t = txn(&mut rng, index, mixed);
        model
            .submit(t.clone())
            .expect("model")
            .await
            .expect("model");
        pending.push_back(store.submit(t).expect("submit"));
        if pending.len() >= IN_FLIGHT {
            if let Some(c) = pending.pop_front() {
                c.await.expect("commit");
            }
        }
    }
    for c in pending {
        c.await.expect("commit");
    }
}

#[test]
fn loop_commits_match_the_model_across_a_remount() {
    loop_commits_match_the_model(false);
}

/// The same with a key-value store that refuses every other batch the
/// loop offers without waiting (a RocksDB write stall): those go to a
/// record thread, and every batch still lands, in order.
#[test]
fn batches_the_loop_cannot_write_go_to_a_record_thread_in_order() {
    loop_commits_match_the_model(true);
}

fn loop_commits_match_the_model(stalling_kv: bool) {
    let seed: u64 = rand::random();
    eprintln!("workload seed {seed}");
    let mut stores = FileStores::new(256 << 20);
    stores.stalling_kv = stalling_kv;
    let model = MemStore::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = stores.open();
    rt.block_on(async {
        assert!(
            store.attach_to_loop().expect("attach"),
            "a file device has a loop ring"
        );
        run(&store, &model, seed, true).await;
        // Every block rewritten (new data goes through the commit thread),
        // then overwrites of them only: the loop's own case.
        for coll in 0..2 {
            for n in 0..8 {
                let mut t = Transaction::new();
                let o = oid(PgId::new(1, coll), &format!("obj{n}"));
                t.write(&o, 0, Bytes::from(pattern(coll as u64 * 8 + n, 64 * 4096)));
                model
                    .submit(t.clone())
                    .expect("model")
                    .await
                    .expect("model");
                store.submit(t).expect("submit").await.expect("commit");
            }
        }
        let before = store.perf();
        run(&store, &model, seed ^ 1, false).await;
        let after = store.perf();
        // Nearly all: a full journal has the commit thread make room.
        let records = after.journal_records - before.journal_records;
        let by_loop = after.loop_records - before.loop_records;
        eprintln!("small overwrites: the loop wrote {by_loop} of {records} records");
        assert!(
            records > 0 && by_loop * 10 >= records * 9,
            "the loop wrote {by_loop} of {records} records of small overwrites"
        );
        // And most of their batches too: no RocksDB stall in a run this
        // small, and a record thread only takes what a busy loop leaves.
        let kv_by_loop = after.loop_kv_writes - before.loop_kv_writes;
        eprintln!("the loop wrote {kv_by_loop} of {by_loop} of its records' batches");
        if stalling_kv {
            // Refused every other time: both ways were taken.
            assert!(
                kv_by_loop > 0 && kv_by_loop < by_loop,
                "the loop wrote {kv_by_loop} of {by_loop} of its records' batches"
            );
        } else {
            assert!(
                kv_by_loop * 2 >= by_loop,
                "the loop wrote {kv_by_loop} of {by_loop} of its records' batches"
            );
        }
        run(&store, &model, seed ^ 2, true).await;
        let want = dump(&model, &[]).await.expect("dump the model");
        let before = store.perf();
        let got = dump(&*store, &[]).await.expect("dump the store");
        assert_eq!(first_difference(&want, &got), None, "before the remount");
        // Read on the loop: what came from the device came through the
        // loop's own ring.
        let after = store.perf();
        let (device, on_loop) = (
            after.device_reads - before.device_reads,
            after.loop_device_reads - before.loop_device_reads,
        );
        eprintln!("the loop read {on_loop} of {device} device reads itself");
        assert!(
            device > 0 && on_loop == device,
            "the loop read {on_loop} of {device} device reads itself"
        );
    });
    // Dropped on this thread, outside the runtime, with the loop's task
    // still alive inside it: detaching reaps what is in flight.
    drop(store);
    drop(rt);
    let store = stores.open();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let want = dump(&model, &[]).await.expect("dump the model");
        let got = dump(&*store, &[]).await.expect("dump the store");
        assert_eq!(first_difference(&want, &got), None, "after the remount");
    });
    let report = store.fsck(true, false).expect("fsck");
    assert!(report.is_clean(), "fsck: {report:?}");
}

/// The loop acknowledges a record, lets the commits' waiters run, and only
/// then writes the record's key-value batch. A waiter that reads what must
/// come from the key-value store (omap) right away, on the loop's own
/// thread, waits for that batch: a record thread writes it, else the loop
/// would wait for itself forever. Every read sees its write.
#[test]
fn a_read_on_the_loop_right_after_its_commit_sees_the_write() {
    let mut stores = FileStores::new(64 << 20);
    let store = stores.open();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let on_loop = store.clone();
    let runner = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            assert!(on_loop.attach_to_loop().expect("attach"));
            let o = oid(PgId::new(1, 0), "header");
            let mut t = Transaction::new();
            t.touch(&o);
            on_loop.submit(t).expect("submit").await.expect("commit");
            for i in 0..300u64 {
                let key = format!("k{i}");
                let mut t = Transaction::new();
                t.omap_set(&o, vec![(key.clone(), Bytes::from(pattern(i, 16)))]);
                on_loop.submit(t).expect("submit").await.expect("commit");
                let got = on_loop
                    .omap_get(&o, std::slice::from_ref(&key))
                    .expect("omap_get");
                assert_eq!(
                    got.get(&key).map(Vec::as_slice),
                    Some(&pattern(i, 16)[..]),
                    "omap key {key} right after its commit"
                );
            }
            let perf = on_loop.perf();
            assert!(perf.loop_records > 0, "the loop wrote no record: {perf:?}");
        });
        drop(on_loop);
        drop(rt);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("reads on the loop right after a commit hung (the loop waited for itself)");
    runner.join().expect("the loop's thread");
    drop(store);
}
