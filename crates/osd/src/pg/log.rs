//! The PG log in memory, the request-id index that makes resent requests
//! apply once, and the merge of an authoritative log into a member's own.
//!
//! A log covers the versions `(tail, head]`. Versions order by epoch, then
//! counter; an interval's primary assigns versions with epochs no older
//! than the interval, so a later read-write interval's entries always sort
//! after an earlier one's. Merging (run by every member at activation, and
//! by a primary that is not the authority during peering) keeps the
//! member's entries up to the newest one the authority also has, rolls back
//! the rest (*divergent* entries: applied here, never acknowledged, not
//! part of the PG's history), takes the authority's newer entries, and says
//! which objects must now be fetched (the missing set) or removed.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use cairn_types::{ReqId, Version};
use cairn_wire::{LogEntry, LogOp};

/// Objects a member must fetch, each at exactly the version given.
pub type Missing = BTreeMap<String, Version>;

#[derive(Clone, Debug, Default)]
pub struct PgLog {
    entries: VecDeque<LogEntry>,
    tail: Version,
    /// The PG's last update as of this log: the newest entry's version, or
    /// newer in a PG split off another, whose log holds only the entries
    /// of its own objects (the parent's head is its head).
    head: Version,
    reqids: HashMap<ReqId, Version>,
}

impl PgLog {
    /// A log of `entries` (sorted, all after `tail`), ending at the newest.
    pub fn new(tail: Version, entries: Vec<LogEntry>) -> Self {
        let head = entries.last().map_or(tail, |e| e.version);
        Self::with_head(tail, head, entries)
    }

    /// A log of `entries` (sorted, all in `(tail, head]`) covering the
    /// versions up to `head`.
    pub fn with_head(tail: Version, head: Version, entries: Vec<LogEntry>) -> Self {
        assert!(head >= tail, "log head {head} before its tail {tail}");
        let mut log = PgLog {
            entries: VecDeque::with_capacity(entries.len()),
            tail,
            head: tail,
            reqids: HashMap::new(),
        };
        for entry in entries {
            log.append(entry);
        }
        assert!(
            log.head <= head,
            "log entry {} after the log's head {head}",
            log.head
        );
        log.head = head;
        log
    }

    pub fn tail(&self) -> Version {
        self.tail
    }

    /// The version up to which this log covers the PG's history.
    pub fn head(&self) -> Version {
        self.head
    }

    /// The log split by object: entries `keep` accepts stay, the others
    /// go to the returned log; both keep this log's tail and head.
    pub fn split_off(&mut self, mut keep: impl FnMut(&LogEntry) -> bool) -> PgLog {
        let (stay, go): (Vec<LogEntry>, Vec<LogEntry>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| keep(e));
        *self = PgLog::with_head(self.tail, self.head, stay);
        PgLog::with_head(self.tail, self.head, go)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &LogEntry> + '_ {
        self.entries.iter()
    }

    /// Entries newer than `after`, oldest first.
    pub fn entries_after(&self, after: Version) -> impl Iterator<Item = &LogEntry> + '_ {
        let start = self.entries.partition_point(|e| e.version <= after);
        self.entries.range(start..)
    }

    /// The version of the entry at `index` (0: the oldest).
    pub fn version_at(&self, index: usize) -> Option<Version> {
        self.entries.get(index).map(|e| e.version)
    }

    pub fn contains(&self, version: Version) -> bool {
        self.get(version).is_some()
    }

    /// The entry at `version`, if logged.
    pub fn get(&self, version: Version) -> Option<&LogEntry> {
        let at = self
            .entries
            .binary_search_by(|e| e.version.cmp(&version))
            .ok()?;
        self.entries.get(at)
    }

    /// The version at which request `reqid` was applied, if still logged.
    pub fn find_reqid(&self, reqid: &ReqId) -> Option<Version> {
        self.reqids.get(reqid).copied()
    }

    /// Count the log as covering the PG's history up to `head`, past its
    /// newest entry (a split PG's log holds only its own objects').
    pub fn advance_head(&mut self, head: Version) {
        if head > self.head {
            self.head = head;
        }
    }

    /// Add the next entry. Versions only grow.
    pub fn append(&mut self, entry: LogEntry) {
        assert!(
            entry.version > self.head(),
            "log entry {} not after head {}",
            entry.version,
            self.head()
        );
        self.head = entry.version;
        if let Some(reqid) = entry.reqid {
            self.reqids.insert(reqid, entry.version);
        }
        self.entries.push_back(entry);
    }

    /// Drop the oldest entries beyond `keep`; returns the new tail if any
    /// were dropped.
    pub fn trim_to_len(&mut self, keep: usize) -> Option<Version> {
        if self.entries.len() <= keep {
            return None;
        }
        while self.entries.len() > keep {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            if let Some(reqid) = entry.reqid {
                if self.reqids.get(&reqid) == Some(&entry.version) {
                    self.reqids.remove(&reqid);
                }
            }
            self.tail = entry.version;
        }
        Some(self.tail)
    }
}

/// What merging an authoritative log into a member's produced.
#[derive(Debug)]
pub struct Merged {
    pub log: PgLog,
    /// The member's missing set after the merge (its earlier entries kept).
    pub missing: Missing,
    /// Objects to remove now: deleted by the authority's newer entries, or
    /// created only by divergent ones.
    pub remove: Vec<String>,
    /// Divergent entries rolled back.
    pub divergent: usize,
    /// Did the member's own log change other than by appending (so it must
    /// be rewritten rather than appended to)?
    pub rewritten: bool,
}

/// Why a member cannot catch up from the authoritative log.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("its log ends at {head}, before the authoritative log's tail {auth_tail}: it needs backfill")]
    Behind { head: Version, auth_tail: Version },
    #[error("its log diverges at {at}, before the authoritative log's tail {auth_tail}: it needs backfill")]
    DivergesBeforeTail { at: Version, auth_tail: Version },
    #[error("its log holds {version} for {ours:?} but the authority holds it for {theirs:?}")]
    Conflict {
        version: Version,
        ours: String,
        theirs: String,
    },
    #[error("the authoritative entries are out of order: {at} follows {after}")]
    Unordered { after: Version, at: Version },
}

/// Merge the authoritative log (`auth_tail`, `auth`, up to `auth_head`)
/// into `mine` (with its missing set). `local_version` gives an object's version in the member's
/// store (`None`: absent), so objects already right are not fetched.
pub fn merge(
    mine: &PgLog,
    my_missing: &Missing,
    auth_tail: Version,
    auth_head: Version,
    auth: &[LogEntry],
    local_version: impl Fn(&str) -> Option<Version>,
) -> Result<Merged, MergeError> {
    if mine.head() < auth_tail {
        return Err(MergeError::Behind {
            head: mine.head(),
            auth_tail,
        });
    }
    let auth_by_version: HashMap<Version, &LogEntry> =
        auth.iter().map(|e| (e.version, e)).collect();
    // Our entries the authority does not have are divergent; they form a
    // suffix of our log (once diverged, a member learns of no later history
    // without merging again).
    let ours: Vec<&LogEntry> = mine.entries_after(auth_tail).collect();
    let split = ours
        .iter()
        .position(|e| !auth_by_version.contains_key(&e.version))
        .unwrap_or(ours.len());
    for entry in &ours[..split] {
        let theirs = auth_by_version[&entry.version];
        if theirs.oid != entry.oid {
            return Err(MergeError::Conflict {
                version: entry.version,
                ours: entry.oid.clone(),
                theirs: theirs.oid.clone(),
            });
        }
    }
    let divergent = &ours[split..];
    if let Some(late) = divergent
        .iter()
        .find(|e| auth_by_version.contains_key(&e.version))
    {
        return Err(MergeError::Conflict {
            version: late.version,
            ours: late.oid.clone(),
            theirs: auth_by_version[&late.version].oid.clone(),
        });
    }
    let common = if split > 0 {
        ours[split - 1].version
    } else if ours.is_empty() {
        // Nothing of ours after the authority's tail, and our head reaches
        // it (checked above): our log records every change to this PG's
        // objects up to there. (A split PG's log holds only its own
        // objects' entries, so its newest may be older than that tail.)
        auth_tail.max(mine.tail())
    } else {
        // Nothing of ours after the authority's tail matches: the common
        // point is our newest entry at or before that tail.
        let kept = mine.entries().rev().find(|e| e.version <= auth_tail);
        kept.map_or(mine.tail(), |e| e.version)
    };
    if common < auth_tail {
        return Err(MergeError::DivergesBeforeTail {
            at: common,
            auth_tail,
        });
    }

    let mut missing = my_missing.clone();
    let mut remove: HashSet<String> = HashSet::new();
    // Roll back divergent entries: the object returns to its version
    // before the oldest divergent entry for it.
    let mut rolled_back: HashMap<&str, Version> = HashMap::new();
    for entry in divergent {
        rolled_back
            .entry(entry.oid.as_str())
            .or_insert(entry.prior_version);
    }
    for (oid, prior) in rolled_back {
        if prior == Version::ZERO {
            missing.remove(oid);
            remove.insert(oid.to_string());
        } else {
            missing.insert(oid.to_string(), prior);
            remove.remove(oid);
        }
    }
    // The authority's newer entries: the newest one per object decides.
    let newer: Vec<&LogEntry> = auth.iter().filter(|e| e.version > common).collect();
    take_newer(&mut missing, &mut remove, newer.iter().copied());
    let (missing, remove) = settle(missing, remove, &local_version);

    let mut kept: Vec<LogEntry> = mine
        .entries()
        .filter(|e| e.version <= common)
        .cloned()
        .collect();
    kept.extend(newer.into_iter().cloned());
    let head = kept.last().map_or(auth_head, |e| e.version.max(auth_head));
    let log = PgLog::with_head(mine.tail(), head.max(mine.tail()), kept);
    Ok(Merged {
        log,
        missing,
        remove,
        divergent: divergent.len(),
        rewritten: !divergent.is_empty(),
    })
}

/// What taking the authority's entries after this member's newest one
/// produced: nothing of the member's diverges, so its log only grows.
#[derive(Debug)]
pub struct Appended {
    /// The member's missing set after taking the entries.
    pub missing: Missing,
    /// Objects to remove now (deleted by the entries).
    pub remove: Vec<String>,
}

/// Take `entries`, the authority's log after `mine`'s head (the caller
/// checked that `mine` ends where the authority's entries resume), and
/// say what the member now misses and must remove. The entries are then
/// appended to `mine` as they are: no entry of the member's is copied, so
/// catching up costs what it takes, not the length of the member's log.
pub fn append_after_head(
    mine: &PgLog,
    my_missing: &Missing,
    entries: &[LogEntry],
    local_version: impl Fn(&str) -> Option<Version>,
) -> Result<Appended, MergeError> {
    if let Some(first) = entries.first() {
        if first.version <= mine.head() {
            return Err(MergeError::Conflict {
                version: first.version,
                ours: mine
                    .get(first.version)
                    .map_or_else(String::new, |e| e.oid.clone()),
                theirs: first.oid.clone(),
            });
        }
    }
    // From a peer: out of order is refused, never applied.
    if let Some(w) = entries.windows(2).find(|w| w[0].version >= w[1].version) {
        return Err(MergeError::Unordered {
            after: w[0].version,
            at: w[1].version,
        });
    }
    let mut missing = my_missing.clone();
    let mut remove = HashSet::new();
    take_newer(&mut missing, &mut remove, entries.iter());
    let (missing, remove) = settle(missing, remove, &local_version);
    Ok(Appended { missing, remove })
}

/// Apply the authority's entries newer than the member's history to its
/// missing set and removals: the newest one per object decides.
fn take_newer<'a>(
    missing: &mut Missing,
    remove: &mut HashSet<String>,
    newer: impl Iterator<Item = &'a LogEntry>,
) {
    for entry in newer {
        match entry.op {
            LogOp::Modify => {
                missing.insert(entry.oid.clone(), entry.version);
                remove.remove(&entry.oid);
            }
            LogOp::Delete => {
                missing.remove(&entry.oid);
                remove.insert(entry.oid.clone());
            }
        }
    }
}

/// Drop from the missing set objects already at the needed version, and
/// from the removals objects not here; removals sorted.
fn settle(
    mut missing: Missing,
    remove: HashSet<String>,
    local_version: &impl Fn(&str) -> Option<Version>,
) -> (Missing, Vec<String>) {
    missing.retain(|oid, need| local_version(oid) != Some(*need));
    let mut remove: Vec<String> = remove
        .into_iter()
        .filter(|oid| local_version(oid).is_some())
        .collect();
    remove.sort();
    (missing, remove)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of an authoritative log of `entries` after `tail`.
    fn last(entries: &[LogEntry], tail: Version) -> Version {
        entries.last().map_or(tail, |e| e.version)
    }

    fn v(epoch: u32, counter: u64) -> Version {
        Version::new(epoch, counter)
    }

    fn modify(version: Version, prior: Version, oid: &str) -> LogEntry {
        LogEntry {
            version,
            prior_version: prior,
            reqid: Some(ReqId {
                client: 1,
                tid: version.counter,
            }),
            oid: oid.into(),
            op: LogOp::Modify,
        }
    }

    fn delete(version: Version, prior: Version, oid: &str) -> LogEntry {
        LogEntry {
            op: LogOp::Delete,
            ..modify(version, prior, oid)
        }
    }

    #[test]
    fn a_member_behind_gets_the_newer_objects_and_deletes() {
        let base = vec![
            modify(v(1, 1), Version::ZERO, "a"),
            modify(v(1, 2), Version::ZERO, "b"),
        ];
        let mine = PgLog::new(Version::ZERO, base.clone());
        let mut auth = base;
        auth.push(modify(v(2, 3), v(1, 1), "a"));
        auth.push(delete(v(2, 4), v(1, 2), "b"));
        auth.push(modify(v(2, 5), Version::ZERO, "c"));
        let local = |oid: &str| match oid {
            "a" => Some(v(1, 1)),
            "b" => Some(v(1, 2)),
            _ => None,
        };
        let merged = merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            last(&auth, Version::ZERO),
            &auth,
            local,
        )
        .unwrap();
        assert_eq!(merged.log.head(), v(2, 5));
        assert_eq!(merged.log.len(), 5);
        assert_eq!(
            merged.missing,
            Missing::from([("a".into(), v(2, 3)), ("c".into(), v(2, 5))])
        );
        assert_eq!(merged.remove, vec!["b".to_string()]);
        assert!(!merged.rewritten);
        assert_eq!(
            merged.log.find_reqid(&ReqId { client: 1, tid: 5 }),
            Some(v(2, 5))
        );
    }

    #[test]
    fn appending_after_the_head_agrees_with_the_whole_merge() {
        let base = vec![
            modify(v(1, 1), Version::ZERO, "a"),
            modify(v(1, 2), Version::ZERO, "b"),
            modify(v(1, 3), Version::ZERO, "d"),
        ];
        let mine = PgLog::new(Version::ZERO, base.clone());
        let earlier = Missing::from([("d".to_string(), v(1, 3))]);
        let newer = vec![
            modify(v(2, 4), v(1, 1), "a"),
            delete(v(2, 5), v(1, 2), "b"),
            modify(v(2, 6), Version::ZERO, "c"),
            modify(v(2, 7), v(2, 6), "c"),
            delete(v(2, 8), v(1, 3), "d"),
        ];
        let mut auth = base;
        auth.extend(newer.iter().cloned());
        // "a" is already at the needed version here (a push landed).
        let local = |oid: &str| match oid {
            "a" => Some(v(2, 4)),
            "b" => Some(v(1, 2)),
            _ => None,
        };
        let whole = merge(&mine, &earlier, Version::ZERO, v(2, 8), &auth, local).unwrap();
        let appended = append_after_head(&mine, &earlier, &newer, local).unwrap();
        assert_eq!(appended.missing, whole.missing);
        assert_eq!(appended.remove, whole.remove);
        assert_eq!(
            appended.missing,
            Missing::from([("c".to_string(), v(2, 7))])
        );
        assert_eq!(appended.remove, vec!["b".to_string()]);
        let mut grown = mine.clone();
        for e in newer.clone() {
            grown.append(e);
        }
        let ours: Vec<_> = grown.entries().cloned().collect();
        let theirs: Vec<_> = whole.log.entries().cloned().collect();
        assert_eq!(ours, theirs);
        assert_eq!(grown.head(), whole.log.head());

        // Nothing newer: nothing changes.
        let none = append_after_head(&mine, &earlier, &[], local).unwrap();
        assert_eq!(none.missing, earlier);
        assert!(none.remove.is_empty());

        // An entry at or before the head is not an append.
        let stale = vec![modify(v(1, 3), v(1, 2), "b")];
        assert!(matches!(
            append_after_head(&mine, &earlier, &stale, local),
            Err(MergeError::Conflict { .. })
        ));
        // Entries out of order (a malformed activation) are refused.
        let unordered = vec![newer[1].clone(), newer[0].clone()];
        assert!(matches!(
            append_after_head(&mine, &earlier, &unordered, local),
            Err(MergeError::Unordered { .. })
        ));
    }

    #[test]
    fn divergent_entries_roll_back_to_the_prior_version_or_away() {
        let common = vec![modify(v(1, 1), Version::ZERO, "a")];
        let mut mine = common.clone();
        mine.push(modify(v(1, 2), v(1, 1), "a")); // divergent overwrite
        mine.push(modify(v(1, 3), Version::ZERO, "x")); // divergent create
        let mine = PgLog::new(Version::ZERO, mine);
        let mut auth = common;
        auth.push(modify(v(3, 2), Version::ZERO, "b"));
        let local = |oid: &str| match oid {
            "a" => Some(v(1, 2)),
            "x" => Some(v(1, 3)),
            _ => None,
        };
        let merged = merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            last(&auth, Version::ZERO),
            &auth,
            local,
        )
        .unwrap();
        assert_eq!(merged.divergent, 2);
        assert!(merged.rewritten);
        assert_eq!(
            merged.missing,
            Missing::from([("a".into(), v(1, 1)), ("b".into(), v(3, 2))])
        );
        assert_eq!(merged.remove, vec!["x".to_string()]);
        let versions: Vec<Version> = merged.log.entries().map(|e| e.version).collect();
        assert_eq!(versions, vec![v(1, 1), v(3, 2)]);
    }

    #[test]
    fn a_divergent_object_touched_again_by_the_authority_takes_its_version() {
        let mine = PgLog::new(
            Version::ZERO,
            vec![
                modify(v(1, 1), Version::ZERO, "a"),
                modify(v(1, 2), v(1, 1), "a"),
            ],
        );
        let auth = vec![
            modify(v(1, 1), Version::ZERO, "a"),
            delete(v(2, 2), v(1, 1), "a"),
        ];
        let merged = merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            last(&auth, Version::ZERO),
            &auth,
            |_| Some(v(1, 2)),
        )
        .unwrap();
        assert!(merged.missing.is_empty());
        assert_eq!(merged.remove, vec!["a".to_string()]);
    }

    #[test]
    fn members_too_far_behind_or_diverged_before_the_tail_need_backfill() {
        let mine = PgLog::new(Version::ZERO, vec![modify(v(1, 1), Version::ZERO, "a")]);
        let auth = vec![modify(v(2, 5), Version::ZERO, "b")];
        assert_eq!(
            merge(
                &mine,
                &Missing::new(),
                v(2, 4),
                last(&auth, v(2, 4)),
                &auth,
                |_| None
            )
            .unwrap_err(),
            MergeError::Behind {
                head: v(1, 1),
                auth_tail: v(2, 4)
            }
        );
        // Our head is past the tail, but we diverged before it.
        let mine = PgLog::new(
            Version::ZERO,
            vec![
                modify(v(1, 1), Version::ZERO, "a"),
                modify(v(1, 9), v(1, 1), "a"),
            ],
        );
        let auth = vec![modify(v(1, 6), Version::ZERO, "c")];
        assert!(matches!(
            merge(
                &mine,
                &Missing::new(),
                v(1, 5),
                last(&auth, v(1, 5)),
                &auth,
                |_| None
            ),
            Err(MergeError::DivergesBeforeTail { .. })
        ));
    }

    #[test]
    fn a_split_log_without_entries_since_the_tail_catches_up_from_the_log() {
        // A split child's log: the parent's tail and head, but only its own
        // objects' entries, the newest older than the authority's tail.
        let mine = PgLog::with_head(v(1, 2), v(3, 30), vec![modify(v(1, 4), Version::ZERO, "a")]);
        let auth = vec![modify(v(3, 31), v(1, 4), "a")];
        let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 31), &auth, |_| {
            Some(v(1, 4))
        })
        .expect("a split log that reaches the tail merges");
        assert_eq!(merged.divergent, 0);
        assert_eq!(merged.missing.get("a"), Some(&v(3, 31)));
        assert_eq!(merged.log.head(), v(3, 31));
        // Equal heads, no entries either side: nothing to do.
        let mine = PgLog::with_head(v(1, 2), v(3, 30), Vec::new());
        let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 30), &[], |_| None)
            .expect("empty split logs merge");
        assert!(merged.missing.is_empty() && merged.remove.is_empty());
        // Our tail is newer than the authority's: its older entries are
        // before our log and not taken into it.
        let mine = PgLog::with_head(v(2, 25), v(3, 30), Vec::new());
        let auth = vec![
            modify(v(2, 22), Version::ZERO, "b"),
            modify(v(3, 31), Version::ZERO, "c"),
        ];
        let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 31), &auth, |_| None)
            .expect("a newer tail merges");
        assert_eq!(merged.log.entries().count(), 1);
        assert!(merged.missing.contains_key("c") && !merged.missing.contains_key("b"));
    }

    #[test]
    fn an_identical_log_changes_nothing_and_keeps_earlier_missing() {
        let entries = vec![
            modify(v(1, 1), Version::ZERO, "a"),
            modify(v(1, 2), Version::ZERO, "b"),
        ];
        let mine = PgLog::new(Version::ZERO, entries.clone());
        let missing = Missing::from([("a".to_string(), v(1, 1))]);
        let merged = merge(
            &mine,
            &missing,
            Version::ZERO,
            last(&entries, Version::ZERO),
            &entries,
            |oid| (oid == "b").then_some(v(1, 2)),
        )
        .unwrap();
        assert_eq!(merged.missing, missing);
        assert!(merged.remove.is_empty());
        assert_eq!(merged.divergent, 0);
        assert_eq!(merged.log.head(), v(1, 2));
    }

    #[test]
    fn trimming_keeps_the_newest_and_forgets_their_reqids() {
        let mut log = PgLog::new(Version::ZERO, Vec::new());
        for i in 1..=10 {
            log.append(modify(v(1, i), Version::ZERO, "a"));
        }
        assert_eq!(log.trim_to_len(4), Some(v(1, 6)));
        assert_eq!(log.tail(), v(1, 6));
        assert_eq!(log.len(), 4);
        assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 3 }), None);
        assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 9 }), Some(v(1, 9)));
        assert_eq!(log.entries_after(v(1, 8)).count(), 2);
        assert!(log.contains(v(1, 7)) && !log.contains(v(1, 3)));
        assert_eq!(log.trim_to_len(4), None);
    }
}
