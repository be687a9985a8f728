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
//!
//! A log sent to a member catching up is *compacted*: only the newest
//! entry per object is sent whole, the older ones fold into it as
//! [`Superseded`](cairn_wire::Superseded) versions and request ids. What a member must fetch or
//! remove depends only on each object's newest entry, so compaction
//! changes neither; the folded versions still count as held by the log
//! (a merge tells history from divergence by them), their request ids
//! still answer resent requests, and they weigh in the log's length.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use cairn_types::{ReqId, Version};
use cairn_wire::{LogEntry, LogOp};

mod compact;
pub use compact::compact;
use compact::{changes, Change};
pub use compact::{check_order, check_unique};

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
    /// The entries counted with the ones folded into them: what bounds the
    /// log's length.
    weight: usize,
    /// Request id → the version it was applied at, for every change the
    /// log stands for. Hashed with foldhash: a caught-up member inserts
    /// thousands of folded ids before its PG can go active, at a third of
    /// SipHash's cost (the seed is still random per process).
    reqids: HashMap<ReqId, Version, foldhash::fast::RandomState>,
}

/// How many entries of the PG's history `entry` stands for.
fn weight_of(entry: &LogEntry) -> usize {
    1 + entry.superseded.len()
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
            weight: 0,
            reqids: HashMap::default(),
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

    /// Entries held (each standing for one or more of the history's).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The history's entries this log stands for: its entries and those
    /// folded into them.
    pub fn weight(&self) -> usize {
        self.weight
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
        self.reqids.reserve(entry.superseded.len() + 1);
        for folded in &entry.superseded {
            if let Some(reqid) = folded.reqid {
                self.reqids.insert(reqid, folded.version);
            }
        }
        if let Some(reqid) = entry.reqid {
            self.reqids.insert(reqid, entry.version);
        }
        self.weight += weight_of(&entry);
        self.entries.push_back(entry);
    }

    /// The tail trimming toward a weight of `keep` would leave: the newest
    /// entry it would drop, dropping the oldest entries only while what
    /// stays weighs at least `keep`. A compacted entry is dropped whole, so
    /// the log may stay above `keep` until enough newer entries follow it:
    /// trimming never takes changes (and their request ids) newer than
    /// the ones it keeps. `None` if nothing can go.
    pub fn trim_point(&self, keep: usize) -> Option<Version> {
        let mut weight = self.weight;
        let mut tail = None;
        for entry in &self.entries {
            let w = weight_of(entry);
            if weight - w < keep {
                break;
            }
            weight -= w;
            tail = Some(entry.version);
        }
        tail
    }

    /// Drop the entries at or before `tail`, which becomes the log's tail.
    pub fn trim_to(&mut self, tail: Version) {
        assert!(
            tail <= self.head,
            "trim to {tail} past the head {}",
            self.head
        );
        while self.entries.front().is_some_and(|e| e.version <= tail) {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            let forget = entry.superseded.iter().map(|s| (s.reqid, s.version));
            for (reqid, version) in forget.chain([(entry.reqid, entry.version)]) {
                if let Some(reqid) = reqid {
                    if self.reqids.get(&reqid) == Some(&version) {
                        self.reqids.remove(&reqid);
                    }
                }
            }
            self.weight -= weight_of(&entry);
        }
        self.tail = self.tail.max(tail);
    }

    /// Drop the oldest entries until the log weighs at most `keep`;
    /// returns the new tail if any were dropped.
    pub fn trim_to_weight(&mut self, keep: usize) -> Option<Version> {
        let tail = self.trim_point(keep)?;
        self.trim_to(tail);
        Some(tail)
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
    #[error("the authoritative entries hold {version} twice")]
    Duplicate { version: Version },
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
    check_order(auth)?;
    // Every version the authority holds, whole or folded into a newer
    // entry of the same object.
    let folded: usize = auth.iter().map(|e| e.superseded.len()).sum();
    let mut auth_by_version: HashMap<Version, &LogEntry> =
        HashMap::with_capacity(auth.len() + folded);
    for entry in auth {
        let versions = entry.superseded.iter().map(|s| s.version);
        for version in versions.chain(std::iter::once(entry.version)) {
            if auth_by_version.insert(version, entry).is_some() {
                return Err(MergeError::Duplicate { version });
            }
        }
    }
    // Our changes after the authority's tail, one per version (an entry
    // of ours may stand for several, and be history only in part).
    let mut ours: Vec<Change<'_>> = mine
        .entries_after(auth_tail)
        .flat_map(changes)
        .filter(|c| c.version > auth_tail.max(mine.tail()))
        .collect();
    ours.sort_unstable_by_key(|c| c.version);
    // Our changes the authority does not have are divergent; they form a
    // suffix of our history (once diverged, a member learns of no later
    // history without merging again).
    let split = ours
        .iter()
        .position(|c| !auth_by_version.contains_key(&c.version))
        .unwrap_or(ours.len());
    let conflict = |c: &Change<'_>| {
        let theirs = auth_by_version.get(&c.version)?;
        (theirs.oid != c.entry.oid).then(|| MergeError::Conflict {
            version: c.version,
            ours: c.entry.oid.clone(),
            theirs: theirs.oid.clone(),
        })
    };
    if let Some(e) = ours[..split].iter().find_map(conflict) {
        return Err(e);
    }
    let divergent = &ours[split..];
    if let Some(late) = divergent
        .iter()
        .find(|c| auth_by_version.contains_key(&c.version))
    {
        return Err(MergeError::Conflict {
            version: late.version,
            ours: late.entry.oid.clone(),
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
        // point is our newest change at or before that tail.
        let kept = mine
            .entries()
            .flat_map(changes)
            .filter(|c| c.version <= auth_tail)
            .map(|c| c.version)
            .max();
        kept.map_or(mine.tail(), |v| v.max(mine.tail()))
    };
    if common < auth_tail {
        return Err(MergeError::DivergesBeforeTail {
            at: common,
            auth_tail,
        });
    }

    let mut missing = my_missing.clone();
    let mut remove: HashSet<String> = HashSet::new();
    // Roll back divergent changes: the object returns to its version
    // before the oldest divergent change of it.
    let mut rolled_back: HashMap<&str, Version> = HashMap::new();
    for change in divergent {
        rolled_back
            .entry(change.entry.oid.as_str())
            .or_insert(change.prior);
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
    // The authority's newer entries (less what we hold of them): the
    // newest one per object decides.
    let newer: Vec<LogEntry> = auth
        .iter()
        .filter(|e| e.version > common)
        .filter_map(|e| compact::cut(e, common).1)
        .collect();
    take_newer(&mut missing, &mut remove, newer.iter());
    let (missing, remove) = settle(missing, remove, &local_version);

    // Ours up to the common point; an entry standing for changes either
    // side of it keeps those before.
    let mut kept: Vec<LogEntry> = Vec::with_capacity(mine.len() + newer.len());
    let mut cut_any = false;
    for entry in mine.entries() {
        if let (Some(held), rest) = compact::cut(entry, common) {
            cut_any |= rest.is_some();
            // What was folded below our tail is trimmed history.
            if held.version > mine.tail() {
                kept.push(held);
            }
        }
    }
    if cut_any {
        kept.sort_unstable_by_key(|e| e.version);
    }
    kept.extend(newer);
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
    // From a peer: out of order or repeated is refused, never applied.
    check_order(entries)?;
    check_unique(entries)?;
    if let Some(early) = entries
        .iter()
        .flat_map(|e| e.superseded.iter())
        .find(|s| s.version <= mine.head())
    {
        return Err(MergeError::Unordered {
            after: mine.head(),
            at: early.version,
        });
    }
    let mut missing = my_missing.clone();
    let mut remove = HashSet::new();
    take_newer(&mut missing, &mut remove, entries.iter());
    // No object here is newer than this log's head (writes and pushes
    // land with or after their entries), so an object needed at a version
    // past it is not looked up in the store: after a restart those reads
    // miss every cache, on the path every client of the PG waits on.
    let head = mine.head();
    missing.retain(|oid, need| *need > head || local_version(oid) != Some(*need));
    let mut remove: Vec<String> = remove
        .into_iter()
        .filter(|oid| local_version(oid).is_some())
        .collect();
    remove.sort();
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
mod tests;
