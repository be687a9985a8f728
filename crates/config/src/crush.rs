//! Syntax checks for the CRUSH options (`mon.crush_bucket_types`,
//! `mon.osd_crush_chooseleaf_type`, `osd.crush_location`,
//! `osd.crush_device_class`, `osd.crush_initial_weight`) and the checks
//! between them: a location or failure domain must name a configured type.
//!
//! Whether a location's buckets exist is the monitor's business; this only
//! refuses what can never be right.

/// The type of devices, always present below the configured bucket types.
const DEVICE_TYPE: &str = "osd";

/// A bucket, type or class name: 1 to 64 of `A-Z a-z 0-9 _ . -`, not
/// starting with `.` or `-`.
pub(crate) fn crush_name(v: &str) -> Result<(), String> {
    let ok_chars = v
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if v.is_empty() || v.len() > 64 || !ok_chars || v.starts_with(['.', '-']) {
        return Err(format!(
            "expected a name of 1-64 characters of A-Z a-z 0-9 _ . -, got {v:?}"
        ));
    }
    Ok(())
}

/// Empty (detect), or a class name.
pub(crate) fn device_class(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    crush_name(v)
}

/// Space-separated bucket types, lowest first; `host` and `root` needed.
pub(crate) fn bucket_types(v: &str) -> Result<(), String> {
    let types: Vec<&str> = v.split_whitespace().collect();
    for (i, t) in types.iter().enumerate() {
        crush_name(t)?;
        if *t == DEVICE_TYPE {
            return Err("osd is the device type, always first; list the types above it".into());
        }
        if types[..i].contains(t) {
            return Err(format!("type {t:?} is given twice"));
        }
    }
    for needed in ["host", "root"] {
        if !types.contains(&needed) {
            return Err(format!("the types must include {needed:?}, got {v:?}"));
        }
    }
    Ok(())
}

/// `type=name` pairs separated by spaces or commas (empty: `host=<this
/// machine's name>`).
pub(crate) fn location(v: &str) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    for token in location_tokens(v) {
        let Some((kind, name)) = token.split_once('=') else {
            return Err(format!("expected type=name pairs, got {token:?}"));
        };
        crush_name(kind)?;
        crush_name(name)?;
        if seen.contains(&kind) {
            return Err(format!("type {kind:?} is given twice"));
        }
        seen.push(kind);
    }
    Ok(())
}

fn location_tokens(v: &str) -> impl Iterator<Item = &str> {
    v.split([' ', ',', '\t']).filter(|t| !t.is_empty())
}

/// Empty (from the device's size), or a decimal number of TiB below 65536
/// with at most nine digits after the point.
pub(crate) fn weight(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let fits = whole.parse::<u32>().map_or(whole.is_empty(), |w| w < 65536);
    if whole.is_empty() && frac.is_empty()
        || !digits(whole)
        || !digits(frac)
        || !fits
        || frac.len() > 9
    {
        return Err(format!(
            "expected a weight in TiB such as 1.5 (below 65536), or empty for the device size; got {v:?}"
        ));
    }
    Ok(())
}

/// The types a location or failure domain may name: `osd` and the
/// configured bucket types.
fn known_types(bucket_types: &str) -> Vec<&str> {
    std::iter::once(DEVICE_TYPE)
        .chain(bucket_types.split_whitespace())
        .collect()
}

/// `mon.osd_crush_chooseleaf_type` must be a known type.
pub(crate) fn check_failure_domain(bucket_types: &str, domain: &str) -> Result<(), String> {
    let known = known_types(bucket_types);
    if known.contains(&domain) {
        Ok(())
    } else {
        Err(format!(
            "must be one of {} (mon.crush_bucket_types), got {domain:?}",
            known.join("|")
        ))
    }
}

/// Every type in `osd.crush_location` must be a configured bucket type.
pub(crate) fn check_location_types(bucket_types: &str, location: &str) -> Result<(), String> {
    let known: Vec<&str> = bucket_types.split_whitespace().collect();
    for token in location_tokens(location) {
        let kind = token.split_once('=').map_or(token, |(k, _)| k);
        if !known.contains(&kind) {
            return Err(format!(
                "unknown bucket type {kind:?} (mon.crush_bucket_types: {})",
                known.join(" ")
            ));
        }
    }
    Ok(())
}
