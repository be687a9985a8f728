//! A pipeline thread that panics (a bug, or a device backend that panics)
//! fails the store instead of hanging it: commits in flight and later ones
//! return an error, unmount completes, and a remount finds every
//! acknowledged write.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_bluestore::{mkfs, BlueStore, MkfsOptions, MountOptions};
use cairn_device::{BlockDevice, MemDevice};
use cairn_kv::{Kv, MemKv};
use cairn_store::{ObjectId, ObjectStore, StoreError};
use common::*;

/// Panics when a thread whose name starts with `target` writes while
/// armed (the hook of a [`HookedDevice`] over a [`MemDevice`]).
struct Panicky {
    armed: AtomicBool,
    target: &'static str,
}

impl WriteHook for Panicky {
    fn before(&self, call: WriteCall) {
        let here = std::thread::current();
        let name = here.name().unwrap_or("");
        if self.armed.load(Ordering::Acquire) && name.starts_with(self.target) {
            self.armed.store(false, Ordering::Release);
            panic!("injected: {name} panics in a device write");
        }
        if call == WriteCall::WriteDurable
            && self.armed.load(Ordering::Acquire)
            && name == "cairn-bs-commit"
        {
            // A slow lone commit, so that the next ones queue up behind it
            // and go to a record thread as a group.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Setup {
    device: Arc<HookedDevice<Panicky>>,
    kv: Arc<MemKv>,
    inline: bool,
}

impl Setup {
    fn new(target: &'static str) -> Self {
        let s = Self {
            device: Arc::new(HookedDevice {
                inner: Arc::new(MemDevice::new(64 * MIB)),
                hook: Panicky {
                    armed: AtomicBool::new(false),
                    target,
                },
            }),
            kv: Arc::new(MemKv::new()),
            inline: false,
        };
        mkfs(s.device.as_ref(), s.kv.as_ref(), &MkfsOptions::default()).expect("mkfs");
        s
    }

    fn open(&self) -> Arc<BlueStore> {
        let device: Arc<dyn BlockDevice> = self.device.clone();
        let kv: Arc<dyn Kv> = self.kv.clone();
        // Every commit through the pipeline threads: an inline commit
        // (see `MountOptions::inline_commits`) runs on the test's own
        // thread, which `inline_commit_panic_fails_the_store_and_loses_nothing`
        // covers.
        let opts = MountOptions {
            inline_commits: self.inline,
            ..MountOptions::default()
        };
        BlueStore::mount(device, kv, opts).expect("mount")
    }
}

/// Ends the test process with a failure if the test is still running
/// after `secs` (a hung store would otherwise hang the test run: a failed
/// assertion drops the store on the test's thread).
struct Watchdog {
    /// Dropped with the watchdog, which ends its wait.
    _done: std::sync::mpsc::Sender<()>,
}

impl Watchdog {
    fn new(secs: u64) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_secs(secs))
            {
                eprintln!("test hung for {secs} s: the store did not fail or unmount");
                std::process::exit(101);
            }
        });
        Self { _done: tx }
    }
}

/// Drop the store on another thread; fail if unmount does not complete.
fn unmount_within(store: Arc<BlueStore>, secs: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(store);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("unmount hung after a pipeline thread panicked");
}

/// A commit that must fail, quickly, with the store failed.
async fn assert_fails(store: &BlueStore, o: &ObjectId) {
    let t = tx(|t| t.write(o, 0, bytes(pattern(99, 4096))));
    let result = match store.submit(t) {
        Ok(c) => tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("a commit hung after a pipeline thread panicked"),
        Err(e) => Err(e),
    };
    assert!(
        matches!(result, Err(StoreError::Failed(_))),
        "commit after the panic: {result:?}"
    );
}

/// Eight 4 KiB overwrites of `a`, one at a time, each awaited, applied to
/// `model` too.
async fn overwrite_blocks(store: &BlueStore, a: &ObjectId, model: &mut [u8]) {
    for i in 0..8u64 {
        let at = i as usize * 8192;
        let block = pattern(10 + i, 4096);
        model[at..at + 4096].copy_from_slice(&block);
        // Let the commit thread finish the previous commit and let go of
        // the commit state, so that with inline commits on the submitter
        // can take it (on a loaded machine it could find it held every
        // time, and queue every transaction instead: seen in CI).
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        commit(store, tx(|t| t.write(a, at as u64, bytes(block.clone())))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_thread_panic_fails_the_store_and_loses_nothing() {
    let _watchdog = Watchdog::new(60);
    let s = Setup::new("cairn-bs-deferred");
    let store = s.open();
    let a = oid(C1, "a");
    let mut model = pattern(1, 256 * KIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    // Applied by the deferred thread, which then panics. That may happen
    // while the overwrites go on (its round starts 10 ms after the first):
    // they stop at the first refused or failed one, which may or may not
    // have reached the journal.
    s.device.hook.armed.store(true, Ordering::Release);
    let mut unsure = None;
    for i in 0..8u64 {
        let at = i as usize * 8192;
        let block = pattern(10 + i, 4096);
        let Ok(c) = store.submit(tx(|t| t.write(&a, at as u64, bytes(block.clone())))) else {
            break;
        };
        if c.await.is_err() {
            unsure = Some((at, block));
            break;
        }
        model[at..at + 4096].copy_from_slice(&block);
    }
    wait_for("the store to fail", || {
        !s.device.hook.armed.load(Ordering::Acquire) && store.submit(tx(|t| t.touch(&a))).is_err()
    })
    .await;
    assert_fails(&store, &a).await;
    unmount_within(store, 20);
    let store = s.open();
    let found = read_all(&*store, &a).await;
    if let Some((at, block)) = unsure {
        // All or nothing of the unacknowledged overwrite.
        if found[at..at + 4096] == block[..] {
            model[at..at + 4096].copy_from_slice(&block);
        }
    }
    assert_bytes(&found, &model, "after remount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_thread_panic_fails_the_store_and_loses_nothing() {
    let _watchdog = Watchdog::new(60);
    let s = Setup::new("cairn-bs-record");
    let store = s.open();
    let objects: Vec<_> = (0..16).map(|i| oid(C1, &format!("o{i}"))).collect();
    let mut acked = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let data = pattern(i as u64, 16 * KIB as usize);
        commit(&*store, tx(|t| t.write(o, 0, bytes(data.clone())))).await;
        acked.push((o.clone(), data));
    }
    // Many commits at once: groups larger than one go through the record
    // threads, one of which panics.
    s.device.hook.armed.store(true, Ordering::Release);
    let mut pending = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let data = pattern(100 + i as u64, 16 * KIB as usize);
        let c = store
            .submit(tx(|t| t.write(o, 0, bytes(data.clone()))))
            .expect("submit");
        pending.push((o.clone(), data, c));
    }
    let mut failed = 0;
    let mut later = Vec::new();
    for (o, data, c) in pending {
        let result = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("a commit hung after a record thread panicked");
        match result {
            Ok(()) => later.push((o, data)),
            Err(_) => failed += 1,
        }
    }
    assert!(
        !s.device.hook.armed.load(Ordering::Acquire),
        "no record thread wrote"
    );
    assert!(failed > 0, "the panicking record's commits must fail");
    assert_fails(&store, &objects[0]).await;
    unmount_within(store, 20);
    let store = s.open();
    // Acknowledged rewrites are there; the others are old or new, whole.
    let rewritten: std::collections::HashMap<_, _> = later.into_iter().collect();
    for (i, (o, old)) in acked.iter().enumerate() {
        let got = read_all(&*store, o).await;
        match rewritten.get(o) {
            Some(new) => assert_bytes(&got, new, "acknowledged rewrite"),
            None => {
                let new = pattern(100 + i as u64, 16 * KIB as usize);
                assert!(
                    got == *old || got == new,
                    "object {i} is neither old nor new"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_commit_panic_fails_the_store_and_loses_nothing() {
    let _watchdog = Watchdog::new(60);
    let mut s = Setup::new("cairn-test-submitter");
    s.inline = true;
    let store = s.open();
    let a = oid(C1, "a");
    let mut model = pattern(1, 64 * KIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    // Small overwrites one at a time: after a few lone commits their
    // submitter writes the records itself.
    overwrite_blocks(&store, &a, &mut model).await;
    assert!(
        store.perf().inline_commits > 0,
        "no inline commit: {:?}",
        store.perf()
    );
    // The next one's submitter panics writing its record. If the commit
    // thread still held the commit state (it may, briefly, after its own
    // work), the transaction was queued and committed as usual instead:
    // it is in the model then, and the next try comes a moment later.
    let mut panicked = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        s.device.hook.armed.store(true, Ordering::Release);
        let data = pattern(77, 4096);
        let submitted = {
            let store = store.clone();
            let a = a.clone();
            let data = data.clone();
            std::thread::Builder::new()
                .name("cairn-test-submitter".into())
                .spawn(move || {
                    let c = store.submit(tx(|t| t.write(&a, 4096, bytes(data))));
                    if let Ok(c) = c {
                        cairn_device::block_on(c).expect("a queued commit");
                    }
                })
                .expect("spawn")
                .join()
        };
        if submitted.is_err() {
            panicked = true;
            break;
        }
        s.device.hook.armed.store(false, Ordering::Release);
        model[4096..8192].copy_from_slice(&data);
    }
    assert!(
        panicked,
        "the submitter never committed inline, so never panicked"
    );
    assert!(
        !s.device.hook.armed.load(Ordering::Acquire),
        "no inline write"
    );
    assert_fails(&store, &a).await;
    unmount_within(store, 20);
    let store = s.open();
    // The panicking write never reached the device, nor was it acknowledged.
    assert_bytes(&read_all(&*store, &a).await, &model, "after remount");
}
