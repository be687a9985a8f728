//! Identifiers and small value types shared by every Cairn crate.
//!
//! This crate owns the vocabulary of the data path — epochs, OSD and pool ids,
//! placement-group ids, PG versions and request ids — and the serde rule by
//! which object data travels out of line in wire frames ([`bulk`]). It must
//! never depend on another Cairn crate, do I/O, or hold state beyond one
//! call.

pub mod bulk;
pub mod compression;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A cluster-map epoch. Every change to the map increments it by one.
pub type Epoch = u32;

/// The id of an OSD daemon; ids are dense small integers assigned by the monitor.
pub type OsdId = u32;

/// The id of a pool; assigned by the monitor, never reused.
pub type PoolId = u32;

/// A placement group: a pool and a seed in `0..pg_num`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PgId {
    pub pool: PoolId,
    pub seed: u32,
}

impl PgId {
    pub const fn new(pool: PoolId, seed: u32) -> Self {
        Self { pool, seed }
    }
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

/// Error parsing an identifier from text.
#[derive(Debug, thiserror::Error)]
#[error("invalid {what}: {text:?}")]
pub struct ParseIdError {
    pub what: &'static str,
    pub text: String,
}

impl FromStr for PgId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseIdError {
            what: "pg id",
            text: s.to_string(),
        };
        let (pool, seed) = s.split_once('.').ok_or_else(err)?;
        Ok(PgId {
            pool: pool.parse().map_err(|_| err())?,
            seed: u32::from_str_radix(seed, 16).map_err(|_| err())?,
        })
    }
}

/// A PG version: the map epoch in which the primary assigned it, and a counter
/// that grows by one with every mutation of the PG across all epochs.
///
/// Versions order first by epoch, then by counter. Only one primary exists for
/// a PG in a given epoch, so a version names exactly one history.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Version {
    pub epoch: Epoch,
    pub counter: u64,
}

impl Version {
    pub const ZERO: Version = Version {
        epoch: 0,
        counter: 0,
    };

    pub const fn new(epoch: Epoch, counter: u64) -> Self {
        Self { epoch, counter }
    }

    /// Big-endian bytes that sort in version order; used as store keys.
    pub fn to_key(self) -> [u8; 12] {
        let mut key = [0u8; 12];
        key[..4].copy_from_slice(&self.epoch.to_be_bytes());
        key[4..].copy_from_slice(&self.counter.to_be_bytes());
        key
    }

    pub fn from_key(key: &[u8]) -> Option<Self> {
        if key.len() != 12 {
            return None;
        }
        let epoch = u32::from_be_bytes(key[..4].try_into().ok()?);
        let counter = u64::from_be_bytes(key[4..].try_into().ok()?);
        Some(Self { epoch, counter })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'{}", self.epoch, self.counter)
    }
}

/// Identifies one client request across retries: the client's id (unique per
/// client instance, assigned by the monitor) and the client's transaction id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReqId {
    pub client: u64,
    pub tid: u64,
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client.{}:{}", self.client, self.tid)
    }
}

/// Who is at the other end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Entity {
    Mon,
    Osd(OsdId),
    Client(u64),
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::Mon => write!(f, "mon"),
            Entity::Osd(id) => write!(f, "osd.{id}"),
            Entity::Client(id) => write!(f, "client.{id}"),
        }
    }
}

/// Parse a size with an optional binary suffix: `4096`, `4k`, `4K`, `10G`, `1MiB`.
pub fn parse_size(text: &str) -> Result<u64, ParseIdError> {
    let err = || ParseIdError {
        what: "size",
        text: text.to_string(),
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let num: u64 = num.parse().map_err(|_| err())?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(err()),
    };
    num.checked_mul(1u64 << shift).ok_or_else(err)
}

/// Format a byte count with the largest exact binary suffix (`4K`, `10G`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        if bytes >= (1 << shift) && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgid_round_trips_through_text() {
        let pg = PgId::new(3, 0x2f);
        assert_eq!(pg.to_string(), "3.2f");
        assert_eq!("3.2f".parse::<PgId>().unwrap(), pg);
        assert!("3".parse::<PgId>().is_err());
        assert!("x.1".parse::<PgId>().is_err());
    }

    #[test]
    fn versions_order_by_epoch_then_counter_and_keys_sort_alike() {
        let a = Version::new(5, 10);
        let b = Version::new(6, 3);
        let c = Version::new(6, 4);
        assert!(a < b && b < c);
        assert!(a.to_key() < b.to_key() && b.to_key() < c.to_key());
        assert_eq!(Version::from_key(&c.to_key()), Some(c));
        assert_eq!(Version::from_key(&[1, 2]), None);
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert!(parse_size("").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("99999999999999T").is_err());
        assert_eq!(format_size(10 << 30), "10G");
        assert_eq!(format_size(4097), "4097");
    }
}
