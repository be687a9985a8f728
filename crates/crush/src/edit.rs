//! Making and changing a CRUSH map. Every edit is validated and atomic: it
//! runs on a copy that replaces the map only if the whole edit succeeded
//! and the result passes [`CrushMap::check`], so an error changes nothing.
//! Moves that would put a bucket inside itself are refused. No edit may
//! change a map in place, or leave its derived weights stale.

use std::collections::BTreeMap;

use cairn_types::OsdId;

use crate::location::{osd_name_id, validate_name};
use crate::map::{Bucket, CrushData, Device, Rule};
use crate::{
    ClassId, CrushError, CrushMap, DeviceReport, ItemId, Location, RuleId, TypeId,
    DEFAULT_BUCKET_TYPES, DEFAULT_ROOT, DEFAULT_RULE, DEVICE_TYPE, DEVICE_TYPE_NAME, MAX_CLASSES,
    MAX_DEPTH, MAX_OSD_ID, MAX_TYPES,
};

impl Default for CrushMap {
    /// The map of a new cluster with the default types and failure domain
    /// `host`.
    fn default() -> Self {
        let types = std::iter::once(DEVICE_TYPE_NAME)
            .chain(DEFAULT_BUCKET_TYPES)
            .map(str::to_string)
            .collect();
        CrushMap::fresh(types, 1)
    }
}

impl CrushMap {
    /// The map of a new cluster on one machine: the default types, and a
    /// default rule placing replicas on distinct OSDs.
    pub fn single_machine() -> CrushMap {
        let mut map = CrushMap::default();
        if let Some(rule) = map.data.rules.get_mut(&0) {
            rule.failure_domain = DEVICE_TYPE;
        }
        map
    }

    /// The map of a new cluster: bucket types `bucket_types` (lowest first,
    /// above `osd`; they must include `host` and `root`), root `default`,
    /// and rule `replicated_rule` placing replicas on distinct items of type
    /// `failure_domain` (`osd` or one of the types).
    pub fn new_cluster<S: AsRef<str>>(
        bucket_types: &[S],
        failure_domain: &str,
    ) -> Result<CrushMap, CrushError> {
        let mut types = vec![DEVICE_TYPE_NAME.to_string()];
        for t in bucket_types {
            let t = t.as_ref();
            validate_name(t)?;
            if types.iter().any(|have| have == t) {
                return Err(CrushError::Invalid(format!(
                    "bucket type '{t}' is given twice"
                )));
            }
            types.push(t.to_string());
        }
        for needed in ["host", "root"] {
            if !types.iter().any(|t| t == needed) {
                return Err(CrushError::Invalid(format!(
                    "the bucket types must include '{needed}'"
                )));
            }
        }
        if types.len() > MAX_TYPES {
            return Err(CrushError::Invalid(format!("more than {MAX_TYPES} types")));
        }
        let domain = types
            .iter()
            .position(|t| t == failure_domain)
            .ok_or_else(|| CrushError::UnknownType {
                name: failure_domain.to_string(),
                known: types.join(", "),
            })?;
        Ok(CrushMap::fresh(types, domain as TypeId))
    }

    /// A new map from valid types: root `default` (type `root`, or the
    /// highest type) and rule `replicated_rule`.
    fn fresh(types: Vec<String>, failure_domain: TypeId) -> CrushMap {
        let root_type = types
            .iter()
            .position(|t| t == "root")
            .unwrap_or(types.len() - 1) as TypeId;
        let root = Bucket {
            id: -1,
            name: DEFAULT_ROOT.into(),
            type_id: root_type,
            parent: None,
            items: Vec::new(),
        };
        let rule = Rule {
            id: 0,
            name: DEFAULT_RULE.into(),
            root: -1,
            class: None,
            failure_domain,
            count: 0,
        };
        let mut map = CrushMap {
            data: CrushData {
                types,
                classes: Vec::new(),
                buckets: BTreeMap::from([(-1, root)]),
                devices: BTreeMap::new(),
                rules: BTreeMap::from([(0, rule)]),
                next_bucket_id: -2,
                next_rule_id: 1,
            },
            weights: BTreeMap::new(),
        };
        map.derive();
        map
    }

    /// Run `f` on a copy; keep the result only if `f` and the invariants
    /// hold.
    fn edit<T>(
        &mut self,
        f: impl FnOnce(&mut CrushMap) -> Result<T, CrushError>,
    ) -> Result<T, CrushError> {
        let mut next = self.clone();
        let value = f(&mut next)?;
        next.check()?;
        next.derive();
        *self = next;
        Ok(value)
    }

    // ------------------------------------------------------------ edits

    /// `osd crush add-bucket NAME TYPE [LOCATION]`: a new, empty bucket,
    /// placed at `location` (a root if empty).
    pub fn add_bucket(
        &mut self,
        name: &str,
        type_name: &str,
        location: &Location,
    ) -> Result<ItemId, CrushError> {
        self.edit(|m| {
            let type_id = m.bucket_type(type_name)?;
            let id = m.create_bucket(name, type_id)?;
            if !location.is_empty() {
                m.link(id, location)?;
            }
            Ok(id)
        })
    }

    /// `osd crush move NAME LOCATION`: put a bucket or an OSD at `location`.
    /// Returns whether it moved (not if it is there already).
    pub fn move_item(&mut self, name: &str, location: &Location) -> Result<bool, CrushError> {
        if location.is_empty() {
            return Err(CrushError::InvalidLocation {
                text: String::new(),
                reason: "give at least one type=name pair".into(),
            });
        }
        self.edit(|m| {
            let item = m.item_id(name)?;
            if m.is_at(item, location)? {
                return Ok(false);
            }
            m.unlink(item);
            m.link(item, location)?;
            Ok(true)
        })
    }

    /// `osd crush rm NAME`: remove an empty bucket that no rule starts from,
    /// or an OSD (which then gets no data until it is placed again).
    pub fn remove_item(&mut self, name: &str) -> Result<ItemId, CrushError> {
        self.edit(|m| {
            let item = m.item_id(name)?;
            if item >= 0 {
                m.unlink(item);
                m.data.devices.remove(&(item as OsdId));
                return Ok(item);
            }
            if let Some(b) = m.data.buckets.get(&item).filter(|b| !b.items.is_empty()) {
                return Err(CrushError::NotEmpty {
                    name: b.name.clone(),
                    items: b.items.len(),
                });
            }
            if let Some(rule) = m.data.rules.values().find(|r| r.root == item) {
                return Err(CrushError::InUse {
                    name: name.to_string(),
                    rule: rule.name.clone(),
                });
            }
            m.unlink(item);
            m.data.buckets.remove(&item);
            Ok(item)
        })
    }

    /// `osd crush reweight osd.N WEIGHT`: set an OSD's CRUSH weight (16.16).
    /// A bucket's weight is always the sum of its items'.
    pub fn reweight(&mut self, name: &str, weight: u32) -> Result<bool, CrushError> {
        self.edit(|m| {
            let item = m.item_id(name)?;
            let Some(device) = u32::try_from(item)
                .ok()
                .and_then(|osd| m.data.devices.get_mut(&osd))
            else {
                return Err(CrushError::Invalid(format!(
                    "{name} is a bucket: its weight is the sum of its items'; reweight its OSDs"
                )));
            };
            let changed = device.weight != weight;
            device.weight = weight;
            Ok(changed)
        })
    }

    /// `osd crush set-device-class CLASS osd.N...`: set the class of OSDs in
    /// the map (a new class name is created).
    pub fn set_device_class(&mut self, class: &str, osds: &[OsdId]) -> Result<bool, CrushError> {
        self.edit(|m| {
            let class_id = m.intern_class(class)?;
            let mut changed = false;
            for osd in osds {
                let device = m
                    .data
                    .devices
                    .get_mut(osd)
                    .ok_or_else(|| CrushError::UnknownItem(format!("osd.{osd}")))?;
                changed |= device.class != class_id;
                device.class = class_id;
            }
            Ok(changed)
        })
    }

    /// `osd crush rule create-replicated NAME ROOT TYPE [CLASS]`.
    pub fn create_replicated_rule(
        &mut self,
        name: &str,
        root: &str,
        failure_domain: &str,
        class: Option<&str>,
    ) -> Result<RuleId, CrushError> {
        self.edit(|m| {
            validate_name(name)?;
            if m.data.rules.values().any(|r| r.name == name) {
                return Err(CrushError::Exists(format!("rule {name}")));
            }
            let root = m
                .bucket_id(root)
                .ok_or_else(|| CrushError::UnknownItem(root.to_string()))?;
            let failure_domain = m.type_id(failure_domain)?;
            let class = class.map(|c| m.class_id(c)).transpose()?;
            let id = m.data.next_rule_id;
            m.data.next_rule_id += 1;
            let rule = Rule {
                id,
                name: name.to_string(),
                root,
                class,
                failure_domain,
                count: 0,
            };
            m.data.rules.insert(id, rule);
            Ok(id)
        })
    }

    /// An OSD boots and reports itself: a new OSD is added with its
    /// weight and class at its location (root `default` if it names none);
    /// an OSD already in the map moves if `update_location` is set and it
    /// sits elsewhere, and takes a configured class. Returns whether the map
    /// changed.
    pub fn boot_device(&mut self, osd: OsdId, report: &DeviceReport) -> Result<bool, CrushError> {
        if osd > MAX_OSD_ID {
            return Err(CrushError::Invalid(format!("osd id {osd} is too large")));
        }
        let location = report.location.with_default_root();
        let item = osd as ItemId;
        self.edit(|m| {
            let Some(current) = m.data.devices.get(&osd).cloned() else {
                let class = m.intern_class(&report.class)?;
                let device = Device {
                    id: osd,
                    weight: report.weight(),
                    class,
                    parent: 0, // set by link
                };
                m.data.devices.insert(osd, device);
                m.link(item, &location)?;
                return Ok(true);
            };
            let mut changed = false;
            if report.update_location && !m.is_at(item, &location)? {
                m.unlink(item);
                m.link(item, &location)?;
                changed = true;
            }
            if report.class_configured && m.class_name(current.class) != report.class {
                let class = m.intern_class(&report.class)?;
                if let Some(d) = m.data.devices.get_mut(&osd) {
                    d.class = class;
                }
                changed = true;
            }
            Ok(changed)
        })
    }

    // ---------------------------------------------------------- helpers

    /// A type a bucket may have: any but `osd`.
    fn bucket_type(&self, name: &str) -> Result<TypeId, CrushError> {
        match self.type_id(name)? {
            DEVICE_TYPE => Err(CrushError::Invalid(format!(
                "type '{name}' is for OSDs; a bucket needs another type ({})",
                self.data.types[1..].join(", ")
            ))),
            id => Ok(id),
        }
    }

    /// The class id of `name`, adding the class if new.
    fn intern_class(&mut self, name: &str) -> Result<ClassId, CrushError> {
        if let Ok(id) = self.class_id(name) {
            return Ok(id);
        }
        validate_name(name)?;
        if self.data.classes.len() >= MAX_CLASSES {
            return Err(CrushError::Invalid(format!(
                "more than {MAX_CLASSES} device classes"
            )));
        }
        self.data.classes.push(name.to_string());
        Ok((self.data.classes.len() - 1) as ClassId)
    }

    /// A new root-level bucket.
    fn create_bucket(&mut self, name: &str, type_id: TypeId) -> Result<ItemId, CrushError> {
        validate_name(name)?;
        if osd_name_id(name).is_some() {
            return Err(CrushError::InvalidName {
                name: name.to_string(),
                reason: "osd.N names OSDs".into(),
            });
        }
        if self.bucket_id(name).is_some() {
            return Err(CrushError::Exists(name.to_string()));
        }
        let id = self.data.next_bucket_id;
        self.data.next_bucket_id = id
            .checked_sub(1)
            .ok_or_else(|| CrushError::Invalid("out of bucket ids".into()))?;
        let bucket = Bucket {
            id,
            name: name.to_string(),
            type_id,
            parent: None,
            items: Vec::new(),
        };
        self.data.buckets.insert(id, bucket);
        Ok(id)
    }

    /// The location's pairs as `(type id, bucket name)`, lowest type first.
    /// Any bucket type may be named (as in Ceph; loops are what is
    /// refused), but not `osd`.
    fn resolve(&self, location: &Location) -> Result<Vec<(TypeId, String)>, CrushError> {
        let mut resolved = Vec::new();
        for (kind, name) in location.pairs() {
            let type_id = self.type_id(kind)?;
            if type_id == DEVICE_TYPE {
                return Err(CrushError::InvalidLocation {
                    text: location.to_string(),
                    reason: format!("'{kind}' is not a bucket type"),
                });
            }
            resolved.push((type_id, name.clone()));
        }
        resolved.sort();
        Ok(resolved)
    }

    /// Is `item` directly in the bucket the location names for its lowest
    /// type?
    fn is_at(&self, item: ItemId, location: &Location) -> Result<bool, CrushError> {
        let resolved = self.resolve(location)?;
        let Some((_, name)) = resolved.first() else {
            return Ok(false);
        };
        Ok(self.bucket_id(name).is_some() && self.parent_of(item) == self.bucket_id(name))
    }

    /// Put a detached `item` at `location`: into the bucket named for the
    /// lowest type, creating missing buckets, each inside the next named,
    /// up to the first that exists.
    fn link(&mut self, item: ItemId, location: &Location) -> Result<(), CrushError> {
        let resolved = self.resolve(location)?;
        let mut child = item;
        for (type_id, name) in resolved {
            match self.bucket_id(&name) {
                Some(existing) => {
                    let have = self.type_of(existing).unwrap_or(type_id);
                    if have != type_id {
                        return Err(CrushError::InvalidLocation {
                            text: location.to_string(),
                            reason: format!(
                                "{name} is a {}, not a {}",
                                self.type_name(have),
                                self.type_name(type_id)
                            ),
                        });
                    }
                    if self.is_within(existing, item) {
                        return Err(CrushError::Loop {
                            item: self.item_name(item),
                            target: name,
                        });
                    }
                    return self.attach(child, existing);
                }
                None => {
                    let created = self.create_bucket(&name, type_id)?;
                    self.attach(child, created)?;
                    child = created;
                }
            }
        }
        Ok(())
    }

    /// Make `child` (detached) an item of `parent`.
    fn attach(&mut self, child: ItemId, parent: ItemId) -> Result<(), CrushError> {
        if let Some(b) = self.data.buckets.get_mut(&parent) {
            b.items.push(child);
        }
        if child >= 0 {
            if let Some(d) = self.data.devices.get_mut(&(child as OsdId)) {
                d.parent = parent;
            }
        } else if let Some(b) = self.data.buckets.get_mut(&child) {
            b.parent = Some(parent);
        }
        if self.depth_of(child).is_none()
            || self.subtree_height(child) + self.depth(child) > MAX_DEPTH
        {
            return Err(CrushError::Invalid(format!(
                "the hierarchy would be deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(())
    }

    /// Take `item` out of its parent (devices keep a stale parent until
    /// linked again).
    fn unlink(&mut self, item: ItemId) {
        let Some(parent) = self.parent_of(item) else {
            return;
        };
        if let Some(b) = self.data.buckets.get_mut(&parent) {
            b.items.retain(|&i| i != item);
        }
        if let Some(b) = self.data.buckets.get_mut(&item) {
            b.parent = None;
        }
    }

    fn depth(&self, item: ItemId) -> usize {
        self.depth_of(item).unwrap_or(MAX_DEPTH + 1)
    }

    /// Levels of buckets below `item` (0 for a device or an empty bucket).
    fn subtree_height(&self, item: ItemId) -> usize {
        let mut level = vec![item];
        for height in 0..=MAX_DEPTH {
            let next: Vec<ItemId> = level
                .iter()
                .filter_map(|i| self.data.buckets.get(i))
                .flat_map(|b| b.items.iter().copied())
                .collect();
            if next.is_empty() {
                return height;
            }
            level = next;
        }
        MAX_DEPTH + 1
    }
}
