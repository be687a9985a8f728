//! Hit sets: which objects of a cache PG were accessed in each of the last
//! `hit_set_count` periods of `hit_set_period` seconds, as bloom filters
//! (Ceph's `bloom` hit sets). Kept by the primary in memory: a new primary
//! starts with none, which only delays promotions.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};

/// Bits of one hit set: 8 KiB of bits hold about 6,800 distinct objects
/// per period at a 1% false-positive rate (a false positive promotes an
/// object early; more objects than that, more often). With the default
/// 12 sets that is 96 KiB per cache PG.
const BITS: usize = 1 << 16;
const HASHES: u32 = 7;

#[derive(Clone)]
struct Bloom {
    bits: Vec<u64>,
    inserted: u64,
}

impl Bloom {
    fn new() -> Self {
        Bloom {
            bits: vec![0; BITS / 64],
            inserted: 0,
        }
    }

    fn positions(name: &str) -> impl Iterator<Item = usize> {
        let hash = |seed: u64| {
            let mut h = foldhash::fast::FixedState::with_seed(seed).build_hasher();
            h.write(name.as_bytes());
            h.finish()
        };
        let (a, b) = (hash(0x5eed_0001), hash(0x5eed_0002) | 1);
        (0..u64::from(HASHES))
            .map(move |i| (a.wrapping_add(i.wrapping_mul(b)) % BITS as u64) as usize)
    }

    fn insert(&mut self, name: &str) {
        for p in Self::positions(name) {
            self.bits[p / 64] |= 1 << (p % 64);
        }
        self.inserted += 1;
    }

    fn contains(&self, name: &str) -> bool {
        Self::positions(name).all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
    }
}

/// The current hit set and the archived ones, newest first.
pub struct HitSets {
    /// Start (seconds) of each set's period, with the set.
    sets: VecDeque<(u64, Bloom)>,
}

impl HitSets {
    pub fn new() -> Self {
        HitSets {
            sets: VecDeque::new(),
        }
    }

    /// Move to the period holding `now`, dropping sets older than `count`
    /// periods.
    fn advance(&mut self, now: u64, period: u64, count: usize) {
        let period = period.max(1);
        let start = now - now % period;
        if self.sets.front().is_none_or(|(s, _)| *s != start) {
            self.sets.push_front((start, Bloom::new()));
        }
        let oldest = start.saturating_sub(period * (count as u64).saturating_sub(1));
        while self.sets.back().is_some_and(|(s, _)| *s < oldest) {
            self.sets.pop_back();
        }
        self.sets.truncate(count.max(1));
    }

    /// Record an access to `name` at `now` and say in how many of the
    /// last `count` hit sets (this one included) it is found.
    pub fn hit(&mut self, name: &str, now: u64, period: u64, count: usize) -> usize {
        self.advance(now, period, count);
        if let Some((_, current)) = self.sets.front_mut() {
            if !current.contains(name) {
                current.insert(name);
            }
        }
        self.sets.iter().filter(|(_, b)| b.contains(name)).count()
    }

    /// Objects inserted into each kept set, newest first (for stats).
    pub fn sizes(&self) -> Vec<u64> {
        self.sets.iter().map(|(_, b)| b.inserted).collect()
    }
}

impl Default for HitSets {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for HitSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HitSets({:?})", self.sizes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recency_counts_distinct_periods() {
        let mut h = HitSets::new();
        assert_eq!(h.hit("a", 100, 10, 3), 1);
        assert_eq!(h.hit("a", 105, 10, 3), 1, "same period");
        assert_eq!(h.hit("a", 112, 10, 3), 2);
        assert_eq!(h.hit("b", 112, 10, 3), 1);
        assert_eq!(h.hit("a", 125, 10, 3), 3);
        assert_eq!(h.hit("a", 131, 10, 3), 3, "only three periods kept");
        assert_eq!(h.hit("a", 200, 10, 3), 1, "old periods forgotten");
        assert_eq!(h.sizes().len(), 1);
    }

    #[test]
    fn few_false_positives() {
        let mut b = Bloom::new();
        for i in 0..5_000 {
            b.insert(&format!("rbd_data.x.{i:016x}"));
        }
        let false_hits = (0..20_000)
            .filter(|i| b.contains(&format!("other.{i}")))
            .count();
        assert!(false_hits < 100, "{false_hits} false positives in 20,000");
    }
}
