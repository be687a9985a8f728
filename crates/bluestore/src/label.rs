//! The superblock: who a device belongs to and how it is laid out.
//!
//! It is written twice at mkfs: as the *label* in device block 0 and as the
//! `Ssuper` key of the key-value store. Mount reads both and refuses a
//! device and a database that do not carry the same store id (a DB path
//! pointing at another OSD's database, a device formatted by someone else).
//!
//! Label layout (block 0, little endian):
//!
//! | bytes | field                                            |
//! |-------|--------------------------------------------------|
//! | 0..8  | magic `CAIRNBS1`                                 |
//! | 8..12 | length of the encoded superblock                 |
//! | 12..16| crc32c of the encoded superblock                 |
//! | 16..  | the superblock ([`crate::onode::encode`]d)       |

use serde::{Deserialize, Serialize};

use crate::onode::{decode, encode, BLOCK};

pub const MAGIC: &[u8; 8] = b"CAIRNBS1";
/// Version of the on-disk format.
pub const VERSION: u32 = 2;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superblock {
    pub version: u32,
    /// Random id of this store, shared by its label and its database.
    pub uuid: u128,
    /// Bytes of the device at mkfs.
    pub device_size: u64,
    pub min_alloc_size: u64,
    pub shard_size: u64,
    /// The commit journal's region (after the label).
    pub journal_start: u64,
    pub journal_len: u64,
    /// First byte of data space (after the journal).
    pub data_start: u64,
}

impl Superblock {
    pub fn id(&self) -> String {
        format!("{:032x}", self.uuid)
    }

    /// The id journal records carry (the low half of the store id).
    pub fn journal_id(&self) -> u64 {
        self.uuid as u64
    }
}

/// Block 0 holding `sb`.
pub fn encode_label(sb: &Superblock) -> Vec<u8> {
    let body = encode(sb);
    let mut block = vec![0u8; BLOCK as usize];
    block[..8].copy_from_slice(MAGIC);
    block[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
    block[12..16].copy_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    block[16..16 + body.len()].copy_from_slice(&body);
    block
}

/// What block 0 of a device holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Label {
    /// All zeros: never formatted (or wiped).
    Blank,
    /// A Cairn BlueStore label.
    Store(Superblock),
    /// Something else: another store's label, a filesystem, data.
    Foreign,
}

/// Read a label; a Cairn label that fails its checks is an error.
pub fn decode_label(block: &[u8]) -> Result<Label, String> {
    if block.len() < 16 || block.iter().all(|&b| b == 0) {
        return Ok(Label::Blank);
    }
    if &block[..8] != MAGIC {
        return Ok(Label::Foreign);
    }
    let len = u32::from_le_bytes([block[8], block[9], block[10], block[11]]) as usize;
    let crc = u32::from_le_bytes([block[12], block[13], block[14], block[15]]);
    let body = block
        .get(16..16 + len)
        .ok_or_else(|| format!("label length {len} exceeds the block"))?;
    if crc32c::crc32c(body) != crc {
        return Err("label checksum mismatch (corrupt superblock)".into());
    }
    let sb: Superblock = decode(body).map_err(|e| format!("label does not decode: {e}"))?;
    if sb.version != VERSION {
        return Err(format!(
            "on-disk format version {} is not supported",
            sb.version
        ));
    }
    Ok(Label::Store(sb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_round_trips_and_detects_damage() {
        let sb = Superblock {
            version: VERSION,
            uuid: 0x1234,
            device_size: 1 << 30,
            min_alloc_size: 4096,
            shard_size: 256 << 10,
            journal_start: 4096,
            journal_len: 1 << 20,
            data_start: 4096 + (1 << 20),
        };
        let mut block = encode_label(&sb);
        assert_eq!(decode_label(&block), Ok(Label::Store(sb)));
        block[20] ^= 1;
        assert!(decode_label(&block).is_err());
        assert_eq!(decode_label(&[0u8; 4096]), Ok(Label::Blank));
        assert_eq!(decode_label(b"XFSB0000000000000000"), Ok(Label::Foreign));
    }
}
