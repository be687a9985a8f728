//! What a cache pool keeps about each of its objects, in the object's
//! `_tier` attribute (bincode, replicated with the object): dirty or
//! clean, a whiteout (a removal not yet flushed), and for an object a
//! client wrote without promoting it, which byte ranges the cache holds.

use cairn_store::{ObjectId, ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::pg::persist;

/// The object attribute holding an [`ObjMeta`].
pub const TIER_ATTR: &str = "_tier";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjMeta {
    /// Changed here since it was last flushed to the base pool.
    pub dirty: bool,
    /// Removed: reads find nothing; a flush removes it from the base pool.
    pub whiteout: bool,
    /// `Some`: only these ranges (sorted, disjoint `(offset, len)`) are
    /// held here; the rest of the object is in the base pool.
    pub partial: Option<Vec<(u64, u64)>>,
    /// When it became dirty (seconds since the Unix epoch; 0 if clean).
    pub dirty_since: u64,
}

/// What the cache holds of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheState {
    /// Nothing: the object is wherever the base pool has it.
    Absent,
    /// A whiteout: the object does not exist.
    Whiteout(ObjMeta),
    /// Some ranges only.
    Partial(ObjMeta),
    /// The whole object.
    Whole(ObjMeta),
}

impl CacheState {
    pub fn meta(&self) -> Option<&ObjMeta> {
        match self {
            CacheState::Absent => None,
            CacheState::Whiteout(m) | CacheState::Partial(m) | CacheState::Whole(m) => Some(m),
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.meta().is_some_and(|m| m.dirty)
    }
}

/// Read an object's cache state. An object without the attribute (written
/// before the pool became a cache) is taken as whole and dirty, so that a
/// flush brings it to the base pool rather than an eviction dropping it.
pub fn read_state(store: &dyn ObjectStore, oid: &ObjectId) -> Result<CacheState, String> {
    let attr = match store.get_attr(oid, TIER_ATTR) {
        Ok(attr) => attr,
        Err(StoreError::NotFound(_)) => return Ok(CacheState::Absent),
        Err(e) => return Err(format!("cannot read the cache state of {oid}: {e}")),
    };
    let Some(bytes) = attr else {
        return Ok(CacheState::Whole(ObjMeta {
            dirty: true,
            ..ObjMeta::default()
        }));
    };
    let meta: ObjMeta = persist::decode(&bytes)
        .map_err(|e| format!("the cache state of {oid} is undecodable: {e}"))?;
    Ok(if meta.whiteout {
        CacheState::Whiteout(meta)
    } else if meta.partial.is_some() {
        CacheState::Partial(meta)
    } else {
        CacheState::Whole(meta)
    })
}

pub fn encode(meta: &ObjMeta) -> bytes::Bytes {
    persist::encode(meta)
}

/// `extents` with `(offset, len)` added, kept sorted and merged.
pub fn add_extent(extents: &mut Vec<(u64, u64)>, offset: u64, len: u64) {
    if len == 0 {
        return;
    }
    extents.push((offset, len));
    extents.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(extents.len());
    for &(off, len) in extents.iter() {
        match merged.last_mut() {
            Some((lo, llen)) if off <= *lo + *llen => {
                let end = (*lo + *llen).max(off + len);
                *llen = end - *lo;
            }
            _ => merged.push((off, len)),
        }
    }
    *extents = merged;
}

/// The ranges of `[0, size)` that `extents` does not cover.
pub fn holes(extents: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &(off, len) in extents {
        if off >= size {
            break;
        }
        if off > at {
            out.push((at, off - at));
        }
        at = at.max(off + len);
    }
    if at < size {
        out.push((at, size - at));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_merge_and_holes_are_their_complement() {
        let mut e = Vec::new();
        add_extent(&mut e, 8192, 4096);
        add_extent(&mut e, 0, 4096);
        add_extent(&mut e, 4096, 100);
        add_extent(&mut e, 10_000, 5000);
        add_extent(&mut e, 0, 0);
        assert_eq!(e, vec![(0, 4196), (8192, 6808)]);
        assert_eq!(holes(&e, 20_000), vec![(4196, 3996), (15_000, 5000)]);
        assert_eq!(holes(&e, 4000), Vec::<(u64, u64)>::new());
        assert_eq!(holes(&[], 10), vec![(0, 10)]);
        assert_eq!(holes(&e, 0), Vec::<(u64, u64)>::new());
    }

    #[test]
    fn meta_round_trips_and_garbage_is_an_error() {
        let m = ObjMeta {
            dirty: true,
            whiteout: false,
            partial: Some(vec![(0, 4096)]),
            dirty_since: 17,
        };
        let back: ObjMeta = persist::decode(&encode(&m)).expect("decode");
        assert_eq!(back, m);
        assert!(persist::decode::<ObjMeta>(&[0xff; 3]).is_err());
    }
}
