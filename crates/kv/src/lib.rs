//! Ordered key-value stores for object-store metadata.
//!
//! The BlueStore-class store keeps everything but object data here: onodes,
//! omap entries, PG logs, the allocator's free list and deferred writes.
//! This crate owns the [`Kv`] trait that store talks to, the [`Batch`] of
//! mutations a commit applies atomically, and two implementations:
//!
//! - [`MemKv`]: a sorted map in memory, for tests; it can also produce the
//!   state a power loss would leave ([`MemKv::crash_image`]).
//! - [`RocksKv`]: RocksDB, with a RocksDB options string applied verbatim.
//!
//! and [`BufferedKv`], a write-back buffer of the newest value per key in
//! front of either, so that keys rewritten often reach the store once per
//! sync.
//!
//! The trait knows nothing about objects: keys and values are bytes, keys
//! sort bytewise. Implementations must never return a value from a batch
//! that was not applied whole.

mod buffered;
mod mem;
mod rocks;
mod rocks_options;

pub use buffered::BufferedKv;
pub use mem::MemKv;
pub use rocks::{RocksKv, RocksKvOptions};
pub use rocks_options::{parse_options_string, RocksOptionsString};

/// Errors of a key-value store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KvError {
    /// The database cannot be opened: missing, unreadable or corrupt.
    #[error("cannot open the key-value store at {path}: {reason}")]
    Open { path: String, reason: String },
    /// A bad RocksDB options string; the message names the option.
    #[error("bad RocksDB option: {0}")]
    Options(String),
    /// An operation failed in the backend (I/O error, full disk, ...).
    #[error("key-value store error: {0}")]
    Backend(String),
}

pub type Result<T, E = KvError> = std::result::Result<T, E>;

/// One mutation of a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Delete every key in `[start, end)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

/// Mutations applied atomically and in order by [`Kv::write`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
    bytes: usize,
}

impl Op {
    /// The op, borrowed.
    pub fn borrowed(&self) -> OpRef<'_> {
        match self {
            Op::Put(k, v) => OpRef::Put(k, v),
            Op::Delete(k) => OpRef::Delete(k),
            Op::DeleteRange(start, end) => OpRef::DeleteRange(start, end),
        }
    }
}

/// A borrowed [`Op`], for [`Kv::write_ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpRef<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
    /// Delete every key in `[start, end)`.
    DeleteRange(&'a [u8], &'a [u8]),
}

impl Batch {
    /// Append a copy of `op`.
    pub fn push_ref(&mut self, op: OpRef<'_>) {
        match op {
            OpRef::Put(k, v) => self.put(k, v),
            OpRef::Delete(k) => self.delete(k),
            OpRef::DeleteRange(start, end) => self.delete_range(start, end),
        }
    }

    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len();
        self.ops.push(Op::Put(key, value));
    }

    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        let key = key.into();
        self.bytes += key.len();
        self.ops.push(Op::Delete(key));
    }

    pub fn delete_range(&mut self, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        let (start, end) = (start.into(), end.into());
        self.bytes += start.len() + end.len();
        self.ops.push(Op::DeleteRange(start, end));
    }

    /// Append every op of `other` after this batch's.
    pub fn append(&mut self, other: Batch) {
        self.bytes += other.bytes;
        self.ops.extend(other.ops);
    }

    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// Add one op, as [`put`](Self::put), [`delete`](Self::delete) or
    /// [`delete_range`](Self::delete_range) would.
    pub fn push(&mut self, op: Op) {
        match op {
            Op::Put(k, v) => self.put(k, v),
            Op::Delete(k) => self.delete(k),
            Op::DeleteRange(a, b) => self.delete_range(a, b),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Bytes of keys and values in the batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// At least as many bytes as [`encode`](Self::encode) returns.
    pub fn encoded_len(&self) -> usize {
        self.bytes + self.ops.len() * 9
    }

    /// The batch as bytes: per op a tag (1 put, 2 delete, 3 delete range)
    /// and its one or two byte strings, each a u32 LE length then bytes.
    /// Encoded batches concatenated decode as one batch.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Append the batch's encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        for op in &self.ops {
            match op {
                Op::Put(k, v) => encode_put(out, k, v),
                Op::Delete(k) => {
                    out.push(2);
                    encode_field(out, k);
                }
                Op::DeleteRange(a, b) => {
                    out.push(3);
                    encode_field(out, a);
                    encode_field(out, b);
                }
            }
        }
    }

    /// A batch from [`encode`](Self::encode)'s bytes.
    pub fn decode(mut bytes: &[u8]) -> std::result::Result<Batch, String> {
        fn field<'a>(bytes: &mut &'a [u8]) -> std::result::Result<&'a [u8], String> {
            let len = bytes
                .get(..4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .ok_or("truncated length")?;
            let value = bytes.get(4..4 + len).ok_or("truncated bytes")?;
            *bytes = &bytes[4 + len..];
            Ok(value)
        }
        let mut batch = Batch::new();
        while let Some((&tag, rest)) = bytes.split_first() {
            bytes = rest;
            match tag {
                1 => {
                    let k = field(&mut bytes)?;
                    let v = field(&mut bytes)?;
                    batch.put(k, v);
                }
                2 => batch.delete(field(&mut bytes)?),
                3 => {
                    let a = field(&mut bytes)?;
                    let b = field(&mut bytes)?;
                    batch.delete_range(a, b);
                }
                other => return Err(format!("unknown batch op {other}")),
            }
        }
        Ok(batch)
    }
}

fn encode_field(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Append one put to an encoded batch (see [`Batch::encode`]), as if the
/// batch had it last, without building a [`Batch`] around it.
pub fn encode_put(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    encode_put_header(out, key, value.len());
    out.extend_from_slice(value);
}

/// Append a put's tag, key and value length to an encoded batch; the
/// caller appends exactly `value_len` bytes of value next (to encode the
/// value in place rather than copy it in).
pub fn encode_put_header(out: &mut Vec<u8>, key: &[u8], value_len: usize) {
    out.push(1);
    encode_field(out, key);
    out.extend_from_slice(&(value_len as u32).to_le_bytes());
}

/// Key-value pairs, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// An ordered key-value store.
pub trait Kv: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Up to `limit` entries with `start <= key < end`, in key order.
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    /// [`get`](Self::get) from memory only: `Ok(None)` when the answer
    /// would need a read from the device. For callers that must not block,
    /// such as an event loop. The default never answers. An empty value
    /// may be reported as `Ok(None)` (see `RocksKv`): callers whose values
    /// can be empty must read them with `get`.
    fn get_in_memory(&self, _key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        Ok(None)
    }

    /// [`scan`](Self::scan) from memory only, as
    /// [`get_in_memory`](Self::get_in_memory).
    fn scan_in_memory(&self, _start: &[u8], _end: &[u8], _limit: usize) -> Result<Option<Entries>> {
        Ok(None)
    }

    /// Apply `batch` atomically. With `sync`, it is durable on return, and
    /// so is every batch written before it. Without, it is visible at once
    /// but may be lost in a crash until `sync` (or a later synced write)
    /// returns, or the store is dropped. An error does not say the batch
    /// was left out (a [`BufferedKv`] may have taken it and failed to
    /// spill): after one, the caller must treat the store as failed.
    fn write(&self, batch: Batch, sync: bool) -> Result<()>;

    /// Apply `ops` as [`write`](Self::write) applies a batch of them,
    /// without the caller first copying them into one (a store that can
    /// take borrowed keys and values copies them once, into its own).
    fn write_ops(&self, ops: &mut dyn Iterator<Item = OpRef<'_>>, sync: bool) -> Result<()> {
        let mut batch = Batch::new();
        for op in ops {
            batch.push_ref(op);
        }
        self.write(batch, sync)
    }

    /// Apply `batch` as `write(batch, false)` does if that needs no wait
    /// (a write stall, a memtable to switch); otherwise write nothing and
    /// return `Ok(false)`, leaving `batch` as it was. For callers that must
    /// not block, such as an event loop, which then leave the batch to a
    /// thread that may. A store that took the batch may leave it empty.
    /// The default never writes.
    fn try_write(&self, _batch: &mut Batch) -> Result<bool> {
        Ok(false)
    }

    /// Make every batch written so far durable.
    fn sync(&self) -> Result<()>;

    /// Memory the store uses for caching, in bytes (0 if it has no cache).
    fn cache_usage(&self) -> u64 {
        0
    }

    /// Backend-specific statistics as `(name, value)` pairs.
    fn stats(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Every entry with `start <= key < end`, read in chunks of `chunk`.
pub fn scan_all(kv: &dyn Kv, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    const CHUNK: usize = 4096;
    let mut out = Vec::new();
    let mut from = start.to_vec();
    loop {
        let part = kv.scan(&from, end, CHUNK)?;
        let done = part.len() < CHUNK;
        if let Some((last, _)) = part.last() {
            from = successor(last);
        }
        out.extend(part);
        if done {
            return Ok(out);
        }
    }
}

/// The smallest key greater than `key`.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// The smallest key greater than every key starting with `prefix`, or
/// `None` if there is none (the prefix is all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_and_successor() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(successor(b"a"), b"a\0".to_vec());
    }

    #[test]
    fn batch_encoding_round_trips() {
        let mut b = Batch::new();
        b.put(b"k".to_vec(), vec![1u8; 5000]);
        b.delete(b"gone".to_vec());
        b.delete_range(b"a".to_vec(), b"b".to_vec());
        b.put(Vec::new(), Vec::new());
        let back = Batch::decode(&b.encode()).unwrap();
        assert_eq!(back, b);
        let bytes = b.encode();
        assert!(Batch::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Batch::decode(&[9]).is_err());
    }

    /// Puts appended to an encoded batch decode as the batch's last ops,
    /// and the encoding never outgrows `encoded_len`.
    #[test]
    fn puts_appended_to_an_encoding_decode_with_it() {
        let mut b = Batch::new();
        b.put(b"k".to_vec(), b"v".to_vec());
        b.delete(b"gone".to_vec());
        let mut out = Vec::new();
        b.encode_into(&mut out);
        assert!(out.len() <= b.encoded_len());
        encode_put(&mut out, b"p", &[7; 100]);
        encode_put_header(&mut out, b"q", 3);
        out.extend_from_slice(b"abc");
        let mut expected = b.clone();
        expected.put(b"p".to_vec(), vec![7; 100]);
        expected.put(b"q".to_vec(), b"abc".to_vec());
        assert_eq!(Batch::decode(&out).unwrap(), expected);
    }

    #[test]
    fn batch_counts_bytes() {
        let mut b = Batch::new();
        b.put(b"k".to_vec(), b"vv".to_vec());
        b.delete(b"x".to_vec());
        b.delete_range(b"a".to_vec(), b"b".to_vec());
        assert_eq!(b.len(), 3);
        assert_eq!(b.bytes(), 6);
        let mut c = Batch::new();
        c.append(b);
        assert_eq!(c.bytes(), 6);
    }
}
