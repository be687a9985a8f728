//! [`FaultDevice`]: an in-memory device for error and crash testing.
//!
//! Owns a two-layer model of a disk with a volatile write cache:
//! - the *durable* image: what survives power loss;
//! - the *unflushed* writes, in completion order: visible to reads, lost or
//!   kept (whole or torn per block) on power loss.
//!
//! A successful [`BlockDevice::flush`] moves every unflushed write into the
//! durable image. [`FaultDevice::crash_image`] computes the content after a
//! simulated power loss, deterministically from a seed, and
//! [`FaultDevice::from_image`] lets a test remount on that image and crash
//! again.
//!
//! Fault model (what the device injects, on request):
//! - EIO on chosen byte ranges, for reads, writes or both
//!   ([`FaultDevice::inject_eio`]). A failing read returns no data; a failing
//!   write changes nothing. In `write_many`, writes outside the faulty
//!   ranges are still applied and the call returns the first error.
//! - EIO on the next flush ([`FaultDevice::fail_flush_once`]); the unflushed
//!   writes stay unflushed (still volatile), as after a real failed FLUSH.
//! - Power loss ([`FaultDevice::crash_image`]) per [`CrashPolicy`].
//!
//! Discard is accepted and changes nothing. All requests complete before
//! their future is returned.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::{
    check_range, check_writes, ready, AlignedBuf, BlockDevice, BoxFuture, DeviceError, MemDevice,
    BLOCK_SIZE,
};

/// Which operations an injected fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOn {
    /// Only reads touching the range fail.
    Reads,
    /// Only writes touching the range fail.
    Writes,
    /// Reads and writes touching the range fail.
    Both,
}

impl FaultOn {
    fn reads(self) -> bool {
        matches!(self, FaultOn::Reads | FaultOn::Both)
    }
    fn writes(self) -> bool {
        matches!(self, FaultOn::Writes | FaultOn::Both)
    }
}

/// What happens to unflushed writes in [`FaultDevice::crash_image`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPolicy {
    /// No unflushed write survives.
    DropAll,
    /// Every unflushed write survives.
    KeepAll,
    /// Each unflushed write independently survives whole, or not at all.
    Random,
    /// Each [`BLOCK_SIZE`] block of each unflushed write independently
    /// survives or not: multi-block writes may be torn.
    Torn,
}

struct State {
    /// What reads see: durable image plus every unflushed write.
    current: Vec<u8>,
    /// What survives power loss.
    durable: Vec<u8>,
    /// Completed, unflushed writes in completion order.
    unflushed: Vec<(u64, Vec<u8>)>,
    faults: Vec<(Range<u64>, FaultOn)>,
    fail_next_flush: bool,
}

/// In-memory device with injectable errors and simulated power loss.
pub struct FaultDevice {
    state: Mutex<State>,
    size: u64,
    writes: AtomicU64,
    flushes: AtomicU64,
    injected: AtomicU64,
}

impl FaultDevice {
    /// A zero-filled device of `size` bytes (rounded down to
    /// [`BLOCK_SIZE`]), everything durable.
    pub fn new(size: u64) -> Self {
        Self::from_image(MemDevice::new(size))
    }

    /// A device whose durable content is `image` (typically a previous
    /// [`crash_image`](Self::crash_image)), with no unflushed writes.
    pub fn from_image(image: MemDevice) -> Self {
        let durable = image.into_vec();
        Self {
            size: durable.len() as u64,
            state: Mutex::new(State {
                current: durable.clone(),
                durable,
                unflushed: Vec::new(),
                faults: Vec::new(),
                fail_next_flush: false,
            }),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Make reads and/or writes touching `range` (bytes) fail with EIO until
    /// [`clear_faults`](Self::clear_faults).
    pub fn inject_eio(&self, range: Range<u64>, on: FaultOn) {
        tracing::debug!(?range, ?on, "fault device: injecting EIO");
        self.state.lock().faults.push((range, on));
    }

    /// Remove every injected range fault and a pending
    /// [`fail_flush_once`](Self::fail_flush_once).
    pub fn clear_faults(&self) {
        let mut st = self.state.lock();
        st.faults.clear();
        st.fail_next_flush = false;
    }

    /// Make the next flush fail with EIO (its writes stay unflushed).
    pub fn fail_flush_once(&self) {
        self.state.lock().fail_next_flush = true;
    }

    /// Number of errors injected so far (reads, writes and flushes).
    pub fn injected_errors(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Number of valid write requests so far, each `write_many` element
    /// counted once, including those failed by an injected fault.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Number of flush requests so far, including failed ones.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// Number of completed writes not yet made durable by a flush.
    pub fn unflushed(&self) -> usize {
        self.state.lock().unflushed.len()
    }

    /// Content visible to reads right now (durable plus unflushed).
    pub fn current_image(&self) -> MemDevice {
        MemDevice::from_vec(self.state.lock().current.clone())
    }

    /// The content after a power loss now: the durable image plus the
    /// unflushed writes that `policy` keeps, applied in completion order.
    /// Deterministic for a given `seed` and history.
    pub fn crash_image(&self, seed: u64, policy: CrashPolicy) -> MemDevice {
        let st = self.state.lock();
        let mut image = st.durable.clone();
        let mut rng = SplitMix64(seed);
        for (off, data) in &st.unflushed {
            let start = *off as usize;
            match policy {
                CrashPolicy::DropAll => {}
                CrashPolicy::KeepAll => image[start..start + data.len()].copy_from_slice(data),
                CrashPolicy::Random => {
                    if rng.coin() {
                        image[start..start + data.len()].copy_from_slice(data);
                    }
                }
                CrashPolicy::Torn => {
                    for (i, block) in data.chunks(BLOCK_SIZE as usize).enumerate() {
                        if rng.coin() {
                            let at = start + i * BLOCK_SIZE as usize;
                            image[at..at + block.len()].copy_from_slice(block);
                        }
                    }
                }
            }
        }
        tracing::debug!(
            seed,
            ?policy,
            unflushed = st.unflushed.len(),
            "fault device: crash image taken"
        );
        MemDevice::from_vec(image)
    }

    /// Whether `[offset, offset+len)` touches an injected fault that applies
    /// to reads (`write == false`) or writes.
    fn fault_hit(st: &State, offset: u64, len: u64, write: bool) -> bool {
        let end = offset + len;
        st.faults.iter().any(|(r, on)| {
            let applies = if write { on.writes() } else { on.reads() };
            applies && offset < r.end && r.start < end
        })
    }

    fn eio(&self, op: &'static str, offset: u64, len: u64) -> DeviceError {
        self.injected.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(op, offset, len, "fault device: injected EIO");
        DeviceError::errno(op, offset, len, libc::EIO)
    }

    fn read_sync(&self, offset: u64, len: u64) -> Result<AlignedBuf, DeviceError> {
        check_range(offset, len, self.size)?;
        let st = self.state.lock();
        if Self::fault_hit(&st, offset, len, false) {
            return Err(self.eio("read", offset, len));
        }
        let start = offset as usize;
        Ok(AlignedBuf::from_slice(
            &st.current[start..start + len as usize],
        ))
    }

    /// Apply one already-validated write under the lock.
    fn apply_write(&self, st: &mut State, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let len = data.len() as u64;
        if Self::fault_hit(st, offset, len, true) {
            return Err(self.eio("write", offset, len));
        }
        if data.is_empty() {
            return Ok(());
        }
        let start = offset as usize;
        st.current[start..start + data.len()].copy_from_slice(data);
        st.unflushed.push((offset, data.to_vec()));
        Ok(())
    }

    fn flush_sync(&self) -> Result<(), DeviceError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        if st.fail_next_flush {
            st.fail_next_flush = false;
            return Err(self.eio("flush", 0, 0));
        }
        let State {
            durable, unflushed, ..
        } = &mut *st;
        for (off, data) in unflushed.drain(..) {
            let start = off as usize;
            durable[start..start + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
}

impl std::fmt::Debug for FaultDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultDevice")
            .field("size", &self.size)
            .field("writes", &self.writes())
            .field("flushes", &self.flushes())
            .finish()
    }
}

impl BlockDevice for FaultDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        ready(self.read_sync(offset, len))
    }

    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>> {
        let result = check_range(offset, buf.len() as u64, self.size)
            .and_then(|()| self.apply_write(&mut self.state.lock(), offset, &buf));
        ready(result)
    }

    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>> {
        if let Err(e) = check_writes(&writes, self.size) {
            return ready(Err(e));
        }
        let mut st = self.state.lock();
        let mut first_err = None;
        for (off, buf) in &writes {
            if let Err(e) = self.apply_write(&mut st, *off, buf) {
                first_err.get_or_insert(e);
            }
        }
        ready(first_err.map_or(Ok(()), Err))
    }

    /// Durable at once (a FUA write): the write goes straight to the
    /// durable image; other unflushed writes stay unflushed.
    fn write_durable(&self, offset: u64, buf: AlignedBuf) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        let mut st = self.state.lock();
        self.flushes.fetch_add(1, Ordering::Relaxed);
        if st.fail_next_flush {
            st.fail_next_flush = false;
            return Err(self.eio("flush", offset, buf.len() as u64));
        }
        self.apply_write(&mut st, offset, &buf)?;
        // The write just queued as unflushed is durable already.
        if let Some((off, data)) = st.unflushed.pop() {
            let start = off as usize;
            st.durable[start..start + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }

    fn flush(&self) -> BoxFuture<Result<(), DeviceError>> {
        ready(self.flush_sync())
    }

    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>> {
        ready(check_range(offset, len, self.size))
    }
}

/// Small deterministic generator (SplitMix64) so crash images depend only
/// on the seed, not on any external crate's algorithm choices.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn coin(&mut self) -> bool {
        self.next() >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_mixed() {
        let a: Vec<bool> = {
            let mut r = SplitMix64(7);
            (0..64).map(|_| r.coin()).collect()
        };
        let b: Vec<bool> = {
            let mut r = SplitMix64(7);
            (0..64).map(|_| r.coin()).collect()
        };
        assert_eq!(a, b);
        let heads = a.iter().filter(|&&x| x).count();
        assert!((10..54).contains(&heads), "heads {heads}");
    }
}
