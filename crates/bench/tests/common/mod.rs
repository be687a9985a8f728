//! Volumes for the run tests: a probe that checks and counts what the bench
//! sends, a volume whose latency follows a pattern, and one that fails.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use cairn_volume::{Result, Volume, VolumeError};

/// Wraps a volume; counts reads and writes, logs the first `log_limit`
/// operations, and notes any operation that is not `bs` bytes at a
/// `bs`-aligned offset inside the first `region` bytes.
pub struct Probe<V> {
    pub inner: V,
    bs: u64,
    region: u64,
    log_limit: usize,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub bad: Mutex<Vec<String>>,
    /// (is_write, offset) of the first operations, in the order they started.
    pub log: Mutex<Vec<(bool, u64)>>,
}

impl<V: Volume> Probe<V> {
    pub fn new(inner: V, bs: u64, region: u64) -> Self {
        Self {
            inner,
            bs,
            region,
            log_limit: 10_000,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bad: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
        }
    }

    fn check(&self, write: bool, offset: u64, len: u64) {
        if len != self.bs || offset % self.bs != 0 || offset + len > self.region {
            self.bad
                .lock()
                .unwrap()
                .push(format!("write={write} {offset}+{len}"));
        }
        let mut log = self.log.lock().unwrap();
        if log.len() < self.log_limit {
            log.push((write, offset));
        }
    }

    pub fn calls(&self) -> u64 {
        self.reads.load(Ordering::Relaxed) + self.writes.load(Ordering::Relaxed)
    }

    pub fn assert_all_good(&self) {
        let bad = self.bad.lock().unwrap();
        assert!(
            bad.is_empty(),
            "{} bad ops, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
    }

    pub fn offsets(&self) -> Vec<u64> {
        self.log.lock().unwrap().iter().map(|&(_, o)| o).collect()
    }
}

impl<V: Volume> Volume for Probe<V> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    async fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.check(false, offset, len);
        self.inner.read(offset, len).await
    }

    async fn write(&self, offset: u64, data: Bytes) -> Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.check(true, offset, data.len() as u64);
        self.inner.write(offset, data).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.write_zeroes(offset, len).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len).await
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
}

/// A volume of zeros whose n-th operation (counting reads and writes from 0)
/// takes `latency(n)`, slept with tokio's timer. Remembers every latency it
/// handed out, in order.
pub struct Delay {
    size: u64,
    latency: fn(u64) -> Duration,
    next: AtomicU64,
    pub given: Mutex<Vec<Duration>>,
}

impl Delay {
    pub fn new(size: u64, latency: fn(u64) -> Duration) -> Self {
        Self {
            size,
            latency,
            next: AtomicU64::new(0),
            given: Mutex::new(Vec::new()),
        }
    }

    async fn wait(&self) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let d = (self.latency)(n);
        {
            let mut given = self.given.lock().unwrap();
            if given.len() == n as usize {
                given.push(d);
            }
        }
        tokio::time::sleep(d).await;
    }

    pub fn calls(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

impl Volume for Delay {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read(&self, _offset: u64, len: u64) -> Result<Bytes> {
        self.wait().await;
        Ok(Bytes::from(vec![0u8; len as usize]))
    }

    async fn write(&self, _offset: u64, _data: Bytes) -> Result<()> {
        self.wait().await;
        Ok(())
    }

    async fn write_zeroes(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    async fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// A volume of zeros that fails every operation touching bytes at or past
/// `fail_from`.
pub struct FailFrom {
    pub size: u64,
    pub fail_from: u64,
}

impl FailFrom {
    fn check(&self, offset: u64, len: u64) -> Result<()> {
        if offset + len > self.fail_from {
            Err(VolumeError::Io(format!("bad sector near {offset}")))
        } else {
            Ok(())
        }
    }
}

impl Volume for FailFrom {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        self.check(offset, len)?;
        Ok(Bytes::from(vec![0u8; len as usize]))
    }

    async fn write(&self, offset: u64, data: Bytes) -> Result<()> {
        self.check(offset, data.len() as u64)
    }

    async fn write_zeroes(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    async fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}
