//! The small values of the CRUSH vocabulary as text: names, locations
//! (`host=h1 rack=r1`), weights (TiB decimals ↔ 16.16 fixed point), and
//! what a booting OSD reports about itself ([`DeviceReport`]).
//!
//! Parsing is strict (a bad token is an error naming it) and integer-only;
//! floating point appears only in [`format_weight`], for display.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{CrushError, DEFAULT_CLASS, DEFAULT_ROOT, WEIGHT_ONE};

/// Longest name of a bucket, type, class or rule.
pub const MAX_NAME_LEN: usize = 64;
/// Most `type=name` pairs in a location.
pub const MAX_LOCATION_PAIRS: usize = 32;

/// Check a bucket, type, class or rule name: 1 to 64 characters of
/// `A-Z a-z 0-9 _ . -`, not starting with `.` or `-`.
pub fn validate_name(name: &str) -> Result<(), CrushError> {
    let bad = |reason: &str| CrushError::InvalidName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(bad("use 1-64 characters of A-Z a-z 0-9 _ . -"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(bad("use only A-Z a-z 0-9 _ . -"));
    }
    if name.starts_with(['.', '-']) {
        return Err(bad("must not start with '.' or '-'"));
    }
    Ok(())
}

/// The OSD id of a device name `osd.N` (canonical decimal), if it is one.
pub(crate) fn osd_name_id(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("osd.")?;
    let id: u32 = digits.parse().ok()?;
    (id.to_string() == digits).then_some(id)
}

/// A position in the hierarchy as `type=name` pairs, e.g. `host=h1
/// rack=r1 root=default`: the item goes into the bucket of the lowest type
/// named, and buckets that do not exist yet are created, each inside the
/// next one named (Ceph's `crush_location`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Location {
    pairs: Vec<(String, String)>,
}

impl Location {
    /// Parse `type=name` pairs separated by spaces or commas. Names and
    /// types are checked for syntax only; whether the types exist is the
    /// map's business. An empty text is the empty location.
    pub fn parse(text: &str) -> Result<Location, CrushError> {
        let bad = |reason: String| CrushError::InvalidLocation {
            text: text.to_string(),
            reason,
        };
        let mut pairs: Vec<(String, String)> = Vec::new();
        for token in text.split([' ', ',', '\t']).filter(|t| !t.is_empty()) {
            let Some((kind, name)) = token.split_once('=') else {
                return Err(bad(format!("expected type=name, got '{token}'")));
            };
            validate_name(kind).map_err(|e| bad(e.to_string()))?;
            validate_name(name).map_err(|e| bad(e.to_string()))?;
            if pairs.iter().any(|(k, _)| k == kind) {
                return Err(bad(format!("type '{kind}' is given twice")));
            }
            if pairs.len() == MAX_LOCATION_PAIRS {
                return Err(bad(format!("more than {MAX_LOCATION_PAIRS} pairs")));
            }
            pairs.push((kind.to_string(), name.to_string()));
        }
        Ok(Location { pairs })
    }

    /// A location from pairs (checked like [`Location::parse`]).
    pub fn from_pairs<K: AsRef<str>, N: AsRef<str>>(
        pairs: &[(K, N)],
    ) -> Result<Location, CrushError> {
        let text: Vec<String> = pairs
            .iter()
            .map(|(k, n)| format!("{}={}", k.as_ref(), n.as_ref()))
            .collect();
        Location::parse(&text.join(" "))
    }

    /// The `(type, name)` pairs, in the order given.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The bucket named for `kind`, if any.
    pub fn get(&self, kind: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, n)| n.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// This location with `root=default` added if it names no root, as an
    /// OSD's stated location is read.
    pub fn with_default_root(&self) -> Location {
        let mut loc = self.clone();
        if loc.get("root").is_none() && loc.pairs.len() < MAX_LOCATION_PAIRS {
            loc.pairs.push(("root".into(), DEFAULT_ROOT.into()));
        }
        loc
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (kind, name)) in self.pairs.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{kind}={name}")?;
        }
        Ok(())
    }
}

/// Most fraction digits a weight may be written with.
const MAX_WEIGHT_DIGITS: u32 = 9;

/// Parse a weight in TiB as a decimal (`1`, `0.5`, `3.64`) into 16.16
/// fixed point, rounded to the nearest step; integer arithmetic only.
pub fn parse_weight(text: &str) -> Result<u32, CrushError> {
    let bad = |reason: &str| CrushError::InvalidWeight {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let (int_part, frac_part) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if int_part.is_empty() && frac_part.is_empty() || !digits(int_part) || !digits(frac_part) {
        return Err(bad(
            "expected a non-negative decimal number of TiB, e.g. 1.5",
        ));
    }
    if frac_part.len() > MAX_WEIGHT_DIGITS as usize {
        return Err(bad("at most 9 digits after the point"));
    }
    let too_big = || bad("must be below 65536");
    let whole: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| too_big())?
    };
    let scale = 10u64.pow(frac_part.len() as u32);
    let frac: u64 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().map_err(|_| bad("bad fraction"))?
    };
    let fixed_frac = (frac * u64::from(WEIGHT_ONE) + scale / 2) / scale;
    let fixed = whole
        .checked_mul(u64::from(WEIGHT_ONE))
        .and_then(|w| w.checked_add(fixed_frac))
        .ok_or_else(too_big)?;
    u32::try_from(fixed).map_err(|_| too_big())
}

/// A 16.16 fixed-point weight as TiB with five decimals (display only).
pub fn format_weight(weight: u64) -> String {
    format!("{:.5}", weight as f64 / f64::from(WEIGHT_ONE))
}

/// The default CRUSH weight of a device of `bytes`: its size in TiB in 16.16
/// fixed point (1 TiB = `0x10000`, as Ceph), at least 1 so that a small
/// test device still gets data, at most `u32::MAX`.
pub fn weight_from_bytes(bytes: u64) -> u32 {
    u32::try_from(bytes >> 24).unwrap_or(u32::MAX).max(1)
}

/// What a booting OSD tells the monitor about its place in the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Where the OSD says it is; a missing `root` means `root=default`.
    pub location: Location,
    /// Move an OSD already in the map to `location` if it sits elsewhere
    /// (Ceph's `osd_crush_update_on_start`). A new OSD is always placed
    /// at `location`.
    pub update_location: bool,
    /// The device class (`hdd`, `ssd`, `nvme`, or any configured name).
    pub class: String,
    /// `class` was configured rather than detected: it replaces the class
    /// of an OSD already in the map (a detected one only applies to a new
    /// OSD, so `set-device-class` survives restarts).
    pub class_configured: bool,
    /// The data device's size in bytes (0 if unknown).
    pub size_bytes: u64,
    /// A configured initial CRUSH weight (16.16); `None`: from the size.
    pub initial_weight: Option<u32>,
}

impl DeviceReport {
    /// A report with no location and weight `weight`, as from an OSD that
    /// states nothing: a new OSD goes to `host=localhost root=default`.
    pub fn unlocated(weight: u32) -> DeviceReport {
        DeviceReport {
            location: Location {
                pairs: vec![("host".into(), "localhost".into())],
            },
            update_location: false,
            class: DEFAULT_CLASS.into(),
            class_configured: false,
            size_bytes: 0,
            initial_weight: Some(weight),
        }
    }

    /// The CRUSH weight a new OSD gets.
    pub fn weight(&self) -> u32 {
        self.initial_weight
            .unwrap_or_else(|| weight_from_bytes(self.size_bytes))
    }
}
