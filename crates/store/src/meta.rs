//! Object metadata shared by the backends: sizes, attributes, omaps,
//! collection logs and collection attributes, and the rules that turn a
//! [`Transaction`] into metadata changes plus a list of [`DataOp`]s.
//!
//! This module owns the *semantics* of every [`TxOp`] apart from byte storage,
//! so that every backend interprets a transaction identically. A backend
//! applies the metadata part here and then carries out the returned data ops
//! on its own byte storage (memory chunks, files, ...). It does no I/O and has
//! no fault model of its own: applying a validated transaction cannot fail.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Collection, ObjectId, ObjectStat, Result, StoreError, Transaction, TxOp, Version};

/// What a backend must do to its byte storage for one op, already resolved
/// against the metadata (sizes) at that point of the transaction.
#[derive(Debug)]
pub(crate) enum DataOp<'a> {
    /// Write `data` at `offset`; storage grows to `offset + data.len()` if shorter.
    Write {
        oid: &'a ObjectId,
        offset: u64,
        data: &'a Bytes,
    },
    /// Make `[offset, offset + len)` read as zeros; the range lies within the
    /// current size, so the size does not change.
    Punch {
        oid: &'a ObjectId,
        offset: u64,
        len: u64,
    },
    /// Set the storage length to `size` (drop data past it, or extend with zeros).
    SetLen { oid: &'a ObjectId, size: u64 },
    /// Drop the object's bytes; the object may not exist.
    Remove { oid: &'a ObjectId },
    /// Drop the bytes of every object of the collection.
    RemoveCollection { coll: Collection },
    /// The bytes of `from` become those of `to`, replacing what `to` had
    /// (nothing, if `from` has no bytes).
    Rename { from: ObjectId, to: ObjectId },
}

/// One object's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ObjMeta {
    pub size: u64,
    pub attrs: BTreeMap<String, Bytes>,
    pub omap: BTreeMap<String, Bytes>,
}

/// One collection's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CollMeta {
    pub objects: BTreeMap<String, ObjMeta>,
    pub log: BTreeMap<Version, Bytes>,
    pub attrs: BTreeMap<String, Bytes>,
}

impl CollMeta {
    fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.log.is_empty() && self.attrs.is_empty()
    }
}

/// Running totals, kept up to date by [`Meta::apply`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Logical bytes: object sizes plus keys and values of attrs, omaps and logs.
    pub used: u64,
    pub objects: u64,
}

/// The metadata of a whole store.
///
/// Collections are shared copy-on-write: cloning a `Meta` costs one reference
/// count per collection, and a later change to a collection copies that
/// collection only while a clone still shares it. The file store takes such
/// a clone at a checkpoint and encodes it on another thread while commits go
/// on. (`Arc` serializes as its contents, so the encoding is unchanged.)
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub colls: BTreeMap<Collection, Arc<CollMeta>>,
    #[serde(skip)]
    pub totals: Totals,
}

fn kv_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

const LOG_KEY_BYTES: u64 = 12;

fn obj_bytes(obj: &ObjMeta) -> u64 {
    let kv = |m: &BTreeMap<String, Bytes>| m.iter().map(|(k, v)| kv_bytes(k, v)).sum::<u64>();
    obj.size + kv(&obj.attrs) + kv(&obj.omap)
}

fn coll_bytes(coll: &CollMeta) -> (u64, u64) {
    let objects = coll.objects.values().map(obj_bytes).sum::<u64>();
    let log = coll
        .log
        .values()
        .map(|e| LOG_KEY_BYTES + e.len() as u64)
        .sum::<u64>();
    let attrs = coll.attrs.iter().map(|(k, v)| kv_bytes(k, v)).sum::<u64>();
    (objects + log + attrs, coll.objects.len() as u64)
}

/// Insert into a kv map, returning the change in accounted bytes.
fn put(map: &mut BTreeMap<String, Bytes>, key: &str, value: &Bytes, totals: &mut Totals) {
    totals.used += kv_bytes(key, value);
    if let Some(old) = map.insert(key.to_string(), value.clone()) {
        totals.used -= kv_bytes(key, &old);
    }
}

fn del(map: &mut BTreeMap<String, Bytes>, key: &str, totals: &mut Totals) {
    if let Some(old) = map.remove(key) {
        totals.used -= kv_bytes(key, &old);
    }
}

impl Meta {
    /// Recompute [`Totals`] from scratch (after loading a snapshot).
    pub fn recount(&mut self) {
        let mut totals = Totals::default();
        for coll in self.colls.values() {
            let (used, objects) = coll_bytes(coll);
            totals.used += used;
            totals.objects += objects;
        }
        self.totals = totals;
    }

    pub fn object(&self, oid: &ObjectId) -> Result<&ObjMeta> {
        self.colls
            .get(&oid.coll)
            .and_then(|c| c.objects.get(&oid.name))
            .ok_or_else(|| StoreError::NotFound(oid.clone()))
    }

    pub fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        Ok(ObjectStat {
            size: self.object(oid)?.size,
        })
    }

    pub fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.object(oid)?.attrs.get(key).map(|v| v.to_vec()))
    }

    pub fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        let obj = self.object(oid)?;
        Ok(obj
            .attrs
            .iter()
            .map(|(k, v)| (k.clone(), v.to_vec()))
            .collect())
    }

    pub fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
        let obj = self.object(oid)?;
        Ok(keys
            .iter()
            .filter_map(|k| obj.omap.get(k).map(|v| (k.clone(), v.to_vec())))
            .collect())
    }

    pub fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        use std::ops::Bound;
        let obj = self.object(oid)?;
        let lower = match start_after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        Ok(obj
            .omap
            .range::<str, _>((lower, Bound::Unbounded))
            .take(max)
            .map(|(k, v)| (k.clone(), v.to_vec()))
            .collect())
    }

    pub fn list_objects(&self, coll: Collection) -> Vec<String> {
        self.colls
            .get(&coll)
            .map(|c| c.objects.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn list_collections(&self) -> Vec<Collection> {
        self.colls.keys().copied().collect()
    }

    pub fn read_log(&self, coll: Collection) -> Vec<(Version, Vec<u8>)> {
        self.colls
            .get(&coll)
            .map(|c| c.log.iter().map(|(v, e)| (*v, e.to_vec())).collect())
            .unwrap_or_default()
    }

    pub fn coll_get_attr(&self, coll: Collection, key: &str) -> Option<Vec<u8>> {
        self.colls
            .get(&coll)
            .and_then(|c| c.attrs.get(key))
            .map(|v| v.to_vec())
    }

    /// The object, created (size 0) if missing.
    fn obj_mut<'m>(
        colls: &'m mut BTreeMap<Collection, Arc<CollMeta>>,
        totals: &mut Totals,
        oid: &ObjectId,
    ) -> &'m mut ObjMeta {
        let coll = Arc::make_mut(colls.entry(oid.coll).or_default());
        // Look up by &str first so that the common case does not clone the name.
        if !coll.objects.contains_key(&oid.name) {
            totals.objects += 1;
            coll.objects.insert(oid.name.clone(), ObjMeta::default());
        }
        coll.objects
            .get_mut(&oid.name)
            .unwrap_or_else(|| unreachable!("object inserted above"))
    }

    /// The object if it exists; its collection is unshared only then.
    fn existing_mut<'m>(
        colls: &'m mut BTreeMap<Collection, Arc<CollMeta>>,
        oid: &ObjectId,
    ) -> Option<&'m mut ObjMeta> {
        let coll = colls.get_mut(&oid.coll)?;
        if !coll.objects.contains_key(&oid.name) {
            return None;
        }
        Arc::make_mut(coll).objects.get_mut(&oid.name)
    }

    /// Drop an object's metadata, if it exists.
    fn remove_meta(
        colls: &mut BTreeMap<Collection, Arc<CollMeta>>,
        totals: &mut Totals,
        oid: &ObjectId,
    ) {
        let coll = colls.get_mut(&oid.coll);
        if let Some(coll) = coll.filter(|c| c.objects.contains_key(&oid.name)) {
            if let Some(obj) = Arc::make_mut(coll).objects.remove(&oid.name) {
                totals.used -= obj_bytes(&obj);
                totals.objects -= 1;
            }
        }
    }

    /// Give `from`'s metadata the id `to`, replacing `to`'s; false if
    /// `from` does not exist.
    fn move_object(&mut self, from: &ObjectId, to: &ObjectId) -> bool {
        let exists = self
            .colls
            .get(&from.coll)
            .is_some_and(|c| c.objects.contains_key(&from.name));
        if !exists {
            return false;
        }
        Self::remove_meta(&mut self.colls, &mut self.totals, to);
        let moved = self
            .colls
            .get_mut(&from.coll)
            .and_then(|c| Arc::make_mut(c).objects.remove(&from.name));
        if let Some(meta) = moved {
            let coll = Arc::make_mut(self.colls.entry(to.coll).or_default());
            coll.objects.insert(to.name.clone(), meta);
        }
        self.gc_coll(from.coll);
        true
    }

    /// The moves a split of `coll` for `pg_num` makes now.
    pub fn split_moves(&self, coll: Collection, pg_num: u32) -> Vec<(ObjectId, ObjectId)> {
        let Some(c) = self.colls.get(&coll) else {
            return Vec::new();
        };
        c.objects
            .keys()
            .filter_map(|name| {
                let to = crate::split_destination(coll, pg_num, name)?;
                Some((
                    ObjectId::new(coll, name.clone()),
                    ObjectId::new(to, name.clone()),
                ))
            })
            .collect()
    }

    fn gc_coll(&mut self, coll: Collection) {
        if self.colls.get(&coll).is_some_and(|c| c.is_empty()) {
            self.colls.remove(&coll);
        }
    }

    /// Apply the metadata part of a (validated) transaction and append the
    /// data ops a backend must carry out, in order, to `out`.
    pub fn apply<'a>(&mut self, txn: &'a Transaction, out: &mut Vec<DataOp<'a>>) {
        for op in &txn.ops {
            self.apply_op(op, out);
        }
    }

    fn apply_op<'a>(&mut self, op: &'a TxOp, out: &mut Vec<DataOp<'a>>) {
        let totals = &mut self.totals;
        match op {
            TxOp::Touch { oid } => {
                Self::obj_mut(&mut self.colls, totals, oid);
            }
            TxOp::Write { oid, offset, data } => {
                let obj = Self::obj_mut(&mut self.colls, totals, oid);
                if !data.is_empty() {
                    let end = offset + data.len() as u64;
                    if end > obj.size {
                        totals.used += end - obj.size;
                        obj.size = end;
                    }
                    out.push(DataOp::Write {
                        oid,
                        offset: *offset,
                        data,
                    });
                }
            }
            TxOp::Zero { oid, offset, len } => {
                let obj = Self::obj_mut(&mut self.colls, totals, oid);
                if *len > 0 {
                    let end = offset + len;
                    if *offset < obj.size {
                        out.push(DataOp::Punch {
                            oid,
                            offset: *offset,
                            len: end.min(obj.size) - offset,
                        });
                    }
                    if end > obj.size {
                        totals.used += end - obj.size;
                        obj.size = end;
                        out.push(DataOp::SetLen { oid, size: end });
                    }
                }
            }
            TxOp::Truncate { oid, size } => {
                let obj = Self::obj_mut(&mut self.colls, totals, oid);
                totals.used = totals.used - obj.size + size;
                obj.size = *size;
                out.push(DataOp::SetLen { oid, size: *size });
            }
            TxOp::Remove { oid } => {
                Self::remove_meta(&mut self.colls, totals, oid);
                // Always drop the bytes: replay may meet files of later ops.
                out.push(DataOp::Remove { oid });
                self.gc_coll(oid.coll);
            }
            TxOp::SetAttr { oid, key, value } => {
                let obj = Self::obj_mut(&mut self.colls, totals, oid);
                put(&mut obj.attrs, key, value, totals);
            }
            TxOp::RmAttr { oid, key } => {
                if let Some(obj) = Self::existing_mut(&mut self.colls, oid) {
                    del(&mut obj.attrs, key, totals);
                }
            }
            TxOp::OmapSet { oid, entries } => {
                let obj = Self::obj_mut(&mut self.colls, totals, oid);
                for (key, value) in entries {
                    put(&mut obj.omap, key, value, totals);
                }
            }
            TxOp::OmapRm { oid, keys } => {
                if let Some(obj) = Self::existing_mut(&mut self.colls, oid) {
                    for key in keys {
                        del(&mut obj.omap, key, totals);
                    }
                }
            }
            TxOp::OmapClear { oid } => {
                if let Some(obj) = Self::existing_mut(&mut self.colls, oid) {
                    for (key, value) in std::mem::take(&mut obj.omap) {
                        totals.used -= kv_bytes(&key, &value);
                    }
                }
            }
            TxOp::LogAppend {
                coll,
                version,
                entry,
            } => {
                let c = Arc::make_mut(self.colls.entry(*coll).or_default());
                totals.used += LOG_KEY_BYTES + entry.len() as u64;
                if let Some(old) = c.log.insert(*version, entry.clone()) {
                    totals.used -= LOG_KEY_BYTES + old.len() as u64;
                }
            }
            TxOp::LogTrim { coll, up_to } => {
                if let Some(c) = self.colls.get_mut(coll).map(Arc::make_mut) {
                    // Keep the entries strictly above `up_to`.
                    let keep = match up_to.counter.checked_add(1) {
                        Some(counter) => c.log.split_off(&Version::new(up_to.epoch, counter)),
                        None => match up_to.epoch.checked_add(1) {
                            Some(epoch) => c.log.split_off(&Version::new(epoch, 0)),
                            None => BTreeMap::new(),
                        },
                    };
                    for entry in std::mem::replace(&mut c.log, keep).values() {
                        totals.used -= LOG_KEY_BYTES + entry.len() as u64;
                    }
                    self.gc_coll(*coll);
                }
            }
            TxOp::Move { from, to } => {
                if self.move_object(from, to) {
                    out.push(DataOp::Rename {
                        from: from.clone(),
                        to: to.clone(),
                    });
                }
            }
            TxOp::SplitCollection { coll, pg_num } => {
                for (from, to) in self.split_moves(*coll, *pg_num) {
                    if self.move_object(&from, &to) {
                        out.push(DataOp::Rename { from, to });
                    }
                }
            }
            TxOp::CollSetAttr { coll, key, value } => {
                let c = Arc::make_mut(self.colls.entry(*coll).or_default());
                put(&mut c.attrs, key, value, totals);
            }
            TxOp::RemoveCollection { coll } => {
                if let Some(c) = self.colls.remove(coll) {
                    let (used, objects) = coll_bytes(&c);
                    totals.used -= used;
                    totals.objects -= objects;
                }
                out.push(DataOp::RemoveCollection { coll: *coll });
            }
        }
    }
}

/// Bytes a transaction may add to the store at most (data written plus keys
/// and values); used for capacity checks before a transaction is accepted.
pub(crate) fn growth_estimate(txn: &Transaction) -> u64 {
    txn.ops
        .iter()
        .map(|op| match op {
            TxOp::Write { data, .. } => data.len() as u64,
            TxOp::SetAttr { key, value, .. } | TxOp::CollSetAttr { key, value, .. } => {
                kv_bytes(key, value)
            }
            TxOp::OmapSet { entries, .. } => entries.iter().map(|(k, v)| kv_bytes(k, v)).sum(),
            TxOp::LogAppend { entry, .. } => LOG_KEY_BYTES + entry.len() as u64,
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PgId;

    #[test]
    fn totals_follow_changes_and_match_a_recount() {
        let coll = PgId::new(1, 2);
        let a = ObjectId::new(coll, "a");
        let b = ObjectId::new(coll, "b");
        let mut txn = Transaction::new();
        txn.write(&a, 10, Bytes::from_static(b"hello"))
            .set_attr(&a, "k", Bytes::from_static(b"v"))
            .omap_set(&b, vec![("x".into(), Bytes::from_static(b"yy"))])
            .log_append(coll, Version::new(1, 1), Bytes::from_static(b"e1"))
            .log_append(coll, Version::new(1, 2), Bytes::from_static(b"e2"))
            .coll_set_attr(coll, "ca", Bytes::from_static(b"1"))
            .truncate(&b, 100)
            .zero(&a, 12, 20);
        let mut meta = Meta::default();
        let mut ops = Vec::new();
        meta.apply(&txn, &mut ops);
        let live = meta.totals;
        meta.recount();
        assert_eq!(live, meta.totals);
        assert_eq!(meta.totals.objects, 2);

        let mut txn = Transaction::new();
        txn.log_trim(coll, Version::new(1, 1))
            .remove(&a)
            .omap_clear(&b);
        meta.apply(&txn, &mut ops);
        let live = meta.totals;
        meta.recount();
        assert_eq!(live, meta.totals);
        assert_eq!(meta.read_log(coll).len(), 1);

        let mut txn = Transaction::new();
        txn.remove_collection(coll);
        meta.apply(&txn, &mut ops);
        assert_eq!(meta.totals, Totals::default());
        assert!(meta.list_collections().is_empty());
    }
}
