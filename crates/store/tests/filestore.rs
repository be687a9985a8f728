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
        Ok(data) => Some(data.to_vec()),
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
    assert_eq!(len, 3 * 4096, "three aligned records");
    let file = std::fs::OpenOptions::new().write(true).open(&journal);
    let file = file.unwrap_or_else(|e| panic!("{e}"));
    // Keep the last record's header and a few payload bytes.
    file.set_len(2 * 4096 + 50)
        .unwrap_or_else(|e| panic!("{e}"));
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

/// Relative paths of the regular files under `root`.
fn files_under(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for rel in files_under(from) {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::copy(from.join(&rel), &dest).unwrap_or_else(|e| panic!("copy {rel:?}: {e}"));
    }
}

/// Power loss after a checkpoint: the journal is intact (it was synced) but
/// object-file writes since the checkpoint reached the disk only in part —
/// whole files, no files, or a random mix of 4 KiB blocks and lengths. Replay
/// must rebuild exactly the acknowledged state from any such mixture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_repairs_any_mix_of_unsynced_object_writes() {
    use rand::{Rng, SeedableRng};
    let seed = 99;
    let (n1, n2) = (300, 600);
    let base = tmpdir();
    let mut workload = common::Workload::new(seed);
    let run = |store: Arc<FileStore>, txns: Vec<Transaction>| async move {
        let commits: Vec<_> = txns.into_iter().map(|t| store.submit(t)).collect();
        for c in commits {
            c.unwrap_or_else(|e| panic!("{e}"))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    let first: Vec<_> = (0..n1).map(|_| workload.next_txn()).collect();
    run(open(base.path(), FileStoreOptions::default()), first).await;
    // Reopening replays and checkpoints: the object files are now synced.
    drop(open(base.path(), FileStoreOptions::default()));
    let synced = tmpdir();
    copy_tree(&base.path().join("objects"), synced.path());
    let second: Vec<_> = (0..n2).map(|_| workload.next_txn()).collect();
    run(open(base.path(), FileStoreOptions::default()), second).await;

    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for trial in 0..4 {
        let crashed = tmpdir();
        copy_tree(base.path(), crashed.path());
        let objects = crashed.path().join("objects");
        let mut paths = files_under(&objects);
        paths.extend(files_under(synced.path()));
        paths.sort();
        paths.dedup();
        for rel in paths {
            let now = std::fs::read(objects.join(&rel)).ok();
            let old = std::fs::read(synced.path().join(&rel)).ok();
            let pick = match rng.gen_range(0..3) {
                0 => old,
                1 => now,
                _ => {
                    let (a, b) = (old.unwrap_or_default(), now.unwrap_or_default());
                    let len = if rng.gen() { a.len() } else { b.len() };
                    let mut mixed = vec![0u8; len];
                    for (i, chunk) in mixed.chunks_mut(4096).enumerate() {
                        let src = if rng.gen() { &a } else { &b };
                        let at = i * 4096;
                        let n = chunk.len().min(src.len().saturating_sub(at));
                        if n > 0 {
                            chunk[..n].copy_from_slice(&src[at..at + n]);
                        }
                    }
                    Some(mixed)
                }
            };
            let dest = objects.join(&rel);
            match pick {
                Some(bytes) => {
                    if let Some(parent) = dest.parent() {
                        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
                    }
                    std::fs::write(&dest, bytes).unwrap_or_else(|e| panic!("{e}"));
                }
                None => drop(std::fs::remove_file(&dest)),
            }
        }
        let store = open(crashed.path(), FileStoreOptions::default());
        assert_eq!(store.stats().replayed, n2, "trial {trial}");
        common::assert_matches_model(&*store, seed, n1 + n2).await;
        // Stale bytes past an object's size would show once it grows again.
        let mut more = common::Workload::new(seed);
        (0..n1 + n2).for_each(|_| drop(more.next_txn()));
        let third: Vec<_> = (0..300).map(|_| more.next_txn()).collect();
        run(store.clone(), third).await;
        common::assert_matches_model(&*store, seed, n1 + n2 + 300).await;
    }
}

/// Commit `count` one-object writes `prefix0..` of 4 KiB each, one at a time
/// (one journal record each).
async fn commit_blocks(store: &FileStore, prefix: &str, count: usize) {
    for i in 0..count {
        let name = format!("{prefix}{i}");
        commit(store, write(&name, &block(&name)))
            .await
            .unwrap_or_else(|e| panic!("commit {name}: {e}"));
    }
}

fn block(name: &str) -> Vec<u8> {
    let seed = crc32c::crc32c(name.as_bytes());
    (0..4096u32)
        .map(|i| (seed.wrapping_add(i) % 251) as u8)
        .collect()
}

async fn assert_blocks(store: &FileStore, prefix: &str, count: usize) {
    for i in 0..count {
        let name = format!("{prefix}{i}");
        let got = read_all(store, &name).await;
        assert_eq!(got.as_deref(), Some(&block(&name)[..]), "{name}");
    }
}

/// Releases a held checkpoint when dropped, so that a failing test ends
/// (closing the store waits for its checkpoint) instead of hanging.
struct Release(Arc<FaultInjection>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.checkpoint_delay_ms.store(0, Ordering::SeqCst);
    }
}

/// A crash while a background checkpoint is still running (its snapshot not
/// yet written) leaves two live journal generations, one in each file; the
/// reopened store replays both, in order, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_during_a_background_checkpoint_replays_both_journals() {
    let dir = tmpdir();
    let faults = Arc::new(FaultInjection::default());
    faults.checkpoint_delay_ms.store(u64::MAX, Ordering::SeqCst);
    let options = FileStoreOptions {
        journal_max_bytes: 64 * 1024,
        faults: Some(faults.clone()),
        ..Default::default()
    };
    let store = open(dir.path(), options.clone());
    // Declared after the store so that it is dropped (releasing) first.
    let _release = Release(faults.clone());
    let before = store.stats().checkpoints;
    // Each record is two 4 KiB pages: 10 records pass 64 KiB and rotate,
    // 6 more stay in the next generation (under twice the limit: no stall).
    commit_blocks(&store, "a", 10).await;
    commit_blocks(&store, "b", 6).await;
    assert_eq!(store.stats().checkpoints, before, "checkpoint was held");
    let crashed = tmpdir();
    copy_tree(dir.path(), crashed.path());

    let reopened = open(crashed.path(), FileStoreOptions::default());
    let stats = reopened.stats();
    assert_eq!(stats.replayed, 16, "{stats:?}");
    assert_eq!(stats.replayed_journals, 2, "{stats:?}");
    assert_blocks(&reopened, "a", 10).await;
    assert_blocks(&reopened, "b", 6).await;
    // After recovery both old generations are dead: a second crash right
    // after more commits replays only those.
    commit_blocks(&reopened, "c", 3).await;
    let again = tmpdir();
    copy_tree(crashed.path(), again.path());
    drop(reopened);
    let third = open(again.path(), FileStoreOptions::default());
    assert_eq!(third.stats().replayed, 3);
    assert_blocks(&third, "a", 10).await;
    assert_blocks(&third, "c", 3).await;

    // The original store finishes its checkpoint once released.
    faults.checkpoint_delay_ms.store(0, Ordering::SeqCst);
    commit_blocks(&store, "d", 20).await;
    assert!(store.stats().checkpoints > before, "{:?}", store.stats());
    drop(store);
    let store = open(dir.path(), FileStoreOptions::default());
    assert_blocks(&store, "b", 6).await;
    assert_blocks(&store, "d", 20).await;
}

/// Commits wait for a running checkpoint only once the active journal file
/// has grown to twice `journal_max_bytes`; that wait is counted as a stall
/// and ends when the checkpoint does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_stall_only_when_both_journals_are_full() {
    let dir = tmpdir();
    let faults = Arc::new(FaultInjection::default());
    faults.checkpoint_delay_ms.store(u64::MAX, Ordering::SeqCst);
    let options = FileStoreOptions {
        journal_max_bytes: 64 * 1024,
        faults: Some(faults.clone()),
        ..Default::default()
    };
    let store = open(dir.path(), options);
    let _release = Release(faults.clone());
    commit_blocks(&store, "a", 10).await; // rotates; checkpoint held
    commit_blocks(&store, "b", 16).await; // fills the second file past 2x
    let blocked = {
        let store = store.clone();
        tokio::spawn(async move { commit_blocks(&store, "c", 2).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !blocked.is_finished(),
        "commit did not wait for the checkpoint"
    );
    faults.checkpoint_delay_ms.store(0, Ordering::SeqCst);
    let waited = tokio::time::timeout(std::time::Duration::from_secs(10), blocked).await;
    assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
    assert_eq!(store.stats().checkpoint_stalls, 1, "{:?}", store.stats());
    assert_blocks(&store, "c", 2).await;
}
