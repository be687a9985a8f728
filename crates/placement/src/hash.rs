//! MurmurHash3 (x86, 32-bit) over bytes and over 32-bit words.
//!
//! Written from the published algorithm description. The word variant is
//! exactly MurmurHash3 of the words' little-endian bytes.

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

/// Scrambles one 32-bit block before it is folded into the state.
#[inline]
fn scramble(k: u32) -> u32 {
    k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

/// Folds one full 4-byte block into the state `h`.
#[inline]
fn mix_block(h: u32, k: u32) -> u32 {
    (h ^ scramble(k))
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

/// Final avalanche so every input bit affects every output bit.
#[inline]
fn fmix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// MurmurHash3 x86 32-bit of `data` with `seed`.
pub(crate) fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    let mut h = seed;
    let mut blocks = data.chunks_exact(4);
    for b in &mut blocks {
        h = mix_block(h, u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &byte) in tail.iter().enumerate() {
            k |= u32::from(byte) << (8 * i);
        }
        h ^= scramble(k);
    }
    // MurmurHash3 mixes in the length modulo 2^32.
    h ^= data.len() as u32;
    fmix(h)
}

/// MurmurHash3 x86 32-bit of the little-endian bytes of `words`, with `seed`.
#[inline]
pub(crate) fn hash_words(words: &[u32], seed: u32) -> u32 {
    let mut h = seed;
    for &w in words {
        h = mix_block(h, w);
    }
    h ^= (words.len() as u32).wrapping_mul(4);
    fmix(h)
}
