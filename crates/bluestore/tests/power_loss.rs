//! Power loss: device and database freeze at one instant (a [`CrashGate`])
//! in the middle of a random concurrent workload; the store mounted on what
//! survived must equal a model after exactly a prefix of the submitted
//! transactions, at least as long as the acknowledged ones, and pass a
//! deep fsck. Then the recovered store runs more transactions and loses
//! power again.
//!
//! Each crash policy of the device is one test: `DropAll` (no unflushed
//! write survives), `Random` (each survives whole or not), `Torn` (each
//! block of each survives or not), `KeepAll`. Two crash points per policy
//! by default; set `CAIRN_CRASH_ITERATIONS` for more (spread over the four
//! policies).

mod common;

use std::collections::VecDeque;
use std::sync::Arc;

use cairn_bluestore::BlueStore;
use cairn_device::CrashPolicy;
use cairn_store::conformance::StoreDump;
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectStore, Transaction};
use common::*;
use rand::Rng;

/// Commits kept in flight at most.
const IN_FLIGHT: usize = 16;

fn iterations_per_policy() -> u64 {
    let total: u64 = std::env::var("CAIRN_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    total.div_ceil(4).max(1)
}

/// The model after `base`.
async fn model_after(base: &[Transaction]) -> MemStore {
    let model = MemStore::new();
    for t in base {
        model.submit(t.clone()).unwrap().await.unwrap();
    }
    model
}

/// One run up to a power loss: returns the store recovered from it and
/// the transactions (from the very start) it must hold.
async fn run_until_crash(
    label: &str,
    stores: &CrashStores,
    store: Arc<BlueStore>,
    base: Vec<Transaction>,
    w: &mut Workload,
    (seed, policy): (u64, CrashPolicy),
    (submissions, crash_ops): (std::ops::Range<usize>, u64),
) -> (CrashStores, Arc<BlueStore>, Vec<Transaction>) {
    let model = model_after(&base).await;
    let submissions = w.rng.gen_range(submissions);
    // Usually the gate crashes by itself just before some device or
    // database write or flush (a run makes two to three per transaction,
    // so 30 to 150); otherwise, or if the run ends first, the crash comes
    // after the last submission.
    if w.rng.gen_bool(0.75) {
        let n = w.rng.gen_range(0..crash_ops);
        stores.crash_after(n, seed, policy);
    }
    let mut submitted: Vec<Transaction> = Vec::new();
    // Model dumps after k of this run's transactions, for the k that may
    // still be the recovered state (k >= acknowledged).
    let mut dumps: VecDeque<(usize, StoreDump)> = VecDeque::new();
    dumps.push_back((0, dump_of(&model).await));
    let mut in_flight = VecDeque::new();
    let mut acked = 0usize;
    // Whether a commit failed (the power is lost): all later ones fail too.
    let mut failed = false;
    'run: for _ in 0..submissions {
        let t = w.next_txn();
        match store.submit(t.clone()) {
            Ok(c) => in_flight.push_back(c),
            Err(e) => {
                // Only a lost device or database fails a submit here.
                assert!(stores.is_crashed(), "{label}: submit: {e:?}");
                break;
            }
        }
        model.submit(t.clone()).unwrap().await.unwrap();
        submitted.push(t);
        dumps.push_back((submitted.len(), dump_of(&model).await));
        // Await in order, keeping up to IN_FLIGHT (sometimes none).
        let keep = if w.rng.gen_bool(0.2) { 0 } else { IN_FLIGHT };
        while in_flight.len() > keep {
            let c = in_flight.pop_front().unwrap();
            if let Err(e) = c.await {
                assert!(stores.is_crashed(), "{label}: commit {acked}: {e:?}");
                failed = true;
                break 'run;
            }
            acked += 1;
        }
        while dumps.front().is_some_and(|(k, _)| *k < acked) {
            dumps.pop_front();
        }
    }

    let (device, kv) = stores.crash(seed, policy);
    // Commits that complete now completed before the crash (everything
    // after it fails): they count as acknowledged. They are a prefix.
    for c in in_flight {
        match c.await {
            Ok(()) if !failed => acked += 1,
            Ok(()) => panic!("{label}: a commit succeeded after an earlier one failed"),
            Err(_) => failed = true,
        }
    }
    drop(store);

    let mut recovered = CrashStores::from_images(device, kv);
    if w.rng.gen_bool(0.5) {
        // Lose power again while mounting (replaying deferred writes).
        recovered.crash_after(w.rng.gen_range(0..4), seed ^ 0xa5a5, policy);
        drop(recovered.open());
        let (device, kv) = recovered.crash(seed ^ 0xa5a5, policy);
        recovered = CrashStores::from_images(device, kv);
    }
    let store = recovered
        .open()
        .unwrap_or_else(|e| panic!("{label}: mount after power loss: {e:?}"));
    let got = cairn_store::conformance::dump(&*store, &[])
        .await
        .unwrap_or_else(|e| panic!("{label}: reading the recovered store: {e:?}"));
    let k = dumps
        .iter()
        .find(|(k, d)| *k >= acked && d == &got)
        .map(|(k, _)| *k)
        .unwrap_or_else(|| {
            let nearest = dumps
                .iter()
                .filter(|(k, _)| *k >= acked)
                .map(|(k, d)| {
                    let diff = cairn_store::conformance::first_difference(&got, d);
                    format!("  after {k}: {}", diff.unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "{label}: recovered store matches no prefix of {} submitted \
                 transactions with at least {acked} acknowledged:\n{nearest}",
                submitted.len()
            )
        });
    let report = store.fsck(true, false).expect("fsck");
    assert!(
        report.is_clean(),
        "{label}: fsck after power loss: {report:?}"
    );
    eprintln!(
        "{label}: submitted {}, acknowledged {acked}, recovered {k}, replayed {}",
        submitted.len(),
        store.replayed()
    );
    let mut base = base;
    base.extend(submitted.into_iter().take(k));
    (recovered, store, base)
}

async fn power_loss(policy: CrashPolicy, policy_index: u64) {
    for i in 0..iterations_per_policy() {
        let seed = 1000 * policy_index + i;
        let mut w = Workload::new(seed, Workload::objects(8), 384 * 1024, 300 * 1024);
        let mut stores = CrashStores::new(32 * MIB);
        // Half the runs with inline commits, half all through the
        // pipeline threads (a run of submissions from one thread would
        // otherwise commit on it).
        stores.mount.inline_commits = i % 2 == 0;
        let store = stores.open().expect("mount");
        let label = format!("{policy:?} seed {seed}, first crash");
        let short = (15..50, 100);
        let (stores, store, base) = run_until_crash(
            &label,
            &stores,
            store,
            Vec::new(),
            &mut w,
            (seed, policy),
            short.clone(),
        )
        .await;
        let label = format!("{policy:?} seed {seed}, second crash");
        let (_stores, store, base) = run_until_crash(
            &label,
            &stores,
            store,
            base,
            &mut w,
            (seed + 7, policy),
            short,
        )
        .await;
        // The twice-recovered store works.
        let t = w.next_txn();
        commit(&*store, t.clone()).await;
        let model = model_after(&base).await;
        model.submit(t).unwrap().await.unwrap();
        assert_same(
            &dump_of(&*store).await,
            &dump_of(&model).await,
            "after recovery",
        );
    }
}

/// Long runs of small overwrites: the 1 MiB commit journal wraps several
/// times and its records are retired after key-value syncs; a power loss
/// anywhere must still recover exactly a prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_after_the_journal_wrapped() {
    let policies = [
        CrashPolicy::DropAll,
        CrashPolicy::Random,
        CrashPolicy::Torn,
        CrashPolicy::KeepAll,
    ];
    for i in 0..iterations_per_policy() {
        let policy = policies[i as usize % policies.len()];
        let seed = 9000 + i;
        let mut w = Workload::new(seed, Workload::objects(8), 256 * 1024, 8 * 1024);
        let mut stores = CrashStores::new(32 * MIB);
        stores.mount.inline_commits = i % 2 == 1;
        let store = stores.open().expect("mount");
        let label = format!("{policy:?} seed {seed}, long run");
        let (_stores, store, _base) = run_until_crash(
            &label,
            &stores,
            store,
            Vec::new(),
            &mut w,
            (seed, policy),
            (400..700, 2000),
        )
        .await;
        assert!(store.fsck(true, false).expect("fsck").is_clean());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_drop_all() {
    power_loss(CrashPolicy::DropAll, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_random() {
    power_loss(CrashPolicy::Random, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_torn() {
    power_loss(CrashPolicy::Torn, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_keep_all() {
    power_loss(CrashPolicy::KeepAll, 3).await;
}
