//! A set of disjoint, non-adjacent byte ranges: the shape of free space.
//!
//! Both the durable free list and the allocator's view of what can be
//! handed out are range sets. Inserting merges with neighbours; removing
//! splits. Both assert the invariant they rely on (inserting space that is
//! already free, or removing space that is not, is a double free or a
//! double allocation: a bug that must never pass silently).

use std::collections::BTreeMap;

/// Disjoint ranges `[offset, offset + len)`, merged when they touch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    /// offset → len; no two ranges overlap or touch.
    ranges: BTreeMap<u64, u64>,
    total: u64,
}

/// How an insert or remove changed the stored ranges (for mirroring the set
/// into key-value entries keyed by range start).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// Ranges (offset, len) now present that were not before, or resized.
    pub put: Vec<(u64, u64)>,
    /// Range starts no longer present.
    pub removed: Vec<u64>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Total bytes in the set.
    pub fn total(&self) -> u64 {
        self.total
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&o, &l)| (o, l))
    }

    /// Whether `[offset, offset + len)` lies wholly inside one range.
    #[cfg(test)]
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        match self.ranges.range(..=offset).next_back() {
            Some((&o, &l)) => offset + len <= o + l,
            None => false,
        }
    }

    /// Whether any byte of `[offset, offset + len)` is in the set.
    pub fn overlaps(&self, offset: u64, len: u64) -> bool {
        if let Some((&o, &l)) = self.ranges.range(..offset + len).next_back() {
            return o + l > offset;
        }
        false
    }

    /// Add `[offset, offset + len)`, which must not overlap the set.
    pub fn insert(&mut self, offset: u64, len: u64) -> Delta {
        assert!(len > 0, "empty range inserted");
        assert!(
            !self.overlaps(offset, len),
            "range {offset:#x}+{len:#x} inserted twice (double free)"
        );
        let mut delta = Delta::default();
        let (mut start, mut end) = (offset, offset + len);
        if let Some((&o, &l)) = self.ranges.range(..offset).next_back() {
            if o + l == offset {
                start = o;
                self.ranges.remove(&o);
            }
        }
        if let Some(&l) = self.ranges.get(&end) {
            self.ranges.remove(&end);
            delta.removed.push(end);
            end += l;
        }
        self.ranges.insert(start, end - start);
        delta.put.push((start, end - start));
        self.total += len;
        delta
    }

    /// Remove `[offset, offset + len)`, which must lie inside one range.
    pub fn remove(&mut self, offset: u64, len: u64) -> Delta {
        assert!(len > 0, "empty range removed");
        let (o, l) = match self.ranges.range(..=offset).next_back() {
            Some((&o, &l)) if offset + len <= o + l => (o, l),
            _ => {
                panic!("range {offset:#x}+{len:#x} removed but not in the set (double allocation)")
            }
        };
        let mut delta = Delta::default();
        self.ranges.remove(&o);
        if o < offset {
            self.ranges.insert(o, offset - o);
            delta.put.push((o, offset - o));
        } else {
            delta.removed.push(o);
        }
        let end = offset + len;
        if end < o + l {
            self.ranges.insert(end, o + l - end);
            delta.put.push((end, o + l - end));
        }
        self.total -= len;
        delta
    }

    /// The first range at or after `from` (wrapping to the start) with at
    /// least `min` bytes, as `(offset, len)`.
    pub fn find_from(&self, from: u64, min: u64) -> Option<(u64, u64)> {
        let after = self.ranges.range(from..);
        let before = self.ranges.range(..from);
        after
            .chain(before)
            .find(|(_, &l)| l >= min)
            .map(|(&o, &l)| (o, l))
    }

    /// The largest range, as `(offset, len)`.
    pub fn largest(&self) -> Option<(u64, u64)> {
        self.ranges
            .iter()
            .max_by_key(|(_, &l)| l)
            .map(|(&o, &l)| (o, l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_and_remove_splits() {
        let mut s = RangeSet::new();
        s.insert(0, 10);
        let d = s.insert(20, 10);
        assert_eq!(d.put, vec![(20, 10)]);
        let d = s.insert(10, 10);
        assert_eq!(d.put, vec![(0, 30)]);
        assert_eq!(d.removed, vec![20]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.total(), 30);
        let d = s.remove(5, 10);
        assert_eq!(d.put, vec![(0, 5), (15, 15)]);
        assert!(d.removed.is_empty());
        let d = s.remove(0, 5);
        assert_eq!(d.removed, vec![0]);
        assert!(s.contains(15, 15));
        assert!(!s.contains(14, 2));
        assert!(s.overlaps(10, 6));
        assert!(!s.overlaps(0, 15));
        assert_eq!(s.total(), 15);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_insert_panics() {
        let mut s = RangeSet::new();
        s.insert(0, 10);
        s.insert(5, 10);
    }

    #[test]
    #[should_panic(expected = "double allocation")]
    fn removing_absent_space_panics() {
        let mut s = RangeSet::new();
        s.insert(0, 10);
        s.remove(5, 10);
    }

    #[test]
    fn find_wraps_around() {
        let mut s = RangeSet::new();
        s.insert(0, 100);
        s.insert(200, 10);
        assert_eq!(s.find_from(150, 5), Some((200, 10)));
        assert_eq!(s.find_from(150, 50), Some((0, 100)));
        assert_eq!(s.find_from(0, 101), None);
        assert_eq!(s.largest(), Some((0, 100)));
    }

    /// Random inserts and removes against a bitmap model.
    #[test]
    fn matches_a_bitmap() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut s = RangeSet::new();
        let mut bits = [false; 256];
        for _ in 0..5000 {
            let o = rng.gen_range(0..256u64);
            let l = rng.gen_range(1..=(256 - o).min(16));
            let range = o as usize..(o + l) as usize;
            if bits[range.clone()].iter().all(|b| !b) {
                s.insert(o, l);
                bits[range].iter_mut().for_each(|b| *b = true);
            } else if bits[range.clone()].iter().all(|b| *b) {
                s.remove(o, l);
                bits[range].iter_mut().for_each(|b| *b = false);
            }
            assert_eq!(s.total(), bits.iter().filter(|b| **b).count() as u64);
        }
        let mut from_set = [false; 256];
        let mut prev_end = None;
        for (o, l) in s.iter() {
            assert!(prev_end.is_none_or(|e| e < o), "ranges touch or overlap");
            prev_end = Some(o + l);
            from_set[o as usize..(o + l) as usize]
                .iter_mut()
                .for_each(|b| *b = true);
        }
        assert_eq!(from_set, bits);
    }
}
