//! [`StoreVolume`]: a [`Volume`] straight on one object store, with no
//! network and no OSD in the path, for `cairn bench store`.
//!
//! The volume's bytes are striped over objects of `object_size` bytes named
//! `<prefix><n>` (`bench.0`, `bench.1`, ...) in one collection, as an image
//! is striped over RADOS objects: byte `b` of the volume is byte
//! `b % object_size` of object `b / object_size`.
//!
//! - A write is one transaction per object piece; all pieces are submitted
//!   (in order) before any commit is awaited, and the write completes when
//!   every piece's commit has resolved, i.e. when it is durable.
//! - A read reads each piece with [`ObjectStore::read`]; a missing object,
//!   or bytes past an object's end, read as zeros.
//! - `write_zeroes` and `discard` are one `Zero` op per piece.
//! - `flush` does nothing: every completed write is already durable.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use cairn_store::{ObjectId, ObjectStore, PgId, StoreError, Transaction, MAX_OBJECT_SIZE};
use cairn_volume::{check_range, Volume, VolumeError};

/// The default object size: 4 MiB, as RBD's.
pub const DEFAULT_OBJECT_SIZE: u64 = 4 << 20;

/// The default object name prefix.
pub const DEFAULT_PREFIX: &str = "bench.";

/// The default collection: pool 0, PG 0.
pub const DEFAULT_COLLECTION: PgId = PgId::new(0, 0);

/// How a [`StoreVolume`] lays its bytes out over objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVolumeOptions {
    /// Bytes per object (1..=[`MAX_OBJECT_SIZE`]).
    pub object_size: u64,
    /// The collection holding the objects.
    pub collection: PgId,
    /// Object `n` is named `<prefix><n>`.
    pub prefix: String,
}

impl Default for StoreVolumeOptions {
    /// 4 MiB objects `bench.<n>` in collection `0.0`.
    fn default() -> Self {
        Self {
            object_size: DEFAULT_OBJECT_SIZE,
            collection: DEFAULT_COLLECTION,
            prefix: DEFAULT_PREFIX.to_string(),
        }
    }
}

/// Why a [`StoreVolume`] could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreVolumeError {
    /// The object size is zero or larger than a store accepts.
    #[error("invalid object size {0}: must be in 1..={MAX_OBJECT_SIZE}")]
    ObjectSize(u64),
    /// The volume size is zero.
    #[error("invalid volume size 0")]
    ZeroSize,
}

/// A volume striped over objects of one object store. See the
/// [module docs](self).
pub struct StoreVolume {
    store: Arc<dyn ObjectStore>,
    size: u64,
    opts: StoreVolumeOptions,
}

/// The part of a volume range that falls in one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    /// Object number.
    object: u64,
    /// Offset in the object.
    offset: u64,
    /// Bytes.
    len: u64,
    /// Offset of the piece within the volume range.
    at: u64,
}

/// Cut `offset..offset+len` at object boundaries.
fn pieces(offset: u64, len: u64, object_size: u64) -> impl Iterator<Item = Piece> {
    let end = offset.saturating_add(len);
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let object = pos / object_size;
        let in_object = pos % object_size;
        let len = (object_size - in_object).min(end - pos);
        let piece = Piece {
            object,
            offset: in_object,
            len,
            at: pos - offset,
        };
        pos += len;
        Some(piece)
    })
}

fn volume_error(e: StoreError) -> VolumeError {
    match e {
        StoreError::NoSpace => VolumeError::NoSpace,
        StoreError::Invalid(msg) => VolumeError::Invalid(msg),
        other => VolumeError::Io(other.to_string()),
    }
}

impl StoreVolume {
    /// A volume of `size` bytes on `store`, laid out as
    /// [`StoreVolumeOptions::default`] says.
    pub fn new(store: Arc<dyn ObjectStore>, size: u64) -> Result<Self, StoreVolumeError> {
        Self::with_options(store, size, StoreVolumeOptions::default())
    }

    /// A volume of `size` bytes on `store`, laid out as `opts` says.
    pub fn with_options(
        store: Arc<dyn ObjectStore>,
        size: u64,
        opts: StoreVolumeOptions,
    ) -> Result<Self, StoreVolumeError> {
        if opts.object_size == 0 || opts.object_size > MAX_OBJECT_SIZE {
            return Err(StoreVolumeError::ObjectSize(opts.object_size));
        }
        if size == 0 {
            return Err(StoreVolumeError::ZeroSize);
        }
        Ok(Self { store, size, opts })
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The layout.
    pub fn options(&self) -> &StoreVolumeOptions {
        &self.opts
    }

    /// The id of object `n`.
    pub fn object_id(&self, n: u64) -> ObjectId {
        ObjectId::new(self.opts.collection, format!("{}{n}", self.opts.prefix))
    }

    /// How many objects the volume spans.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.opts.object_size)
    }

    /// Submit one transaction per piece of the range (built by `op`), then
    /// wait until every one is durable.
    async fn mutate(
        &self,
        offset: u64,
        len: u64,
        op: impl Fn(&mut Transaction, &ObjectId, Piece),
    ) -> Result<(), VolumeError> {
        check_range(offset, len, self.size)?;
        let mut commits = Vec::new();
        for piece in pieces(offset, len, self.opts.object_size) {
            let oid = self.object_id(piece.object);
            let mut txn = Transaction::new();
            op(&mut txn, &oid, piece);
            commits.push(self.store.submit(txn).map_err(volume_error)?);
        }
        for commit in commits {
            commit.await.map_err(volume_error)?;
        }
        Ok(())
    }
}

impl Volume for StoreVolume {
    fn size(&self) -> u64 {
        self.size
    }

    async fn read(&self, offset: u64, len: u64) -> Result<Bytes, VolumeError> {
        check_range(offset, len, self.size)?;
        let mut reads: Vec<_> = pieces(offset, len, self.opts.object_size)
            .map(|p| {
                let read = self.store.read(&self.object_id(p.object), p.offset, p.len);
                (p, read)
            })
            .collect();
        if reads.len() == 1 {
            if let Some((piece, read)) = reads.pop() {
                // One piece (the usual case): hand the store's bytes back
                // as they are, unless the object ends short of the piece.
                let buf = match read.await {
                    Ok(buf) => buf,
                    Err(StoreError::NotFound(_)) => Bytes::new(),
                    Err(e) => return Err(volume_error(e)),
                };
                if buf.len() as u64 == piece.len {
                    return Ok(buf);
                }
                let mut padded = BytesMut::zeroed(piece.len as usize);
                let n = buf.len().min(padded.len());
                padded[..n].copy_from_slice(&buf[..n]);
                return Ok(padded.freeze());
            }
        }
        let mut out = BytesMut::zeroed(len as usize);
        for (piece, read) in reads {
            let buf = match read.await {
                Ok(buf) => buf,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(volume_error(e)),
            };
            let n = buf.len().min(piece.len as usize);
            let at = piece.at as usize;
            out[at..at + n].copy_from_slice(&buf[..n]);
        }
        Ok(out.freeze())
    }

    async fn write(&self, offset: u64, data: Bytes) -> Result<(), VolumeError> {
        self.mutate(offset, data.len() as u64, |txn, oid, p| {
            let at = p.at as usize;
            txn.write(oid, p.offset, data.slice(at..at + p.len as usize));
        })
        .await
    }

    async fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.mutate(offset, len, |txn, oid, p| {
            txn.zero(oid, p.offset, p.len);
        })
        .await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.write_zeroes(offset, len).await
    }

    async fn flush(&self) -> Result<(), VolumeError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::memstore::MemStore;
    use cairn_volume::MemVolume;
    use rand::rngs::SmallRng;
    use rand::{Rng, RngCore, SeedableRng};

    fn volume(size: u64, object_size: u64) -> StoreVolume {
        let opts = StoreVolumeOptions {
            object_size,
            ..StoreVolumeOptions::default()
        };
        StoreVolume::with_options(Arc::new(MemStore::new()), size, opts).expect("volume")
    }

    #[test]
    fn pieces_cut_at_object_boundaries() {
        let got: Vec<Piece> = pieces(3000, 10_000, 4096).collect();
        let want = [
            Piece {
                object: 0,
                offset: 3000,
                len: 1096,
                at: 0,
            },
            Piece {
                object: 1,
                offset: 0,
                len: 4096,
                at: 1096,
            },
            Piece {
                object: 2,
                offset: 0,
                len: 4096,
                at: 5192,
            },
            Piece {
                object: 3,
                offset: 0,
                len: 712,
                at: 9288,
            },
        ];
        assert_eq!(got, want);
        assert_eq!(pieces(0, 0, 4096).count(), 0);
        assert_eq!(pieces(8192, 4096, 4096).count(), 1);
    }

    #[test]
    fn bad_layouts_are_refused() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemStore::new());
        let opts = |object_size| StoreVolumeOptions {
            object_size,
            ..StoreVolumeOptions::default()
        };
        assert_eq!(
            StoreVolume::with_options(store.clone(), 1 << 20, opts(0)).err(),
            Some(StoreVolumeError::ObjectSize(0))
        );
        assert_eq!(
            StoreVolume::new(store, 0).err(),
            Some(StoreVolumeError::ZeroSize)
        );
    }

    #[tokio::test]
    async fn unwritten_ranges_read_as_zeros() {
        let v = volume(64 << 10, 4096);
        let data = v.read(1000, 10_000).await.expect("read");
        assert_eq!(data.len(), 10_000);
        assert!(data.iter().all(|&b| b == 0));
        // Write the start of object 1 only: the rest of it (past its end)
        // and object 2 (missing) still read as zeros.
        v.write(4096, Bytes::from_static(&[7; 100]))
            .await
            .expect("write");
        let data = v.read(4000, 8192).await.expect("read");
        assert!(data[..96].iter().all(|&b| b == 0));
        assert!(data[96..196].iter().all(|&b| b == 7));
        assert!(data[196..].iter().all(|&b| b == 0));
        let one = v.read(4096, 4096).await.expect("read");
        assert_eq!(one.len(), 4096);
        assert!(one[100..].iter().all(|&b| b == 0));
    }

    #[tokio::test]
    async fn random_writes_read_back_across_object_boundaries() {
        const SIZE: u64 = 256 << 10;
        let v = volume(SIZE, 16 << 10);
        let model = MemVolume::new(SIZE);
        let mut rng = SmallRng::seed_from_u64(42);
        for i in 0..400 {
            let len = rng.gen_range(1..=40_000u64);
            let offset = rng.gen_range(0..=SIZE - len);
            match i % 10 {
                9 => {
                    v.write_zeroes(offset, len).await.expect("zero");
                    model.write_zeroes(offset, len).await.expect("zero");
                }
                8 => {
                    v.discard(offset, len).await.expect("discard");
                    model.discard(offset, len).await.expect("discard");
                }
                _ => {
                    let mut buf = vec![0u8; len as usize];
                    rng.fill_bytes(&mut buf);
                    let buf = Bytes::from(buf);
                    v.write(offset, buf.clone()).await.expect("write");
                    model.write(offset, buf).await.expect("write");
                }
            }
            let len = rng.gen_range(1..=40_000u64);
            let offset = rng.gen_range(0..=SIZE - len);
            let got = v.read(offset, len).await.expect("read");
            let want = model.read(offset, len).await.expect("read");
            assert!(got == want, "op {i}: read {offset}+{len} differs");
        }
        v.flush().await.expect("flush");
        let all = v.read(0, SIZE).await.expect("read");
        assert!(all[..] == model.snapshot()[..], "whole volume differs");
        assert_eq!(v.objects(), 16);
        let names = v
            .store()
            .list_objects(DEFAULT_COLLECTION)
            .expect("list objects");
        assert!(names.len() <= 16 && !names.is_empty(), "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("bench.")), "{names:?}");
    }

    #[tokio::test]
    async fn ranges_past_the_end_are_rejected() {
        let v = volume(8192, 4096);
        assert!(matches!(
            v.read(4096, 8192).await,
            Err(VolumeError::OutOfRange { .. })
        ));
        assert!(matches!(
            v.write(8192, Bytes::from_static(b"x")).await,
            Err(VolumeError::OutOfRange { .. })
        ));
        assert!(matches!(
            v.write_zeroes(u64::MAX, 2).await,
            Err(VolumeError::OutOfRange { .. })
        ));
    }

    #[tokio::test]
    async fn fill_writes_exactly_the_region() {
        let v = Arc::new(volume(1 << 20, 64 << 10));
        let region = (1 << 19) + 4096;
        let took = crate::fill(v.clone(), region, 128 << 10, 4, Some(5))
            .await
            .expect("fill");
        assert!(took > std::time::Duration::ZERO);
        let data = v.read(0, 1 << 20).await.expect("read");
        let region = region as usize;
        assert!(
            data[..region].iter().all(|&b| b != 0),
            "holes in the region"
        );
        assert!(
            data[region..].iter().all(|&b| b == 0),
            "wrote past the region"
        );
        for (bs, depth, region) in [(0, 1, 4096), (1000, 1, 4096), (4096, 0, 4096), (4096, 1, 0)] {
            let r = crate::fill(v.clone(), region, bs, depth, None).await;
            assert!(
                matches!(r, Err(crate::BenchError::InvalidSpec { .. })),
                "bs {bs} depth {depth} region {region}: {r:?}"
            );
        }
        let r = crate::fill(v.clone(), 2 << 20, 4096, 1, None).await;
        assert!(matches!(
            r,
            Err(crate::BenchError::InvalidSpec { param: "size", .. })
        ));
    }

    #[tokio::test]
    async fn the_bench_runs_on_a_store_volume() {
        let v = Arc::new(volume(1 << 20, 64 << 10));
        let spec = crate::BenchSpec {
            rw: crate::RwMode::RandWrite,
            bs: 4096,
            iodepth: 8,
            runtime: std::time::Duration::from_millis(200),
            precondition: true,
            seed: Some(1),
            ..crate::BenchSpec::default()
        };
        let report = crate::run(v.clone(), &spec).await.expect("bench");
        assert!(report.write.ops > 0 && report.write.iops > 0.0);
        let data = v.read(0, 1 << 20).await.expect("read");
        assert!(data.iter().all(|&b| b != 0), "precondition left holes");
    }
}
