//! FileStore: the conformance suite (with the default journal and with a tiny
//! one that checkpoints after nearly every batch), checkpoints under load,
//! group commit, injected journal faults, capacity, and journal damage.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_store::conformance::Harness;
use cairn_store::filestore::{FaultInjection, FileStore, FileStoreOptions};
use cairn_store::{ObjectId, ObjectStore, PgId, StoreError, Transaction};
use tempfile::TempDir;

struct Files {
    dir: TempDir,
    options: FileStoreOptions,
}

impl Files {
    fn new(journal_max_bytes: u64) -> Self {
        Self {
            dir: tmpdir(),
            options: FileStoreOptions {
                journal_max_bytes,
                ..Default::default()
            },
        }
    }
}

impl Harness for Files {
    fn open(&mut self) -> Arc<dyn ObjectStore> {
        open(self.dir.path(), self.options.clone())
    }

    fn durable(&self) -> bool {
        true
    }
}

fn tmpdir() -> TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn open(dir: &Path, options: FileStoreOptions) -> Arc<FileStore> {
    FileStore::open(dir, options).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

mod default_journal {
    use super::*;
    cairn_store::conformance_tests!(Files::new(FileStoreOptions::default().journal_max_bytes));
}

mod tiny_journal {
    use super::*;
    cairn_store::conformance_tests!(Files::new(4096));
}

fn oid(name: &str) -> ObjectId {
    ObjectId::new(PgId::new(1, 1), name)
}

fn write(name: &str, data: &[u8]) -> Transaction {
    let mut t = Transaction::new();
    t.write(&oid(name), 0, Bytes::copy_from_slice(data));
    t
}

async fn commit(store: &dyn ObjectStore, t: Transaction) -> Result<(), StoreError> {
    store.submit(t)?.await
}

async fn read_all(store: &dyn ObjectStore, name: &str) -> Option<Vec<u8>> {
    match store.read(&oid(name), 0, 1 << 20).await {
        Ok(data) => Some(data),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => panic!("read {name}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_under_load_lose_nothing() {
    let dir = tmpdir();
    let options = FileStoreOptions {
        journal_max_bytes: 16 * 1024,
        ..Default::default()
    };
    let seed = 42;
    let count = 3000;
    let store = open(dir.path(), options.clone());
    let mut workload = common::Workload::new(seed);
    let mut in_flight = std::collections::VecDeque::new();
    for _ in 0..count {
        in_flight.push_back(
            store
                .submit(workload.next_txn())
                .unwrap_or_else(|e| panic!("{e}")),
        );
        if in_flight.len() >= 200 {
            if let Some(c) = in_flight.pop_front() {
                c.await.unwrap_or_else(|e| panic!("commit: {e}"));
            }
        }
    }
    for c in in_flight {
        c.await.unwrap_or_else(|e| panic!("commit: {e}"));
    }
    let stats = store.stats();
    assert!(stats.checkpoints > 10, "{stats:?}");
    assert!(stats.batches < count, "no group commit: {stats:?}");
    common::assert_matches_model(&*store, seed, count).await;
    drop(store);
    let journal = std::fs::metadata(dir.path().join("journal")).map(|m| m.len());
    assert!(
        journal.as_ref().is_ok_and(|len| *len < 2 << 20),
        "journal not reset: {journal:?}"
    );

    let store = open(dir.path(), options);
    common::assert_matches_model(&*store, seed, count).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_batches_concurrent_submits() {
    let dir = tmpdir();
    let store = open(dir.path(), FileStoreOptions::default());
    let commits: Vec<_> = (0..500)
        .map(|i| store.submit(write(&format!("o{i}"), b"x")))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"));
    for c in commits {
        c.await.unwrap_or_else(|e| panic!("{e}"));
    }
    let stats = store.stats();
    assert_eq!(stats.transactions, 500);
    assert!(stats.batches < 100, "{stats:?}");
}

#[tokio::test]
async fn enospc_on_journal_append_rejects_the_batch_only() {
    let dir = tmpdir();
    let faults = Arc::new(FaultInjection::default());
    let options = FileStoreOptions {
        faults: Some(faults.clone()),
        ..Default::default()
    };
    let store = open(dir.path(), options);
    commit(&*store, write("a", b"first"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    faults.journal_enospc.store(1, Ordering::SeqCst);
    let err = commit(&*store, write("b", b"lost")).await;
    assert!(matches!(err, Err(StoreError::NoSpace)), "{err:?}");
    assert_eq!(read_all(&*store, "b").await, None);
    commit(&*store, write("c", b"after"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(store);

    let store = open(dir.path(), FileStoreOptions::default());
    assert_eq!(read_all(&*store, "a").await.as_deref(), Some(&b"first"[..]));
    assert_eq!(read_all(&*store, "b").await, None);
    assert_eq!(read_all(&*store, "c").await.as_deref(), Some(&b"after"[..]));
}

#[tokio::test]
async fn failed_sync_fails_the_store_and_never_acks() {
    let dir = tmpdir();
    let faults = Arc::new(FaultInjection::default());
    let options = FileStoreOptions {
        faults: Some(faults.clone()),
        ..Default::default()
    };
    let store = open(dir.path(), options);
    commit(&*store, write("a", b"kept"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    faults.sync_failure.store(true, Ordering::SeqCst);
    let err = commit(&*store, write("b", b"unsynced")).await;
    assert!(matches!(err, Err(StoreError::Failed(_))), "{err:?}");
    assert!(matches!(
        store.submit(write("c", b"x")),
        Err(StoreError::Failed(_))
    ));
    assert_eq!(read_all(&*store, "a").await.as_deref(), Some(&b"kept"[..]));
    drop(store);

    let store = open(dir.path(), FileStoreOptions::default());
    assert_eq!(read_all(&*store, "a").await.as_deref(), Some(&b"kept"[..]));
    commit(&*store, write("c", b"works"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn capacity_limit_gives_no_space_until_freed() {
    let dir = tmpdir();
    let options = FileStoreOptions {
        capacity_bytes: Some(100_000),
        ..Default::default()
    };
    let store = open(dir.path(), options);
    let big = vec![1u8; 60_000];
    commit(&*store, write("a", &big))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = commit(&*store, write("b", &big)).await;
    assert!(matches!(err, Err(StoreError::NoSpace)), "{err:?}");
    assert_eq!(read_all(&*store, "b").await, None);
    let mut rm = Transaction::new();
    rm.remove(&oid("a"));
    commit(&*store, rm).await.unwrap_or_else(|e| panic!("{e}"));
    commit(&*store, write("b", &big))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = store.statfs().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.total_bytes, 100_000);
    assert_eq!(stats.objects, 1);
}

/// Three separately committed transactions: three journal records.
async fn three_records(dir: &Path) {
    let store = open(dir, FileStoreOptions::default());
    for (name, data) in [("a", b"one"), ("b", b"two"), ("c", b"six")] {
        commit(&*store, write(name, data))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test]
async fn torn_journal_tail_is_dropped() {
    let dir = tmpdir();
    three_records(dir.path()).await;
    let journal = dir.path().join("journal");
    let len = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
    let file = std::fs::OpenOptions::new().write(true).open(&journal);
    let file = file.unwrap_or_else(|e| panic!("{e}"));
    file.set_len(len - 5).unwrap_or_else(|e| panic!("{e}"));
    drop(file);

    let store = open(dir.path(), FileStoreOptions::default());
    assert_eq!(read_all(&*store, "b").await.as_deref(), Some(&b"two"[..]));
    assert_eq!(read_all(&*store, "c").await, None);
    commit(&*store, write("d", b"new"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    let store = open(dir.path(), FileStoreOptions::default());
    assert_eq!(read_all(&*store, "d").await.as_deref(), Some(&b"new"[..]));
    assert_eq!(store.stats().replayed, 1);
}

#[tokio::test]
async fn damaged_journal_record_before_good_ones_is_corruption() {
    let dir = tmpdir();
    three_records(dir.path()).await;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("journal"));
    let file = file.unwrap_or_else(|e| panic!("{e}"));
    file.write_all_at(&[0xee; 4], 60)
        .unwrap_or_else(|e| panic!("{e}"));
    drop(file);
    let err = FileStore::open(dir.path(), FileStoreOptions::default()).map(drop);
    assert!(matches!(err, Err(StoreError::Corrupt(_))), "{err:?}");
}

#[tokio::test]
async fn damaged_snapshot_is_corruption() {
    let dir = tmpdir();
    three_records(dir.path()).await;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("meta"));
    let file = file.unwrap_or_else(|e| panic!("{e}"));
    file.write_all_at(&[0xee], 45)
        .unwrap_or_else(|e| panic!("{e}"));
    drop(file);
    let err = FileStore::open(dir.path(), FileStoreOptions::default()).map(drop);
    assert!(matches!(err, Err(StoreError::Corrupt(_))), "{err:?}");
}

#[test]
fn a_store_opens_only_once_at_a_time() {
    let dir = tmpdir();
    let store = open(dir.path(), FileStoreOptions::default());
    assert!(FileStore::open(dir.path(), FileStoreOptions::default()).is_err());
    drop(store);
    drop(open(dir.path(), FileStoreOptions::default()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_reads_use_the_blocking_pool() {
    let dir = tmpdir();
    let store = open(dir.path(), FileStoreOptions::default());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    commit(&*store, write("big", &data))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let got = store.read(&oid("big"), 0, 4_000_000).await;
    assert!(got.is_ok_and(|got| got == data));
}
