//! Stores for tests: in memory (MemDevice + MemKv) or on files (a
//! preallocated O_DIRECT file + RocksDB in a temporary directory); on a
//! FaultDevice (injected errors); behind a crash gate that freezes device
//! and database at one instant (power loss). Plus small helpers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_bluestore::{mkfs, BlueStore, MkfsOptions, MountOptions};
use cairn_device::{
    AlignedBuf, BlockDevice, BoxFuture, CrashPolicy, DeviceError, FaultDevice, FileDevice,
    FileDeviceOptions, MemDevice,
};
use cairn_kv::{Batch, BufferedKv, Kv, KvError, MemKv, RocksKv, RocksKvOptions};
use cairn_store::{Collection, ObjectId, ObjectStore, PgId, Transaction};
use parking_lot::RwLock;

pub const MIB: u64 = 1 << 20;

/// A store in memory; reopening mounts the same device and database again.
pub struct MemStores {
    pub device: Arc<MemDevice>,
    pub kv: Arc<MemKv>,
    pub mkfs: MkfsOptions,
    pub mount: MountOptions,
    made: bool,
}

impl MemStores {
    pub fn new(size: u64) -> Self {
        Self {
            device: Arc::new(MemDevice::new(size)),
            kv: Arc::new(MemKv::new()),
            mkfs: MkfsOptions::default(),
            mount: MountOptions::default(),
            made: false,
        }
    }

    pub fn open(&mut self) -> Arc<BlueStore> {
        if !self.made {
            mkfs(self.device.as_ref(), self.kv.as_ref(), &self.mkfs).expect("mkfs");
            self.made = true;
        }
        let device: Arc<dyn BlockDevice> = self.device.clone();
        let kv: Arc<dyn Kv> = self.kv.clone();
        BlueStore::mount(device, kv, self.mount.clone()).expect("mount")
    }
}

/// A store on a preallocated file with RocksDB beside it.
pub struct FileStores {
    pub dir: tempfile::TempDir,
    pub size: u64,
    pub mkfs: MkfsOptions,
    pub mount: MountOptions,
    /// Mount over a key-value store that refuses every other non-blocking
    /// write, as a RocksDB in a write stall does (see [`StallingKv`]).
    pub stalling_kv: bool,
    made: bool,
}

impl FileStores {
    pub fn new(size: u64) -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            size,
            mkfs: MkfsOptions::default(),
            mount: MountOptions::default(),
            stalling_kv: false,
            made: false,
        }
    }

    pub fn block_path(&self) -> PathBuf {
        self.dir.path().join("block")
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    pub fn open(&mut self) -> Arc<BlueStore> {
        if !self.made {
            FileDevice::create_file(self.block_path(), self.size).expect("create block file");
        }
        let device = open_device(&self.block_path());
        let kv = open_kv(&self.db_path(), !self.made, &self.mount.rocksdb_options);
        if !self.made {
            mkfs(device.as_ref(), kv.as_ref(), &self.mkfs).expect("mkfs");
            self.made = true;
        }
        let kv: Arc<dyn Kv> = if self.stalling_kv {
            Arc::new(StallingKv {
                inner: kv,
                tries: AtomicU64::new(0),
            })
        } else {
            kv
        };
        BlueStore::mount(device, kv, self.mount.clone()).expect("mount")
    }
}

/// A [`Kv`] whose non-blocking writes are refused every other time, as a
/// RocksDB in a write stall refuses them: the caller must hand the batch
/// to a thread that may wait, in order.
pub struct StallingKv {
    inner: Arc<dyn Kv>,
    tries: AtomicU64,
}

impl Kv for StallingKv {
    fn get(&self, key: &[u8]) -> cairn_kv::Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> cairn_kv::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.scan(start, end, limit)
    }
    fn write(&self, batch: Batch, sync: bool) -> cairn_kv::Result<()> {
        self.inner.write(batch, sync)
    }
    fn try_write(&self, batch: &mut Batch) -> cairn_kv::Result<bool> {
        if self.tries.fetch_add(1, Ordering::Relaxed) % 2 == 0 {
            return Ok(false);
        }
        self.inner.try_write(batch)
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        self.inner.sync()
    }
}

pub fn open_device(path: &Path) -> Arc<dyn BlockDevice> {
    Arc::new(FileDevice::open(path, FileDeviceOptions::default()).expect("open device"))
}

pub fn open_kv(path: &Path, create: bool, options: &str) -> Arc<dyn Kv> {
    let opts = RocksKvOptions {
        create,
        options: options.to_string(),
        block_cache_bytes: 8 * MIB,
        ..Default::default()
    };
    // As the OSD opens it: behind the write-back buffer.
    let rocks = RocksKv::open(path, &opts).expect("open RocksDB");
    Arc::new(BufferedKv::new(rocks, 4 << 20))
}

// ---------------------------------------------------------------------------
// Helpers for the behavioural tests (paths, faults, power loss, bad input).
// ---------------------------------------------------------------------------

pub const KIB: u64 = 1 << 10;
pub const C1: Collection = PgId::new(1, 7);
pub const C2: Collection = PgId::new(2, 3);

pub fn oid(coll: Collection, name: &str) -> ObjectId {
    ObjectId::new(coll, name)
}

/// A transaction built by one chain of builder calls.
pub fn tx(build: impl FnOnce(&mut Transaction) -> &mut Transaction) -> Transaction {
    let mut t = Transaction::new();
    build(&mut t);
    t
}

/// Submit and wait until durable; panics on error.
pub async fn commit(store: &dyn ObjectStore, t: Transaction) {
    store.submit(t).expect("submit").await.expect("commit");
}

/// Read `[offset, offset + len)`; panics on error.
pub async fn read(store: &dyn ObjectStore, o: &ObjectId, offset: u64, len: u64) -> Vec<u8> {
    match store.read(o, offset, len).await {
        Ok(v) => v.to_vec(),
        Err(e) => panic!("read {o} {offset}+{len}: {e:?}"),
    }
}

/// The whole object.
pub async fn read_all(store: &dyn ObjectStore, o: &ObjectId) -> Vec<u8> {
    let size = store.stat(o).expect("stat").size;
    read(store, o, 0, size).await
}

/// Bytes that differ from block to block and from seed to seed, so a
/// misplaced block is noticed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Highly compressible text.
pub fn text(len: usize) -> Vec<u8> {
    b"the quick brown fox jumps over the lazy dog; "
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Wait (polling, without a fixed sleep) until `cond` holds; panics after
/// a generous deadline. For events the store completes in the background
/// (deferred writes applied, space released, the store failing).
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A store on a [`FaultDevice`] (errors, power loss) with a [`MemKv`].
pub struct FaultStores {
    pub device: Arc<FaultDevice>,
    pub kv: Arc<MemKv>,
    pub mkfs: MkfsOptions,
    pub mount: MountOptions,
    made: bool,
}

impl FaultStores {
    pub fn new(size: u64) -> Self {
        Self {
            device: Arc::new(FaultDevice::new(size)),
            kv: Arc::new(MemKv::new()),
            mkfs: MkfsOptions::default(),
            mount: MountOptions::default(),
            made: false,
        }
    }

    pub fn open(&mut self) -> Arc<BlueStore> {
        self.try_open().expect("mount")
    }

    pub fn try_open(&mut self) -> cairn_store::Result<Arc<BlueStore>> {
        if !self.made {
            mkfs(self.device.as_ref(), self.kv.as_ref(), &self.mkfs).expect("mkfs");
            self.made = true;
        }
        let device: Arc<dyn BlockDevice> = self.device.clone();
        let kv: Arc<dyn Kv> = self.kv.clone();
        BlueStore::mount(device, kv, self.mount.clone())
    }

    /// Continue on a new device and database (after a simulated crash).
    pub fn replace(&mut self, device: FaultDevice, kv: MemKv) {
        self.device = Arc::new(device);
        self.kv = Arc::new(kv);
    }
}

/// Freezes a device and a key-value store at one instant: every operation
/// holds the read side of `lock` while it runs; a crash takes the write
/// side, so it falls between operations of both, never inside one. After
/// the crash every operation fails, so the crashed store stops quickly.
///
/// A crash is made on request ([`CrashStores::crash`]) or just before the
/// n-th mutating operation (device write, flush, discard, database write)
/// from some point on ([`CrashStores::crash_after`]): that reaches points
/// inside the commit pipeline a test thread could not time.
pub struct CrashGate {
    lock: RwLock<()>,
    crashed: AtomicBool,
    /// Mutating operations so far.
    ops: AtomicU64,
    /// Crash just before this operation (`u64::MAX`: never).
    crash_at: AtomicU64,
    how: parking_lot::Mutex<(u64, CrashPolicy)>,
    images: parking_lot::Mutex<Option<(FaultDevice, MemKv)>>,
    device: Arc<FaultDevice>,
    kv: Arc<MemKv>,
}

impl CrashGate {
    fn new(device: FaultDevice, kv: MemKv) -> Arc<Self> {
        Arc::new(Self {
            lock: RwLock::new(()),
            crashed: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            crash_at: AtomicU64::new(u64::MAX),
            how: parking_lot::Mutex::new((0, CrashPolicy::DropAll)),
            images: parking_lot::Mutex::new(None),
            device: Arc::new(device),
            kv: Arc::new(kv),
        })
    }

    pub fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Lose power now (once): keep what survives.
    fn crash_now(&self) {
        let _frozen = self.lock.write();
        if self.crashed.swap(true, Ordering::SeqCst) {
            return;
        }
        let (seed, policy) = *self.how.lock();
        let device = FaultDevice::from_image(self.device.crash_image(seed, policy));
        // The database keeps what it synced and, but for `DropAll`, some of
        // the later batches too (RocksDB flushes full memtables on its own).
        let later = self.kv.unsynced_batches();
        let keep = match policy {
            CrashPolicy::DropAll => 0,
            CrashPolicy::KeepAll => later,
            _ => (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % (later + 1),
        };
        *self.images.lock() = Some((device, self.kv.crash_image_keeping(keep)));
    }

    /// Run `op` under the gate; `mutating` ops count towards `crash_at`.
    fn run<T>(&self, mutating: bool, op: impl FnOnce() -> T, crashed: impl FnOnce() -> T) -> T {
        if mutating {
            let n = self.ops.fetch_add(1, Ordering::SeqCst);
            if n == self.crash_at.load(Ordering::SeqCst) {
                self.crash_now();
            }
        }
        let _held = self.lock.read();
        if self.is_crashed() {
            return crashed();
        }
        op()
    }
}

/// A [`BlockDevice`] over a [`FaultDevice`] behind a [`CrashGate`].
/// `FaultDevice` completes every request before returning its future, so
/// holding the gate around the call (not the await) covers the request.
pub struct GatedDevice {
    gate: Arc<CrashGate>,
}

fn closed<T: Send + 'static>() -> BoxFuture<Result<T, DeviceError>> {
    Box::pin(std::future::ready(Err(DeviceError::Closed)))
}

impl BlockDevice for GatedDevice {
    fn size(&self) -> u64 {
        self.gate.device.size()
    }
    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        self.gate
            .run(false, || self.gate.device.read(offset, len), closed)
    }
    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>> {
        self.gate
            .run(true, || self.gate.device.write(offset, buf), closed)
    }
    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>> {
        self.gate
            .run(true, || self.gate.device.write_many(writes), closed)
    }
    fn flush(&self) -> BoxFuture<Result<(), DeviceError>> {
        self.gate.run(true, || self.gate.device.flush(), closed)
    }
    fn write_durable(&self, offset: u64, buf: AlignedBuf) -> Result<(), DeviceError> {
        self.gate.run(
            true,
            || self.gate.device.write_durable(offset, buf),
            || Err(DeviceError::Closed),
        )
    }
    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>> {
        self.gate
            .run(true, || self.gate.device.discard(offset, len), closed)
    }
}

/// The write call a [`HookedDevice`]'s hook runs before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteCall {
    Write,
    WriteMany,
    WriteDurable,
}

/// What a [`HookedDevice`] does before each write (wait, panic, sleep).
pub trait WriteHook: Send + Sync + 'static {
    fn before(&self, call: WriteCall);
}

/// A device that runs `hook` before every write, then passes each call to
/// `inner`.
pub struct HookedDevice<H> {
    pub inner: Arc<dyn BlockDevice>,
    pub hook: H,
}

impl<H: WriteHook> BlockDevice for HookedDevice<H> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>> {
        self.hook.before(WriteCall::Write);
        self.inner.write(offset, buf)
    }
    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>> {
        self.hook.before(WriteCall::WriteMany);
        self.inner.write_many(writes)
    }
    fn write_durable(&self, offset: u64, buf: AlignedBuf) -> Result<(), DeviceError> {
        self.hook.before(WriteCall::WriteDurable);
        self.inner.write_durable(offset, buf)
    }
    fn flush(&self) -> BoxFuture<Result<(), DeviceError>> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>> {
        self.inner.discard(offset, len)
    }
}

/// A [`Kv`] over a [`MemKv`] whose writes hold a [`CrashGate`].
pub struct GatedKv {
    gate: Arc<CrashGate>,
}

impl Kv for GatedKv {
    fn get(&self, key: &[u8]) -> cairn_kv::Result<Option<Vec<u8>>> {
        self.gate.kv.get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> cairn_kv::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.gate.kv.scan(start, end, limit)
    }
    fn write(&self, batch: Batch, sync: bool) -> cairn_kv::Result<()> {
        self.gate.run(
            true,
            || self.gate.kv.write(batch, sync),
            || Err(KvError::Backend("power lost".into())),
        )
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        self.gate.run(
            true,
            || self.gate.kv.sync(),
            || Err(KvError::Backend("power lost".into())),
        )
    }
}

/// A store whose device and database lose power together.
pub struct CrashStores {
    pub gate: Arc<CrashGate>,
    pub mount: MountOptions,
}

impl CrashStores {
    /// A formatted store of `size` bytes.
    pub fn new(size: u64) -> Self {
        let s = Self::from_images(FaultDevice::new(size), MemKv::new());
        let device = GatedDevice {
            gate: s.gate.clone(),
        };
        let kv = GatedKv {
            gate: s.gate.clone(),
        };
        // The smallest journal: it wraps and is retired (after key-value
        // syncs) many times within one workload.
        let opts = MkfsOptions {
            journal_size: 1 << 20,
            ..MkfsOptions::default()
        };
        mkfs(&device, &kv, &opts).expect("mkfs");
        s
    }

    /// A store continuing from power-loss images.
    pub fn from_images(device: FaultDevice, kv: MemKv) -> Self {
        Self {
            gate: CrashGate::new(device, kv),
            mount: MountOptions::default(),
        }
    }

    pub fn open(&self) -> cairn_store::Result<Arc<BlueStore>> {
        let device: Arc<dyn BlockDevice> = Arc::new(GatedDevice {
            gate: self.gate.clone(),
        });
        let kv: Arc<dyn Kv> = Arc::new(GatedKv {
            gate: self.gate.clone(),
        });
        BlueStore::mount(device, kv, self.mount.clone())
    }

    pub fn is_crashed(&self) -> bool {
        self.gate.is_crashed()
    }

    /// Lose power just before the `n`-th mutating operation from now
    /// (0: the next one), keeping unflushed device writes per `policy`.
    pub fn crash_after(&self, n: u64, seed: u64, policy: CrashPolicy) {
        *self.gate.how.lock() = (seed, policy);
        let now = self.gate.ops.load(Ordering::SeqCst);
        self.gate.crash_at.store(now + n, Ordering::SeqCst);
    }

    /// Lose power now, unless that already happened: the device as
    /// `policy` leaves its unflushed writes, and the database as of its
    /// last sync. Everything after fails. Returns what survived.
    pub fn crash(&self, seed: u64, policy: CrashPolicy) -> (FaultDevice, MemKv) {
        if !self.is_crashed() {
            *self.gate.how.lock() = (seed, policy);
        }
        self.gate.crash_now();
        self.gate
            .images
            .lock()
            .take()
            .expect("crash images taken once")
    }
}

/// Raw bytes of a [`Bytes`]-typed payload.
pub fn bytes(v: Vec<u8>) -> Bytes {
    Bytes::from(v)
}

/// Assert `actual == expected` for byte strings, naming the first
/// difference instead of printing megabytes.
#[track_caller]
pub fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    if actual == expected {
        return;
    }
    let at = actual
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(actual.len().min(expected.len()));
    panic!(
        "{what}: {} bytes vs {} expected; first difference at byte {at} ({:?} vs {:?})",
        actual.len(),
        expected.len(),
        actual.get(at),
        expected.get(at)
    );
}

/// Random transactions over a fixed set of objects: writes of 1 byte to
/// `max_write` bytes at aligned and unaligned offsets (new data, extending
/// and overwriting), small overwrites (deferred when the blocks exist),
/// truncates up and down, zeros, removes, attributes and omap entries.
pub struct Workload {
    pub objects: Vec<ObjectId>,
    /// Writes start below this offset.
    pub span: u64,
    pub max_write: usize,
    pub rng: rand::rngs::StdRng,
    serial: u64,
}

impl Workload {
    pub fn new(seed: u64, objects: Vec<ObjectId>, span: u64, max_write: usize) -> Self {
        use rand::SeedableRng;
        Self {
            objects,
            span,
            max_write,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            serial: 0,
        }
    }

    /// `count` objects spread over two collections.
    pub fn objects(count: usize) -> Vec<ObjectId> {
        (0..count)
            .map(|i| oid(if i % 2 == 0 { C1 } else { C2 }, &format!("obj{i}")))
            .collect()
    }

    fn offset(&mut self, below: u64) -> u64 {
        use rand::Rng;
        let off = self.rng.gen_range(0..below.max(1));
        if self.rng.gen_bool(0.4) {
            off / 4096 * 4096
        } else {
            off
        }
    }

    fn payload(&mut self, len: usize) -> Bytes {
        use rand::Rng;
        self.serial += 1;
        if self.rng.gen_bool(0.3) {
            let mut t = text(len);
            if let Some(b) = t.first_mut() {
                *b = self.serial as u8;
            }
            Bytes::from(t)
        } else {
            Bytes::from(pattern(
                self.serial.wrapping_mul(7919) ^ self.rng.gen::<u64>(),
                len,
            ))
        }
    }

    /// The next transaction: 1 to 3 ops.
    pub fn next_txn(&mut self) -> Transaction {
        use rand::Rng;
        let mut t = Transaction::new();
        for _ in 0..self.rng.gen_range(1..=3) {
            let o = self.objects[self.rng.gen_range(0..self.objects.len())].clone();
            match self.rng.gen_range(0..100) {
                0..=29 => {
                    let len = if self.rng.gen_bool(0.5) {
                        self.rng.gen_range(1..=8192)
                    } else {
                        self.rng.gen_range(1..=self.max_write)
                    };
                    let off = self.offset(self.span);
                    let data = self.payload(len);
                    t.write(&o, off, data);
                }
                30..=54 => {
                    // Small overwrite of (probably) existing data.
                    let len = if self.rng.gen_bool(0.5) {
                        4096
                    } else {
                        self.rng.gen_range(1..=12_000)
                    };
                    let off = self.offset(self.span / 2);
                    let data = self.payload(len);
                    t.write(&o, off, data);
                }
                55..=62 => {
                    let size = self.offset(self.span + self.max_write as u64);
                    t.truncate(&o, size);
                }
                63..=70 => {
                    let off = self.offset(self.span);
                    let len = self.rng.gen_range(1..=100_000);
                    t.zero(&o, off, len);
                }
                71..=76 => {
                    t.remove(&o);
                }
                77..=88 => {
                    let key = format!("attr{}", self.rng.gen_range(0..4));
                    let len = self.rng.gen_range(0..100);
                    let value = self.payload(len);
                    t.set_attr(&o, &key, value);
                }
                _ => {
                    let key = format!("omap{}", self.rng.gen_range(0..6));
                    let len = self.rng.gen_range(0..200);
                    let value = self.payload(len);
                    t.omap_set(&o, vec![(key, value)]);
                }
            }
        }
        t
    }
}

/// `dump` of a store, panicking on error.
pub async fn dump_of(store: &dyn ObjectStore) -> cairn_store::conformance::StoreDump {
    cairn_store::conformance::dump(store, &[])
        .await
        .expect("dump")
}

/// Assert two dumps are equal, naming the first difference.
#[track_caller]
pub fn assert_same(
    actual: &cairn_store::conformance::StoreDump,
    expected: &cairn_store::conformance::StoreDump,
    what: &str,
) {
    if let Some(d) = cairn_store::conformance::first_difference(actual, expected) {
        panic!("{what}: store and model differ: {d}");
    }
}
