//! Rule evaluation: `take ROOT [class C]`, `chooseleaf firstn N type T`,
//! `emit`, with a straw2 draw at every level of the hierarchy.
//!
//! For replica `rep`, try `t` (0, 1, …, [`CHOOSE_TOTAL_TRIES`] - 1) uses
//! draw number `r = rep + t * RETRY_STRIDE`. From the root, draw an item
//! among the bucket's items by their weights in the rule's view; descend
//! into it with the same `r` until an item of type `T` (the *failure
//! domain*) is drawn. Then draw a device under it the same way (Ceph's
//! stable chooseleaf, descending once). The try is rejected, and the next
//! try made, if the failure domain was already chosen, no item of the
//! wanted type could be drawn, or the device is out. A replica whose every
//! try fails is left out (the result is then shorter than asked).
//!
//! Because every draw is straw2, a change to one item's weight only moves
//! wins to or from that item at its level; retries use fresh draw numbers,
//! so a rejection for one replica never shifts another's choice. This
//! module must never allocate per draw or use floating point.

use cairn_placement::{straw2_draw, RETRY_STRIDE};
use cairn_types::OsdId;

use crate::{ClassId, CrushError, CrushMap, ItemId, Rule, RuleId, TypeId, DEVICE_TYPE, MAX_DEPTH};

/// Tries per replica before it is left out (Ceph's `choose_total_tries`).
pub const CHOOSE_TOTAL_TRIES: u32 = 50;

impl Rule {
    /// How many replicas the rule places for a pool of `size`.
    pub fn replicas(&self, size: usize) -> usize {
        let size_i = i64::try_from(size).unwrap_or(i64::MAX);
        let n = match i64::from(self.count) {
            0 => size_i,
            c if c < 0 => size_i + c,
            c => c.min(size_i),
        };
        usize::try_from(n.max(0)).unwrap_or(0)
    }
}

impl CrushMap {
    /// The OSDs rule `rule` places input `x` on for a pool of `size`, in
    /// order (the first is the primary): distinct OSDs in distinct failure
    /// domains, none for which `is_in` is false. Shorter than `size` when
    /// the hierarchy cannot give more; empty for an unknown rule.
    pub fn map_rule(
        &self,
        rule: RuleId,
        x: u32,
        size: usize,
        is_in: impl Fn(OsdId) -> bool,
    ) -> Vec<OsdId> {
        let Some(rule) = self.rule(rule) else {
            return Vec::new();
        };
        let n = rule.replicas(size).min(crate::MAX_REPLICAS);
        let mut domains: Vec<ItemId> = Vec::with_capacity(n);
        let mut osds: Vec<OsdId> = Vec::with_capacity(n);
        for rep in 0..n as u32 {
            for attempt in 0..CHOOSE_TOTAL_TRIES {
                let r = rep.wrapping_add(attempt.wrapping_mul(RETRY_STRIDE));
                let Some(domain) = self.descend(rule.root, x, r, rule.failure_domain, rule.class)
                else {
                    continue;
                };
                if domains.contains(&domain) {
                    continue;
                }
                let leaf = match OsdId::try_from(domain) {
                    Ok(osd) => Some(osd),
                    Err(_) => self
                        .descend(domain, x, r, DEVICE_TYPE, rule.class)
                        .and_then(|item| OsdId::try_from(item).ok()),
                };
                let Some(osd) = leaf.filter(|&osd| is_in(osd)) else {
                    continue;
                };
                domains.push(domain);
                osds.push(osd);
                break;
            }
        }
        self.assert_distinct(&domains, &osds, rule);
        osds
    }

    /// Draw down from bucket `start` with draw number `r` until an item of
    /// type `want` comes up. `None` if a bucket has nothing of weight in
    /// the view, or a device comes up while a bucket type is wanted.
    fn descend(
        &self,
        start: ItemId,
        x: u32,
        r: u32,
        want: TypeId,
        class: Option<ClassId>,
    ) -> Option<ItemId> {
        let mut bucket = start;
        for _ in 0..MAX_DEPTH {
            let items = &self.data.buckets.get(&bucket)?.items;
            let weights = self.item_weights(bucket, class);
            let keyed = items.iter().zip(weights).map(|(&i, &w)| (i as u32, w));
            let item = items[straw2_draw(x, r, keyed)?];
            match self.type_of(item)? {
                t if t == want => return Some(item),
                DEVICE_TYPE => return None,
                _ => bucket = item,
            }
        }
        None
    }

    /// Placement's invariant: distinct OSDs in distinct failure domains,
    /// each inside its domain.
    fn assert_distinct(&self, domains: &[ItemId], osds: &[OsdId], rule: &Rule) {
        for (i, (d, o)) in domains.iter().zip(osds).enumerate() {
            assert!(
                !domains[..i].contains(d) && !osds[..i].contains(o),
                "rule {} placed {osds:?} in domains {domains:?}",
                rule.name
            );
            debug_assert!(self.is_within(*o as ItemId, *d), "osd.{o} is not in {d}");
        }
    }

    /// Can rule `rule` place `size` replicas on the OSDs for which `is_in`
    /// holds? Counts the failure domains under the rule's root (in its class
    /// view) holding at least one such OSD of nonzero weight.
    pub fn check_rule(
        &self,
        rule: RuleId,
        size: usize,
        is_in: impl Fn(OsdId) -> bool,
    ) -> Result<(), CrushError> {
        let rule = self.rule(rule).ok_or_else(|| CrushError::UnknownRule {
            name: format!("id {rule}"),
            known: self.known(self.rules().map(|r| r.name.as_str())),
        })?;
        let want = rule.replicas(size);
        let available = self.domains_with_in(rule, &is_in);
        if available >= want {
            return Ok(());
        }
        let root = self.item_name(rule.root);
        let domain = self.type_name(rule.failure_domain).to_string();
        Err(CrushError::Unsatisfiable {
            rule: rule.name.clone(),
            under: if root == crate::DEFAULT_ROOT {
                String::new()
            } else {
                format!(" under {root}")
            },
            class: rule
                .class
                .map(|c| format!(" of class {}", self.class_name(c)))
                .unwrap_or_default(),
            domain,
            available,
            size: want,
        })
    }

    /// Failure domains of `rule` with an in OSD of weight in its view.
    fn domains_with_in(&self, rule: &Rule, is_in: &impl Fn(OsdId) -> bool) -> usize {
        let mut count = 0;
        let mut level = vec![rule.root];
        for _ in 0..=MAX_DEPTH {
            let mut next = Vec::new();
            for item in level {
                let weighty = self.view_weight(item, rule.class) > 0;
                if !weighty && item != rule.root {
                    continue;
                }
                if item != rule.root && self.type_of(item) == Some(rule.failure_domain) {
                    count += usize::from(self.has_in_device(item, rule.class, is_in));
                } else if let Some(b) = self.bucket(item) {
                    next.extend(b.items.iter().copied());
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
        count
    }

    /// Does `item` hold (or is it) an in device of weight in the view?
    fn has_in_device(
        &self,
        item: ItemId,
        class: Option<ClassId>,
        is_in: &impl Fn(OsdId) -> bool,
    ) -> bool {
        let mut level = vec![item];
        for _ in 0..=MAX_DEPTH {
            let mut next = Vec::new();
            for i in level {
                if self.view_weight(i, class) == 0 {
                    continue;
                }
                match OsdId::try_from(i) {
                    Ok(osd) if is_in(osd) => return true,
                    Ok(_) => {}
                    Err(_) => next.extend(self.bucket(i).into_iter().flat_map(|b| &b.items)),
                }
            }
            if next.is_empty() {
                return false;
            }
            level = next;
        }
        false
    }
}
