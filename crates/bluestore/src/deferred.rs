//! The deferred thread: applies deferred writes (small overwrites whose
//! data travelled in a commit's journal record) in place, in rounds, then
//! flushes and lets the journal's tail move on (see `pipeline`).
//!
//! A round takes whole journal records, about as many bytes as the device
//! applies in `ROUND_TIME` (measured, see [`RoundSize`]; between
//! `MIN_DEFERRED_ROUND` and `MAX_DEFERRED_ROUND`), once
//! `DEFERRED_BATCH_BYTES` are queued or the oldest has waited
//! `DEFERRED_BATCH_WAIT`. Its writes are the latest content per block,
//! sorted, contiguous blocks merged, at most `DEFERRED_IN_FLIGHT` on the
//! device at once (`BlockDevice::write_all_blocking`: on a file device, a
//! ring of this thread's own, so no other thread wakes it).
//!
//! The commit side keeps journal records to about a round of deferred
//! writes each (`Pipeline::round_bytes`): a record of 1,600 random blocks,
//! a group commit of flushes of a cache tier, would be a 10 s round.
//!
//! Must never: count a write applied before the flush after it returned,
//! or split a journal record's writes over two rounds.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cairn_device::AlignedBuf;
use cairn_kv::Batch;
use tokio::sync::oneshot;

use crate::keys;
use crate::onode::BLOCK;
use crate::pipeline::{DeferredRecord, Prepared, DEFERRED_BATCH_BYTES};
use crate::state::Inner;

/// Most bytes of deferred writes applied in one round.
const MAX_DEFERRED_ROUND: u64 = 32 << 20;
/// Fewest bytes a round is sized to (a round still takes at least one
/// whole record): below it a round's fixed cost, a device flush and a
/// key-value commit, outweighs its writes.
const MIN_DEFERRED_ROUND: u64 = 256 << 10;
/// About how long one round should take on the device. The journal's tail
/// moves only when a round ends, so a full journal waits for the round in
/// flight: a round of `MAX_DEFERRED_ROUND` random 4 KiB writes is 8,192
/// seeks, about 50 s on a spinning disk, and every commit waited that long.
/// Rounds of about this much time keep that wait short on any device.
const ROUND_TIME: std::time::Duration = std::time::Duration::from_millis(250);
/// A round starts once `DEFERRED_BATCH_BYTES` are queued or the first
/// queued record has waited this long.
const DEFERRED_BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
/// Most deferred writes on the device at once. A whole round at once (up to
/// thousands of writes) queues every journal record, and the flush in it,
/// behind them all: milliseconds of commit latency, every round.
const DEFERRED_IN_FLIGHT: usize = 32;

/// Marks the deferred thread stopped as it ends, however it ends: the
/// commit thread waits for that before it stops (see `commit::next_group`).
struct DeferredStopped<'a>(&'a Inner);

impl Drop for DeferredStopped<'_> {
    fn drop(&mut self) {
        let pipeline = &self.0.pipeline;
        pipeline.deferred_stopped.store(true, Ordering::Release);
        let _commits = pipeline.commits.lock();
        pipeline.commit_ready.notify_all();
    }
}

/// The deferred thread.
pub(crate) fn deferred_loop(inner: Arc<Inner>) {
    let _stopped = DeferredStopped(&inner);
    let mut size = RoundSize::default();
    loop {
        let round: Vec<DeferredRecord> = {
            let mut q = inner.pipeline.deferred.lock();
            while q.items.is_empty() && !q.shutdown {
                inner.pipeline.deferred_ready.wait(&mut q);
            }
            if q.items.is_empty() {
                return;
            }
            // Gather a batch: every round costs a device flush, so apply
            // once enough has queued or the oldest record has waited long
            // enough, whichever is first.
            let deadline = Instant::now() + DEFERRED_BATCH_WAIT;
            while !q.shutdown && q.bytes < DEFERRED_BATCH_BYTES {
                if inner
                    .pipeline
                    .deferred_ready
                    .wait_until(&mut q, deadline)
                    .timed_out()
                {
                    break;
                }
            }
            let (n, bytes) = round_len(&q.items, size.bytes());
            q.bytes -= bytes;
            q.items.drain(..n).collect()
        };
        if inner.failed.get().is_some() {
            continue; // the journal keeps their records for replay
        }
        let started = Instant::now();
        match apply_round(&inner, &round) {
            Ok(()) => {
                size.applied(
                    round.iter().map(DeferredRecord::bytes).sum(),
                    started.elapsed(),
                );
                inner
                    .pipeline
                    .round_bytes
                    .store(size.bytes(), Ordering::Relaxed);
            }
            Err(why) => inner.fail(why),
        }
    }
}

/// How many bytes the next round takes: what the device applied in
/// [`ROUND_TIME`], from the rounds so far (a moving average of their
/// rates, rounds too small to tell left out), within
/// [`MIN_DEFERRED_ROUND`]..=[`MAX_DEFERRED_ROUND`]. Starts at the most, so
/// a fast device never waits for the measure; a slow one is measured by
/// its first round.
#[derive(Debug, Default)]
struct RoundSize {
    /// Bytes per second, `None` before the first round large enough.
    rate: Option<f64>,
}

impl RoundSize {
    fn bytes(&self) -> u64 {
        match self.rate {
            None => MAX_DEFERRED_ROUND,
            Some(rate) => ((rate * ROUND_TIME.as_secs_f64()) as u64)
                .clamp(MIN_DEFERRED_ROUND, MAX_DEFERRED_ROUND),
        }
    }

    /// A round of `bytes` took `took`.
    fn applied(&mut self, bytes: u64, took: std::time::Duration) {
        if bytes < MIN_DEFERRED_ROUND {
            return;
        }
        let rate = bytes as f64 / took.as_secs_f64().max(1e-6);
        self.rate = Some(match self.rate {
            None => rate,
            Some(old) => (old + rate) / 2.0,
        });
    }
}

/// How many of the queued records the next round takes, and their bytes:
/// about `max` bytes, in whole journal records. Mount applies every
/// deferred write of every record from the journal's tail on, so were a
/// record's writes split over two rounds, the first round's would count as
/// applied (their transactions' released space reused, see `try_release`)
/// while a crash before the second could still write them again.
fn round_len(items: &VecDeque<DeferredRecord>, max: u64) -> (usize, u64) {
    let mut bytes = 0;
    let mut n = 0;
    while n < items.len()
        && (n == 0
            || bytes < max
            || items[n].record.is_some() && items[n].record == items[n - 1].record)
    {
        bytes += items[n].bytes();
        n += 1;
    }
    (n, bytes)
}

/// The bytes of a run of blocks, in one buffer: a lone block (the usual
/// run of random overwrites) from where it lies, if aligned (see
/// `Builder::try_deferred`), a longer run copied together.
fn run_buf(run: &[&Bytes]) -> AlignedBuf {
    match run {
        [one] => AlignedBuf::share((*one).clone()),
        _ => AlignedBuf::concat(&run.iter().map(|b| &b[..]).collect::<Vec<_>>()),
    }
}

/// Write a round of deferred records in place, flush, forget the records.
fn apply_round(inner: &Inner, round: &[DeferredRecord]) -> Result<(), String> {
    // Latest content per block; contiguous blocks go in one write.
    let mut latest: HashMap<u64, &Bytes> = HashMap::new();
    for r in round {
        for (phys, data, _) in &r.writes {
            latest.insert(*phys, data);
        }
    }
    let mut blocks: Vec<(u64, &Bytes)> = latest.into_iter().collect();
    blocks.sort_unstable_by_key(|(p, _)| *p);
    let mut runs: Vec<(u64, Vec<&Bytes>)> = Vec::new();
    for (phys, data) in blocks {
        // A run's blocks are laid end to end: one of another size would
        // shift every later block of the run to the wrong place.
        assert_eq!(
            data.len() as u64,
            BLOCK,
            "deferred write at {phys} is not one block"
        );
        match runs.last_mut() {
            Some((start, run)) if *start + run.len() as u64 * BLOCK == phys => run.push(data),
            _ => runs.push((phys, vec![data])),
        }
    }
    // On the device's bulk path: a window of writes submitted and waited
    // for by this thread (a ring of its own on a file device), then the
    // flush, on this thread too.
    let writes: Vec<(u64, AlignedBuf)> = runs
        .into_iter()
        .map(|(start, run)| (start, run_buf(&run)))
        .collect();
    inner
        .device
        .write_all_blocking(writes, DEFERRED_IN_FLIGHT)
        .map_err(|e| format!("deferred write failed: {e}"))?;
    inner
        .device
        .flush_blocking()
        .map_err(|e| format!("device flush failed: {e}"))?;
    inner.perf.device_flushes.fetch_add(1, Ordering::Relaxed);
    let mut bytes = 0;
    for r in round {
        for (phys, _, pin) in &r.writes {
            inner.cache.unpin(*phys, *pin, true);
            bytes += BLOCK;
        }
    }
    inner.deferred_backlog.fetch_sub(bytes, Ordering::Relaxed);
    inner
        .perf
        .deferred_applied
        .fetch_add(round.len() as u64, Ordering::Relaxed);
    {
        let mut tail = inner.pipeline.tail.lock();
        for r in round {
            tail.remove(&r.seq);
        }
    }
    inner.pipeline.tail_moved.notify_all();
    // A commit records the moved tail (every commit carries it) and deletes
    // the records kept in the key-value store; the space these writes kept
    // from reuse is released once it is durable (see `finish_group`), so
    // no replay can ever land on reused space. Not waited for: the commit
    // thread may itself be waiting for the tail to move.
    let mut batch = Batch::new();
    for r in round.iter().filter(|r| r.record.is_none()) {
        batch.delete(keys::deferred(r.seq));
    }
    let (done, _) = oneshot::channel();
    let mut st = inner.state.lock();
    let seq = st.next_seq;
    st.next_seq += 1;
    inner.queue_commit(Prepared {
        seq,
        batch,
        data: None,
        data_pins: Vec::new(),
        deferred: None,
        release: None,
        retires: round.iter().map(|r| r.seq).collect(),
        done: Some(done),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `mib` MiB of writes in journal record `record`.
    fn rec(seq: u64, record: Option<u64>, mib: u64) -> DeferredRecord {
        let blocks = mib * (1 << 20) / BLOCK;
        DeferredRecord {
            seq,
            writes: (0..blocks).map(|b| (b * BLOCK, Bytes::new(), 0)).collect(),
            record,
        }
    }

    #[test]
    fn rounds_never_split_a_journal_record() {
        let mib = MAX_DEFERRED_ROUND >> 20;
        // Three transactions of one record, each over half a round.
        let q: VecDeque<_> = [
            rec(1, Some(7), mib / 2 + 1),
            rec(2, Some(7), mib / 2 + 1),
            rec(3, Some(7), mib / 2 + 1),
            rec(4, Some(8), 1),
        ]
        .into();
        assert_eq!(
            round_len(&q, MAX_DEFERRED_ROUND).0,
            3,
            "all of record 7, none of record 8"
        );
        // Records in the key-value store (no journal record) may be split.
        let q: VecDeque<_> = [
            rec(1, None, mib / 2 + 1),
            rec(2, None, mib / 2 + 1),
            rec(3, None, mib / 2 + 1),
        ]
        .into();
        assert_eq!(round_len(&q, MAX_DEFERRED_ROUND).0, 2);
        // Distinct records: about one round's worth.
        let q: VecDeque<_> = (0..8).map(|i| rec(i, Some(i), mib / 4)).collect();
        let (n, bytes) = round_len(&q, MAX_DEFERRED_ROUND);
        assert_eq!((n, bytes), (4, MAX_DEFERRED_ROUND));
    }

    #[test]
    fn rounds_are_sized_to_what_the_device_applies_in_a_round_time() {
        let mut size = RoundSize::default();
        assert_eq!(size.bytes(), MAX_DEFERRED_ROUND, "unmeasured: the most");
        // A spinning disk: 64 random 4 KiB writes in 0.4 s, each a seek.
        size.applied(MIN_DEFERRED_ROUND, std::time::Duration::from_millis(400));
        assert_eq!(size.bytes(), MIN_DEFERRED_ROUND, "never below the least");
        // Too small a round to tell: the measure stays.
        size.applied(4096, std::time::Duration::from_secs(10));
        assert_eq!(size.bytes(), MIN_DEFERRED_ROUND);
        // The device speeds up (or was slow only once): the size follows,
        // halfway each round, up to the most.
        let mut fast = RoundSize::default();
        fast.applied(8 << 20, std::time::Duration::from_millis(50)); // 160 MiB/s
        assert_eq!(fast.bytes(), MAX_DEFERRED_ROUND);
        let mut mid = RoundSize::default();
        mid.applied(4 << 20, std::time::Duration::from_secs(1)); // 4 MiB/s
        assert_eq!(mid.bytes(), 1 << 20);
        mid.applied(8 << 20, std::time::Duration::from_secs(1)); // 8 MiB/s
        assert_eq!(mid.bytes(), 6 << 20 >> 2, "the mean of 4 and 8 MiB/s");
        // Rounds take whole records up to the size.
        let q: VecDeque<_> = (0..8).map(|i| rec(i, Some(i), 1)).collect();
        assert_eq!(round_len(&q, 3 << 20), (3, 3 << 20));
        assert_eq!(round_len(&q, 1), (1, 1 << 20), "at least one record");
    }
}
