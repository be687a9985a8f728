//! Compression of stored data.
//!
//! A blob is compressed when the mode says so and the result is worth it:
//! stored compressed only if `compressed <= logical × required_ratio` after
//! rounding up to the allocation unit (space is allocated in whole units, so
//! a saving smaller than one unit saves nothing).

use serde::{Deserialize, Serialize};

/// When to compress (Ceph's modes). There are no client hints yet, so
/// `passive` (compress only data hinted compressible) compresses nothing
/// and `aggressive` (everything not hinted incompressible) compresses
/// everything, as `force` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompressionMode {
    #[default]
    None,
    Passive,
    Aggressive,
    Force,
}

impl CompressionMode {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "passive" => Some(Self::Passive),
            "aggressive" => Some(Self::Aggressive),
            "force" => Some(Self::Force),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Passive => "passive",
            Self::Aggressive => "aggressive",
            Self::Force => "force",
        }
    }

    /// Whether data without hints is compressed.
    pub fn compresses(self) -> bool {
        matches!(self, Self::Aggressive | Self::Force)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algorithm {
    #[default]
    Lz4,
    Zstd,
    Snappy,
}

/// How one write is compressed: the store's options, or a pool's
/// settings over them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    pub mode: CompressionMode,
    pub algorithm: Algorithm,
    pub required_ratio: f64,
    pub min_blob_size: u64,
    pub max_blob_size: u64,
}

impl Policy {
    /// `base` with a pool's settings applied (each unset one keeps
    /// `base`'s; names were checked when the pool was set).
    pub fn with_pool(self, pool: &cairn_types::compression::PoolCompression) -> Policy {
        Policy {
            mode: pool
                .mode
                .as_deref()
                .and_then(CompressionMode::parse)
                .unwrap_or(self.mode),
            algorithm: pool
                .algorithm
                .as_deref()
                .and_then(Algorithm::parse)
                .unwrap_or(self.algorithm),
            required_ratio: pool.required_ratio.unwrap_or(self.required_ratio),
            min_blob_size: pool.min_blob_size.unwrap_or(self.min_blob_size),
            max_blob_size: pool.max_blob_size.unwrap_or(self.max_blob_size),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{algorithm:?} decompression failed: {reason}")]
pub struct DecompressError {
    pub algorithm: Algorithm,
    pub reason: String,
}

impl Algorithm {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "lz4" => Some(Self::Lz4),
            "zstd" => Some(Self::Zstd),
            "snappy" => Some(Self::Snappy),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
            Self::Snappy => "snappy",
        }
    }

    /// Compress `data`; `None` if the algorithm failed (store it raw).
    pub fn compress(self, data: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Lz4 => Some(lz4_flex::block::compress(data)),
            Self::Zstd => zstd::bulk::compress(data, 1).ok(),
            Self::Snappy => snap::raw::Encoder::new().compress_vec(data).ok(),
        }
    }

    /// Decompress `data` into exactly `len` bytes.
    pub fn decompress(self, data: &[u8], len: usize) -> Result<Vec<u8>, DecompressError> {
        let fail = |reason: String| DecompressError {
            algorithm: self,
            reason,
        };
        let out = match self {
            Self::Lz4 => lz4_flex::block::decompress(data, len).map_err(|e| fail(e.to_string()))?,
            Self::Zstd => zstd::bulk::decompress(data, len).map_err(|e| fail(e.to_string()))?,
            Self::Snappy => snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| fail(e.to_string()))?,
        };
        if out.len() != len {
            return Err(fail(format!("{} bytes, expected {len}", out.len())));
        }
        Ok(out)
    }
}

/// Compress `data` if worth it: the compressed size rounded up to `unit`
/// must be at most `ratio` of the raw size rounded up to `unit`, and smaller.
pub fn maybe_compress(algorithm: Algorithm, ratio: f64, unit: u64, data: &[u8]) -> Option<Vec<u8>> {
    let compressed = algorithm.compress(data)?;
    let round = |n: usize| (n as u64).div_ceil(unit) * unit;
    let (stored, raw) = (round(compressed.len()), round(data.len()));
    (stored < raw && stored as f64 <= raw as f64 * ratio).then_some(compressed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_round_trips() {
        let data: Vec<u8> = (0..65536u32).map(|i| (i / 100) as u8).collect();
        for alg in [Algorithm::Lz4, Algorithm::Zstd, Algorithm::Snappy] {
            let c = alg.compress(&data).unwrap();
            assert!(c.len() < data.len() / 4, "{alg:?}");
            assert_eq!(alg.decompress(&c, data.len()).unwrap(), data);
            assert!(alg.decompress(&c[..c.len() / 2], data.len()).is_err());
            assert_eq!(Algorithm::parse(alg.name()), Some(alg));
        }
    }

    #[test]
    fn incompressible_data_is_not_worth_it() {
        use rand::RngCore;
        let mut data = vec![0u8; 65536];
        rand::thread_rng().fill_bytes(&mut data);
        assert!(maybe_compress(Algorithm::Lz4, 0.875, 4096, &data).is_none());
        let zeros = vec![0u8; 65536];
        assert!(maybe_compress(Algorithm::Lz4, 0.875, 4096, &zeros).is_some());
        // A saving below one allocation unit is no saving.
        assert!(maybe_compress(Algorithm::Lz4, 0.99, 1 << 20, &zeros).is_none());
    }
}
