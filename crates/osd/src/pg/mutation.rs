//! A client request's mutations turned into one store transaction,
//! checked against the object as it is: what the ops write, and whether
//! the object exists after them. Reads nothing but the object; decides
//! nothing about ordering or replication (the write path does).

use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction, MAX_OBJECT_SIZE};
use cairn_types::Version;
use cairn_wire::{ObjOp, OpError};

use super::persist::{self, VERSION_ATTR};
use crate::io::store_error;

/// Does this request need the object's current state to build its
/// transaction (or, for reads, to see every acknowledged write)?
pub(super) fn needs_object_state(ops: &[ObjOp]) -> bool {
    ops.iter().any(|op| {
        matches!(
            op,
            ObjOp::Zero { .. }
                | ObjOp::Remove
                | ObjOp::Create { .. }
                | ObjOp::OmapInsert { .. }
                | ObjOp::OmapRm { .. }
                | ObjOp::CopyPut(_)
        ) || !op.is_mutation()
    })
}

/// Turn a request's mutations into a store transaction. Returns the
/// transaction and whether the object exists after it.
pub(super) fn build_mutation(
    store: &dyn ObjectStore,
    oid: &ObjectId,
    ops: &[ObjOp],
    version: Version,
    fresh: bool,
) -> Result<(Transaction, bool), OpError> {
    let mut txn = Transaction::new();
    let mut size = None;
    if fresh {
        // Whatever is here (a cache's whiteout) goes; the ops see nothing.
        match store.stat(oid) {
            Ok(_) => {
                txn.remove(oid);
            }
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(store_error(e)),
        }
    } else if needs_object_state(ops) {
        size = match store.stat(oid) {
            Ok(stat) => Some(stat.size),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(store_error(e)),
        };
    }
    for op in ops {
        if let ObjOp::OmapCmp { key, value } = op {
            crate::io::omap_cmp(store, oid, key, value.as_deref())?;
        }
    }
    let mut exists = size.is_some();
    for op in ops {
        match op {
            ObjOp::Write { offset, data } => {
                if offset.saturating_add(data.len() as u64) > MAX_OBJECT_SIZE {
                    return Err(OpError::Invalid(
                        "write past the maximum object size".into(),
                    ));
                }
                txn.write(oid, *offset, data.clone());
                let end = offset + data.len() as u64;
                size = Some(size.unwrap_or(0).max(end));
                exists = true;
            }
            ObjOp::Zero { offset, len } => {
                let Some(cur) = size.filter(|_| exists) else {
                    continue;
                };
                let end = offset.saturating_add(*len).min(cur);
                if *offset >= end {
                    continue;
                }
                if end == cur {
                    txn.truncate(oid, *offset);
                    size = Some(*offset);
                } else {
                    txn.zero(oid, *offset, end - offset);
                }
            }
            ObjOp::Truncate { size: new_size } => {
                txn.truncate(oid, *new_size);
                size = Some(*new_size);
                exists = true;
            }
            ObjOp::Remove => {
                if !exists {
                    return Err(OpError::NotFound);
                }
                txn.remove(oid);
                exists = false;
                size = None;
            }
            ObjOp::Create { exclusive } => {
                if exists && *exclusive {
                    return Err(OpError::Exists);
                }
                txn.touch(oid);
                exists = true;
                size = Some(size.unwrap_or(0));
            }
            ObjOp::SetAttr { key, value } => {
                if key.starts_with('_') {
                    return Err(OpError::Invalid(format!("attribute {key:?} is reserved")));
                }
                txn.set_attr(oid, key, value.clone());
                exists = true;
            }
            ObjOp::OmapSet { entries } => {
                txn.omap_set(oid, entries.clone());
                exists = true;
            }
            ObjOp::OmapInsert { entries } => {
                if exists {
                    let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
                    let found = store.omap_get(oid, &keys).map_err(store_error)?;
                    if !found.is_empty() {
                        return Err(OpError::Exists);
                    }
                }
                txn.omap_set(oid, entries.clone());
                exists = true;
            }
            ObjOp::OmapRm { keys } => {
                if exists {
                    txn.omap_rm(oid, keys.clone());
                }
            }
            ObjOp::OmapCmp { .. } => {}
            ObjOp::CopyPut(copy) => {
                if copy.data.len() as u64 > MAX_OBJECT_SIZE {
                    return Err(OpError::Invalid(
                        "copy larger than the maximum object size".into(),
                    ));
                }
                if exists {
                    txn.remove(oid);
                }
                txn.touch(oid);
                if !copy.data.is_empty() {
                    txn.write(oid, 0, copy.data.clone());
                }
                for (key, value) in &copy.attrs {
                    if key.starts_with('_') {
                        return Err(OpError::Invalid(format!("attribute {key:?} is reserved")));
                    }
                    txn.set_attr(oid, key, value.clone());
                }
                if !copy.omap.is_empty() {
                    txn.omap_set(oid, copy.omap.clone());
                }
                exists = true;
                size = Some(copy.data.len() as u64);
            }
            _ => return Err(OpError::Invalid("read op in a write request".into())),
        }
    }
    if exists {
        txn.set_attr(oid, VERSION_ATTR, persist::encode(&version));
    }
    Ok((txn, exists))
}
