//! Straw2 weighted selection with a fixed-point logarithm.
//!
//! See the crate documentation for the algorithm. Everything here is integer
//! arithmetic so that results are identical on every platform.

use crate::hash::hash_words;
use crate::OsdId;

/// Salt for the per-(input, OSD, draw) straw hash.
const STRAW_SALT: u32 = 0x7374_7277; // "strw"

/// Draws made for one replica before falling back to a draw restricted to the
/// OSDs not chosen yet (CRUSH's `choose_total_tries` defaults to 50 as well).
pub const MAX_DRAWS_PER_REPLICA: u32 = 50;

/// Distance between the draw numbers `r'` of successive retries of a replica:
/// draw `t` of replica `r` uses `r' = r + t * RETRY_STRIDE`, so retries never
/// reuse another replica's draw and the result for `n` replicas is a prefix of
/// the result for `n + 1`. CRUSH rules retry the same way.
pub const RETRY_STRIDE: u32 = 1 << 16;

/// Fractional bits of the fixed-point logarithms below.
pub(crate) const FRAC_BITS: u32 = 32;

/// log2 of the table resolution: the table has `2^TABLE_BITS + 1` entries.
const TABLE_BITS: u32 = 10;
const TABLE_LEN: usize = (1 << TABLE_BITS) + 1;

/// `LOG2_TABLE[i] = round(log2(1 + i / 1024) * 2^32)`, for `i` in `0..=1024`.
pub(crate) static LOG2_TABLE: [u64; TABLE_LEN] = build_log2_table();

/// Computes the table at compile time by the bit-by-bit squaring method:
/// for `y` in `[1, 2)`, squaring `y` doubles `log2(y)`; whenever the square
/// reaches 2, the next fractional bit of the logarithm is 1 and `y` is halved.
const fn build_log2_table() -> [u64; TABLE_LEN] {
    const ONE: u128 = 1 << 62; // y is kept in fixed point with 62 fraction bits
    const EXTRA: u32 = 2; // extra bits computed for rounding
    let mut table = [0u64; TABLE_LEN];
    let mut i = 0;
    while i < TABLE_LEN - 1 {
        let mut y: u128 = ((1u128 << TABLE_BITS) + i as u128) << (62 - TABLE_BITS);
        let mut bits: u64 = 0;
        let mut b = 0;
        while b < FRAC_BITS + EXTRA {
            y = (y * y) >> 62;
            bits <<= 1;
            if y >= 2 * ONE {
                y >>= 1;
                bits |= 1;
            }
            b += 1;
        }
        table[i] = (bits + (1 << (EXTRA - 1))) >> EXTRA;
        i += 1;
    }
    table[TABLE_LEN - 1] = 1 << FRAC_BITS; // log2(2) = 1
    table
}

/// `log2(v)` for `v >= 1`, in fixed point with [`FRAC_BITS`] fraction bits.
/// Monotonically non-decreasing in `v`; absolute error below about 2^-22.
pub(crate) fn log2_fixed(v: u64) -> u64 {
    debug_assert!(v >= 1);
    let k = 63 - v.leading_zeros(); // integer part
    let mantissa = v - (1u64 << k); // k bits below the leading one
                                    // The fraction `mantissa / 2^k` as a 32-bit fraction (v <= 2^32 keeps k <= 32;
                                    // larger v lose low bits, which only matters for the tests' range checks).
    let frac = if k <= FRAC_BITS {
        mantissa << (FRAC_BITS - k)
    } else {
        mantissa >> (k - FRAC_BITS)
    };
    let shift = FRAC_BITS - TABLE_BITS;
    let idx = (frac >> shift) as usize;
    let rem = frac & ((1u64 << shift) - 1);
    let lo = LOG2_TABLE[idx];
    let hi = LOG2_TABLE[idx + 1];
    let interp = lo + (((hi - lo) * rem) >> shift);
    (u64::from(k) << FRAC_BITS) + interp
}

/// `-log2(u)` for `u = (h + 1) / 2^32` in `(0, 1]`, in fixed point
/// (0 for `u = 1`, at most `32 << FRAC_BITS`).
#[inline]
pub(crate) fn neg_log2_unit(h: u32) -> u64 {
    (32u64 << FRAC_BITS) - log2_fixed(u64::from(h) + 1)
}

/// An OSD eligible for selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The OSD.
    pub id: OsdId,
    /// Relative weight in 16.16 fixed point (`0x10000` = 1.0). Weight 0 is
    /// never chosen.
    pub weight: u32,
}

impl Candidate {
    /// A candidate with the given id and 16.16 fixed-point weight.
    pub const fn new(id: OsdId, weight: u32) -> Self {
        Self { id, weight }
    }
}

/// One candidate's straw in a draw: the winner has the smallest
/// `neg_log / weight` (that is, the largest `ln(u) / weight`). `id` is the
/// candidate's hash key, which also breaks ties.
#[derive(Clone, Copy)]
struct Straw {
    neg_log: u64,
    weight: u64,
    id: u32,
}

impl Straw {
    /// Whether `self` beats `other`: exact rational comparison of
    /// `neg_log / weight`, ties to the lower id. A strict total order on
    /// (ratio, id), so the winner does not depend on the candidates' order.
    /// `neg_log < 2^38` and weights below `2^64` keep the products in `u128`.
    #[inline]
    fn beats(&self, other: &Straw) -> bool {
        let lhs = u128::from(self.neg_log) * u128::from(other.weight);
        let rhs = u128::from(other.neg_log) * u128::from(self.weight);
        lhs < rhs || (lhs == rhs && self.id < other.id)
    }
}

/// One straw2 draw number `r` for input `x` over the nonzero-weight candidates
/// not rejected by `skip`. `None` if nothing is eligible.
fn draw(x: u32, candidates: &[Candidate], r: u32, skip: impl Fn(OsdId) -> bool) -> Option<OsdId> {
    let mut best: Option<Straw> = None;
    for c in candidates {
        if c.weight == 0 || skip(c.id) {
            continue;
        }
        let straw = Straw {
            neg_log: neg_log2_unit(hash_words(&[x, c.id, r], STRAW_SALT)),
            weight: u64::from(c.weight),
            id: c.id,
        };
        let better = match &best {
            None => true,
            Some(b) => straw.beats(b),
        };
        if better {
            best = Some(straw);
        }
    }
    best.map(|b| b.id)
}

/// Straw2 weighted draw of an ordered list of up to `n` distinct OSDs for input
/// `x` (usually [`pg_placement_seed`](crate::pg_placement_seed)).
///
/// The first entry is the primary. Candidates with weight 0 are never chosen;
/// if a candidate id appears more than once, the entry with the larger weight
/// effectively counts. The result does not depend on the order of
/// `candidates`, and has `min(n, number of distinct nonzero-weight ids)`
/// entries. The result for `n` is always a prefix of the result for `n + 1`.
pub fn straw2_select(x: u32, candidates: &[Candidate], n: usize) -> Vec<OsdId> {
    let mut chosen: Vec<OsdId> = Vec::with_capacity(n.min(candidates.len()));
    for replica in 0..n {
        let r = replica as u32;
        let mut picked = None;
        for attempt in 0..MAX_DRAWS_PER_REPLICA {
            let r_prime = r.wrapping_add(attempt.wrapping_mul(RETRY_STRIDE));
            match draw(x, candidates, r_prime, |_| false) {
                None => return chosen, // no nonzero-weight candidate at all
                Some(id) if !chosen.contains(&id) => {
                    picked = Some(id);
                    break;
                }
                Some(_) => {} // collision: redraw with the next r'
            }
        }
        if picked.is_none() {
            let r_final = r.wrapping_add(MAX_DRAWS_PER_REPLICA.wrapping_mul(RETRY_STRIDE));
            picked = draw(x, candidates, r_final, |id| chosen.contains(&id));
        }
        match picked {
            Some(id) => chosen.push(id),
            None => break, // every nonzero-weight candidate is already chosen
        }
    }
    chosen
}

/// One straw2 draw, number `r` for input `x`, among weighted items at any
/// level of a hierarchy: `items` yields `(key, weight)` pairs, where `key`
/// is the item's identity in the hash (an OSD id, or a bucket id as its
/// two's-complement `u32`). Returns the index (in `items` order) of the
/// winner among the items of nonzero weight, `None` if there is none.
///
/// Each item's straw depends only on `(x, key, r)` and its weight, exactly
/// as in [`straw2_select`], so the winner does not depend on the order of
/// `items` (ties go to the lower key), and changing one item's weight only
/// moves wins to or from that item. Weights are relative; a bucket's weight
/// is the sum of its items', which needs the 64 bits.
pub fn straw2_draw(x: u32, r: u32, items: impl IntoIterator<Item = (u32, u64)>) -> Option<usize> {
    let mut best: Option<(usize, Straw)> = None;
    for (index, (key, weight)) in items.into_iter().enumerate() {
        if weight == 0 {
            continue;
        }
        let straw = Straw {
            neg_log: neg_log2_unit(hash_words(&[x, key, r], STRAW_SALT)),
            weight,
            id: key,
        };
        if best.as_ref().is_none_or(|(_, b)| straw.beats(b)) {
            best = Some((index, straw));
        }
    }
    best.map(|(index, _)| index)
}
