//! The CRUSH map: where every OSD sits in the cluster's failure-domain
//! hierarchy, and the rules that turn a PG's placement input into OSDs in
//! distinct failure domains (Ceph's CRUSH, written from its published
//! behaviour).
//!
//! This crate owns
//! - the hierarchy ([`CrushMap`]): bucket *types* (`osd` = 0, then e.g.
//!   host, rack, row, datacenter, root), *buckets* (negative ids, a name, a
//!   type, items), *devices* (OSDs, with a CRUSH weight in 16.16 fixed-point
//!   TiB and a device class such as `hdd`, `ssd`, `nvme`), several roots;
//! - its edits (`add_bucket`, `move_item`, `remove_item`, `reweight`,
//!   `set_device_class`, `create_replicated_rule`, `boot_device`), each
//!   validated, atomic (an error changes nothing) and refusing loops;
//! - replicated *rules* (`take ROOT [class C]`, `chooseleaf firstn N type
//!   T`, `emit`) and their evaluation ([`CrushMap::map_rule`]): straw2 at
//!   every level, through `cairn-placement`'s [`straw2_draw`];
//! - the check that a rule can place `size` replicas at all
//!   ([`CrushMap::check_rule`]).
//!
//! It must never do I/O, read clocks or randomness, or use floating point
//! in placement: every client, OSD and monitor computes the same OSDs from
//! the same map. (Weights are shown as TiB decimals only when formatted.)
//!
//! # Weights and classes
//!
//! A device's weight is set once, when it joins the map (by default its
//! size in TiB, [`weight_from_bytes`]), and changed only by
//! [`CrushMap::reweight`]. A bucket's weight is the sum of its items'. A
//! rule with `class C` sees the *class view* of the tree (Ceph's shadow
//! trees): a bucket weighs the sum of its class-C devices, other devices
//! weigh nothing. Both views are derived after every edit and never
//! serialized.
//!
//! [`straw2_draw`]: cairn_placement::straw2_draw

mod edit;
mod location;
mod map;
mod mapper;

#[cfg(test)]
mod tests;

pub use location::{
    format_weight, parse_weight, validate_name, weight_from_bytes, DeviceReport, Location,
};
pub use map::{Bucket, CrushMap, Device, Rule, TreeNode};
pub use mapper::CHOOSE_TOTAL_TRIES;

/// An item of the hierarchy: a device (`>= 0`, the OSD id) or a bucket
/// (`< 0`).
pub type ItemId = i32;
/// A bucket type: an index into the map's type list; 0 is `osd`.
pub type TypeId = u16;
/// A device class: an index into the map's class list.
pub type ClassId = u16;
/// A rule's id, referenced by pools.
pub type RuleId = u32;

/// The type of devices (OSDs).
pub const DEVICE_TYPE: TypeId = 0;
/// The name of [`DEVICE_TYPE`].
pub const DEVICE_TYPE_NAME: &str = "osd";
/// Weight 1.0 (one TiB) in 16.16 fixed point.
pub const WEIGHT_ONE: u32 = 0x10000;
/// Bucket types of a new cluster, lowest first (after `osd`).
pub const DEFAULT_BUCKET_TYPES: [&str; 5] = ["host", "rack", "row", "datacenter", "root"];
/// The root every new cluster has, and where OSDs go when their location
/// names no root.
pub const DEFAULT_ROOT: &str = "default";
/// The rule every new cluster has; pools use it unless told otherwise.
pub const DEFAULT_RULE: &str = "replicated_rule";
/// The class of a device whose kind cannot be detected.
pub const DEFAULT_CLASS: &str = "ssd";
/// Deepest hierarchy (levels of buckets below a root) accepted.
pub const MAX_DEPTH: usize = 16;
/// Most replicas a rule places.
pub const MAX_REPLICAS: usize = 16;
/// Most bucket types a map may have.
pub const MAX_TYPES: usize = 32;
/// Most device classes a map may have.
pub const MAX_CLASSES: usize = 64;
/// Largest OSD id the hierarchy can hold (ids share `i32` with buckets).
pub const MAX_OSD_ID: u32 = i32::MAX as u32;

/// Why a CRUSH query or edit was refused. Every message is one line that
/// names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrushError {
    #[error("no bucket or OSD named '{0}' in the CRUSH map")]
    UnknownItem(String),
    #[error("unknown bucket type '{name}' (types: {known})")]
    UnknownType { name: String, known: String },
    #[error("unknown device class '{name}' (classes: {known})")]
    UnknownClass { name: String, known: String },
    #[error("unknown CRUSH rule '{name}' (rules: {known})")]
    UnknownRule { name: String, known: String },
    #[error("'{0}' already exists in the CRUSH map")]
    Exists(String),
    #[error("invalid name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("invalid CRUSH location '{text}': {reason}")]
    InvalidLocation { text: String, reason: String },
    #[error("invalid weight '{text}': {reason}")]
    InvalidWeight { text: String, reason: String },
    #[error("moving {item} under {target} would create a loop ({target} is inside {item})")]
    Loop { item: String, target: String },
    #[error("bucket '{name}' is not empty ({items} items): move or remove them first")]
    NotEmpty { name: String, items: usize },
    #[error("bucket '{name}' is the root of rule '{rule}'")]
    InUse { name: String, rule: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{}", unsatisfiable(.rule, .domain, .under, .class, *.available, *.size))]
    Unsatisfiable {
        rule: String,
        domain: String,
        under: String,
        class: String,
        available: usize,
        size: usize,
    },
    #[error("corrupt CRUSH map: {0}")]
    Corrupt(String),
}

/// The text of [`CrushError::Unsatisfiable`]: "rule r places replicas on
/// distinct hosts, but only 2 hosts have in OSDs; size 3 cannot be met".
fn unsatisfiable(
    rule: &str,
    domain: &str,
    under: &str,
    class: &str,
    available: usize,
    size: usize,
) -> String {
    let have = match available {
        0 => format!("no {domain}{under} has"),
        1 => format!("only 1 {domain}{under} has"),
        n => format!("only {n} {domain}s{under} have"),
    };
    format!(
        "rule {rule} places replicas on distinct {domain}s, but {have} in OSDs{class}; \
         size {size} cannot be met"
    )
}
