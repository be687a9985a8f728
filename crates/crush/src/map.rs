//! The CRUSH map's data: types, classes, buckets, devices and rules (the
//! serialized part), the weights derived from them (never serialized,
//! recomputed after every edit and on decode), lookups, the invariants
//! every map satisfies ([`CrushMap::check`]), and the tree view `cairn osd
//! tree` prints.
//!
//! Invariants: every device and bucket has at most one parent, which is an
//! existing bucket listing it exactly once; following parents always ends
//! at a root within [`MAX_DEPTH`] levels (so there are no loops); bucket
//! names are unique and never `osd.N`; rules name existing roots, types and
//! classes. A map that breaks one does not decode. Nothing here changes a
//! map (that is `edit`'s), and derived weights must never be serialized.

use std::collections::BTreeMap;

use cairn_types::OsdId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::location::osd_name_id;
use crate::{
    ClassId, CrushError, ItemId, RuleId, TypeId, DEVICE_TYPE, DEVICE_TYPE_NAME, MAX_DEPTH,
};

/// A bucket: an interior node of the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Negative.
    pub id: ItemId,
    pub name: String,
    pub type_id: TypeId,
    /// `None` for a root.
    pub parent: Option<ItemId>,
    /// Child buckets and devices, in the order they were added.
    pub items: Vec<ItemId>,
}

/// A device: an OSD's leaf in the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub id: OsdId,
    /// CRUSH weight, 16.16 fixed-point TiB.
    pub weight: u32,
    pub class: ClassId,
    /// The bucket holding the device.
    pub parent: ItemId,
}

/// A replicated rule: `take root [class C]`, `chooseleaf firstn count type
/// failure_domain`, `emit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: RuleId,
    pub name: String,
    /// The bucket the rule starts from.
    pub root: ItemId,
    /// Only devices of this class (the class view of the tree).
    pub class: Option<ClassId>,
    /// Replicas go to distinct items of this type (0: distinct OSDs).
    pub failure_domain: TypeId,
    /// `firstn` N: 0 means the pool's size, a negative N means size - |N|,
    /// a positive N at most N (never more than the pool's size).
    pub count: i32,
}

/// The serialized part of a [`CrushMap`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CrushData {
    /// Type names by id; `types[0]` is `osd`.
    pub types: Vec<String>,
    /// Device class names by id.
    pub classes: Vec<String>,
    pub buckets: BTreeMap<ItemId, Bucket>,
    pub devices: BTreeMap<OsdId, Device>,
    pub rules: BTreeMap<RuleId, Rule>,
    /// The id the next bucket gets (decreasing from -1; never reused).
    pub next_bucket_id: ItemId,
    pub next_rule_id: RuleId,
}

/// Derived weights of one bucket's items in one view, aligned with
/// [`Bucket::items`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ItemWeights {
    pub total: u64,
    pub items: Vec<u64>,
}

/// Derived weights of one bucket: the whole tree's view and each class's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BucketWeights {
    pub all: ItemWeights,
    pub by_class: BTreeMap<ClassId, ItemWeights>,
}

/// The CRUSH map. See the crate documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrushMap {
    pub(crate) data: CrushData,
    /// Derived from `data` by [`CrushMap::derive`]; never serialized.
    pub(crate) weights: BTreeMap<ItemId, BucketWeights>,
}

/// One row of the tree view: a bucket or a device, at its depth below a
/// root, in depth-first order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    pub id: ItemId,
    pub name: String,
    pub type_name: String,
    /// Devices only.
    pub class: Option<String>,
    /// 16.16 fixed-point TiB (a bucket's is the sum of its items').
    pub weight: u64,
    pub depth: usize,
    pub children: Vec<ItemId>,
}

impl Serialize for CrushMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.data.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CrushMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let data = CrushData::deserialize(deserializer)?;
        CrushMap::from_data(data).map_err(serde::de::Error::custom)
    }
}

impl CrushMap {
    /// A map from its data, checked and with its weights derived.
    pub(crate) fn from_data(data: CrushData) -> Result<CrushMap, CrushError> {
        let mut map = CrushMap {
            data,
            weights: BTreeMap::new(),
        };
        map.check()?;
        map.derive();
        Ok(map)
    }

    /// Recompute every bucket's derived weights, leaves first.
    pub(crate) fn derive(&mut self) {
        let mut weights = BTreeMap::new();
        let roots: Vec<ItemId> = self.roots().collect();
        for root in roots {
            self.derive_bucket(root, &mut weights);
        }
        self.weights = weights;
    }

    fn derive_bucket(&self, id: ItemId, out: &mut BTreeMap<ItemId, BucketWeights>) {
        let Some(bucket) = self.data.buckets.get(&id) else {
            return;
        };
        let mut bw = BucketWeights::default();
        for (index, &item) in bucket.items.iter().enumerate() {
            // Each class's weight of this item; classes absent weigh 0.
            let (all, by_class): (u64, Vec<(ClassId, u64)>) = if item >= 0 {
                match self.data.devices.get(&(item as OsdId)) {
                    Some(d) => (u64::from(d.weight), vec![(d.class, u64::from(d.weight))]),
                    None => (0, Vec::new()),
                }
            } else {
                self.derive_bucket(item, out);
                match out.get(&item) {
                    Some(child) => (
                        child.all.total,
                        child.by_class.iter().map(|(c, w)| (*c, w.total)).collect(),
                    ),
                    None => (0, Vec::new()),
                }
            };
            bw.all.items.push(all);
            bw.all.total += all;
            for (class, weight) in by_class {
                let view = bw.by_class.entry(class).or_insert_with(|| ItemWeights {
                    total: 0,
                    items: vec![0; bucket.items.len()],
                });
                view.items[index] = weight;
                view.total += weight;
            }
        }
        out.insert(id, bw);
    }

    /// Check the invariants listed in the module documentation.
    pub fn check(&self) -> Result<(), CrushError> {
        let d = &self.data;
        let bad = |msg: String| Err(CrushError::Corrupt(msg));
        if d.types.first().map(String::as_str) != Some(DEVICE_TYPE_NAME) {
            return bad("type 0 is not osd".into());
        }
        let mut names = BTreeMap::new();
        for (id, b) in &d.buckets {
            if *id >= 0 || b.id != *id || *id <= d.next_bucket_id {
                return bad(format!("bad bucket id {id}"));
            }
            if b.type_id == DEVICE_TYPE || usize::from(b.type_id) >= d.types.len() {
                return bad(format!("bucket {} has bad type {}", b.name, b.type_id));
            }
            if names.insert(b.name.as_str(), *id).is_some() || osd_name_id(&b.name).is_some() {
                return bad(format!("bucket name {} is not unique", b.name));
            }
            if let Some(p) = b.parent {
                self.check_child(p, *id)?;
            }
            for &item in &b.items {
                if self.parent_of(item) != Some(*id) {
                    return bad(format!("{} lists {item}, whose parent differs", b.name));
                }
            }
            if self.depth_of(*id).is_none() {
                return bad(format!("bucket {} is in a loop or too deep", b.name));
            }
        }
        for (id, dev) in &d.devices {
            if dev.id != *id || *id > crate::MAX_OSD_ID || usize::from(dev.class) >= d.classes.len()
            {
                return bad(format!("bad device osd.{id}"));
            }
            self.check_child(dev.parent, *id as ItemId)?;
        }
        for (id, r) in &d.rules {
            let root_ok = d.buckets.contains_key(&r.root);
            let class_ok = r.class.is_none_or(|c| usize::from(c) < d.classes.len());
            if r.id != *id
                || !root_ok
                || !class_ok
                || usize::from(r.failure_domain) >= d.types.len()
            {
                return bad(format!("bad rule {}", r.name));
            }
        }
        Ok(())
    }

    /// `child` must be listed exactly once by bucket `parent`.
    fn check_child(&self, parent: ItemId, child: ItemId) -> Result<(), CrushError> {
        let listed = self
            .data
            .buckets
            .get(&parent)
            .map_or(0, |p| p.items.iter().filter(|&&i| i == child).count());
        if listed != 1 {
            return Err(CrushError::Corrupt(format!(
                "item {child} is listed {listed} times by its parent {parent}"
            )));
        }
        Ok(())
    }

    // ----------------------------------------------------------- lookups

    /// Buckets with no parent, by id (the first root made comes first).
    pub fn roots(&self) -> impl Iterator<Item = ItemId> + '_ {
        self.data
            .buckets
            .values()
            .rev()
            .filter(|b| b.parent.is_none())
            .map(|b| b.id)
    }

    pub fn bucket(&self, id: ItemId) -> Option<&Bucket> {
        self.data.buckets.get(&id)
    }

    pub fn device(&self, osd: OsdId) -> Option<&Device> {
        self.data.devices.get(&osd)
    }

    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.data.devices.values()
    }

    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.data.rules.values()
    }

    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.data.rules.get(&id)
    }

    pub fn rule_by_name(&self, name: &str) -> Result<&Rule, CrushError> {
        self.data
            .rules
            .values()
            .find(|r| r.name == name)
            .ok_or_else(|| CrushError::UnknownRule {
                name: name.to_string(),
                known: self.known(self.data.rules.values().map(|r| r.name.as_str())),
            })
    }

    /// The parent bucket of an item, if it has one.
    pub fn parent_of(&self, item: ItemId) -> Option<ItemId> {
        if item >= 0 {
            self.data.devices.get(&(item as OsdId)).map(|d| d.parent)
        } else {
            self.data.buckets.get(&item).and_then(|b| b.parent)
        }
    }

    /// The item of type `kind` that holds `osd` (the OSD itself for type
    /// 0), or `None` if the OSD is not in the tree under such an item.
    pub fn ancestor_of_type(&self, osd: OsdId, kind: TypeId) -> Option<ItemId> {
        let mut cur = osd as ItemId;
        for _ in 0..=MAX_DEPTH {
            if self.type_of(cur)? == kind {
                return Some(cur);
            }
            cur = self.parent_of(cur)?;
        }
        None
    }

    /// Levels of buckets above `item`, or `None` past [`MAX_DEPTH`] (a loop).
    pub(crate) fn depth_of(&self, item: ItemId) -> Option<usize> {
        let mut cur = item;
        for depth in 0..=MAX_DEPTH {
            match self.parent_of(cur) {
                Some(p) => cur = p,
                None => return Some(depth),
            }
        }
        None
    }

    /// Is `item` inside `ancestor` (or the same)?
    pub fn is_within(&self, item: ItemId, ancestor: ItemId) -> bool {
        let mut cur = Some(item);
        for _ in 0..=MAX_DEPTH {
            match cur {
                Some(c) if c == ancestor => return true,
                Some(c) => cur = self.parent_of(c),
                None => return false,
            }
        }
        false
    }

    /// The type of an item (devices are type 0).
    pub fn type_of(&self, item: ItemId) -> Option<TypeId> {
        if item >= 0 {
            self.data
                .devices
                .contains_key(&(item as OsdId))
                .then_some(DEVICE_TYPE)
        } else {
            self.data.buckets.get(&item).map(|b| b.type_id)
        }
    }

    pub fn type_name(&self, id: TypeId) -> &str {
        self.data
            .types
            .get(usize::from(id))
            .map_or("?", String::as_str)
    }

    /// The type list, lowest first (`osd` first).
    pub fn types(&self) -> &[String] {
        &self.data.types
    }

    pub fn type_id(&self, name: &str) -> Result<TypeId, CrushError> {
        self.data
            .types
            .iter()
            .position(|t| t == name)
            .map(|i| i as TypeId)
            .ok_or_else(|| CrushError::UnknownType {
                name: name.to_string(),
                known: self.data.types.join(", "),
            })
    }

    pub fn class_name(&self, id: ClassId) -> &str {
        self.data
            .classes
            .get(usize::from(id))
            .map_or("?", String::as_str)
    }

    pub fn class_id(&self, name: &str) -> Result<ClassId, CrushError> {
        self.data
            .classes
            .iter()
            .position(|c| c == name)
            .map(|i| i as ClassId)
            .ok_or_else(|| CrushError::UnknownClass {
                name: name.to_string(),
                known: self.known(self.data.classes.iter().map(String::as_str)),
            })
    }

    /// A bucket's id by name.
    pub fn bucket_id(&self, name: &str) -> Option<ItemId> {
        self.data
            .buckets
            .values()
            .find(|b| b.name == name)
            .map(|b| b.id)
    }

    /// An item by name: a bucket name, or `osd.N` for a device in the map.
    pub fn item_id(&self, name: &str) -> Result<ItemId, CrushError> {
        let device = osd_name_id(name).filter(|id| self.data.devices.contains_key(id));
        device
            .map(|id| id as ItemId)
            .or_else(|| self.bucket_id(name))
            .ok_or_else(|| CrushError::UnknownItem(name.to_string()))
    }

    /// The name of an item: its bucket name or `osd.N`.
    pub fn item_name(&self, item: ItemId) -> String {
        if item >= 0 {
            format!("osd.{item}")
        } else {
            self.data
                .buckets
                .get(&item)
                .map_or_else(|| format!("bucket{item}"), |b| b.name.clone())
        }
    }

    /// The weight of an item (16.16), in the whole tree's view.
    pub fn weight_of(&self, item: ItemId) -> u64 {
        if item >= 0 {
            self.data
                .devices
                .get(&(item as OsdId))
                .map_or(0, |d| u64::from(d.weight))
        } else {
            self.weights.get(&item).map_or(0, |w| w.all.total)
        }
    }

    /// The weights of a bucket's items in the view of `class` (all devices
    /// if `None`), aligned with its items; empty if it has none there.
    pub(crate) fn item_weights(&self, bucket: ItemId, class: Option<ClassId>) -> &[u64] {
        let Some(w) = self.weights.get(&bucket) else {
            return &[];
        };
        match class {
            None => &w.all.items,
            Some(c) => w.by_class.get(&c).map_or(&[], |v| &v.items),
        }
    }

    /// The weight of an item in the view of `class`.
    pub(crate) fn view_weight(&self, item: ItemId, class: Option<ClassId>) -> u64 {
        if item >= 0 {
            match self.data.devices.get(&(item as OsdId)) {
                Some(d) if class.is_none_or(|c| c == d.class) => u64::from(d.weight),
                _ => 0,
            }
        } else {
            let Some(w) = self.weights.get(&item) else {
                return 0;
            };
            match class {
                None => w.all.total,
                Some(c) => w.by_class.get(&c).map_or(0, |v| v.total),
            }
        }
    }

    /// `a, b, c`, or `none`.
    pub(crate) fn known<'a>(&self, names: impl Iterator<Item = &'a str>) -> String {
        let list: Vec<&str> = names.collect();
        if list.is_empty() {
            "none".into()
        } else {
            list.join(", ")
        }
    }

    /// The hierarchy depth-first from each root, children in item order.
    pub fn tree(&self) -> Vec<TreeNode> {
        let mut out = Vec::new();
        let roots: Vec<ItemId> = self.roots().collect();
        for root in roots {
            self.tree_from(root, 0, &mut out);
        }
        out
    }

    fn tree_from(&self, item: ItemId, depth: usize, out: &mut Vec<TreeNode>) {
        let (type_id, class, children) = if item >= 0 {
            let class = self
                .data
                .devices
                .get(&(item as OsdId))
                .map(|d| self.class_name(d.class).to_string());
            (DEVICE_TYPE, class, Vec::new())
        } else {
            match self.data.buckets.get(&item) {
                Some(b) => (b.type_id, None, b.items.clone()),
                None => return,
            }
        };
        out.push(TreeNode {
            id: item,
            name: self.item_name(item),
            type_name: self.type_name(type_id).to_string(),
            class,
            weight: self.weight_of(item),
            depth,
            children: children.clone(),
        });
        if depth < MAX_DEPTH {
            for child in children {
                self.tree_from(child, depth + 1, out);
            }
        }
    }
}
