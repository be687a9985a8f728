//! The key-value schema: every key the store writes, by prefix.
//!
//! | prefix | key after the prefix                     | value                                  |
//! |--------|------------------------------------------|----------------------------------------|
//! | `S`    | name (`super`, `nid`, `jnext`, `jdef`)   | superblock; next object id; journal positions |
//! | `O`    | collection (8 B) · object name           | onode core ([`crate::onode::Core`])    |
//! | `X`    | nid (8 B) · shard index (4 B)            | extent-map shard ([`crate::onode::Shard`]) |
//! | `M`    | nid (8 B) · omap key                     | omap value                             |
//! | `L`    | collection (8 B) · epoch (4 B) · counter (8 B) | PG log entry                     |
//! | `C`    | collection (8 B) · attribute name        | collection attribute                   |
//! | `F`    | device offset (8 B)                      | free extent length (8 B)               |
//! | `D`    | sequence (8 B)                           | deferred write record                  |
//!
//! A deferred write record normally lives only in a commit journal record
//! (see `journal`): a `D` put there never reaches the key-value store. Only
//! a commit group too large for a journal record writes its `D` records
//! here, and deletes them once applied.
//!
//! Integers are big endian so that keys sort numerically; a collection is
//! its pool (4 B) then its PG seed (4 B). Names and attribute keys are the
//! last component, so they need no escaping.

use cairn_store::{Collection, ObjectId, Version};

pub const ONODE: u8 = b'O';
pub const SHARD: u8 = b'X';
pub const OMAP: u8 = b'M';
pub const LOG: u8 = b'L';
pub const COLL_ATTR: u8 = b'C';
pub const FREE: u8 = b'F';
pub const DEFERRED: u8 = b'D';

pub const SUPER_KEY: &[u8] = b"Ssuper";
pub const NID_KEY: &[u8] = b"Snid";
/// Where the commit journal continues after the last batch written here.
pub const JOURNAL_KEY: &[u8] = b"Sjnext";
/// The oldest journal record whose deferred writes may not be on the
/// device yet: mount applies those of it and every later record.
pub const JDEF_KEY: &[u8] = b"Sjdef";

/// Bytes of an encoded collection.
pub const COLL_LEN: usize = 8;

fn with_prefix(prefix: u8, capacity: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + capacity);
    key.push(prefix);
    key
}

pub fn push_coll(key: &mut Vec<u8>, coll: Collection) {
    key.extend_from_slice(&coll.pool.to_be_bytes());
    key.extend_from_slice(&coll.seed.to_be_bytes());
}

/// The collection encoded at the start of `bytes`.
pub fn decode_coll(bytes: &[u8]) -> Option<Collection> {
    let pool = u32::from_be_bytes(bytes.get(0..4)?.try_into().ok()?);
    let seed = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    Some(Collection::new(pool, seed))
}

/// `prefix` · collection: the start of everything of `coll` under `prefix`.
pub fn coll_prefix(prefix: u8, coll: Collection) -> Vec<u8> {
    let mut key = with_prefix(prefix, COLL_LEN);
    push_coll(&mut key, coll);
    key
}

pub fn onode(oid: &ObjectId) -> Vec<u8> {
    let mut key = with_prefix(ONODE, COLL_LEN + oid.name.len());
    push_coll(&mut key, oid.coll);
    key.extend_from_slice(oid.name.as_bytes());
    key
}

/// The object named by an onode key.
pub fn decode_onode(key: &[u8]) -> Option<ObjectId> {
    if key.first() != Some(&ONODE) {
        return None;
    }
    let coll = decode_coll(&key[1..])?;
    let name = std::str::from_utf8(key.get(1 + COLL_LEN..)?).ok()?;
    Some(ObjectId::new(coll, name))
}

pub fn nid_prefix(prefix: u8, nid: u64) -> Vec<u8> {
    let mut key = with_prefix(prefix, 8);
    key.extend_from_slice(&nid.to_be_bytes());
    key
}

pub fn shard(nid: u64, index: u32) -> Vec<u8> {
    let mut key = nid_prefix(SHARD, nid);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The shard index of a shard key.
pub fn decode_shard(key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(key.get(9..13)?.try_into().ok()?))
}

pub fn omap(nid: u64, name: &str) -> Vec<u8> {
    let mut key = nid_prefix(OMAP, nid);
    key.extend_from_slice(name.as_bytes());
    key
}

/// The omap key name of an omap key.
pub fn decode_omap(key: &[u8]) -> Option<String> {
    String::from_utf8(key.get(9..)?.to_vec()).ok()
}

pub fn log(coll: Collection, version: Version) -> Vec<u8> {
    let mut key = coll_prefix(LOG, coll);
    key.extend_from_slice(&version.epoch.to_be_bytes());
    key.extend_from_slice(&version.counter.to_be_bytes());
    key
}

pub fn decode_log(key: &[u8]) -> Option<Version> {
    let at = 1 + COLL_LEN;
    let epoch = u32::from_be_bytes(key.get(at..at + 4)?.try_into().ok()?);
    let counter = u64::from_be_bytes(key.get(at + 4..at + 12)?.try_into().ok()?);
    Some(Version::new(epoch, counter))
}

pub fn coll_attr(coll: Collection, name: &str) -> Vec<u8> {
    let mut key = coll_prefix(COLL_ATTR, coll);
    key.extend_from_slice(name.as_bytes());
    key
}

pub fn free(offset: u64) -> Vec<u8> {
    nid_prefix(FREE, offset)
}

pub fn deferred(seq: u64) -> Vec<u8> {
    nid_prefix(DEFERRED, seq)
}

/// The big-endian u64 after a one-byte prefix (free-list offsets, deferred
/// sequence numbers).
pub fn decode_u64_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(1..9)?.try_into().ok()?))
}

/// The key range `[start, end)` of everything starting with `prefix`.
pub fn range_of(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let end = cairn_kv::prefix_end(prefix).unwrap_or_else(|| vec![0xff; prefix.len() + 1]);
    (prefix.to_vec(), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort() {
        let c = Collection::new(3, 0x1_0000);
        let oid = ObjectId::new(c, "rbd_data.1.00");
        assert_eq!(decode_onode(&onode(&oid)), Some(oid.clone()));
        assert!(onode(&ObjectId::new(Collection::new(3, 1), "z")) < onode(&oid));
        let v = Version::new(7, 300);
        assert_eq!(decode_log(&log(c, v)), Some(v));
        assert!(log(c, Version::new(7, 2)) < log(c, Version::new(7, 10)));
        assert!(log(c, Version::new(7, u64::MAX)) < log(c, Version::new(8, 0)));
        assert_eq!(decode_shard(&shard(9, 513)), Some(513));
        assert!(shard(9, 2) < shard(9, 256));
        assert_eq!(decode_omap(&omap(4, "key")).as_deref(), Some("key"));
        assert_eq!(decode_u64_key(&free(1 << 40)), Some(1 << 40));
        let (start, end) = range_of(&nid_prefix(SHARD, 9));
        assert!(start <= shard(9, u32::MAX) && shard(9, u32::MAX) < end);
        assert!(shard(10, 0) >= end);
    }
}
