//! The record threads: each writes a journal record the commit thread laid
//! out, durably, then *answers* records in sequence order. Answering has
//! two steps: first every durable record next in order is *acknowledged*
//! (its commits complete: the journal holds them) by whichever thread
//! finds it so, even while another writes batches; then each record's
//! batch goes to the key-value store (unsynced; see `journal`) and its
//! group is finished (`finish_group`: counted committed, deferred writes
//! and released space handed on). A thread whose record is durable before
//! an earlier one leaves it to the thread answering that one. A batch
//! never reaches the key-value store before its record is durable, nor
//! before an earlier record's batch. Until its batch is there, a
//! transaction's objects stay dirty in the cache, and reads of the
//! key-value store wait for it (`Inner::wait_kv_current`).
//!
//! There is one more thread than records written at once (`WRITERS`), so
//! that a record can start while another thread writes batches.
//!
//! Must never: acknowledge a record before it and every earlier one is
//! durable, answer a record out of order, or write anything after the
//! store has failed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Instant;

use cairn_kv::Batch;
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::journal::Record;
use crate::pipeline::{finish_group, Done, Prepared};
use crate::state::Inner;

/// A group whose journal record is laid out, to be written and answered.
pub(crate) struct InFlight {
    pub group: Vec<Prepared>,
    /// The group's key-value changes, written once the record is durable.
    pub batch: Batch,
    pub seq: u64,
    /// The journal tail the batch records.
    pub tail: u64,
    pub start: Instant,
    pub payload_len: usize,
}

/// Records between the commit thread and the record threads.
pub(crate) struct Flight {
    /// Laid out, not yet taken by a record thread; oldest first.
    pub to_write: VecDeque<(InFlight, Record)>,
    /// Written (durably or not), waiting for an earlier record to be
    /// answered; by sequence number.
    pub written: BTreeMap<u64, (InFlight, Result<(), String>)>,
    /// A record thread is answering records (one at a time, in order).
    pub answering: bool,
    /// A record thread died, maybe while answering: records are no longer
    /// answered in order but failed as they come.
    pub broken: bool,
    pub stop: bool,
    /// Sequence number of the last record answered: its commits completed
    /// (or failed) and its deferred writes and releases handed on. Only
    /// this says the commit thread may finish a group itself: groups must
    /// settle in order, or a later deferred write to a block could be
    /// queued, and applied, before an earlier one.
    pub settled: u64,
    /// Sequence number of the last record whose commits are acknowledged:
    /// it and every earlier one are durable. At least `settled`.
    pub acked: u64,
}

/// What the commit thread and the record threads share.
pub(crate) struct Shared {
    pub flight: Mutex<Flight>,
    /// A record was laid out, or the record threads are to stop.
    pub handed: Condvar,
    /// A record was answered (`settled` moved), or the store failed.
    pub finished: Condvar,
}

impl Shared {
    /// Nothing in flight; the last record answered is `settled`.
    pub fn new(settled: u64) -> Self {
        Self {
            flight: Mutex::new(Flight {
                to_write: VecDeque::new(),
                written: BTreeMap::new(),
                answering: false,
                broken: false,
                stop: false,
                settled,
                acked: settled,
            }),
            handed: Condvar::new(),
            finished: Condvar::new(),
        }
    }
}

/// Tells the record threads to stop once nothing is left to write.
pub(crate) struct StopRecords<'a>(pub &'a Shared);

impl Drop for StopRecords<'_> {
    fn drop(&mut self) {
        self.0.flight.lock().stop = true;
        self.0.handed.notify_all();
    }
}

/// Fails the store if a record thread panics, and wakes the commit thread,
/// which may be waiting for a record that thread was to answer.
struct RecordThreadDies<'a>(&'a Inner, &'a Shared);

impl Drop for RecordThreadDies<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let inner = self.0;
            inner.fail("a journal record thread panicked; remount the store".into());
            let abandoned = {
                let mut flight = self.1.flight.lock();
                flight.broken = true;
                std::mem::take(&mut flight.written)
            };
            for (f, _) in abandoned.into_values() {
                for mut p in f.group {
                    p.answer(inner.check_failed());
                }
            }
            let _flight = self.1.flight.lock();
            self.1.finished.notify_all();
        }
    }
}

/// A record thread: write the next record laid out, then answer every
/// record written that is next in order, unless another thread already is.
///
/// Records an event loop wrote (`loop_commit`) arrive in `written`
/// already acknowledged; the loop answers them itself when it can
/// ([`answer_on_loop`]), and wakes a record thread for the rest.
pub(crate) fn record_loop(inner: &Inner, shared: &Shared) {
    let _dies = RecordThreadDies(inner, shared);
    loop {
        let mut flight = shared.flight.lock();
        let job = loop {
            if let Some(job) = flight.to_write.pop_front() {
                break Some(job);
            }
            if !flight.answering && flight.written.contains_key(&(flight.settled + 1)) {
                break None;
            }
            if flight.stop {
                return;
            }
            shared.handed.wait(&mut flight);
        };
        if let Some((f, record)) = job {
            drop(flight);
            // Nothing more is written once the store has failed.
            let written = match inner.failed.get() {
                Some(why) => Err(why.clone()),
                None => record.write(inner.device.as_ref()),
            };
            flight = shared.flight.lock();
            if flight.broken {
                drop(flight);
                for mut p in f.group {
                    p.answer(inner.check_failed());
                }
                continue;
            }
            flight.written.insert(f.seq, (f, written));
            if flight.answering {
                // The thread answering will write its batch; acknowledge
                // it now if it is next in order, rather than after the
                // batch that thread is writing.
                acknowledge(inner, shared, &mut flight);
                continue;
            }
        }
        flight.answering = true;
        loop {
            acknowledge(inner, shared, &mut flight);
            let next = flight.settled + 1;
            let Some((f, written)) = flight.written.remove(&next) else {
                break;
            };
            drop(flight);
            answer(inner, f, written);
            flight = shared.flight.lock();
            flight.settled = next;
            shared.finished.notify_all();
            if let Some(lc) = inner.loop_commits.get() {
                lc.poke();
            }
        }
        flight.answering = false;
    }
}

/// Acknowledge every record written durably that is next in order; the
/// commits are answered with the lock released.
pub(crate) fn acknowledge(inner: &Inner, shared: &Shared, flight: &mut MutexGuard<'_, Flight>) {
    let acks = take_acks(inner, flight);
    if !acks.is_empty() {
        shared.finished.notify_all();
        MutexGuard::unlocked(flight, || {
            for done in acks {
                let _ = done.send(Ok(()));
            }
            if let Some(lc) = inner.loop_commits.get() {
                lc.poke();
            }
        });
    }
}

/// Take the acknowledgements of every record written durably that is next
/// in order, and count them acknowledged. They are sent before the
/// records' batches reach the key-value store: the records hold them, so
/// they are as durable as they will be, and their objects stay newer in
/// the cache than in the key-value store (dirty, never evicted) until
/// `finish_group` counts them committed.
fn take_acks(inner: &Inner, flight: &mut Flight) -> Vec<Done> {
    let mut acks = Vec::new();
    if inner.failed.get().is_some() {
        return acks;
    }
    let mut next = flight.acked + 1;
    while let Some((f, Ok(()))) = flight.written.get_mut(&next) {
        acks.extend(f.group.iter_mut().filter_map(|p| p.done.take()));
        if let Some(last) = f.group.last() {
            inner.acked.fetch_max(last.seq, Ordering::AcqRel);
        }
        flight.acked = next;
        next += 1;
    }
    acks
}

/// Wake a record thread if a record written and next in order waits for
/// its batch and nobody is answering: for a thread that must wait for the
/// batches while the loop that would write them may be the thread waiting.
pub(crate) fn hand_unanswered(shared: &Shared) {
    let flight = shared.flight.lock();
    if !flight.answering && flight.written.contains_key(&(flight.settled + 1)) {
        shared.handed.notify_one();
    }
}

/// Most records an event loop answers in one go (see [`answer_on_loop`]):
/// a bound on the loop's time away from its other work; what is left goes
/// to a record thread.
const LOOP_ANSWER_MAX: usize = 8;

/// Answer records next in order on an event loop, as a record thread
/// would, unless one already is: each batch goes to the key-value store
/// only if it takes it without waiting ([`cairn_kv::Kv::try_write`]). A
/// record whose batch would wait, and whatever is left after
/// [`LOOP_ANSWER_MAX`], go back to `written` for a record thread, which is
/// woken. Saves waking a thread per record, the usual case.
pub(crate) fn answer_on_loop(inner: &Inner, shared: &Shared, flight: &mut MutexGuard<'_, Flight>) {
    if flight.answering || flight.broken || flight.stop {
        return;
    }
    flight.answering = true;
    let mut answered = 0;
    while answered < LOOP_ANSWER_MAX {
        acknowledge(inner, shared, flight);
        let next = flight.settled + 1;
        let Some((f, written)) = flight.written.remove(&next) else {
            break;
        };
        let answer = MutexGuard::unlocked(flight, || try_answer(inner, f, written));
        if let Err(back) = answer {
            flight.written.insert(next, back);
            break;
        }
        flight.settled = next;
        shared.finished.notify_all();
        answered += 1;
    }
    flight.answering = false;
    if flight.written.contains_key(&(flight.settled + 1)) {
        shared.handed.notify_one();
    }
    if answered > 0 {
        inner
            .perf
            .loop_kv_writes
            .fetch_add(answered as u64, Ordering::Relaxed);
    }
}

/// Answer a written record: write its batch to the key-value store
/// (unsynced) and complete its commits, or fail them, and the store, if
/// the record, the write or an earlier one failed.
fn answer(inner: &Inner, f: InFlight, written: Result<(), String>) {
    let answered = answer_with(inner, f, written, false);
    assert!(
        answered.is_ok(),
        "a blocking answer never hands a record back"
    );
}

/// [`answer`] without blocking: a batch the key-value store could only
/// take by waiting is not written, and the record comes back untouched.
fn try_answer(
    inner: &Inner,
    f: InFlight,
    written: Result<(), String>,
) -> Result<(), (InFlight, Result<(), String>)> {
    answer_with(inner, f, written, true)
}

fn answer_with(
    inner: &Inner,
    mut f: InFlight,
    written: Result<(), String>,
    nonblocking: bool,
) -> Result<(), (InFlight, Result<(), String>)> {
    // The record first: a batch must never reach the key-value store
    // (where a sync or a memtable flush may make it durable) before its
    // record, since the deferred writes it describes are only there.
    // Records are answered in order, and the commit thread writes the
    // key-value store only with none unanswered, so batches land in commit
    // order. After a failure nothing more goes to the key-value store: a
    // batch must never land there without every earlier one.
    let metadata_failed = |e| format!("metadata write failed: {e}");
    let written = match (written, inner.failed.get()) {
        (Err(why), _) => Err(why),
        (Ok(()), Some(why)) => Err(why.clone()),
        (Ok(()), None) if nonblocking => match inner.kv.try_write(&mut f.batch) {
            Ok(true) => Ok(()),
            Ok(false) => return Err((f, Ok(()))),
            Err(e) => Err(metadata_failed(e)),
        },
        (Ok(()), None) => inner
            .kv
            .write(std::mem::take(&mut f.batch), false)
            .map_err(metadata_failed),
    };
    match written {
        Ok(()) if inner.failed.get().is_none() => {
            record_answered(inner, f.start, f.payload_len, f.tail, f.seq);
            finish_group(inner, f.group);
        }
        result => {
            if let Err(why) = result {
                inner.fail(why);
            }
            for mut p in f.group {
                p.answer(inner.check_failed());
            }
        }
    }
    Ok(())
}

/// Count record `seq` (`payload_len` bytes, begun at `start`) written and
/// its batch in the key-value store, which now records journal tail `tail`.
pub(crate) fn record_answered(
    inner: &Inner,
    start: Instant,
    payload_len: usize,
    tail: u64,
    seq: u64,
) {
    let perf = &inner.perf;
    let us = start.elapsed().as_micros() as u64;
    perf.journal_write_us.fetch_add(us, Ordering::Relaxed);
    perf.journal_records.fetch_add(1, Ordering::Relaxed);
    perf.journal_bytes
        .fetch_add(payload_len as u64, Ordering::Relaxed);
    perf.kv_commit(us);
    inner.jdef_written.fetch_max(tail, Ordering::AcqRel);
    inner.journal_written.store(seq, Ordering::Release);
}
