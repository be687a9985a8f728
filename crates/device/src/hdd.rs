//! [`EmulatedHdd`]: a wrapper that makes any device behave like a spinning
//! disk, for tests and benchmarks of slow and fast pools on one machine
//! (cache tiering). Never a production setting.
//!
//! The model ([`HddModel`]) has one head and serves requests one at a
//! time, in arrival order: each costs a seek unless it starts where the
//! previous one ended, plus its length at the streaming bandwidth; a flush
//! costs one seek (the drive writing out its cache). A worker thread owns
//! the head: it sleeps each request's service time, then carries it out on
//! the wrapped device, so a request's future completes no sooner than the
//! disk it imitates would. What the wrapped device promises (durability
//! after flush, errors) is passed through unchanged.
//!
//! Requests waiting for the head are bounded ([`HDD_QUEUE_MAX`]); one
//! past it fails at once with an I/O error naming the queue.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use crate::done::{self, Done, ReadTx};
use crate::{block_on, check_range, check_writes, AlignedBuf, BlockDevice, BoxFuture, DeviceError};

/// Requests waiting for the emulated head at most.
pub const HDD_QUEUE_MAX: usize = 4096;

/// The spinning disk being imitated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HddModel {
    /// Cost of a request that does not start where the last one ended
    /// (seek plus rotational delay); 4–8 ms for a 7,200 rpm drive.
    pub seek: Duration,
    /// Streaming bandwidth in bytes per second; ~150 MiB/s.
    pub bytes_per_s: u64,
}

impl HddModel {
    /// Time to serve `len` bytes at `offset` with the head at `head`.
    pub fn service_time(&self, head: u64, offset: u64, len: u64) -> Duration {
        let seek = if offset == head {
            Duration::ZERO
        } else {
            self.seek
        };
        let transfer = Duration::from_nanos(
            (u128::from(len) * 1_000_000_000 / u128::from(self.bytes_per_s.max(1))) as u64,
        );
        seek + transfer
    }
}

enum Request {
    Read(u64, u64, ReadTx),
    Write(u64, AlignedBuf, Done),
    Flush(Done),
    Discard(u64, u64, Done),
}

/// A device that serves like a spinning disk (see the module docs).
pub struct EmulatedHdd {
    size: u64,
    queue: SyncSender<Request>,
}

impl EmulatedHdd {
    /// Wrap `inner`; the head starts at offset 0.
    pub fn new(inner: Arc<dyn BlockDevice>, model: HddModel) -> Self {
        let (queue, requests) = sync_channel(HDD_QUEUE_MAX);
        let size = inner.size();
        let spawned = std::thread::Builder::new()
            .name("cairn-hdd-head".into())
            .spawn(move || serve(inner, model, requests));
        if let Err(e) = spawned {
            // Without its thread the device fails every request (Closed):
            // the store reports it, nothing is lost silently.
            tracing::error!("emulated hdd: cannot start its thread: {e}");
        }
        EmulatedHdd { size, queue }
    }

    fn enqueue(&self, request: Request) {
        match self.queue.try_send(request) {
            Ok(()) => {}
            Err(TrySendError::Full(r)) => fail(
                r,
                DeviceError::Io {
                    op: "queue",
                    offset: 0,
                    len: 0,
                    source: std::io::Error::other(format!(
                        "emulated hdd: {HDD_QUEUE_MAX} requests already wait for the head"
                    )),
                },
            ),
            Err(TrySendError::Disconnected(r)) => fail(r, DeviceError::Closed),
        }
    }
}

fn fail(request: Request, e: DeviceError) {
    match request {
        Request::Read(_, _, tx) => {
            let _ = tx.send(Err(e));
        }
        Request::Write(_, _, d) | Request::Flush(d) | Request::Discard(_, _, d) => d.finish(Err(e)),
    }
}

/// The head: one request at a time, in arrival order.
fn serve(inner: Arc<dyn BlockDevice>, model: HddModel, requests: Receiver<Request>) {
    let mut head = 0u64;
    for request in requests {
        match request {
            Request::Read(offset, len, tx) => {
                std::thread::sleep(model.service_time(head, offset, len));
                head = offset + len;
                let _ = tx.send(block_on(inner.read(offset, len)));
            }
            Request::Write(offset, buf, done) => {
                let len = buf.len() as u64;
                std::thread::sleep(model.service_time(head, offset, len));
                head = offset + len;
                done.finish(block_on(inner.write(offset, buf)));
            }
            Request::Flush(done) => {
                std::thread::sleep(model.seek);
                done.finish(block_on(inner.flush()));
            }
            Request::Discard(offset, len, done) => {
                done.finish(block_on(inner.discard(offset, len)));
            }
        }
    }
}

impl BlockDevice for EmulatedHdd {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        if let Err(e) = check_range(offset, len, self.size) {
            return crate::ready(Err(e));
        }
        let (tx, fut) = done::read();
        self.enqueue(Request::Read(offset, len, tx));
        fut
    }

    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>> {
        if let Err(e) = check_range(offset, buf.len() as u64, self.size) {
            return crate::ready(Err(e));
        }
        let (d, fut) = done::unit();
        self.enqueue(Request::Write(offset, buf, d));
        fut
    }

    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>> {
        if let Err(e) = check_writes(&writes, self.size) {
            return crate::ready(Err(e));
        }
        if writes.is_empty() {
            return crate::ready(Ok(()));
        }
        let (members, fut) = done::group(writes.len());
        for ((offset, buf), d) in writes.into_iter().zip(members) {
            self.enqueue(Request::Write(offset, buf, d));
        }
        fut
    }

    fn flush(&self) -> BoxFuture<Result<(), DeviceError>> {
        let (d, fut) = done::unit();
        self.enqueue(Request::Flush(d));
        fut
    }

    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>> {
        if let Err(e) = check_range(offset, len, self.size) {
            return crate::ready(Err(e));
        }
        let (d, fut) = done::unit();
        self.enqueue(Request::Discard(offset, len, d));
        fut
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::MemDevice;

    fn hdd(seek_ms: u64) -> EmulatedHdd {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 << 20));
        EmulatedHdd::new(
            inner,
            HddModel {
                seek: Duration::from_millis(seek_ms),
                bytes_per_s: 100 << 20,
            },
        )
    }

    #[test]
    fn the_model_charges_seeks_and_bandwidth() {
        let m = HddModel {
            seek: Duration::from_millis(5),
            bytes_per_s: 100 << 20,
        };
        assert_eq!(m.service_time(0, 0, 0), Duration::ZERO);
        assert_eq!(
            m.service_time(4096, 4096, 100 << 20),
            Duration::from_secs(1)
        );
        assert_eq!(m.service_time(0, 8192, 0), Duration::from_millis(5));
    }

    #[test]
    fn data_round_trips_and_random_reads_pay_a_seek_each() {
        let dev = hdd(5);
        let mut buf = AlignedBuf::zeroed(4096);
        buf.fill(0x5a);
        block_on(dev.write(1 << 20, buf)).expect("write");
        block_on(dev.flush()).expect("flush");
        let back = block_on(dev.read(1 << 20, 4096)).expect("read");
        assert!(back.iter().all(|b| *b == 0x5a));
        // Ten reads far apart: ten seeks, so at least 50 ms in all.
        let start = Instant::now();
        for k in 0..10u64 {
            block_on(dev.read(k * (4 << 20), 4096)).expect("read");
        }
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "{:?}",
            start.elapsed()
        );
        // Bad requests fail at once, as on any device.
        assert!(matches!(
            block_on(dev.read(1, 4096)),
            Err(DeviceError::Misaligned { .. })
        ));
    }
}
