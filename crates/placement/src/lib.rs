//! Deterministic data placement: object → placement group → ordered OSD list.
//!
//! This crate owns the *pure functions* every node uses to agree on where data
//! lives: the object-name hash, Ceph-style `stable_mod` folding into `pg_num`
//! placement groups, the per-PG placement input, and a straw2 weighted draw that
//! turns that input plus a list of weighted OSDs into an ordered replica list.
//!
//! It must never do I/O, hold state, read clocks or randomness, or use
//! floating point: every client, OSD and monitor must compute bit-identical
//! answers on every platform and every release. Once released, the output of
//! these functions must never change (known-answer tests pin it).
//!
//! # The algorithm
//!
//! 1. **Object → PG.** [`object_hash`] is MurmurHash3 (x86, 32-bit, seed 0) of
//!    the UTF-8 name. [`pg_seed`] folds it into `0..pg_num` with
//!    [`stable_mod`]: take the low bits under the next power-of-two mask and, if
//!    that lands at or beyond `pg_num`, drop the top bit. When `pg_num` grows,
//!    an object either stays put or moves into one of the *new* PGs (a PG
//!    "splits"), never between two old PGs.
//! 2. **PG → placement input.** [`pg_placement_seed`] hashes `(pool, seed)` so
//!    that neighbouring PGs, and the same seed in different pools, get
//!    independent inputs `x`.
//! 3. **Input → OSDs (straw2).** For replica `r`, every candidate OSD `i` with
//!    weight `w_i > 0` draws `u_i = (hash(x, id_i, r') + 1) / 2^32` in `(0, 1]`
//!    and a straw `ln(u_i) / w_i`; the largest straw wins. Because
//!    `-ln(u)/w` is exponentially distributed with rate `w`, OSD `i` wins with
//!    probability `w_i / Σw`, and each candidate's straw depends only on its own
//!    id and weight — so adding, removing or reweighting one OSD only moves
//!    data to or from that OSD. If the winner was already chosen for an earlier
//!    replica, the replica is redrawn with a new `r'` (up to
//!    [`MAX_DRAWS_PER_REPLICA`] draws, like CRUSH's retries); if all of them
//!    collide, one final draw over the not-yet-chosen candidates decides, so
//!    the result always has `min(n, distinct nonzero-weight OSDs)` entries.
//!
//! [`straw2_draw`] is the same draw over any weighted items, one at a time:
//! the CRUSH hierarchy (crate `cairn-crush`) runs it at every level of its
//! tree, over buckets and then devices.
//!
//! The logarithm is computed in fixed point (see the `straw2` module): a
//! 1025-entry table of `log2(1 + i/1024)` built at compile time with integer
//! arithmetic, plus linear interpolation. `ln` and `log2` differ by a constant
//! factor that cancels when straws are compared, and the comparison
//! `log(u_a)/w_a > log(u_b)/w_b` is done exactly by cross-multiplying in
//! `u128`; ties go to the lower OSD id. No floating point is involved.

mod hash;
mod straw2;

#[cfg(test)]
mod tests;

pub use cairn_types::OsdId;
pub use straw2::{straw2_draw, straw2_select, Candidate, MAX_DRAWS_PER_REPLICA, RETRY_STRIDE};

use hash::{hash_words, murmur3_32};

/// Salt for [`pg_placement_seed`], so its output is unrelated to other hashes of
/// the same words.
const PG_PLACEMENT_SALT: u32 = 0x7067_706c; // "pgpl"

/// Stable 32-bit hash of an object name: MurmurHash3 (x86, 32-bit) with seed 0
/// over the UTF-8 bytes of `name`.
///
/// Deterministic on every platform. Its output is part of the on-disk/on-wire
/// contract and must never change.
pub fn object_hash(name: &str) -> u32 {
    murmur3_32(name.as_bytes(), 0)
}

/// Ceph-style stable modulo: maps `x` into `0..b`, where
/// `bmask = b.next_power_of_two() - 1`.
///
/// Takes `x & bmask` when that is below `b`, otherwise `x & (bmask >> 1)`. When
/// `b` grows (with `bmask` recomputed), a value either keeps its result or moves
/// to a result `>= ` the old `b`: only objects that must move do.
///
/// Requires `b >= 1` and `bmask` as described; with `b == 0` the result is 0.
pub fn stable_mod(x: u32, b: u32, bmask: u32) -> u32 {
    if x & bmask < b {
        x & bmask
    } else {
        x & (bmask >> 1)
    }
}

/// The PG seed (in `0..pg_num`) of object `name` in a pool with `pg_num` PGs.
///
/// `pg_num` need not be a power of two; a `pg_num` of 0 is treated as 1.
pub fn pg_seed(name: &str, pg_num: u32) -> u32 {
    let pg_num = pg_num.max(1);
    let bmask = pg_num_mask(pg_num);
    stable_mod(object_hash(name), pg_num, bmask)
}

/// `(next power of two >= pg_num) - 1`, the mask [`stable_mod`] expects.
pub fn pg_num_mask(pg_num: u32) -> u32 {
    match pg_num.checked_next_power_of_two() {
        Some(p) => p - 1,
        None => u32::MAX,
    }
}

/// The 32-bit placement input `x` for PG `seed` of pool `pool`, hashed so that
/// neighbouring PGs (and equal seeds in different pools) are independent.
pub fn pg_placement_seed(pool: u32, seed: u32) -> u32 {
    hash_words(&[pool, seed], PG_PLACEMENT_SALT)
}
