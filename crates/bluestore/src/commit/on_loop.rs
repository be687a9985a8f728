//! The commit thread's fast path, for an event loop (see `loop_commit`):
//! lay out the next group's journal record without blocking, or say why
//! not. Must never block, nor hand a record over once the store is
//! detached from its loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{retirable, Committer, MAX_GROUP, TAIL_PUT_BYTES, UNSETTLED};
use crate::journal::{Record, WRITERS};
use crate::pipeline::{Prepared, Queue};
use crate::record::InFlight;
use crate::state::Inner;

/// What [`loop_group`] did.
pub(crate) enum LoopGroup {
    /// A group's record was laid out and handed to the writer.
    Started,
    /// Nothing to do now: nothing queued, the commit state busy (the
    /// commit thread is told), or as many records in flight as allowed
    /// (a completion will call again).
    Wait,
    /// The next group needs the commit thread, which is told: new data
    /// to wait for, a journal to make room in, a group too large for a
    /// record, or a failed store.
    Thread,
}

/// Lay out the next group for an event loop, without blocking: the fast
/// path of `start_group` (see `loop_commit`). Only while `attached` (read
/// under the commit state, which detaching holds) are records handed to
/// `write`, which starts the durable write of the record and keeps what
/// answers it; an error from it (handing that back) fails the store. When
/// it waits for records in flight, it sets `stalled` (see
/// `loop_commit::LoopCommits::poke`).
pub(crate) fn loop_group(
    inner: &Arc<Inner>,
    attached: &AtomicBool,
    stalled: &AtomicBool,
    write: impl FnOnce(InFlight, Record) -> Result<(), (String, InFlight)>,
) -> LoopGroup {
    // Set under the queue's lock, which the commit thread holds from
    // checking it to waiting: no request is missed.
    let ask_thread = |q: &mut Queue<Prepared>| {
        q.wanted = true;
        inner.pipeline.commit_ready.notify_one();
        LoopGroup::Thread
    };
    let to_thread = || ask_thread(&mut inner.pipeline.commits.lock());
    if inner.pipeline.commits.lock().items.is_empty() {
        return LoopGroup::Wait;
    }
    let Some(st) = inner.commit.try_lock() else {
        // The commit thread holds it, and wakes the loop once done.
        return LoopGroup::Wait;
    };
    let mut c = Committer {
        inner,
        shared: &inner.records,
        st,
        inline: false,
    };
    if !attached.load(Ordering::Acquire) || inner.failed.get().is_some() {
        return to_thread();
    }
    {
        // `wait_unacked(WRITERS - 1)`, without the wait: whoever moves
        // `acked` or `settled` next (under this lock) wakes the loop.
        let flight = c.shared.flight.lock();
        let left = WRITERS as u64 - 1;
        if c.st.begun - flight.acked > left || c.st.begun - flight.settled > left + UNSETTLED {
            stalled.store(true, Ordering::Release);
            return LoopGroup::Wait;
        }
    }
    let max_bytes = c.st.journal.max_payload() - TAIL_PUT_BYTES;
    let mut group = {
        let mut q = inner.pipeline.commits.lock();
        if q.shutdown || q.dead.is_some() {
            return ask_thread(&mut q);
        }
        let (mut n, mut bytes, mut deferred) = (0, 0, 0);
        while n < q.items.len().min(MAX_GROUP)
            && q.items[n].data.is_none()
            && bytes + q.items[n].record_bytes() <= max_bytes
            && (n == 0 || inner.pipeline.deferred_fits(deferred, &q.items[n]))
        {
            bytes += q.items[n].record_bytes();
            deferred += q.items[n].deferred_bytes();
            n += 1;
        }
        if n == 0 {
            // New data to wait for, or too large for a record.
            return ask_thread(&mut q);
        }
        c.st.journal.retire(retirable(inner));
        if !c.st.journal.room(bytes + TAIL_PUT_BYTES).0 {
            return ask_thread(&mut q);
        }
        q.items.drain(..n).collect::<Vec<_>>()
    };
    let start = Instant::now();
    c.st.lone_streak = 0;
    let (mut batch, payload_len) = Committer::merge(&mut group);
    let (payload, tail) = c.encode_record(&mut group, &mut batch, payload_len);
    let (f, record, fill) = c.place(&mut group, batch, &payload, tail, start);
    if let Err((why, f)) = write(f, record) {
        inner.fail(why);
        for mut p in f.group {
            p.answer(inner.check_failed());
        }
        return to_thread();
    }
    c.request_sync(fill);
    inner.perf.loop_records.fetch_add(1, Ordering::Relaxed);
    LoopGroup::Started
}
