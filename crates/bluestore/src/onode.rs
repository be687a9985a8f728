//! Onodes: an object's metadata and its extent map.
//!
//! An object's bytes are mapped by its *extent map* from logical ranges to
//! *blobs*. A blob is physical space on the device (one or more allocation
//! units) holding a contiguous run of one object's data, raw or compressed,
//! with a checksum per 4 KiB of what is stored. Several extents may refer to
//! parts of one blob (after an overwrite split it); a blob's space goes back
//! to the allocator when no extent refers to it, and, for a raw blob, each
//! allocation unit no extent refers to any more goes back at once.
//!
//! The extent map is cut into fixed-size *shards* by logical offset
//! (`shard_size`, set at mkfs); each shard is one key-value entry with its
//! extents and blobs, so a small write rewrites one small entry, not the
//! whole map. Extents and blobs never cross a shard boundary.
//!
//! Invariants, asserted: extents of a shard do not overlap and lie inside
//! the shard; every extent refers to a blob of its shard and to bytes the
//! blob holds; a raw blob's referenced bytes lie in live (unreleased) units.

use std::collections::BTreeMap;

use bincode::Options as _;
use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::checksum::{ChecksumType, CSUM_BLOCK};
use crate::compression::Algorithm;

/// Device block: the unit of I/O, of checksums and of extents.
pub const BLOCK: u64 = 4096;

/// Format version written before every encoded value.
const FORMAT: u8 = 1;

/// Encode a metadata value: a format byte, then compact bincode.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT];
    // Serializing plain data into a Vec cannot fail.
    if let Err(e) = bincode_options().serialize_into(&mut out, value) {
        unreachable!("encoding metadata failed: {e}");
    }
    out
}

/// Decode a value written by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => bincode_options()
            .deserialize(rest)
            .map_err(|e| e.to_string()),
        Some((v, _)) => Err(format!("unknown format version {v}")),
        None => Err("empty value".into()),
    }
}

fn bincode_options() -> impl bincode::Options {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .reject_trailing_bytes()
}

/// The part of an onode that is not the extent map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// Unique id of this incarnation of the object: keys its shards and omap.
    pub nid: u64,
    pub size: u64,
    pub attrs: BTreeMap<String, Bytes>,
}

/// A piece of physical space; `offset == RELEASED` marks units handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PExtent {
    pub offset: u64,
    pub len: u32,
}

pub const RELEASED: u64 = u64::MAX;

impl PExtent {
    pub fn is_live(&self) -> bool {
        self.offset != RELEASED
    }
}

/// Stored data of one object: raw, or compressed as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// Physical space in blob order, a whole number of allocation units.
    pub pextents: Vec<PExtent>,
    /// Raw bytes the blob holds (a multiple of [`BLOCK`]).
    pub logical_len: u32,
    /// Algorithm and compressed length, if compressed.
    pub compression: Option<(Algorithm, u32)>,
    pub csum: ChecksumType,
    /// One checksum per [`CSUM_BLOCK`] of stored bytes.
    #[serde(with = "serde_bytes")]
    pub csums: Vec<u8>,
}

impl Blob {
    /// Bytes stored on the device (padded to blocks).
    pub fn stored_len(&self) -> u64 {
        match self.compression {
            Some((_, clen)) => u64::from(clen).div_ceil(BLOCK) * BLOCK,
            None => u64::from(self.logical_len),
        }
    }

    /// Physical ranges holding stored bytes `[off, off + len)` as
    /// `(device offset, len)`; `None` if part of it was released.
    pub fn phys_ranges(&self, off: u64, len: u64) -> Option<Vec<(u64, u64)>> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let (mut at, end) = (0u64, off + len);
        for p in &self.pextents {
            let p_end = at + u64::from(p.len);
            let (lo, hi) = (off.max(at), end.min(p_end));
            if lo < hi {
                if !p.is_live() {
                    return None;
                }
                let phys = p.offset + (lo - at);
                match out.last_mut() {
                    Some((o, l)) if *o + *l == phys => *l += hi - lo,
                    _ => out.push((phys, hi - lo)),
                }
            }
            at = p_end;
            if at >= end {
                break;
            }
        }
        (at >= end).then_some(out)
    }

    /// Live physical space of the whole blob.
    pub fn live(&self) -> impl Iterator<Item = PExtent> + '_ {
        self.pextents.iter().copied().filter(PExtent::is_live)
    }

    /// Release the allocation units of a raw blob that no extent refers to;
    /// `refs` are the referenced ranges of the blob, sorted by offset.
    pub fn release_unreferenced(&mut self, refs: &[(u64, u64)], au: u64) -> Vec<PExtent> {
        if self.compression.is_some() {
            return Vec::new();
        }
        let mut released = Vec::new();
        let mut next = Vec::with_capacity(self.pextents.len());
        let mut at = 0u64;
        for p in std::mem::take(&mut self.pextents) {
            if !p.is_live() {
                at += u64::from(p.len);
                next.push(p);
                continue;
            }
            let mut unit = 0u64;
            while unit < u64::from(p.len) {
                let (lo, hi) = (at + unit, at + unit + au);
                let used = refs.iter().any(|&(o, l)| o < hi && o + l > lo);
                let piece = PExtent {
                    offset: if used { p.offset + unit } else { RELEASED },
                    len: au as u32,
                };
                if !used {
                    released.push(PExtent {
                        offset: p.offset + unit,
                        len: au as u32,
                    });
                }
                push_merged(&mut next, piece);
                unit += au;
            }
            at += u64::from(p.len);
        }
        self.pextents = next;
        released
    }

    /// Check the blob's own invariants.
    pub fn check(&self, au: u64) -> Result<(), String> {
        let total: u64 = self.pextents.iter().map(|p| u64::from(p.len)).sum();
        if total < self.stored_len() || total % au != 0 {
            return Err(format!(
                "blob space {total} does not fit {}",
                self.stored_len()
            ));
        }
        let blocks = (self.stored_len() as usize) / CSUM_BLOCK;
        if self.csums.len() != blocks * self.csum.width() {
            return Err(format!(
                "{} checksum bytes for {blocks} blocks",
                self.csums.len()
            ));
        }
        Ok(())
    }
}

/// Append `p`, merging with the last piece when contiguous and alike.
fn push_merged(v: &mut Vec<PExtent>, p: PExtent) {
    if let Some(last) = v.last_mut() {
        let contiguous = if p.is_live() {
            last.is_live() && last.offset + u64::from(last.len) == p.offset
        } else {
            !last.is_live()
        };
        if contiguous {
            last.len += p.len;
            return;
        }
    }
    v.push(p);
}

/// `len` logical bytes mapped to `blob` starting at `blob_off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub len: u32,
    pub blob: u32,
    pub blob_off: u32,
}

/// What a logical range holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    Hole { len: u64 },
    Data { blob: u32, blob_off: u64, len: u64 },
}

/// One shard of an extent map: offsets are relative to the shard start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub extents: BTreeMap<u32, Extent>,
    pub blobs: BTreeMap<u32, Blob>,
    pub next_blob: u32,
}

impl Shard {
    pub fn is_empty(&self) -> bool {
        self.extents.is_empty() && self.blobs.is_empty()
    }

    /// The pieces of `[start, end)`, in order.
    pub fn lookup(&self, start: u32, end: u32) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut at = start;
        let first = self
            .extents
            .range(..=start)
            .next_back()
            .map(|(&o, _)| o)
            .unwrap_or(start);
        for (&o, e) in self.extents.range(first..end) {
            let e_end = o + e.len;
            if e_end <= at {
                continue;
            }
            if o > at {
                out.push(Piece::Hole {
                    len: u64::from(o - at),
                });
                at = o;
            }
            let hi = e_end.min(end);
            out.push(Piece::Data {
                blob: e.blob,
                blob_off: u64::from(e.blob_off + (at - o)),
                len: u64::from(hi - at),
            });
            at = hi;
        }
        if at < end {
            out.push(Piece::Hole {
                len: u64::from(end - at),
            });
        }
        out
    }

    /// Remove the mapping of `[start, end)`, splitting extents at the edges.
    /// Returns the blobs whose references changed.
    pub fn punch(&mut self, start: u32, end: u32) -> Vec<u32> {
        let mut touched = Vec::new();
        let first = self
            .extents
            .range(..start)
            .next_back()
            .filter(|(&o, e)| o + e.len > start)
            .map(|(&o, _)| o)
            .unwrap_or(start);
        let doomed: Vec<u32> = self.extents.range(first..end).map(|(&o, _)| o).collect();
        for o in doomed {
            let Some(e) = self.extents.remove(&o) else {
                continue;
            };
            touched.push(e.blob);
            let e_end = o + e.len;
            if o < start {
                self.extents.insert(
                    o,
                    Extent {
                        len: start - o,
                        ..e
                    },
                );
            }
            if e_end > end {
                self.extents.insert(
                    end,
                    Extent {
                        len: e_end - end,
                        blob: e.blob,
                        blob_off: e.blob_off + (end - o),
                    },
                );
            }
        }
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Map `[at, at + e.len)`, which must be unmapped, to `e`.
    pub fn insert(&mut self, at: u32, e: Extent) {
        assert!(e.len > 0, "empty extent");
        assert!(
            self.lookup(at, at + e.len)
                .iter()
                .all(|p| matches!(p, Piece::Hole { .. })),
            "extent {at}+{} inserted over mapped data",
            e.len
        );
        assert!(self.blobs.contains_key(&e.blob), "extent of a missing blob");
        self.extents.insert(at, e);
    }

    pub fn add_blob(&mut self, blob: Blob) -> u32 {
        let id = self.next_blob;
        self.next_blob += 1;
        self.blobs.insert(id, blob);
        id
    }

    /// Referenced ranges `(blob_off, len)` of `blob`, sorted.
    fn refs(&self, blob: u32) -> Vec<(u64, u64)> {
        let mut refs: Vec<(u64, u64)> = self
            .extents
            .values()
            .filter(|e| e.blob == blob)
            .map(|e| (u64::from(e.blob_off), u64::from(e.len)))
            .collect();
        refs.sort_unstable();
        refs
    }

    /// Release what `blobs` no longer need after a punch: whole blobs no
    /// extent refers to, and unreferenced units of raw blobs.
    pub fn release(&mut self, blobs: &[u32], au: u64) -> Vec<PExtent> {
        let mut released = Vec::new();
        for &id in blobs {
            let refs = self.refs(id);
            if refs.is_empty() {
                if let Some(blob) = self.blobs.remove(&id) {
                    released.extend(blob.live());
                }
            } else if let Some(blob) = self.blobs.get_mut(&id) {
                released.extend(blob.release_unreferenced(&refs, au));
            }
        }
        released
    }

    /// Every physical extent the shard holds.
    pub fn live_space(&self) -> impl Iterator<Item = PExtent> + '_ {
        self.blobs.values().flat_map(Blob::live)
    }

    /// Check the shard's invariants; `size` is the shard's logical length.
    pub fn check(&self, size: u32, au: u64) -> Result<(), String> {
        let mut prev_end = 0u32;
        for (&o, e) in &self.extents {
            if o < prev_end || e.len == 0 || o.checked_add(e.len).is_none_or(|end| end > size) {
                return Err(format!("extent {o}+{} overlaps or leaves the shard", e.len));
            }
            prev_end = o + e.len;
            let blob = self
                .blobs
                .get(&e.blob)
                .ok_or_else(|| format!("extent {o} refers to missing blob {}", e.blob))?;
            if e.blob_off + e.len > blob.logical_len {
                return Err(format!("extent {o} reaches past blob {}", e.blob));
            }
            if blob.compression.is_none()
                && blob
                    .phys_ranges(u64::from(e.blob_off), u64::from(e.len))
                    .is_none()
            {
                return Err(format!(
                    "extent {o} refers to released space of blob {}",
                    e.blob
                ));
            }
        }
        for (id, blob) in &self.blobs {
            blob.check(au).map_err(|e| format!("blob {id}: {e}"))?;
            if !self.extents.values().any(|e| e.blob == *id) {
                return Err(format!("blob {id} is not referenced"));
            }
        }
        Ok(())
    }
}

impl Shard {
    /// Memory the shard takes, roughly, in bytes (for cache accounting).
    pub fn approx_bytes(&self) -> u64 {
        let blobs: usize = self
            .blobs
            .values()
            .map(|b| 96 + b.pextents.len() * 16 + b.csums.len())
            .sum();
        (64 + self.extents.len() * 40 + blobs) as u64
    }
}

/// An object's metadata as held in memory: the core and every shard.
/// Shards are shared copy-on-write, so copying an onode to change one
/// shard copies only that shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Onode {
    pub core: Core,
    pub shards: BTreeMap<u32, std::sync::Arc<Shard>>,
    /// The sum of the shards' `approx_bytes`, kept by whoever changes a
    /// shard (the transaction builder, once per changed shard), so that
    /// cache accounting never walks every shard of a large object.
    pub shard_bytes: u64,
}

impl Onode {
    /// An onode of `core` and `shards`, counting their memory.
    pub fn new(core: Core, shards: BTreeMap<u32, std::sync::Arc<Shard>>) -> Self {
        let shard_bytes = shards.values().map(|s| s.approx_bytes()).sum();
        Self {
            core,
            shards,
            shard_bytes,
        }
    }

    /// Memory the onode takes, roughly, in bytes (for cache accounting).
    pub fn approx_bytes(&self) -> u64 {
        let attrs: usize = self
            .core
            .attrs
            .iter()
            .map(|(k, v)| 48 + k.len() + v.len())
            .sum();
        64 + attrs as u64 + self.shard_bytes
    }

    /// `shard_bytes` counted again from every shard.
    pub fn recount_shard_bytes(&self) -> u64 {
        self.shards.values().map(|s| s.approx_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_blob(offset: u64, len: u32) -> Blob {
        Blob {
            pextents: vec![PExtent { offset, len }],
            logical_len: len,
            compression: None,
            csum: ChecksumType::None,
            csums: Vec::new(),
        }
    }

    #[test]
    fn punch_splits_and_release_frees_units() {
        let mut s = Shard::default();
        let b = s.add_blob(raw_blob(1 << 20, 64 << 10));
        s.insert(
            0,
            Extent {
                len: 64 << 10,
                blob: b,
                blob_off: 0,
            },
        );
        let touched = s.punch(8 << 10, 24 << 10);
        assert_eq!(touched, vec![b]);
        assert_eq!(s.extents.len(), 2);
        let released = s.release(&touched, 4096);
        let total: u64 = released.iter().map(|p| u64::from(p.len)).sum();
        assert_eq!(total, 16 << 10);
        assert_eq!(released[0].offset, (1 << 20) + (8 << 10));
        s.check(256 << 10, 4096).unwrap();
        assert_eq!(
            s.lookup(4096, 28 << 10),
            vec![
                Piece::Data {
                    blob: b,
                    blob_off: 4096,
                    len: 4096
                },
                Piece::Hole { len: 16 << 10 },
                Piece::Data {
                    blob: b,
                    blob_off: 24 << 10,
                    len: 4096
                },
            ]
        );
        // Punching the rest frees the remaining units and the blob.
        let touched = s.punch(0, 64 << 10);
        let released = s.release(&touched, 4096);
        let total: u64 = released.iter().map(|p| u64::from(p.len)).sum();
        assert_eq!(total, 48 << 10);
        assert!(s.is_empty());
    }

    #[test]
    fn large_units_stay_while_partly_referenced() {
        let mut s = Shard::default();
        let b = s.add_blob(raw_blob(0, 128 << 10));
        s.insert(
            0,
            Extent {
                len: 128 << 10,
                blob: b,
                blob_off: 0,
            },
        );
        let touched = s.punch(4096, 100 << 10);
        let released = s.release(&touched, 64 << 10);
        assert!(released.is_empty(), "both 64K units are still referenced");
        let touched = s.punch(0, 64 << 10);
        let released = s.release(&touched, 64 << 10);
        assert_eq!(
            released,
            vec![PExtent {
                offset: 0,
                len: 64 << 10
            }]
        );
        s.check(256 << 10, 64 << 10).unwrap();
    }

    #[test]
    #[should_panic(expected = "inserted over mapped data")]
    fn inserting_over_data_panics() {
        let mut s = Shard::default();
        let b = s.add_blob(raw_blob(0, 8192));
        s.insert(
            0,
            Extent {
                len: 8192,
                blob: b,
                blob_off: 0,
            },
        );
        s.insert(
            4096,
            Extent {
                len: 4096,
                blob: b,
                blob_off: 0,
            },
        );
    }

    #[test]
    fn values_round_trip() {
        let mut s = Shard::default();
        let b = s.add_blob(raw_blob(4096, 8192));
        s.insert(
            0,
            Extent {
                len: 8192,
                blob: b,
                blob_off: 0,
            },
        );
        let back: Shard = decode(&encode(&s)).unwrap();
        assert_eq!(back, s);
        assert!(decode::<Shard>(&[9, 1, 2]).is_err());
        let phys = s.blobs[&b].phys_ranges(4096, 4096).unwrap();
        assert_eq!(phys, vec![(8192, 4096)]);
    }
}
