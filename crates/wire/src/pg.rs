//! What OSDs say to each other about one placement group, and the PG
//! records those messages carry (the log entry, the info every member
//! persists, the stats a primary reports).
//!
//! Every [`PgMessage`] carries the sender's map epoch: a receiver with an
//! older map holds the message until it has that map, so that nobody
//! answers for an interval it has not seen begin. Messages about an active
//! interval carry its [`ActId`]; a member drops those of any other.

use bytes::Bytes;
use cairn_store::Transaction;
use cairn_types::{Epoch, OsdId, PgId, PoolId, ReqId, Version};
use serde::{Deserialize, Serialize};

/// What one mutation did to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogOp {
    /// The object exists after the mutation, at the entry's version.
    Modify,
    /// The object was removed.
    Delete,
}

/// A PG log entry: one mutation, for recovery, rollback and exactly-once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub version: Version,
    /// The object's version before this mutation ([`Version::ZERO`]: it
    /// did not exist). Rolling back a divergent entry restores this.
    pub prior_version: Version,
    pub reqid: Option<ReqId>,
    pub oid: String,
    pub op: LogOp,
    /// Older entries of the same object this one stands for, oldest first
    /// (with some, `prior_version` is the oldest one's prior):
    /// a log sent to a member catching up keeps only the newest entry per
    /// object, and the older ones' versions and request ids ride here, so
    /// the member still knows every version in its log's range (a merge
    /// tells history from divergence by them) and still answers a resent
    /// request exactly once. Empty for an entry as written. Sent and
    /// stored packed ([`crate::folded`]).
    #[serde(with = "crate::folded")]
    pub superseded: Vec<Superseded>,
}

/// An older entry folded into a newer one of the same object. The folded
/// entries of one entry are the object's every change in the range they
/// span, oldest first, so each one's prior version follows from the one
/// before it (the first's is the entry's `prior_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superseded {
    pub version: Version,
    pub reqid: Option<ReqId>,
    pub op: LogOp,
}

/// Where an activation's log entries start: the member's own newest entry
/// (its version and object), as the primary heard at peering. The entries
/// sent are the authority's after it; a member whose log does not end
/// there cannot take them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBase {
    pub version: Version,
    pub oid: String,
}

/// How much of the PG's object set a member holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backfill {
    /// Every object (except those in the member's missing set).
    Complete,
    /// Being backfilled: objects named up to and including `done_upto`
    /// (in name order; `None`: none) are as complete as for a complete
    /// member; the rest may be absent or stale.
    Partial { done_upto: Option<String> },
}

impl Backfill {
    pub fn is_complete(&self) -> bool {
        matches!(self, Backfill::Complete)
    }

    /// Does the member hold `name` (up to its missing set)?
    pub fn covers(&self, name: &str) -> bool {
        match self {
            Backfill::Complete => true,
            Backfill::Partial { done_upto } => done_upto.as_deref().is_some_and(|d| name <= d),
        }
    }
}

/// What a member persists about its copy of a PG (collection attribute
/// `info`), and reports when queried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgInfo {
    pub pg: PgId,
    /// The newest log entry.
    pub last_update: Version,
    /// Entries at or below this version are trimmed: the log covers
    /// `(log_tail, last_update]`.
    pub log_tail: Version,
    /// First epoch of the last interval in which this member was activated
    /// (its log made the PG's authoritative log). Among members, the newest
    /// `last_epoch_started` wins peering, then the newest `last_update`.
    pub last_epoch_started: Epoch,
    pub backfill: Backfill,
    /// When the PG was last scrubbed, and deep-scrubbed, here as primary
    /// (seconds since the Unix epoch; 0: never).
    pub last_scrub: u64,
    pub last_deep_scrub: u64,
    /// The pool's pg_num this copy was split for: a member whose copy has
    /// a smaller one (it missed a split while down) splits it before
    /// anything else. 0 in a blank PG before the OSD has a map.
    pub pg_num: u32,
}

impl PgInfo {
    /// The info of a member that holds nothing of the PG yet, in a pool of
    /// `pg_num` PGs.
    pub fn empty(pg: PgId, pg_num: u32) -> Self {
        Self {
            pg,
            pg_num,
            last_update: Version::ZERO,
            log_tail: Version::ZERO,
            last_epoch_started: 0,
            backfill: Backfill::Complete,
            last_scrub: 0,
            last_deep_scrub: 0,
        }
    }
}

/// Identifies one activation of a PG: the primary's interval (its first
/// epoch, as the primary saw it) and the peering attempt within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ActId {
    pub epoch: Epoch,
    pub attempt: u32,
}

impl std::fmt::Display for ActId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.attempt)
    }
}

/// A whole object as recovery copies it, at one version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCopy {
    pub name: String,
    pub version: Version,
    /// `None`: the object does not exist at `version` (a removal).
    #[serde(with = "cairn_types::bulk::option")]
    pub data: Option<Bytes>,
    pub attrs: Vec<(String, Bytes)>,
    pub omap: Vec<(String, Bytes)>,
}

/// One PG message between OSDs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PgMessage {
    pub pg: PgId,
    /// The sender's map epoch.
    pub epoch: Epoch,
    pub body: PgBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PgBody {
    // ----- peering -----
    /// Primary → any member, past or present: report your info.
    Query { query_epoch: Epoch },
    /// Reply to [`PgBody::Query`]: `None` if the member holds nothing of the
    /// PG; `damaged` if what it holds could not be read.
    Info {
        query_epoch: Epoch,
        info: Option<PgInfo>,
        missing: Vec<(String, Version)>,
        damaged: Option<String>,
    },
    /// Primary → the member with the authoritative log: send it
    /// (compacted, as an activation's).
    GetLog { query_epoch: Epoch },
    /// Reply to [`PgBody::GetLog`].
    Log {
        query_epoch: Epoch,
        info: PgInfo,
        entries: Vec<LogEntry>,
    },
    /// Primary → each acting member and backfill target: the PG is active
    /// as `act` with the authoritative `info` and log `entries`; merge them
    /// (rolling back what they lack), and, if `backfill`, count yourself a
    /// backfill target. With a `base`, `entries` are only those after the
    /// member's own newest entry (it is up to date through it); without,
    /// the whole authoritative log. Either way compacted: the newest entry
    /// per object, the older ones folded into it ([`LogEntry::superseded`]).
    Activate {
        act: ActId,
        info: PgInfo,
        base: Option<LogBase>,
        entries: Vec<LogEntry>,
        backfill: bool,
    },
    /// Reply to [`PgBody::Activate`]: the member's info and missing set
    /// after the merge, or why it refused.
    Activated {
        act: ActId,
        result: Result<(PgInfo, Vec<(String, Version)>), String>,
    },

    // ----- replication -----
    /// Apply a mutation: its log entry, and its transaction unless the
    /// receiver is a backfill target that has not reached the object yet.
    RepOp {
        act: ActId,
        entry: LogEntry,
        txn: Option<Transaction>,
    },
    RepOpReply {
        act: ActId,
        version: Version,
        result: Result<(), String>,
    },

    // ----- recovery and backfill -----
    /// Primary → member: install these object copies (a copy without data
    /// removes the object); a backfill target then holds everything up to
    /// `backfill_upto`.
    Push {
        act: ActId,
        tid: u64,
        objects: Vec<ObjectCopy>,
        removes: Vec<String>,
        backfill_upto: Option<Backfill>,
    },
    PushReply {
        act: ActId,
        tid: u64,
        result: Result<(), String>,
    },
    /// Primary → a member that holds objects the primary is missing: send
    /// them, each at exactly the given version.
    Pull {
        act: ActId,
        tid: u64,
        objects: Vec<(String, Version)>,
    },
    /// Reply to [`PgBody::Pull`]: a copy per object, in order; an error if
    /// the member does not hold one at the version asked for.
    PullReply {
        act: ActId,
        tid: u64,
        result: Result<Vec<ObjectCopy>, String>,
    },
    /// Primary → backfill target: list your objects with names after
    /// `after`, at most `max`, in name order.
    Scan {
        act: ActId,
        tid: u64,
        after: Option<String>,
        max: u32,
    },
    /// Reply to [`PgBody::Scan`]: names and versions; `done` if there are
    /// no more.
    ScanReply {
        act: ActId,
        tid: u64,
        result: Result<(Vec<(String, Version)>, bool), String>,
    },
    /// Primary → backfill target: reserve one of your backfill slots.
    Reserve { act: ActId },
    /// Reply to [`PgBody::Reserve`]: granted, or why not (no free slot,
    /// too full).
    Reserved {
        act: ActId,
        result: Result<(), String>,
    },
    /// Primary → backfill target: backfill ended or stopped; free the slot.
    Release { act: ActId },
    /// Primary → a former member: the PG is recovered without you; delete
    /// your copy.
    Remove,

    // ----- scrub -----
    /// Primary → acting member: describe your objects named after `after`
    /// up to and including `upto` (`None`: to the end); `deep`: read all
    /// their data.
    ScrubRequest {
        act: ActId,
        tid: u64,
        after: Option<String>,
        upto: Option<String>,
        deep: bool,
    },
    ScrubMap {
        act: ActId,
        tid: u64,
        result: Result<Vec<ScrubEntry>, String>,
    },
    /// A member that holds data of the PG but is not in its up or acting
    /// set → the primary: here is what I hold (a possible recovery source).
    Notify { info: PgInfo },

    // ----- catch-up before boot -----
    /// An OSD starting again, still down in the map → the PG's acting
    /// primary: my log ends at `base`; send what follows it. Answered on
    /// the connection it came on (the map does not have the sender's new
    /// address yet).
    CatchUp { base: LogBase },
    /// Reply to [`PgBody::CatchUp`]: the primary's info and its log after
    /// `base`, compacted as an activation's; or why not (not active, or
    /// `base` is not in its log).
    CatchUpLog {
        base: LogBase,
        result: Result<(PgInfo, Vec<LogEntry>), String>,
    },
}

/// What scrub learns of one copy of one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubEntry {
    pub name: String,
    pub size: u64,
    /// The object's version attribute (`None`: unreadable or absent).
    pub version: Option<Version>,
    /// crc32c of the attributes, in key order.
    pub attrs_digest: u32,
    /// Deep scrub only: crc32c of the data and of the omap.
    pub data_digest: Option<u32>,
    pub omap_digest: Option<u32>,
    /// Why the copy could not be read (a checksum mismatch), if it could not.
    pub error: Option<String>,
}

/// One object whose copies disagree, as scrub found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inconsistent {
    pub name: String,
    /// The copies that differ from the authoritative one, and how.
    pub bad: Vec<(OsdId, String)>,
    /// Is there a good copy to repair from?
    pub repairable: bool,
}

/// A PG's state as its primary reports it to the monitor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStat {
    pub pg: PgId,
    /// Ceph-style state words joined by `+`: `active+clean`,
    /// `peering`, `down`, `incomplete`, `peered+undersized+degraded`,
    /// `active+recovering+degraded`, `active+backfilling+remapped`, ...
    pub state: String,
    /// First epoch of the current interval (the primary's view).
    pub interval_epoch: Epoch,
    pub up: Vec<OsdId>,
    pub acting: Vec<OsdId>,
    pub last_update: Version,
    pub objects: u64,
    /// Bytes stored in the PG's objects (their sizes, one copy), as the
    /// primary last counted them.
    pub bytes: u64,
    /// Object copies missing on acting members, and objects still to
    /// backfill (an estimate).
    pub degraded: u64,
    /// Objects that no reachable member holds at the needed version.
    pub unfound: u64,
    /// Every acting member holds every object: the monitor may forget the
    /// PG's past intervals.
    pub recovered: bool,
    /// OSDs the PG waits for, if any.
    pub blocked_by: Vec<OsdId>,
    /// Why the PG is in this state, in a sentence.
    pub detail: String,
    /// Counters since this OSD started: objects recovered from the log,
    /// objects backfilled, bytes moved by either.
    pub recovered_objects: u64,
    pub backfilled_objects: u64,
    pub recovery_bytes: u64,
    /// Bad copies rewritten from a good one (read repair and scrub repair).
    pub repaired_objects: u64,
    pub last_scrub: u64,
    pub last_deep_scrub: u64,
    /// Objects the last scrub found inconsistent (at most
    /// [`MAX_INCONSISTENT_REPORTED`]).
    pub inconsistent: Vec<Inconsistent>,
    /// For a PG of a cache pool: its tiering state and counters.
    pub tier: Option<TierStat>,
    /// Client I/O the primary took for this PG since it became primary.
    pub client_io: ClientIo,
}

/// Client operations counted by a PG's primary: reads (bytes asked for)
/// and mutations (bytes written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientIo {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl ClientIo {
    /// Count one client request.
    pub fn count(&mut self, ops: &[crate::ObjOp]) {
        use crate::ObjOp;
        if ops.iter().any(ObjOp::is_mutation) {
            self.write_ops += 1;
            self.write_bytes += ops
                .iter()
                .map(|o| match o {
                    ObjOp::Write { data, .. } => data.len() as u64,
                    ObjOp::CopyPut(c) => c.data.len() as u64,
                    _ => 0,
                })
                .sum::<u64>();
        } else {
            self.read_ops += 1;
            self.read_bytes += ops
                .iter()
                .map(|o| match o {
                    ObjOp::Read { len, .. } => *len,
                    _ => 0,
                })
                .sum::<u64>();
        }
    }

    pub fn add(&mut self, o: &ClientIo) {
        self.read_ops += o.read_ops;
        self.read_bytes += o.read_bytes;
        self.write_ops += o.write_ops;
        self.write_bytes += o.write_bytes;
    }
}

/// A cache PG's tiering, as its primary last saw it. Counters run since
/// the primary took the PG.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStat {
    /// Dirty objects (not yet flushed to the base pool), counted with the
    /// objects and bytes.
    pub dirty: u64,
    /// Whiteouts among the objects (removals not yet flushed, or flushed
    /// and not yet evicted).
    pub whiteouts: u64,
    /// Objects held (whiteouts included), and their bytes; of them, the
    /// dirty ones' bytes.
    pub objects: u64,
    pub bytes: u64,
    pub dirty_bytes: u64,
    /// The map epoch at which `dirty` was counted.
    pub counted_epoch: Epoch,
    /// The agent or a sweep is flushing, or evicting, now.
    pub flushing: bool,
    pub evicting: bool,
    /// At the target: writes of new data wait.
    pub full: bool,
    pub promotes: u64,
    pub flushes: u64,
    pub evicts: u64,
    pub proxied_reads: u64,
    pub proxied_writes: u64,
    /// Base-pool ops that carried proxied writes (writes to one object
    /// that queued together go as one).
    pub proxied_write_batches: u64,
    /// Writes to objects not in the cache taken without promoting them.
    pub partial_writes: u64,
}

/// A cache pool's contents, summed by the monitor over the last stats of
/// its PGs and sent to each OSD after its heartbeat: the tiering agents
/// judge how full the cache is by the pool, not by their PG alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierPoolUsage {
    pub pool: PoolId,
    /// PGs whose stats are in the sums (the others not reported yet).
    pub pgs_counted: u32,
    pub objects: u64,
    pub bytes: u64,
    pub dirty: u64,
    pub dirty_bytes: u64,
}

/// What an OSD's recovery did since it started, over all its PGs, in any
/// role (as primary pulling or pushing, or receiving as a member).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryCounters {
    /// Object copies brought up to date from the log (pulled or pushed).
    pub recovered_objects: u64,
    /// Objects copied by backfill.
    pub backfilled_objects: u64,
    /// Bytes moved by either.
    pub recovery_bytes: u64,
    /// Bad copies rewritten (read repair and scrub repair).
    pub repaired_objects: u64,
}

/// Inconsistent objects a primary reports per PG at most.
pub const MAX_INCONSISTENT_REPORTED: usize = 64;
