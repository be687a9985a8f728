//! Compaction of a log sent to a member catching up: only the newest entry
//! per object goes whole, the older ones ride in it as [`Superseded`]
//! versions, request ids and ops (see the parent module). What a member
//! must fetch or remove depends only on each object's newest entry, so a
//! compacted catch-up costs the objects changed, not the writes made.
//!
//! It must never drop a version: a merge tells the PG's history from a
//! member's divergent changes by the versions the authority holds, one
//! change at a time (a compacted entry may be history in part).

use std::collections::HashMap;

use cairn_types::{ReqId, Version};
use cairn_wire::{LogEntry, LogOp, Superseded};

use super::MergeError;

/// One change of the PG's history a log entry stands for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Change<'a> {
    pub version: Version,
    /// The object's version before the change (ZERO: it did not exist).
    pub prior: Version,
    pub reqid: Option<ReqId>,
    pub op: LogOp,
    pub entry: &'a LogEntry,
}

/// The object's version after a change of `op` at `version`.
fn after(version: Version, op: LogOp) -> Version {
    match op {
        LogOp::Modify => version,
        LogOp::Delete => Version::ZERO,
    }
}

/// The changes `entry` stands for, oldest first: its folded ones, then
/// its own.
pub(super) fn changes(entry: &LogEntry) -> impl Iterator<Item = Change<'_>> + '_ {
    let own = Superseded {
        version: entry.version,
        reqid: entry.reqid,
        op: entry.op,
    };
    let mut prior = entry.prior_version;
    entry
        .superseded
        .iter()
        .copied()
        .chain(std::iter::once(own))
        .map(move |s| {
            let change = Change {
                version: s.version,
                prior,
                reqid: s.reqid,
                op: s.op,
                entry,
            };
            prior = after(s.version, s.op);
            change
        })
}

/// Split `entry` at `upto`: what of it is at or before (its newest such
/// change as a whole entry, the older folded into it), and what is after.
pub(super) fn cut(entry: &LogEntry, upto: Version) -> (Option<LogEntry>, Option<LogEntry>) {
    if entry.version <= upto {
        return (Some(entry.clone()), None);
    }
    let held = entry.superseded.partition_point(|s| s.version <= upto);
    let rest = LogEntry {
        prior_version: match held.checked_sub(1) {
            Some(last) => after(entry.superseded[last].version, entry.superseded[last].op),
            None => entry.prior_version,
        },
        superseded: entry.superseded[held..].to_vec(),
        ..entry.clone()
    };
    let remnant = held.checked_sub(1).map(|last| {
        let newest = entry.superseded[last];
        LogEntry {
            version: newest.version,
            prior_version: entry.prior_version,
            reqid: newest.reqid,
            oid: entry.oid.clone(),
            op: newest.op,
            superseded: entry.superseded[..last].to_vec(),
        }
    });
    (remnant, Some(rest))
}

/// The log's `entries` (sorted) compacted for a member that holds the
/// history up to `after`: the newest entry per object, with the older ones
/// (and whatever was folded into them) folded in, minus changes at or
/// before `after`.
pub fn compact<'a>(entries: impl Iterator<Item = &'a LogEntry>, after: Version) -> Vec<LogEntry> {
    let entries: Vec<&LogEntry> = entries.collect();
    // Each entry's object as a small index (one hash per entry), and per
    // object its newest entry, the oldest folded one's prior version and
    // the folded so far.
    let mut index: HashMap<&str, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(64, Default::default());
    let mut object = Vec::with_capacity(entries.len());
    let mut newest: Vec<usize> = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        let next = index.len();
        let i = *index.entry(entry.oid.as_str()).or_insert(next);
        if i == next {
            newest.push(at);
        } else {
            newest[i] = at;
        }
        object.push(i);
    }
    let mut folded: Vec<Option<(Version, Vec<Superseded>)>> = vec![None; newest.len()];
    let mut out = Vec::with_capacity(newest.len());
    for (at, entry) in entries.iter().enumerate() {
        let i = object[at];
        if newest[i] != at {
            let (_, list) = folded[i].get_or_insert_with(|| (entry.prior_version, Vec::new()));
            list.extend(changes(entry).map(|c| Superseded {
                version: c.version,
                reqid: c.reqid,
                op: c.op,
            }));
            continue;
        }
        let kept = match folded[i].take() {
            Some((prior, mut older)) => {
                older.extend_from_slice(&entry.superseded);
                if !older.is_sorted_by_key(|s| s.version) {
                    older.sort_unstable_by_key(|s| s.version);
                }
                // A log never holds a version twice (what a member takes
                // from a peer is checked by `check_unique`).
                assert!(
                    older.windows(2).all(|w| w[0].version < w[1].version),
                    "log holds a version of {oid:?} twice",
                    oid = entry.oid
                );
                LogEntry {
                    prior_version: prior,
                    superseded: older,
                    ..(*entry).clone()
                }
            }
            None => (*entry).clone(),
        };
        if kept.superseded.first().is_some_and(|s| s.version <= after) {
            // The member holds part of it already: send the rest.
            out.extend(cut(&kept, after).1);
        } else if kept.version > after {
            out.push(kept);
        }
    }
    out
}

/// Refuse entries from a peer whose versions do not ascend: across the
/// entries, and within each one (its folded versions, then its own).
pub fn check_order(entries: &[LogEntry]) -> Result<(), MergeError> {
    let mut last: Option<Version> = None;
    for entry in entries {
        let mut before = None;
        let folded = entry.superseded.iter().map(|s| s.version);
        for version in folded.chain(std::iter::once(entry.version)) {
            if let Some(after) = before.filter(|&b| b >= version) {
                return Err(MergeError::Unordered { after, at: version });
            }
            before = Some(version);
        }
        if let Some(after) = last.filter(|&l| l >= entry.version) {
            return Err(MergeError::Unordered {
                after,
                at: entry.version,
            });
        }
        last = Some(entry.version);
    }
    Ok(())
}

/// Refuse entries from a peer that hold a version twice, whole or folded
/// (a later merge would find two changes at one version).
pub fn check_unique(entries: &[LogEntry]) -> Result<(), MergeError> {
    let folded: usize = entries.iter().map(|e| e.superseded.len()).sum();
    let mut seen: std::collections::HashSet<Version, foldhash::fast::RandomState> =
        std::collections::HashSet::with_capacity_and_hasher(
            entries.len() + folded,
            Default::default(),
        );
    for entry in entries {
        let versions = entry.superseded.iter().map(|s| s.version);
        for version in versions.chain(std::iter::once(entry.version)) {
            if !seen.insert(version) {
                return Err(MergeError::Duplicate { version });
            }
        }
    }
    Ok(())
}
