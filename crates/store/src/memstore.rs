//! [`MemStore`]: an in-memory [`ObjectStore`] for tests and models.
//!
//! It owns nothing but process memory: metadata (the shared `meta` rules) and object bytes
//! in sparse 64 KiB chunks (so that a truncate to a terabyte costs nothing).
//! Transactions are applied at `submit` under one write lock, which makes
//! them atomic and ordered; every [`Commit`] is ready at once. Fault model:
//! none — a crash loses everything, which is why only tests use it.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::meta::{DataOp, Meta};
use crate::{
    Collection, Commit, ObjectId, ObjectStat, ObjectStore, Result, StoreStats, Transaction, Version,
};

const CHUNK: u64 = 64 * 1024;

/// Sparse bytes: chunk index → the chunk's leading bytes; everything not
/// stored reads as zeros.
#[derive(Default)]
struct Sparse {
    chunks: BTreeMap<u64, Vec<u8>>,
}

impl Sparse {
    fn write(&mut self, offset: u64, data: &[u8]) {
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let in_chunk = (pos % CHUNK) as usize;
            let n = rest.len().min(CHUNK as usize - in_chunk);
            let chunk = self.chunks.entry(pos / CHUNK).or_default();
            if chunk.len() < in_chunk + n {
                chunk.resize(in_chunk + n, 0);
            }
            chunk[in_chunk..in_chunk + n].copy_from_slice(&rest[..n]);
            pos += n as u64;
            rest = &rest[n..];
        }
    }

    fn punch(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK;
            let start = (pos % CHUNK) as usize;
            let stop = ((end - idx * CHUNK).min(CHUNK)) as usize;
            if start == 0 && stop == CHUNK as usize {
                self.chunks.remove(&idx);
            } else if let Some(chunk) = self.chunks.get_mut(&idx) {
                let stop = stop.min(chunk.len());
                if start < stop {
                    chunk[start..stop].fill(0);
                }
            }
            pos = (idx + 1) * CHUNK;
        }
    }

    fn set_len(&mut self, size: u64) {
        drop(self.chunks.split_off(&size.div_ceil(CHUNK)));
        let tail = (size % CHUNK) as usize;
        if tail != 0 {
            if let Some(chunk) = self.chunks.get_mut(&(size / CHUNK)) {
                chunk.truncate(tail);
            }
        }
    }

    fn read_into(&self, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        let first = offset / CHUNK;
        for (idx, chunk) in self.chunks.range(first..end.div_ceil(CHUNK)) {
            let base = idx * CHUNK;
            let from = offset.max(base);
            let to = end.min(base + chunk.len() as u64);
            if from < to {
                let src = &chunk[(from - base) as usize..(to - base) as usize];
                let dst = (from - offset) as usize;
                buf[dst..dst + src.len()].copy_from_slice(src);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    meta: Meta,
    data: HashMap<ObjectId, Sparse>,
}

/// An in-memory object store. Cheap to create; see the module docs.
#[derive(Default)]
pub struct MemStore {
    inner: RwLock<Inner>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ObjectStore for MemStore {
    fn submit(&self, txn: Transaction) -> Result<Commit> {
        txn.validate()?;
        let mut ops = Vec::new();
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        inner.meta.apply(&txn, &mut ops);
        for op in ops {
            match op {
                DataOp::Write { oid, offset, data } => inner
                    .data
                    .entry(oid.clone())
                    .or_default()
                    .write(offset, data),
                DataOp::Punch { oid, offset, len } => {
                    if let Some(s) = inner.data.get_mut(oid) {
                        s.punch(offset, len);
                    }
                }
                DataOp::SetLen { oid, size } => {
                    if let Some(s) = inner.data.get_mut(oid) {
                        s.set_len(size);
                    }
                }
                DataOp::Remove { oid } => {
                    inner.data.remove(oid);
                }
                DataOp::RemoveCollection { coll } => inner.data.retain(|oid, _| oid.coll != coll),
                DataOp::Rename { from, to } => match inner.data.remove(&from) {
                    Some(data) => {
                        inner.data.insert(to, data);
                    }
                    None => {
                        inner.data.remove(&to);
                    }
                },
            }
        }
        Ok(Commit::ready(Ok(())))
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> crate::BoxFuture<Result<Bytes>> {
        let result = (|| {
            let inner = self.inner.read();
            let size = inner.meta.object(oid)?.size;
            let len = len.min(size.saturating_sub(offset));
            let mut buf = vec![0u8; len as usize];
            if let Some(sparse) = inner.data.get(oid) {
                sparse.read_into(offset, &mut buf);
            }
            Ok(Bytes::from(buf))
        })();
        Box::pin(std::future::ready(result))
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        self.inner.read().meta.stat(oid)
    }

    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.read().meta.get_attr(oid, key)
    }

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        self.inner.read().meta.get_attrs(oid)
    }

    fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
        self.inner.read().meta.omap_get(oid, keys)
    }

    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner.read().meta.omap_list(oid, start_after, max)
    }

    fn list_objects(&self, coll: Collection) -> Result<Vec<String>> {
        Ok(self.inner.read().meta.list_objects(coll))
    }

    fn list_collections(&self) -> Result<Vec<Collection>> {
        Ok(self.inner.read().meta.list_collections())
    }

    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>> {
        Ok(self.inner.read().meta.read_log(coll))
    }

    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.inner.read().meta.coll_get_attr(coll, key))
    }

    fn statfs(&self) -> Result<StoreStats> {
        let totals = self.inner.read().meta.totals;
        Ok(StoreStats {
            total_bytes: u64::MAX,
            used_bytes: totals.used,
            objects: totals.objects,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_chunks_read_back_what_was_written() {
        let mut s = Sparse::default();
        s.write(CHUNK - 3, b"abcdef");
        let read = |s: &Sparse| {
            let mut buf = vec![0u8; 10];
            s.read_into(CHUNK - 5, &mut buf);
            buf
        };
        assert_eq!(&read(&s), b"\0\0abcdef\0\0");
        s.punch(CHUNK - 2, 3);
        assert_eq!(&read(&s), b"\0\0a\0\0\0ef\0\0");
        s.set_len(CHUNK + 2);
        assert_eq!(&read(&s), b"\0\0a\0\0\0e\0\0\0");
        s.set_len(CHUNK - 4);
        assert_eq!(&read(&s), b"\0\0\0\0\0\0\0\0\0\0");
        s.punch(0, 10 * CHUNK);
        assert!(s.chunks.is_empty() || s.chunks.values().all(|c| c.iter().all(|b| *b == 0)));
    }
}
