//! The load itself: jobs that keep `iodepth` operations in flight against a
//! volume, and the sequential precondition pass.
//!
//! A job is one tokio task. It chooses every offset itself (so its RNG and
//! sequential cursor need no synchronisation) and drives its `iodepth`
//! outstanding operations itself, as futures it polls (as fio drives its
//! I/O from one thread): a batch of completions costs one wake-up of the
//! job, which records their latency in histograms it alone owns and starts
//! the next operations in the same pass. (An operation as a task of its
//! own cost three task hops per operation: 4K randwrite QD32 against one
//! store spent about a third of its latency there.) Histograms are merged
//! once, when the job ends.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use cairn_volume::{Volume, VolumeError};
use futures::stream::{FuturesUnordered, StreamExt};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use crate::report::Measurement;
use crate::spec::{BenchSpec, RwMode};
use crate::{BenchError, OpKind};

/// Block size of the precondition pass.
pub const PRECONDITION_BS: u64 = 4 << 20;
/// Writes the precondition pass keeps in flight.
pub const PRECONDITION_IODEPTH: usize = 16;

/// When the counted window of a run starts and ends. Operations are counted
/// if they complete inside it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub start: Instant,
    pub end: Instant,
}

/// A buffer of `len` random bytes, none of them zero (so a written block can
/// always be told from an unwritten one).
pub(crate) fn random_data(len: u64, rng: &mut SmallRng) -> Bytes {
    let mut buf = vec![0u8; len as usize];
    rng.fill_bytes(&mut buf);
    for b in &mut buf {
        if *b == 0 {
            *b = 0xa5;
        }
    }
    Bytes::from(buf)
}

/// The seed of job `index` of a run seeded with `seed`.
pub(crate) fn job_seed(seed: u64, index: u64) -> u64 {
    seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Chooses the kind and offset of each operation of one job.
pub(crate) struct OpGen {
    mode: RwMode,
    rwmixread: u32,
    bs: u64,
    /// Blocks of `bs` bytes in the region.
    blocks: u64,
    /// The job's slice of the region, in blocks, for sequential modes.
    slice_start: u64,
    slice_len: u64,
    cursor: u64,
    rng: SmallRng,
}

impl OpGen {
    /// The generator of job `job` of `numjobs` (on one volume) over a region
    /// of `region` bytes.
    pub fn new(spec: &BenchSpec, region: u64, job: u64, numjobs: u64, rng: SmallRng) -> Self {
        let blocks = (region / spec.bs).max(1);
        let numjobs = numjobs.max(1);
        // Job j gets blocks [j*N/J, (j+1)*N/J); with more jobs than blocks
        // some slices would be empty, and those jobs share a block instead.
        let start = (u128::from(job) * u128::from(blocks) / u128::from(numjobs)) as u64;
        let end = (u128::from(job + 1) * u128::from(blocks) / u128::from(numjobs)) as u64;
        let slice_start = start.min(blocks - 1);
        let slice_len = end.saturating_sub(start).max(1);
        Self {
            mode: spec.rw,
            rwmixread: spec.rwmixread,
            bs: spec.bs,
            blocks,
            slice_start,
            slice_len,
            cursor: 0,
            rng,
        }
    }

    /// The next operation: its kind and byte offset.
    pub fn next_op(&mut self) -> (OpKind, u64) {
        let kind = match self.mode {
            RwMode::Read | RwMode::RandRead => OpKind::Read,
            RwMode::Write | RwMode::RandWrite => OpKind::Write,
            RwMode::RandRw => {
                if self.rng.gen_range(0..100) < self.rwmixread {
                    OpKind::Read
                } else {
                    OpKind::Write
                }
            }
        };
        let block = if self.mode.is_random() {
            self.rng.gen_range(0..self.blocks)
        } else {
            let block = self.slice_start + self.cursor;
            self.cursor += 1;
            if self.cursor == self.slice_len {
                self.cursor = 0;
            }
            block
        };
        (kind, block * self.bs)
    }

    /// The generator's RNG, for drawing write data.
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

/// What an operation task hands back to its job.
struct Done {
    kind: OpKind,
    offset: u64,
    issued: Instant,
    completed: Instant,
    result: Result<(), VolumeError>,
}

/// Run one operation and time it. `issued` is when the job decided to start it.
async fn do_op<V: Volume>(
    volume: Arc<V>,
    kind: OpKind,
    offset: u64,
    len: u64,
    data: Bytes,
    issued: Instant,
) -> Done {
    let result = match kind {
        OpKind::Read => match volume.read(offset, len).await {
            Ok(buf) if buf.len() as u64 == len => Ok(()),
            Ok(buf) => Err(VolumeError::Io(format!(
                "short read: {} of {len} bytes",
                buf.len()
            ))),
            Err(e) => Err(e),
        },
        OpKind::Write | OpKind::PreconditionWrite => volume.write(offset, data).await,
    };
    Done {
        kind,
        offset,
        issued,
        completed: Instant::now(),
        result,
    }
}

fn task_error(e: JoinError) -> BenchError {
    BenchError::Task(e.to_string())
}

/// One job: keep `spec.iodepth` operations in flight until `window.end`, then
/// wait for the outstanding ones. Sets `stop` on failure and stops issuing
/// once another job has set it.
pub(crate) async fn run_job<V: Volume>(
    volume: Arc<V>,
    spec: BenchSpec,
    mut gen: OpGen,
    window: Window,
    stop: Arc<AtomicBool>,
) -> Result<Measurement, BenchError> {
    let result = job_loop(volume, &spec, &mut gen, window, &stop).await;
    if result.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    result
}

async fn job_loop<V: Volume>(
    volume: Arc<V>,
    spec: &BenchSpec,
    gen: &mut OpGen,
    window: Window,
    stop: &AtomicBool,
) -> Result<Measurement, BenchError> {
    let mut stats = Measurement::new()?;
    let data = if spec.rw.writes() {
        random_data(spec.bs, gen.rng())
    } else {
        Bytes::new()
    };
    let iodepth = spec.iodepth as usize;
    let mut in_flight = FuturesUnordered::new();
    // Operations that finished on their first poll, not yet counted.
    let mut finished = VecDeque::new();
    let mut issuing = true;
    loop {
        while issuing && in_flight.len() + finished.len() < iodepth {
            let now = Instant::now();
            if now >= window.end || stop.load(Ordering::Relaxed) {
                issuing = false;
                break;
            }
            let (kind, offset) = gen.next_op();
            let buf = match kind {
                OpKind::Read => Bytes::new(),
                _ => data.clone(),
            };
            // Started now, as fio starts an I/O when it queues it: left in
            // `in_flight` unpolled, it would not reach the volume until
            // every completion ahead of it had been handled.
            let mut op = Box::pin(do_op(volume.clone(), kind, offset, spec.bs, buf, now));
            match poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await {
                Poll::Ready(done) => finished.push_back(done),
                Poll::Pending => in_flight.push(op),
            }
        }
        // Dropping `in_flight` on an early return aborts the other operations.
        let done = match finished.pop_front() {
            Some(done) => done,
            None => match in_flight.next().await {
                Some(done) => done,
                None => break,
            },
        };
        // Operations that complete at once (a memory volume, cached reads)
        // would otherwise keep this loop from ever yielding, starving the
        // other jobs on this worker: yield once the task's budget is spent.
        tokio::task::coop::consume_budget().await;
        if let Err(source) = done.result {
            return Err(BenchError::Io {
                op: done.kind,
                offset: done.offset,
                len: spec.bs,
                source,
            });
        }
        if done.completed >= window.start && done.completed <= window.end {
            let latency = done.completed.saturating_duration_since(done.issued);
            stats.record(done.kind, spec.bs, latency);
        }
    }
    Ok(stats)
}

/// Write the first `region` bytes of `volume` in order, in blocks of
/// [`PRECONDITION_BS`] with [`PRECONDITION_IODEPTH`] in flight.
pub(crate) async fn precondition<V: Volume>(
    volume: Arc<V>,
    region: u64,
    seed: u64,
) -> Result<(), BenchError> {
    fill(volume, region, PRECONDITION_BS, PRECONDITION_IODEPTH, seed).await
}

/// Write the first `region` bytes of `volume` in order, in blocks of `bs`
/// (the last one shorter if `region` is not a multiple) with `iodepth` in
/// flight, all carrying the same random non-zero data. `bs` and `iodepth`
/// must be positive.
pub(crate) async fn fill<V: Volume>(
    volume: Arc<V>,
    region: u64,
    bs: u64,
    iodepth: usize,
    seed: u64,
) -> Result<(), BenchError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let chunk = bs.min(region);
    let data = random_data(chunk, &mut rng);
    let mut in_flight = JoinSet::new();
    let mut offset = 0;
    loop {
        while offset < region && in_flight.len() < iodepth {
            let len = chunk.min(region - offset);
            let buf = data.slice(..len as usize);
            let op = do_op(
                volume.clone(),
                OpKind::PreconditionWrite,
                offset,
                len,
                buf,
                Instant::now(),
            );
            in_flight.spawn(op);
            offset += len;
        }
        let Some(joined) = in_flight.join_next().await else {
            return Ok(());
        };
        let done = joined.map_err(task_error)?;
        if let Err(source) = done.result {
            let len = chunk.min(region - done.offset);
            return Err(BenchError::Io {
                op: done.kind,
                offset: done.offset,
                len,
                source,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rw: RwMode, bs: u64) -> BenchSpec {
        BenchSpec {
            rw,
            bs,
            ..BenchSpec::default()
        }
    }

    fn offsets(gen: &mut OpGen, n: usize) -> Vec<u64> {
        (0..n).map(|_| gen.next_op().1).collect()
    }

    #[test]
    fn sequential_jobs_walk_their_own_slices_and_wrap() {
        let s = spec(RwMode::Read, 4096);
        // 10 blocks (plus a partial one that is never used), 3 jobs: 3, 3, 4 blocks.
        let region = 10 * 4096 + 100;
        let seqs: Vec<Vec<u64>> = (0..3)
            .map(|j| {
                let rng = SmallRng::seed_from_u64(j);
                offsets(&mut OpGen::new(&s, region, j, 3, rng), 9)
            })
            .collect();
        let blocks = |v: &[u64]| v.iter().map(|o| o / 4096).collect::<Vec<_>>();
        assert_eq!(blocks(&seqs[0]), [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(blocks(&seqs[1]), [3, 4, 5, 3, 4, 5, 3, 4, 5]);
        assert_eq!(blocks(&seqs[2]), [6, 7, 8, 9, 6, 7, 8, 9, 6]);
    }

    #[test]
    fn more_jobs_than_blocks_stay_in_the_region() {
        let s = spec(RwMode::Write, 4096);
        for j in 0..8 {
            let mut gen = OpGen::new(&s, 2 * 4096, j, 8, SmallRng::seed_from_u64(j));
            for off in offsets(&mut gen, 5) {
                assert!(off == 0 || off == 4096, "job {j}: {off}");
            }
        }
    }

    #[test]
    fn random_offsets_are_aligned_uniform_and_seeded() {
        let s = spec(RwMode::RandRead, 8192);
        let region = 64 * 8192;
        let mut a = OpGen::new(&s, region, 0, 1, SmallRng::seed_from_u64(7));
        let mut b = OpGen::new(&s, region, 0, 1, SmallRng::seed_from_u64(7));
        let seq = offsets(&mut a, 64_000);
        assert_eq!(seq[..100], offsets(&mut b, 100)[..]);
        let mut hits = vec![0u32; 64];
        for off in &seq {
            assert_eq!(off % 8192, 0);
            hits[(off / 8192) as usize] += 1;
        }
        // Each block expects 1000 hits; 5 standard deviations is about 160.
        assert!(hits.iter().all(|&h| (840..1160).contains(&h)), "{hits:?}");
    }

    #[test]
    fn randrw_mix_follows_rwmixread() {
        for (mix, lo, hi) in [(0, 0, 0), (100, 10_000, 10_000), (70, 6_800, 7_200)] {
            let s = BenchSpec {
                rwmixread: mix,
                ..spec(RwMode::RandRw, 4096)
            };
            let mut gen = OpGen::new(&s, 1 << 20, 0, 1, SmallRng::seed_from_u64(1));
            let reads = (0..10_000)
                .filter(|_| gen.next_op().0 == OpKind::Read)
                .count();
            assert!((lo..=hi).contains(&reads), "mix {mix}: {reads} reads");
        }
    }

    #[test]
    fn random_data_has_no_zero_bytes() {
        let data = random_data(1 << 16, &mut SmallRng::seed_from_u64(3));
        assert_eq!(data.len(), 1 << 16);
        assert!(data.iter().all(|&b| b != 0));
    }
}
