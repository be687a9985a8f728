//! Every message Cairn sends, grouped by who talks to whom.
//!
//! - session: [`Message::Hello`] opens every connection and names the sender;
//! - monitor: boot, heartbeats with PG stats, map subscription, commands;
//! - client ↔ OSD: [`OsdOp`] / [`OsdOpReply`];
//! - OSD ↔ OSD: everything about one PG ([`PgMessage`]: peering,
//!   replication, recovery, backfill), and the OSD's peering requests to
//!   the monitor (`up_thru`, `pg_temp`).

use bytes::Bytes;
use cairn_map::crush::DeviceReport;
use cairn_map::{ClusterMap, OsdUsage};
use cairn_types::{Entity, Epoch, OsdId, PgId, PoolId, ReqId};

use crate::pg::{PgMessage, PgStat, RecoveryCounters, TierPoolUsage};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    // ----- session -----
    Hello {
        entity: Entity,
        fsid: Option<String>,
    },
    Ping {
        nonce: u64,
    },
    Pong {
        nonce: u64,
    },

    // ----- monitor -----
    OsdBoot {
        id: OsdId,
        /// Public address: for clients, admin tools and the monitor.
        addr: String,
        /// Cluster address: for other OSDs.
        cluster_addr: String,
        fsid: String,
        /// Where the OSD is in the CRUSH hierarchy, its device class and size.
        crush: DeviceReport,
    },
    /// Sent every heartbeat interval; `pgs` holds the PGs this OSD is
    /// primary for, `usage` its store's space (`None` if the store could
    /// not say), from which the monitor judges how full it is.
    OsdHeartbeat {
        id: OsdId,
        epoch: Epoch,
        pgs: Vec<PgStat>,
        usage: Option<OsdUsage>,
        /// Recovery done by this OSD since it started.
        counters: RecoveryCounters,
    },
    /// `target` has not answered `reporter`'s heartbeats on the cluster
    /// network for `silent_ms`; sent every heartbeat interval while it
    /// lasts.
    OsdFailure {
        reporter: OsdId,
        target: OsdId,
        silent_ms: u64,
    },
    /// Ask for every map newer than `have`, now and as they are made.
    Subscribe {
        have: Epoch,
    },
    MapUpdate {
        map: Box<ClusterMap>,
    },
    MonCommand {
        tid: u64,
        cmd: MonCommand,
    },
    MonReply {
        tid: u64,
        result: Result<String, String>,
    },
    /// The monitor's answer to a heartbeat, when the map has cache pools:
    /// each cache pool's objects and bytes over all its PGs.
    TierUsage {
        pools: Vec<TierPoolUsage>,
    },

    // ----- client ↔ OSD -----
    OsdOp(OsdOp),
    OsdOpReply(OsdOpReply),

    // ----- OSD ↔ OSD -----
    /// Peering, replication and recovery of one PG.
    Pg(PgMessage),

    // ----- OSD → monitor, for peering -----
    /// The OSD is about to serve as a primary in an interval that started
    /// at `epoch`: record that it was alive through it (`up_thru`).
    OsdUpThru {
        id: OsdId,
        epoch: Epoch,
    },
    /// A primary asks for `osds` as the PG's acting set while its up set is
    /// backfilled (empty: back to the up set).
    PgTemp {
        id: OsdId,
        pg: PgId,
        osds: Vec<OsdId>,
    },

    // ----- admin ↔ OSD -----
    OsdAdmin {
        tid: u64,
        cmd: OsdAdminCommand,
    },
    /// The reply to [`Message::OsdAdmin`]: JSON, or an error message.
    OsdAdminReply {
        tid: u64,
        result: Result<String, String>,
    },
}

/// Administrative requests to one OSD. Replies carry JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdAdminCommand {
    /// The object store's performance counters.
    Perf,
    /// Scrub a PG this OSD is primary for now; `repair`: rewrite the bad
    /// copies it finds from a good one.
    Scrub { pg: PgId, deep: bool, repair: bool },
    /// Change a runtime option of this OSD until it stops (`cairn tell
    /// osd.N config set`); checked as `cairn config set` checks it.
    ConfigSet { key: String, value: String },
    /// The OSD's running options, with where each came from.
    ConfigShow,
    /// Flush every dirty object of the cache pool's PGs this OSD is primary
    /// for to the base pool, and evict every object (`cairn osd tier
    /// flush-evict-all`); replies at once, the sweep runs behind client I/O.
    TierFlushEvictAll { pool: PoolId },
    /// How far the sweeps of the cache pool's PGs this OSD is primary for
    /// have come.
    TierSweepStatus { pool: PoolId },
}

/// Administrative requests to the monitor. Replies carry JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonCommand {
    Status,
    GetMap,
    OsdLs,
    /// The map's OSDs (both addresses, state, CRUSH position), pools and
    /// `pg_temp` (`cairn osd dump`).
    OsdDump,
    OsdOut {
        id: OsdId,
    },
    OsdIn {
        id: OsdId,
    },
    OsdDown {
        id: OsdId,
    },
    PoolCreate {
        name: String,
        pg_num: Option<u32>,
        size: Option<u32>,
        min_size: Option<u32>,
        /// CRUSH rule name (default `replicated_rule`).
        rule: Option<String>,
    },
    PoolRm {
        name: String,
    },
    /// Change one setting of a pool (`pg_num`), given as text.
    PoolSet {
        name: String,
        key: String,
        value: String,
    },
    PoolLs,
    PgLs,
    /// One PG: its mapping, state, past intervals and what it waits for.
    PgQuery {
        pg: PgId,
    },
    /// Declare a down OSD's data lost: peering stops waiting for it.
    OsdLost {
        id: OsdId,
    },
    /// Every health warning with what it concerns (PGs, OSDs, objects).
    HealthDetail,
    /// PGs whose last scrub found inconsistent objects, with the objects.
    PgInconsistent,
    /// The CRUSH hierarchy with each OSD's state (`cairn osd tree`).
    OsdTree,
    /// `cairn osd crush ...`.
    OsdCrush(CrushCommand),
    /// Fence `client` for `expire_s` seconds: every OSD refuses its ops
    /// from the epoch that adds it. Replies with that epoch.
    BlocklistAdd {
        client: u64,
        expire_s: u64,
        reason: String,
    },
    BlocklistRm {
        client: u64,
    },
    BlocklistLs,
    /// Store an option in the configuration database (checked against the
    /// option schema: a runtime option WHO reads, a valid value). Replies
    /// with the entry and the epoch that carries it.
    ConfigSet {
        who: String,
        key: String,
        value: String,
    },
    /// Remove an entry: the option goes back to what the daemons' files say.
    ConfigRm {
        who: String,
        key: String,
    },
    /// Every entry of the configuration database.
    ConfigDump,
    /// The monitor's running options, with where each came from.
    ConfigShow,
    /// Every OSD's space and PG count, and every pool's stored bytes and
    /// objects: what `cairn df` and `cairn osd df` print.
    Df,
    /// `cairn osd tier ...`.
    OsdTier(TierCommand),
    /// Client I/O and cache-tier activity per pool (`cairn pool stats`);
    /// `None`: every pool.
    PoolStats {
        pool: Option<String>,
    },
}

/// Changes to cache tiering (Ceph's `osd tier` commands).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TierCommand {
    Add { base: String, cache: String },
    CacheMode { cache: String, mode: String },
    SetOverlay { base: String, cache: String },
    RemoveOverlay { base: String },
    Rm { base: String, cache: String },
}

/// Changes to, and listings of, the CRUSH map. Names are bucket names or
/// `osd.N`; locations are `type=name` pairs separated by spaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrushCommand {
    AddBucket {
        name: String,
        type_name: String,
        location: String,
    },
    Move {
        name: String,
        location: String,
    },
    Rm {
        name: String,
    },
    /// `weight` in TiB as a decimal, e.g. `1.5`.
    Reweight {
        name: String,
        weight: String,
    },
    SetDeviceClass {
        class: String,
        names: Vec<String>,
    },
    RuleCreateReplicated {
        name: String,
        root: String,
        failure_domain: String,
        class: Option<String>,
    },
    RuleLs,
}

/// One client operation on one object: a list of sub-ops applied atomically.
/// A request holds either only reads or only mutations, and any guards
/// ([`ObjOp::OmapCmp`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdOp {
    /// Per-send id for matching the reply.
    pub tid: u64,
    /// Stable across resends, for exactly-once application.
    pub reqid: ReqId,
    /// The client's map epoch when it chose the target.
    pub epoch: Epoch,
    pub pg: PgId,
    pub oid: String,
    pub ops: Vec<ObjOp>,
    /// Run on the pool addressed even if its map sends its ops to a cache
    /// pool: set by a cache pool's OSDs reaching the base pool.
    pub ignore_overlay: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjOp {
    // reads
    Read {
        offset: u64,
        len: u64,
    },
    Stat,
    GetAttr {
        key: String,
    },
    OmapGet {
        keys: Vec<String>,
    },
    OmapList {
        start_after: Option<String>,
        max: u32,
    },
    /// A guard: the object's omap value at `key` must equal `value`
    /// (`None`: the key, or the whole object, is absent), or the whole
    /// request fails with [`OpError::Mismatch`] and nothing of it is
    /// applied. In a mutating request guards see the object as it was
    /// before the request (put them first).
    OmapCmp {
        key: String,
        value: Option<Bytes>,
    },
    /// The whole object: data, user attributes and omap
    /// ([`OpOutput::Copy`]); how a cache tier promotes an object.
    CopyGet,
    // mutations
    Write {
        offset: u64,
        #[serde(with = "cairn_types::bulk")]
        data: Bytes,
    },
    /// Zero a range; clipped to the object's size; no-op on a missing object.
    Zero {
        offset: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    /// Fails with `NotFound` if the object does not exist.
    Remove,
    Create {
        exclusive: bool,
    },
    SetAttr {
        key: String,
        value: Bytes,
    },
    OmapSet {
        entries: Vec<(String, Bytes)>,
    },
    /// Like `OmapSet` but fails with `Exists` if any key exists.
    OmapInsert {
        entries: Vec<(String, Bytes)>,
    },
    OmapRm {
        keys: Vec<String>,
    },
    /// Replace the whole object (data, user attributes, omap) with this
    /// copy, creating it if absent; how a cache tier flushes an object.
    CopyPut(ObjectData),
}

/// An object's content without its version: what [`ObjOp::CopyGet`]
/// returns and [`ObjOp::CopyPut`] installs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectData {
    #[serde(with = "cairn_types::bulk")]
    pub data: Bytes,
    pub attrs: Vec<(String, Bytes)>,
    pub omap: Vec<(String, Bytes)>,
}

impl ObjOp {
    pub fn is_mutation(&self) -> bool {
        !matches!(
            self,
            ObjOp::Read { .. }
                | ObjOp::Stat
                | ObjOp::GetAttr { .. }
                | ObjOp::OmapGet { .. }
                | ObjOp::OmapList { .. }
                | ObjOp::OmapCmp { .. }
                | ObjOp::CopyGet
        )
    }
}

/// Result of one read sub-op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpOutput {
    None,
    Data(#[serde(with = "cairn_types::bulk")] Bytes),
    Stat { size: u64 },
    Attr(Option<Bytes>),
    Omap(Vec<(String, Bytes)>),
    Copy(ObjectData),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum OpError {
    #[error("object not found")]
    NotFound,
    #[error("already exists")]
    Exists,
    /// The client is on the map's blocklist (fenced): nothing was applied.
    #[error("this client is blocklisted (fenced off the cluster); another client took over")]
    Blocklisted,
    /// An [`ObjOp::OmapCmp`] guard did not hold; nothing was applied.
    #[error("compare failed: {0}")]
    Mismatch(String),
    #[error("invalid operation: {0}")]
    Invalid(String),
    /// An OSD of the PG is full (or its store ran out of space): the
    /// mutation was not applied. Removes, truncates and zeroing still work.
    #[error("no space left: an OSD serving this object is full (see `cairn status`)")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(String),
    /// Not the primary at `epoch`; get a map at least that new and resend.
    #[error("not the primary for this PG at epoch {epoch}")]
    WrongPrimary { epoch: Epoch },
    /// The PG changed interval while the op was in flight; resend.
    #[error("PG interval changed; resend")]
    Retry { epoch: Epoch },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdOpReply {
    pub tid: u64,
    pub result: Result<Vec<OpOutput>, OpError>,
}
