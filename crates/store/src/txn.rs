//! Transactions: the only way to change an object store.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Collection, ObjectId, StoreError, Version, MAX_OBJECT_SIZE};

/// One mutation inside a [`Transaction`]. Every op is idempotent when a
/// journal replays a sequence of them in order from a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxOp {
    /// Create the object if missing (size 0); no-op otherwise.
    Touch {
        oid: ObjectId,
    },
    /// Write bytes at an offset, creating the object and extending its size.
    Write {
        oid: ObjectId,
        offset: u64,
        #[serde(with = "cairn_types::bulk")]
        data: Bytes,
    },
    /// Make a range read as zeros, creating the object and extending its size
    /// like a write of zeros would; backends may punch holes.
    Zero {
        oid: ObjectId,
        offset: u64,
        len: u64,
    },
    /// Set the size, dropping data past it or extending with zeros; creates the object.
    Truncate {
        oid: ObjectId,
        size: u64,
    },
    /// Remove the object with its data, attributes and omap; no-op if missing.
    Remove {
        oid: ObjectId,
    },
    /// Set an attribute, creating the object if missing.
    SetAttr {
        oid: ObjectId,
        key: String,
        value: Bytes,
    },
    RmAttr {
        oid: ObjectId,
        key: String,
    },
    /// Set omap entries, creating the object if missing.
    OmapSet {
        oid: ObjectId,
        entries: Vec<(String, Bytes)>,
    },
    OmapRm {
        oid: ObjectId,
        keys: Vec<String>,
    },
    OmapClear {
        oid: ObjectId,
    },
    /// Add (or replace) the log entry at `version` in a collection's log.
    LogAppend {
        coll: Collection,
        version: Version,
        entry: Bytes,
    },
    /// Drop every log entry at or below `up_to`.
    LogTrim {
        coll: Collection,
        up_to: Version,
    },
    /// Set a collection attribute.
    CollSetAttr {
        coll: Collection,
        key: String,
        value: Bytes,
    },
    /// Remove a collection with all its objects, log and attributes.
    RemoveCollection {
        coll: Collection,
    },
    /// Give object `from` (its data, attributes and omap) the id `to`,
    /// replacing whatever `to` held; no-op if `from` does not exist. The
    /// collections may differ (a PG split moves objects to a child PG).
    Move {
        from: ObjectId,
        to: ObjectId,
    },
    /// Split PG collection `coll` for its pool's new `pg_num`: every
    /// client object of `coll` whose PG under `pg_num` is another one
    /// moves, as by [`TxOp::Move`], to that PG's collection (see
    /// [`split_destination`]). The store decides which objects move when
    /// it applies the op, so objects created by transactions submitted
    /// before it move too. The collection's log and attributes stay.
    SplitCollection {
        coll: Collection,
        pg_num: u32,
    },
}

/// Names starting with this character are a PG's own metadata objects
/// (clients may not use control characters): a split leaves them in place.
pub const INTERNAL_PREFIX: char = '\u{1}';

/// Where a split of `coll` for `pg_num` puts object `name`: `None` if it
/// stays. An object belongs to the PG its placement hash picks — the
/// same function clients use to address it.
pub fn split_destination(coll: Collection, pg_num: u32, name: &str) -> Option<Collection> {
    if name.starts_with(INTERNAL_PREFIX) {
        return None;
    }
    let seed = cairn_placement::pg_seed(name, pg_num);
    (seed != coll.seed).then(|| Collection::new(coll.pool, seed))
}

impl TxOp {
    /// The object this op changes (for a move, its source), if it
    /// changes one object.
    pub fn object(&self) -> Option<&ObjectId> {
        match self {
            TxOp::Touch { oid }
            | TxOp::Remove { oid }
            | TxOp::RmAttr { oid, .. }
            | TxOp::SetAttr { oid, .. }
            | TxOp::OmapSet { oid, .. }
            | TxOp::OmapRm { oid, .. }
            | TxOp::OmapClear { oid }
            | TxOp::Write { oid, .. }
            | TxOp::Zero { oid, .. }
            | TxOp::Truncate { oid, .. } => Some(oid),
            TxOp::Move { from, .. } => Some(from),
            TxOp::LogAppend { .. }
            | TxOp::LogTrim { .. }
            | TxOp::CollSetAttr { .. }
            | TxOp::RemoveCollection { .. }
            | TxOp::SplitCollection { .. } => None,
        }
    }
}

/// An atomic, ordered group of [`TxOp`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub ops: Vec<TxOp>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn push(&mut self, op: TxOp) -> &mut Self {
        self.ops.push(op);
        self
    }

    pub fn touch(&mut self, oid: &ObjectId) -> &mut Self {
        self.push(TxOp::Touch { oid: oid.clone() })
    }

    pub fn write(&mut self, oid: &ObjectId, offset: u64, data: Bytes) -> &mut Self {
        self.push(TxOp::Write {
            oid: oid.clone(),
            offset,
            data,
        })
    }

    pub fn zero(&mut self, oid: &ObjectId, offset: u64, len: u64) -> &mut Self {
        self.push(TxOp::Zero {
            oid: oid.clone(),
            offset,
            len,
        })
    }

    pub fn truncate(&mut self, oid: &ObjectId, size: u64) -> &mut Self {
        self.push(TxOp::Truncate {
            oid: oid.clone(),
            size,
        })
    }

    pub fn remove(&mut self, oid: &ObjectId) -> &mut Self {
        self.push(TxOp::Remove { oid: oid.clone() })
    }

    pub fn set_attr(&mut self, oid: &ObjectId, key: &str, value: Bytes) -> &mut Self {
        self.push(TxOp::SetAttr {
            oid: oid.clone(),
            key: key.to_string(),
            value,
        })
    }

    pub fn rm_attr(&mut self, oid: &ObjectId, key: &str) -> &mut Self {
        self.push(TxOp::RmAttr {
            oid: oid.clone(),
            key: key.to_string(),
        })
    }

    pub fn omap_set(&mut self, oid: &ObjectId, entries: Vec<(String, Bytes)>) -> &mut Self {
        self.push(TxOp::OmapSet {
            oid: oid.clone(),
            entries,
        })
    }

    pub fn omap_rm(&mut self, oid: &ObjectId, keys: Vec<String>) -> &mut Self {
        self.push(TxOp::OmapRm {
            oid: oid.clone(),
            keys,
        })
    }

    pub fn omap_clear(&mut self, oid: &ObjectId) -> &mut Self {
        self.push(TxOp::OmapClear { oid: oid.clone() })
    }

    pub fn log_append(&mut self, coll: Collection, version: Version, entry: Bytes) -> &mut Self {
        self.push(TxOp::LogAppend {
            coll,
            version,
            entry,
        })
    }

    pub fn log_trim(&mut self, coll: Collection, up_to: Version) -> &mut Self {
        self.push(TxOp::LogTrim { coll, up_to })
    }

    pub fn coll_set_attr(&mut self, coll: Collection, key: &str, value: Bytes) -> &mut Self {
        self.push(TxOp::CollSetAttr {
            coll,
            key: key.to_string(),
            value,
        })
    }

    pub fn move_object(&mut self, from: &ObjectId, to: &ObjectId) -> &mut Self {
        self.push(TxOp::Move {
            from: from.clone(),
            to: to.clone(),
        })
    }

    pub fn split_collection(&mut self, coll: Collection, pg_num: u32) -> &mut Self {
        self.push(TxOp::SplitCollection { coll, pg_num })
    }

    pub fn remove_collection(&mut self, coll: Collection) -> &mut Self {
        self.push(TxOp::RemoveCollection { coll })
    }

    /// Reject transactions no backend may apply: ranges past
    /// [`MAX_OBJECT_SIZE`] or overflowing, empty object names.
    pub fn validate(&self) -> Result<(), StoreError> {
        let check_range = |oid: &ObjectId, offset: u64, len: u64| match offset.checked_add(len) {
            Some(end) if end <= MAX_OBJECT_SIZE => Ok(()),
            _ => Err(StoreError::Invalid(format!(
                "range {offset}+{len} on {oid} exceeds the maximum object size"
            ))),
        };
        for op in &self.ops {
            match op {
                TxOp::Write { oid, offset, data } => check_range(oid, *offset, data.len() as u64)?,
                TxOp::Zero { oid, offset, len } => check_range(oid, *offset, *len)?,
                TxOp::Truncate { oid, size } => check_range(oid, *size, 0)?,
                TxOp::Move { from, to } if from == to || to.name.is_empty() => {
                    return Err(StoreError::Invalid(format!("cannot move {from} to {to}")));
                }
                TxOp::SplitCollection { coll, pg_num }
                    if !pg_num.is_power_of_two() || coll.seed >= *pg_num =>
                {
                    return Err(StoreError::Invalid(format!(
                        "cannot split {coll} for pg_num {pg_num} (a power of two above its seed)"
                    )));
                }
                _ => {}
            }
            let oid = op.object();
            if let Some(oid) = oid {
                if oid.name.is_empty() {
                    return Err(StoreError::Invalid("empty object name".into()));
                }
            }
        }
        Ok(())
    }
}
