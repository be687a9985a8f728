//! Crash test: a child process (this test binary, re-executed) runs a random
//! workload on a FileStore with many commits in flight and prints one line
//! per acknowledged transaction; the parent SIGKILLs it at a random moment,
//! reopens the store and checks that it holds exactly a prefix of the
//! workload that includes every acknowledged transaction.
//!
//! Every iteration continues on the same store, so later iterations also
//! crash a store that was itself recovered from a crash. Odd iterations use
//! a tiny journal so that kills also land inside checkpoints.
//! `CAIRN_CRASH_ITERATIONS` sets the number of iterations (default 5).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cairn_store::filestore::{FileStore, FileStoreOptions};
use cairn_store::ObjectStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CHILD_DIR: &str = "CAIRN_CRASH_CHILD_DIR";
const CHILD_JOURNAL: &str = "CAIRN_CRASH_CHILD_JOURNAL";
const SEED: u64 = 0x5eed_cafe;
const IN_FLIGHT: usize = 128;

#[test]
fn kill_nine_loses_no_acknowledged_transaction() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(Path::new(&dir));
        return;
    }
    let iterations: u32 = std::env::var("CAIRN_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut rng = SmallRng::seed_from_u64(SEED ^ 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let mut total_acked = 0;
    for iteration in 0..iterations {
        let journal_max = if iteration % 2 == 1 {
            64 * 1024
        } else {
            256 << 20
        };
        let kill_after = Duration::from_millis(rng.gen_range(20..400));
        let acked = run_child(dir.path(), journal_max, kill_after);

        let store = FileStore::open(dir.path(), FileStoreOptions::default())
            .unwrap_or_else(|e| panic!("iteration {iteration}: reopen failed: {e}"));
        let count = common::applied_count(&*store);
        if let Some(last) = acked {
            assert!(
                count > last,
                "iteration {iteration}: transaction {last} was acknowledged but only {count} survived"
            );
        }
        rt.block_on(common::assert_matches_model(&*store, SEED, count));
        let objects = store.statfs().map(|s| s.objects);
        let model = common::model(SEED, count).statfs().map(|s| s.objects);
        assert_eq!(
            objects.ok(),
            model.ok(),
            "iteration {iteration}: object count"
        );
        total_acked = count;
        eprintln!(
            "iteration {iteration}: acked up to {acked:?}, recovered {count}, replayed {}",
            store.stats().replayed
        );
    }
    assert!(total_acked > 0, "the child never acknowledged anything");
}

/// Run the child until `kill_after` past its first acknowledgement, SIGKILL
/// it, and return the index of the last transaction it acknowledged.
fn run_child(dir: &Path, journal_max: u64, kill_after: Duration) -> Option<u64> {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "kill_nine_loses_no_acknowledged_transaction",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_JOURNAL, journal_max.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn child: {e}"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no child stdout"));
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(n) = line
                .strip_prefix("ACK ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                if last.is_none() {
                    let _ = tx.send(());
                }
                last = Some(n);
            }
        }
        last
    });
    let started = Instant::now();
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("child acknowledged nothing within {:?}", started.elapsed());
    }
    std::thread::sleep(kill_after);
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed");
    let _ = child.wait();
    reader
        .join()
        .unwrap_or_else(|_| panic!("reader thread panicked"))
}

/// The child: continue the workload from what the store holds, forever.
fn child(dir: &Path) {
    let journal_max_bytes = std::env::var(CHILD_JOURNAL)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256 << 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async move {
        let options = FileStoreOptions {
            journal_max_bytes,
            ..Default::default()
        };
        let store = FileStore::open(dir, options).unwrap_or_else(|e| panic!("child open: {e}"));
        let mut workload = common::Workload::new(SEED);
        for _ in 0..common::applied_count(&*store) {
            workload.next_txn();
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel(IN_FLIGHT);
        let acker = tokio::spawn(async move {
            while let Some((i, commit)) = rx.recv().await {
                let commit: cairn_store::Commit = commit;
                commit.await.unwrap_or_else(|e| panic!("commit {i}: {e}"));
                let mut out = std::io::stdout();
                let _ = writeln!(out, "ACK {i}");
                let _ = out.flush();
            }
        });
        loop {
            let i = workload.position();
            let commit = store
                .submit(workload.next_txn())
                .unwrap_or_else(|e| panic!("submit {i}: {e}"));
            if tx.send((i, commit)).await.is_err() {
                break;
            }
        }
        let _ = acker.await;
    });
}
