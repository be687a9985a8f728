//! Checksums of stored data, one per checksum block.
//!
//! Computed over the bytes as they go to the device (after compression) and
//! verified on every read from the device; a mismatch is never returned as
//! data. `none` stores no checksums (the source documents' benchmark
//! configuration turned them off).

use serde::{Deserialize, Serialize};

/// Checksum block size: every block of stored bytes has its own checksum.
pub const CSUM_BLOCK: usize = 4096;
/// Bytes of the widest checksum.
pub const MAX_WIDTH: usize = 8;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChecksumType {
    None,
    #[default]
    Crc32c,
    Xxhash64,
}

impl ChecksumType {
    /// Bytes of one checksum.
    pub fn width(self) -> usize {
        match self {
            ChecksumType::None => 0,
            ChecksumType::Crc32c => 4,
            ChecksumType::Xxhash64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::None => "none",
            ChecksumType::Crc32c => "crc32c",
            ChecksumType::Xxhash64 => "xxhash64",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(ChecksumType::None),
            "crc32c" => Some(ChecksumType::Crc32c),
            "xxhash64" => Some(ChecksumType::Xxhash64),
            _ => None,
        }
    }

    /// The checksum of `block` in its stored form: the first
    /// [`ChecksumType::width`] bytes of the array.
    pub fn of(self, block: &[u8]) -> [u8; MAX_WIDTH] {
        let mut out = [0u8; MAX_WIDTH];
        match self {
            ChecksumType::None => {}
            ChecksumType::Crc32c => out[..4].copy_from_slice(&crc32c::crc32c(block).to_le_bytes()),
            ChecksumType::Xxhash64 => out = xxhash_rust::xxh64::xxh64(block, 0).to_le_bytes(),
        }
        out
    }

    /// Append the checksum of `block` to `out`.
    fn push(self, block: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.of(block)[..self.width()]);
    }

    /// Checksums of every [`CSUM_BLOCK`] of `data` (a multiple of it).
    pub fn compute(self, data: &[u8]) -> Vec<u8> {
        debug_assert_eq!(data.len() % CSUM_BLOCK, 0);
        let mut out = Vec::with_capacity(data.len() / CSUM_BLOCK * self.width());
        for block in data.chunks(CSUM_BLOCK) {
            self.push(block, &mut out);
        }
        out
    }

    /// Replace the checksum of block `index` in `csums` with that of `block`.
    pub fn update(self, csums: &mut [u8], index: usize, block: &[u8]) {
        let w = self.width();
        if w == 0 {
            return;
        }
        csums[index * w..(index + 1) * w].copy_from_slice(&self.of(block)[..w]);
    }

    /// Check `data`, which starts at block `first` of a blob whose
    /// checksums are `csums`. Returns the index of the first bad block.
    pub fn verify(self, csums: &[u8], first: usize, data: &[u8]) -> Result<(), usize> {
        let w = self.width();
        if w == 0 {
            return Ok(());
        }
        for (i, block) in data.chunks(CSUM_BLOCK).enumerate() {
            let at = (first + i) * w;
            if csums.get(at..at + w) != Some(&self.of(block)[..w]) {
                return Err(first + i);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_verify_update() {
        for t in [
            ChecksumType::Crc32c,
            ChecksumType::Xxhash64,
            ChecksumType::None,
        ] {
            let mut data = vec![7u8; 3 * CSUM_BLOCK];
            let mut csums = t.compute(&data);
            assert_eq!(csums.len(), 3 * t.width());
            assert_eq!(t.verify(&csums, 0, &data), Ok(()));
            assert_eq!(t.verify(&csums, 1, &data[CSUM_BLOCK..]), Ok(()));
            data[CSUM_BLOCK + 5] ^= 1;
            if t != ChecksumType::None {
                assert_eq!(t.verify(&csums, 0, &data), Err(1));
                t.update(&mut csums, 1, &data[CSUM_BLOCK..2 * CSUM_BLOCK]);
            }
            assert_eq!(t.verify(&csums, 0, &data), Ok(()));
            assert_eq!(ChecksumType::parse(t.name()), Some(t));
        }
    }
}
