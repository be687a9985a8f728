//! Whole-store dumps through the [`ObjectStore`] trait, for comparing a
//! backend with a model (or with itself before and after a reopen).

use std::collections::BTreeMap;

use crate::{Collection, ObjectId, ObjectStore, Result, Version};

/// Everything one object holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectDump {
    pub size: u64,
    pub data: Vec<u8>,
    pub attrs: BTreeMap<String, Vec<u8>>,
    pub omap: Vec<(String, Vec<u8>)>,
}

/// Everything one collection holds (collection attributes only for the keys
/// the dump was asked for: the trait cannot list them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectionDump {
    pub objects: BTreeMap<String, ObjectDump>,
    pub log: Vec<(Version, Vec<u8>)>,
    pub attrs: BTreeMap<String, Vec<u8>>,
}

/// The visible state of a whole store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreDump {
    pub collections: BTreeMap<Collection, CollectionDump>,
}

/// Read the whole visible state of `store`, including the collection
/// attributes named in `coll_attr_keys`. Objects are read whole, so keep
/// them small.
pub async fn dump(store: &dyn ObjectStore, coll_attr_keys: &[&str]) -> Result<StoreDump> {
    let mut out = StoreDump::default();
    for coll in store.list_collections()? {
        let mut c = CollectionDump {
            log: store.read_log(coll)?,
            ..Default::default()
        };
        for key in coll_attr_keys {
            if let Some(v) = store.coll_get_attr(coll, key)? {
                c.attrs.insert(key.to_string(), v);
            }
        }
        for name in store.list_objects(coll)? {
            let oid = ObjectId::new(coll, name.clone());
            let size = store.stat(&oid)?.size;
            let data = store.read(&oid, 0, size).await?.to_vec();
            let mut omap = Vec::new();
            loop {
                let after = omap.last().map(|(k, _): &(String, Vec<u8>)| k.clone());
                let page = store.omap_list(&oid, after.as_deref(), 256)?;
                if page.is_empty() {
                    break;
                }
                omap.extend(page);
            }
            let attrs = store.get_attrs(&oid)?;
            c.objects.insert(
                name,
                ObjectDump {
                    size,
                    data,
                    attrs,
                    omap,
                },
            );
        }
        out.collections.insert(coll, c);
    }
    Ok(out)
}

/// A short description of the first difference between two dumps, or
/// `None` if they are equal. Meant for assertion messages (dumps can be big).
pub fn first_difference(a: &StoreDump, b: &StoreDump) -> Option<String> {
    let colls_a: Vec<_> = a.collections.keys().collect();
    let colls_b: Vec<_> = b.collections.keys().collect();
    if colls_a != colls_b {
        return Some(format!("collections {colls_a:?} vs {colls_b:?}"));
    }
    for (coll, ca) in &a.collections {
        let cb = &b.collections[coll];
        if ca.log != cb.log {
            let va: Vec<_> = ca.log.iter().map(|(v, _)| v.to_string()).collect();
            let vb: Vec<_> = cb.log.iter().map(|(v, _)| v.to_string()).collect();
            return Some(format!(
                "{coll}: log {va:?} vs {vb:?} (or entry bytes differ)"
            ));
        }
        if ca.attrs != cb.attrs {
            return Some(format!("{coll}: attrs {:?} vs {:?}", ca.attrs, cb.attrs));
        }
        let names_a: Vec<_> = ca.objects.keys().collect();
        let names_b: Vec<_> = cb.objects.keys().collect();
        if names_a != names_b {
            return Some(format!("{coll}: objects {names_a:?} vs {names_b:?}"));
        }
        for (name, oa) in &ca.objects {
            let ob = &cb.objects[name];
            if oa.size != ob.size {
                return Some(format!("{coll}/{name}: size {} vs {}", oa.size, ob.size));
            }
            if let Some(at) = oa.data.iter().zip(&ob.data).position(|(x, y)| x != y) {
                return Some(format!(
                    "{coll}/{name}: data differs at byte {at}: {} vs {}",
                    oa.data[at], ob.data[at]
                ));
            }
            if oa.attrs != ob.attrs {
                return Some(format!(
                    "{coll}/{name}: attrs {:?} vs {:?}",
                    oa.attrs, ob.attrs
                ));
            }
            if oa.omap != ob.omap {
                return Some(format!(
                    "{coll}/{name}: omap {:?} vs {:?}",
                    oa.omap, ob.omap
                ));
            }
        }
    }
    (a != b).then(|| "dumps differ".to_string())
}
