//! The state a PG keeps in memory besides its info, log and missing set:
//! where a primary's peering stands ([`Phase`]), what each store operation
//! it started is for ([`Wait`]), and what an active primary tracks
//! ([`PrimaryState`]: peers, writes in flight, objects, recovery).
//! Plain data: the transitions live with the code that makes them
//! (`peering`, `ops`, `recovery`, ...).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use cairn_types::{OsdId, Version};
use cairn_wire::{ActId, OsdOp, PgInfo};

use super::log::Missing;
use super::{peering, recovery, tier, BackfillTarget, Inflight};
use crate::io::ClientId;

/// Where a primary's peering stands.
#[derive(Clone, Debug)]
pub(crate) enum Phase {
    /// Not the primary.
    Idle,
    GetInfo(peering::GetInfo),
    /// An earlier interval may have acknowledged writes, and none of its
    /// members that could hold them is up: wait for one (or `osd lost`).
    Down {
        blocked_by: Vec<OsdId>,
        reason: String,
    },
    /// No reachable member holds a complete copy.
    Incomplete {
        reason: String,
    },
    /// A step failed; peering starts again at `retry_at`.
    Retry {
        reason: String,
    },
    /// Waiting for the monitor to install the acting set asked for.
    WaitActing {
        want: Vec<OsdId>,
    },
    /// Fetching the authoritative log from `auth`.
    GetLog {
        auth: OsdId,
    },
    /// Waiting for a map that records `up_thru` through this interval.
    WaitUpThru,
    /// Waiting for members to merge the log and report their missing sets.
    Activating {
        waiting: BTreeSet<OsdId>,
    },
    /// Serving (if the acting set has at least min_size members) and
    /// recovering.
    Active,
}

/// A client operation waiting for something.
#[derive(Clone, Debug)]
pub(crate) struct ClientOp {
    pub client: ClientId,
    pub op: OsdOp,
    /// When it reached this OSD (for slow-op reports).
    pub arrived: Duration,
}

/// What a started store operation of this PG is for.
#[derive(Clone, Debug)]
pub(crate) enum Wait {
    /// The primary's own commit of a client write.
    WriteCommit { act: ActId, version: Version },
    /// A replica's commit of a RepOp: then it replies.
    RepCommit {
        primary: OsdId,
        act: ActId,
        version: Version,
    },
    /// A replica's commit of its activation: then it replies.
    ReplicaActivated {
        primary: OsdId,
        act: ActId,
        /// When the activation arrived, how long the member took to merge
        /// it into a transaction, and how many log entries it brought
        /// (of the history, and sent once compacted):
        /// logged with the commit, so the wait a primary sees can be told
        /// from the member's work and its store's.
        arrived: Duration,
        merged: Duration,
        entries: (usize, usize),
    },
    /// The primary's commit of its own activation.
    PrimaryActivated { act: ActId },
    /// A member's commit of pushed objects: then it replies.
    PushCommit {
        primary: OsdId,
        act: ActId,
        tid: u64,
    },
    /// The primary's commit of objects it pulled.
    PullCommit { act: ActId, oids: Vec<String> },
    /// A client read; `counted` in its object's [`ObjState::reads`].
    Read {
        act: ActId,
        op: ClientOp,
        counted: bool,
    },
    /// A copy of an object read for pushing.
    Copy {
        act: ActId,
        oid: String,
        purpose: CopyPurpose,
    },
    /// A commit nobody waits for beyond durability.
    Quiet,
    /// A cache tier's op on the base pool, or its read of an object to flush.
    Tier {
        act: ActId,
        oid: String,
        step: tier::Step,
    },
}

#[derive(Clone, Debug)]
pub(crate) enum CopyPurpose {
    /// Push to the members missing it.
    Recovery,
    /// Part of a backfill batch to `target`.
    Backfill { target: OsdId },
    /// To answer a pull: copy `index` of answer `key`.
    Pull { key: u64, index: usize },
    /// For a deep scrub map: entry `index` of build `key`.
    Scrub { key: u64, index: usize },
}

/// What the primary tracks while active.
#[derive(Debug)]
pub(crate) struct PrimaryState {
    pub act: ActId,
    /// Acting replicas and backfill targets: their info and missing sets.
    pub peers: BTreeMap<OsdId, PeerState>,
    /// Every member heard from during peering, for pulls.
    pub sources: BTreeMap<OsdId, (PgInfo, Missing)>,
    pub inflight: BTreeMap<Version, Inflight>,
    /// Per object: writes in flight and operations waiting for it.
    pub objects: BTreeMap<String, ObjState>,
    /// Objects with a recovery operation in flight.
    pub recovering: HashSet<String>,
    /// Objects no reachable member holds at the needed version.
    pub unfound: BTreeMap<String, recovery::Unfound>,
    /// Objects clients wait for: recovered first.
    pub urgent: VecDeque<String>,
    pub backfill: BTreeMap<OsdId, BackfillTarget>,
    /// Backfill slot held on this OSD.
    pub backfill_slot: bool,
    /// Pulls in flight, by tid: from whom, for what.
    pub pulls: HashMap<u64, (OsdId, recovery::Pull)>,
    /// Pushes in flight, by tid.
    pub pushes: HashMap<u64, recovery::Push>,
    /// Recovery pushes of an object still unacknowledged.
    pub push_waiting: HashMap<String, usize>,
    /// Cache tiering, for a PG of a cache pool.
    pub tier: Option<Box<tier::TierPg>>,
}

#[derive(Clone, Debug)]
pub(crate) struct PeerState {
    pub info: PgInfo,
    pub missing: Missing,
}

#[derive(Debug, Default)]
pub(crate) struct ObjState {
    pub pending_writes: u32,
    /// Reads of a cache pool's object running on the store: its eviction
    /// waits for them (a read that started before the object left the
    /// cache must still find it).
    pub reads: u32,
    /// The object's version once its pending writes commit.
    pub version: Option<Version>,
    pub waiting: Vec<ClientOp>,
}

/// Counters of this PG since the OSD started.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub recovered_objects: u64,
    pub backfilled_objects: u64,
    pub recovery_bytes: u64,
    /// Bad copies rewritten: by read repair and by scrub repair.
    pub repaired_objects: u64,
}
