//! Commits driven from the submitter's event loop.
//!
//! With the commit thread, a commit crosses three threads: the submitter
//! queues it and wakes the commit thread, which lays out a journal record
//! and wakes a record thread, which writes it (blocking) and wakes the
//! submitter's loop with the acknowledgement. When the store is attached
//! to an event loop ([`attach`]), that loop does the common case itself:
//! a task on it takes what is queued, lays out the record (`loop_group`)
//! and starts its durable write on a [`LoopRing`] of its own; the ring's
//! completion wakes the same loop, which acknowledges the commits there
//! (their waiters are tasks of that loop: no thread is woken) and then
//! writes the record's batch to the key-value store, off the
//! acknowledgement's path, if the store takes it without waiting; a batch
//! that would wait (a RocksDB write stall) goes to a record thread.
//!
//! Attaching also gives the loop a `LoopReader` where the device has one:
//! the loop's own device reads are then entered and reaped on the loop too
//! (see `read::Sources`), not handed to the engine's reaper thread.
//!
//! Records still go in order through the same `Flight` (see `record`), so
//! groups the commit thread lays out and groups the loop does mix freely:
//! whatever cannot be done without blocking (new data to wait for and
//! flush, a full journal, a group too large for a record, a failed store,
//! shutting down) is left to the commit thread, which is woken for it.
//!
//! Must never: block the loop; submit a record once detached (detaching
//! holds the commit state, under which records are handed over); leave a
//! record in flight unreaped (detaching, or the task being dropped with its
//! runtime, reaps every one on the calling thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_device::{Completion, LoopRing};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::commit::{loop_group, LoopGroup};
use crate::record::{acknowledge, answer_on_loop, InFlight};
use crate::state::Inner;

/// What the loop's task shares with submitters and with detaching.
pub(crate) struct LoopCommits {
    ring: LoopRing,
    /// Records written through the ring, by sequence number, until their
    /// completion is reaped.
    in_flight: Mutex<foldhash::HashMap<u64, InFlight>>,
    /// Wakes the task: a transaction queued, or detaching.
    pub wake: Notify,
    /// Submitters wake the task, not the commit thread. Cleared (under
    /// the commit state) to detach.
    pub attached: AtomicBool,
    /// The task waits for records in flight (maybe the commit thread's)
    /// to be acknowledged or settled: see [`LoopCommits::poke`].
    stalled: AtomicBool,
}

impl LoopCommits {
    /// Called after `acked` or `settled` moved (with the flight lock
    /// released): wake the task if it waits for that. Set under the
    /// flight lock by the task, so no move after its check is missed.
    pub fn poke(&self) {
        if self.stalled.swap(false, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }
}

/// Attach `inner` to the calling tokio runtime's loop: spawn its task.
/// `Ok(false)` if the device has no loop ring (memory and fault devices).
pub(crate) fn attach(inner: &Arc<Inner>) -> Result<bool, String> {
    if let Some(lc) = inner.loop_commits.get() {
        // Once detached, a store stays on its commit thread.
        return Ok(lc.attached.load(Ordering::Acquire));
    }
    let ring = match inner.device.loop_ring() {
        None => return Ok(false),
        Some(ring) => ring.map_err(|e| e.to_string())?,
    };
    let lc = Arc::new(LoopCommits {
        ring,
        in_flight: Mutex::new(Default::default()),
        wake: Notify::new(),
        attached: AtomicBool::new(true),
        stalled: AtomicBool::new(false),
    });
    if inner.loop_commits.set(lc.clone()).is_err() {
        return Ok(true);
    }
    tokio::spawn(run(inner.clone(), lc));
    // The loop's reads too, where the device offers it (a single-threaded
    // loop); without it they go through the device's engine.
    match inner.device.loop_reader() {
        Some(Ok(reader)) => {
            let _ = inner.loop_reader.set(reader);
        }
        Some(Err(e)) => tracing::debug!("reads stay on the device's engine: {e}"),
        None => {}
    }
    Ok(true)
}

/// Stop committing on the loop: nothing more is handed to the ring, and
/// every record in flight is reaped (blocking the calling thread) and
/// handed on. The commit thread is woken for whatever is queued.
pub(crate) fn detach(inner: &Inner) {
    let Some(lc) = inner.loop_commits.get() else {
        return;
    };
    // Reap first: the commit thread may hold the commit state while it
    // waits for the loop's records, and the loop may be this thread.
    completed(inner, lc, lc.ring.drain_blocking());
    {
        // Under the commit state no record is handed to the ring after
        // this; under the queue's lock no submitter queues for the loop.
        let _commit = inner.commit.lock();
        let _q = inner.pipeline.commits.lock();
        lc.attached.store(false, Ordering::Release);
    }
    completed(inner, lc, lc.ring.drain_blocking());
    lc.wake.notify_one();
    wake_commit_thread(inner);
}

/// Wake the commit thread to take everything queued, now that the loop
/// no longer does (under the queue's lock: see `commit::wait_for_commits`).
fn wake_commit_thread(inner: &Inner) {
    let _q = inner.pipeline.commits.lock();
    inner.pipeline.commit_ready.notify_one();
}

/// Reaps what is in flight if the task is dropped (its runtime ended).
struct Reap<'a>(&'a Inner, &'a LoopCommits);

impl Drop for Reap<'_> {
    fn drop(&mut self) {
        // The task is gone: it hands nothing more to the ring.
        {
            let _q = self.0.pipeline.commits.lock();
            self.1.attached.store(false, Ordering::Release);
        }
        completed(self.0, self.1, self.1.ring.drain_blocking());
        wake_commit_thread(self.0);
    }
}

/// The loop's task: start groups while it may, then wait for a
/// completion or a new transaction.
async fn run(inner: Arc<Inner>, lc: Arc<LoopCommits>) {
    let _reap = Reap(&inner, &lc);
    loop {
        while let LoopGroup::Started = start(&inner, &lc) {}
        if !lc.attached.load(Ordering::Acquire) && lc.in_flight.lock().is_empty() {
            return;
        }
        tokio::select! {
            biased;
            done = lc.ring.completions() => {
                acknowledged(&inner, &lc, done);
                // The commits' waiters are tasks of this loop, woken by
                // the acknowledgement: let them run first (an OSD's reply
                // to its client or primary goes out in this turn), then
                // write the batches, which no acknowledgement waits for.
                tokio::task::yield_now().await;
                answer_on_loop(&inner, &inner.records, &mut inner.records.flight.lock());
            }
            _ = lc.wake.notified() => {
                // New transactions: let the rest of this turn run first
                // (the tasks that send what the submitter queued, such as
                // an OSD's RepOps, and the reactor's next messages, whose
                // transactions join this group), then lay out the group.
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Lay out and start the next group, if it can be done here.
fn start(inner: &Arc<Inner>, lc: &LoopCommits) -> LoopGroup {
    loop_group(inner, &lc.attached, &lc.stalled, |f, record| {
        let seq = f.seq;
        // Held across the submit: a completion reaped meanwhile (by a
        // detaching thread) finds the record once it is in.
        let mut in_flight = lc.in_flight.lock();
        match lc.ring.submit(seq, record.offset, record.bytes) {
            Ok(()) => {
                in_flight.insert(seq, f);
                Ok(())
            }
            Err(e) => Err((format!("journal write failed: {e}"), f)),
        }
    })
}

/// Hand written records on: acknowledge what is durable and next in
/// order, and write their batches to the key-value store (both here, on
/// the calling thread), or wake a record thread for what would wait.
fn completed(inner: &Inner, lc: &LoopCommits, done: Vec<Completion>) {
    acknowledged(inner, lc, done);
    answer_on_loop(inner, &inner.records, &mut inner.records.flight.lock());
}

/// Take written records out of flight and acknowledge what is durable and
/// next in order. Their batches are left in `written` for
/// [`answer_on_loop`] or a record thread.
fn acknowledged(inner: &Inner, lc: &LoopCommits, done: Vec<Completion>) {
    let shared = &inner.records;
    for (seq, result) in done {
        let Some(f) = lc.in_flight.lock().remove(&seq) else {
            tracing::error!("a journal write completed for record {seq}, not in flight");
            continue;
        };
        let written = result.map_err(|e| format!("journal write failed: {e}"));
        let mut flight = shared.flight.lock();
        if flight.broken || flight.stop {
            // No record thread will answer it, nor the records before it:
            // never acknowledged, and the store is failed (a clean stop
            // leaves no record in flight).
            drop(flight);
            inner.fail(match written {
                Err(why) => why,
                Ok(()) => {
                    format!("journal record {seq} completed after the record threads stopped")
                }
            });
            for mut p in f.group {
                p.answer(inner.check_failed());
            }
            continue;
        }
        flight.written.insert(seq, (f, written));
        acknowledge(inner, shared, &mut flight);
    }
}
