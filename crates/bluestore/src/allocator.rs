//! Free space: the durable free list and the allocator.
//!
//! Two range sets describe free space. The *free list* is exactly what the
//! key-value store holds (prefix `F`) once every submitted transaction has
//! committed: a transaction that allocates or releases space changes it and
//! writes the matching `F` entries in its own batch, so space and the
//! metadata that uses it change atomically. The *allocator* is what may be
//! handed out now: space a transaction releases joins it only later, once
//! no deferred write or in-flight read can still touch it (see
//! `release`), so it never returns space that is still in use.
//!
//! Allocation is next-fit from a moving cursor (new data lands in roughly
//! ascending order, which suits flash), in whole allocation units, and may
//! return several pieces when no single free range is large enough.

use cairn_kv::Batch;

use crate::keys;
use crate::onode::PExtent;
use crate::rangeset::{Delta, RangeSet};

/// Space that can be handed out now.
pub(crate) struct Allocator {
    free: RangeSet,
    cursor: u64,
    au: u64,
}

impl Allocator {
    pub fn new(free: RangeSet, au: u64) -> Self {
        Self {
            free,
            cursor: 0,
            au,
        }
    }

    pub fn free_bytes(&self) -> u64 {
        self.free.total()
    }

    /// `len` bytes (a multiple of the unit) in as few pieces as possible,
    /// each at most `max_piece`; `None`, with nothing taken, if there is
    /// not that much free space.
    pub fn allocate(&mut self, len: u64, max_piece: u64) -> Option<Vec<PExtent>> {
        assert!(len % self.au == 0 && len > 0, "allocation of {len} bytes");
        if self.free.total() < len {
            return None;
        }
        let mut out = Vec::new();
        let mut left = len;
        while left > 0 {
            let want = left.min(max_piece);
            let (offset, avail) = match self.free.find_from(self.cursor, want) {
                Some(found) => found,
                None => self.free.largest()?,
            };
            let take = avail.min(want);
            self.free.remove(offset, take);
            self.cursor = offset + take;
            out.push(PExtent {
                offset,
                len: u32::try_from(take).unwrap_or(u32::MAX),
            });
            left -= take;
        }
        Some(out)
    }

    /// Make `p` available again.
    pub fn release(&mut self, p: PExtent) {
        assert_eq!(p.offset % self.au, 0, "release of an unaligned extent");
        self.free.insert(p.offset, u64::from(p.len));
    }
}

/// The durable free list as it will stand once every submitted transaction
/// has committed.
pub(crate) struct Freelist {
    free: RangeSet,
}

impl Freelist {
    pub fn new(free: RangeSet) -> Self {
        Self { free }
    }

    pub fn total(&self) -> u64 {
        self.free.total()
    }

    #[cfg(test)]
    pub fn set(&self) -> &RangeSet {
        &self.free
    }

    /// Mark `p` used, adding the `F` changes to `batch`.
    pub fn allocate(&mut self, p: PExtent, batch: &mut Batch) {
        let delta = self.free.remove(p.offset, u64::from(p.len));
        write_delta(delta, batch);
    }

    /// Mark `p` free, adding the `F` changes to `batch`.
    pub fn release(&mut self, p: PExtent, batch: &mut Batch) {
        let delta = self.free.insert(p.offset, u64::from(p.len));
        write_delta(delta, batch);
    }
}

fn write_delta(delta: Delta, batch: &mut Batch) {
    for start in delta.removed {
        batch.delete(keys::free(start));
    }
    for (start, len) in delta.put {
        batch.put(keys::free(start), len.to_be_bytes().to_vec());
    }
}

/// Decode the `F` entries of a store into a range set, checking that every
/// range is aligned to `au`, inside `[data_start, device_end)`, and apart
/// from the others.
pub(crate) fn load_freelist(
    entries: &[(Vec<u8>, Vec<u8>)],
    au: u64,
    data_start: u64,
    device_end: u64,
) -> Result<RangeSet, String> {
    let mut set = RangeSet::new();
    for (key, value) in entries {
        let offset = keys::decode_u64_key(key).ok_or("bad free-list key")?;
        let len = value
            .as_slice()
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| format!("bad free-list length at {offset:#x}"))?;
        if offset % au != 0 || len % au != 0 || len == 0 {
            return Err(format!(
                "free extent {offset:#x}+{len:#x} is not unit-aligned"
            ));
        }
        if offset < data_start || offset.checked_add(len).is_none_or(|end| end > device_end) {
            return Err(format!(
                "free extent {offset:#x}+{len:#x} is outside the device"
            ));
        }
        if set.overlaps(offset.saturating_sub(1), len + 2) {
            return Err(format!(
                "free extent {offset:#x}+{len:#x} overlaps or touches another"
            ));
        }
        set.insert(offset, len);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(len: u64) -> Allocator {
        let mut free = RangeSet::new();
        free.insert(0, len);
        Allocator::new(free, 4096)
    }

    #[test]
    fn allocates_next_fit_and_in_pieces() {
        let mut a = allocator(64 << 10);
        let x = a.allocate(16 << 10, 1 << 20).unwrap();
        let y = a.allocate(16 << 10, 1 << 20).unwrap();
        assert_eq!(
            x,
            vec![PExtent {
                offset: 0,
                len: 16 << 10
            }]
        );
        assert_eq!(y[0].offset, 16 << 10);
        a.release(x[0]);
        // 32K free at the end, 16K at the start: 40K takes both.
        let z = a.allocate(40 << 10, 1 << 20).unwrap();
        let total: u64 = z.iter().map(|p| u64::from(p.len)).sum();
        assert_eq!(total, 40 << 10);
        assert_eq!(a.free_bytes(), 8 << 10);
        assert!(a.allocate(16 << 10, 1 << 20).is_none());
        assert_eq!(a.free_bytes(), 8 << 10, "a failed allocation takes nothing");
    }

    #[test]
    fn freelist_writes_matching_entries() {
        let mut free = RangeSet::new();
        free.insert(4096, 1 << 20);
        let mut f = Freelist::new(free);
        let mut batch = Batch::new();
        f.allocate(
            PExtent {
                offset: 4096,
                len: 8192,
            },
            &mut batch,
        );
        f.release(
            PExtent {
                offset: 4096,
                len: 4096,
            },
            &mut batch,
        );
        let kv = cairn_kv::MemKv::new();
        use cairn_kv::Kv;
        let mut init = Batch::new();
        init.put(keys::free(4096), (1u64 << 20).to_be_bytes().to_vec());
        kv.write(init, true).unwrap();
        kv.write(batch, true).unwrap();
        let (start, end) = keys::range_of(&[keys::FREE]);
        let entries = kv.scan(&start, &end, 100).unwrap();
        let loaded = load_freelist(&entries, 4096, 4096, 2 << 20).unwrap();
        assert_eq!(&loaded, f.set());
        assert_eq!(loaded.total(), (1 << 20) - 4096);
    }

    #[test]
    fn load_rejects_bad_entries() {
        let entry = |o: u64, l: u64| (keys::free(o), l.to_be_bytes().to_vec());
        assert!(load_freelist(&[entry(4097, 4096)], 4096, 4096, 1 << 20).is_err());
        assert!(load_freelist(&[entry(0, 4096)], 4096, 4096, 1 << 20).is_err());
        assert!(load_freelist(&[entry(4096, 1 << 20)], 4096, 4096, 1 << 20).is_err());
        let overlapping = [entry(4096, 8192), entry(8192, 4096)];
        assert!(load_freelist(&overlapping, 4096, 4096, 1 << 20).is_err());
        assert!(load_freelist(&[entry(4096, 8192)], 4096, 4096, 1 << 20).is_ok());
    }
}
