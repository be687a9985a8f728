//! A pool's compression settings (Ceph's pool options `compression_mode`,
//! `compression_algorithm`, `compression_required_ratio`,
//! `compression_min_blob_size`, `compression_max_blob_size`): carried in
//! the map with the pool, handed by each OSD to its store. Each unset
//! field leaves the OSD's own `bluestore_compression_*` setting in force.

use serde::{Deserialize, Serialize};

/// Compression modes, as the store names them.
pub const MODES: &[&str] = &["none", "passive", "aggressive", "force"];
/// Compression algorithms, as the store names them.
pub const ALGORITHMS: &[&str] = &["lz4", "zstd", "snappy"];
/// Largest `max_blob_size` a pool may ask for.
pub const MAX_BLOB_SIZE: u64 = 16 << 20;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolCompression {
    pub mode: Option<String>,
    pub algorithm: Option<String>,
    /// Keep compressed data only if it takes at most this share of the raw
    /// size, in (0, 1].
    pub required_ratio: Option<f64>,
    pub min_blob_size: Option<u64>,
    pub max_blob_size: Option<u64>,
}

/// Ratios are checked finite when set, so equality is total.
impl Eq for PoolCompression {}

impl PoolCompression {
    /// The option names, without their `compression_` prefix.
    pub const KEYS: &'static [&'static str] = &[
        "mode",
        "algorithm",
        "required_ratio",
        "min_blob_size",
        "max_blob_size",
    ];

    pub fn is_empty(&self) -> bool {
        *self == PoolCompression::default()
    }

    /// Set `key` (one of [`Self::KEYS`]) from text; `default` unsets it.
    /// Returns whether it changed; an error names the key and what it takes.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let unset = value == "default";
        let before = self.clone();
        let size = |what: &str| -> Result<u64, String> {
            value.parse().map_err(|_| {
                format!("compression_{what} must be a number of bytes or 'default', not '{value}'")
            })
        };
        match key {
            "mode" if unset => self.mode = None,
            "mode" if MODES.contains(&value) => self.mode = Some(value.to_string()),
            "mode" => {
                return Err(format!(
                    "compression_mode must be one of {} or 'default', not '{value}'",
                    MODES.join(", ")
                ))
            }
            "algorithm" if unset => self.algorithm = None,
            "algorithm" if ALGORITHMS.contains(&value) => self.algorithm = Some(value.to_string()),
            "algorithm" => {
                return Err(format!(
                    "compression_algorithm must be one of {} or 'default', not '{value}'",
                    ALGORITHMS.join(", ")
                ))
            }
            "required_ratio" if unset => self.required_ratio = None,
            "required_ratio" => match value.parse::<f64>() {
                Ok(r) if r > 0.0 && r <= 1.0 => self.required_ratio = Some(r),
                _ => {
                    return Err(format!(
                        "compression_required_ratio must be in (0, 1] or 'default', not '{value}'"
                    ))
                }
            },
            "min_blob_size" if unset => self.min_blob_size = None,
            "min_blob_size" => self.min_blob_size = Some(size("min_blob_size")?),
            "max_blob_size" if unset => self.max_blob_size = None,
            "max_blob_size" => match size("max_blob_size")? {
                n if (4096..=MAX_BLOB_SIZE).contains(&n) => self.max_blob_size = Some(n),
                n => {
                    return Err(format!(
                        "compression_max_blob_size must be from 4096 to {MAX_BLOB_SIZE}, not {n}"
                    ))
                }
            },
            other => {
                return Err(format!(
                    "unknown compression setting 'compression_{other}' (settable: {})",
                    Self::KEYS
                        .iter()
                        .map(|k| format!("compression_{k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
        Ok(*self != before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_default_unsets() {
        let mut c = PoolCompression::default();
        assert_eq!(c.set("mode", "force"), Ok(true));
        assert_eq!(c.set("mode", "force"), Ok(false));
        assert_eq!(c.set("algorithm", "zstd"), Ok(true));
        assert_eq!(c.set("required_ratio", "0.5"), Ok(true));
        assert!(c.set("required_ratio", "1.5").is_err());
        assert!(c.set("required_ratio", "NaN").is_err());
        assert!(c
            .set("mode", "always")
            .unwrap_err()
            .contains("none, passive"));
        assert!(c.set("max_blob_size", "100").is_err());
        assert!(c
            .set("level", "3")
            .unwrap_err()
            .contains("unknown compression setting"));
        assert_eq!(c.mode.as_deref(), Some("force"));
        assert_eq!(c.set("mode", "default"), Ok(true));
        assert_eq!(c.mode, None);
        assert!(!c.is_empty());
    }
}
