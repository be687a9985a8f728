//! One placement group's in-memory state on this OSD: its interval (acting
//! set), phase, PG info and log (with the request-id index that makes resent
//! requests apply exactly once), in-flight writes and the ops waiting on them.
//!
//! Invariant: the log, `info.last_update` and the store's copy of both change
//! only together, inside the same store transaction ([`PgState::log_mutation`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use cairn_map::{Acting, ClusterMap};
use cairn_store::{Transaction, TxOp};
use cairn_types::{Epoch, OsdId, PgId, ReqId, Version};
use cairn_wire::{LogEntry, OsdOp, PgInfo, PgStat, PgState as WirePgState, Sender};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::Osd;

/// Collection attribute holding the bincode [`PgInfo`].
pub const INFO_ATTR: &str = "info";
/// Object attribute holding the bincode [`Version`] of the last mutation.
pub const VERSION_ATTR: &str = "_v";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Primary: gathering infos, syncing members. Client ops wait.
    Peering,
    /// Primary: serving.
    Active,
    /// Primary: fewer than min_size members up. Client ops wait.
    Inactive,
    /// Replica: waiting for the primary to activate this interval.
    ReplicaWaiting,
    /// Replica: activated by the primary whose interval started at this epoch.
    ReplicaActive(Epoch),
}

/// Per-object bookkeeping on the primary.
#[derive(Default)]
pub struct ObjState {
    /// Writes submitted but not yet completed.
    pub pending_writes: u32,
    /// Ops that must see those writes (reads, conditional writes).
    pub waiting: Vec<(OsdOp, Sender)>,
}

pub struct PgState {
    pub acting: Acting,
    pub interval_epoch: Epoch,
    pub phase: Phase,
    /// Bumped by every new interval or re-peer; a peering task whose number
    /// is no longer current stops.
    pub peering_seq: u64,
    pub info: PgInfo,
    pub log: VecDeque<(Version, Option<ReqId>)>,
    pub reqids: HashMap<ReqId, Version>,
    /// Requests in flight, with any resends of them waiting for the outcome.
    pub inflight: HashMap<ReqId, Vec<(u64, Sender)>>,
    pub inflight_writes: usize,
    pub objects: HashMap<String, ObjState>,
    pub waiting_active: Vec<(OsdOp, Sender)>,
    /// Connection generation to each replica at activation.
    pub peer_generations: HashMap<OsdId, u64>,
    pub min_size: u32,
    pub retired: bool,
    pub objects_estimate: u64,
}

pub struct Pg {
    pub id: PgId,
    pub state: Mutex<PgState>,
    /// Signalled when `inflight_writes` drops to zero.
    pub drained: Notify,
}

impl Pg {
    /// Build the PG from what the store holds (info and log), or empty.
    pub fn load(osd: &Osd, id: PgId) -> Arc<Pg> {
        let info = match osd.store.coll_get_attr(id, INFO_ATTR) {
            Ok(Some(bytes)) => bincode::deserialize(&bytes).unwrap_or_default(),
            _ => PgInfo::default(),
        };
        let mut state = PgState {
            acting: Acting {
                osds: Vec::new(),
                incarnations: Vec::new(),
            },
            interval_epoch: 0,
            phase: Phase::ReplicaWaiting,
            peering_seq: 0,
            info: PgInfo {
                pg: Some(id),
                ..info
            },
            log: VecDeque::new(),
            reqids: HashMap::new(),
            inflight: HashMap::new(),
            inflight_writes: 0,
            objects: HashMap::new(),
            waiting_active: Vec::new(),
            peer_generations: HashMap::new(),
            min_size: 1,
            retired: false,
            objects_estimate: osd
                .store
                .list_objects(id)
                .map(|o| o.len() as u64)
                .unwrap_or(0),
        };
        match osd.store.read_log(id) {
            Ok(entries) => state.reset_log(&entries),
            Err(e) => tracing::error!("pg {id}: cannot read log: {e}"),
        }
        Arc::new(Pg {
            id,
            state: Mutex::new(state),
            drained: Notify::new(),
        })
    }

    pub fn is_primary(&self, me: OsdId) -> bool {
        self.state.lock().acting.primary() == Some(me)
    }

    /// Adopt the acting set of a new map. If that starts a new interval in
    /// which this OSD is primary, returns the peering number to peer with.
    pub fn new_interval(&self, map: &ClusterMap, acting: Acting, me: OsdId) -> Option<u64> {
        let (seq, stale) = {
            let mut st = self.state.lock();
            st.min_size = map.pool(self.id.pool).map(|p| p.min_size).unwrap_or(1);
            if st.acting == acting {
                return None;
            }
            tracing::debug!(
                "pg {}: new interval at {}: {:?}",
                self.id,
                map.epoch,
                acting.osds
            );
            st.acting = acting;
            st.interval_epoch = map.epoch;
            st.peering_seq += 1;
            st.peer_generations.clear();
            if st.acting.primary() == Some(me) {
                st.phase = Phase::Peering;
                (Some(st.peering_seq), Vec::new())
            } else {
                st.phase = Phase::ReplicaWaiting;
                (None, std::mem::take(&mut st.waiting_active))
            }
        };
        crate::primary::reply_wrong_primary(stale, map.epoch);
        seq
    }

    pub fn retire(&self, epoch: Epoch) {
        let waiting = {
            let mut st = self.state.lock();
            st.retired = true;
            st.peering_seq += 1;
            st.phase = Phase::ReplicaWaiting;
            std::mem::take(&mut st.waiting_active)
        };
        crate::primary::reply_wrong_primary(waiting, epoch);
    }

    pub fn stat(&self) -> PgStat {
        let st = self.state.lock();
        PgStat {
            pg: self.id,
            state: match st.phase {
                Phase::Active => WirePgState::Active,
                Phase::Inactive => WirePgState::Inactive,
                _ => WirePgState::Peering,
            },
            interval_epoch: st.interval_epoch,
            acting: st.acting.osds.clone(),
            last_update: st.info.last_update,
            objects: st.objects_estimate,
        }
    }
}

impl PgState {
    /// Replace the in-memory log and request index with `entries`.
    pub fn reset_log(&mut self, entries: &[(Version, Vec<u8>)]) {
        self.log.clear();
        self.reqids.clear();
        for (version, bytes) in entries {
            let reqid = bincode::deserialize::<LogEntry>(bytes)
                .ok()
                .and_then(|e| e.reqid);
            self.log.push_back((*version, reqid));
            if let Some(reqid) = reqid {
                self.reqids.insert(reqid, *version);
            }
        }
    }

    /// The next version a mutation gets at `epoch`.
    pub fn next_version(&self, epoch: Epoch) -> Version {
        let epoch = epoch.max(self.info.last_update.epoch);
        Version::new(epoch, self.info.last_update.counter + 1)
    }

    /// Record `entry` in the log and PG info, in memory and in `txn`, and
    /// trim the log beyond `max_entries`.
    pub fn log_mutation(
        &mut self,
        pg: PgId,
        entry: &LogEntry,
        txn: &mut Transaction,
        max_entries: usize,
    ) {
        assert!(
            entry.version > self.info.last_update,
            "pg {pg}: version {} not after last_update {}",
            entry.version,
            self.info.last_update
        );
        self.info.last_update = entry.version;
        self.info.pg = Some(pg);
        let encoded = bincode::serialize(entry).unwrap_or_default();
        txn.push(TxOp::LogAppend {
            coll: pg,
            version: entry.version,
            entry: Bytes::from(encoded),
        });
        let info = bincode::serialize(&self.info).unwrap_or_default();
        txn.coll_set_attr(pg, INFO_ATTR, Bytes::from(info));
        self.log.push_back((entry.version, entry.reqid));
        if let Some(reqid) = entry.reqid {
            self.reqids.insert(reqid, entry.version);
        }
        // Trim in batches so the trim op is not in every transaction.
        if self.log.len() > max_entries + 64 {
            let mut up_to = Version::ZERO;
            while self.log.len() > max_entries {
                if let Some((version, reqid)) = self.log.pop_front() {
                    up_to = version;
                    if let Some(reqid) = reqid {
                        if self.reqids.get(&reqid) == Some(&version) {
                            self.reqids.remove(&reqid);
                        }
                    }
                }
            }
            txn.log_trim(pg, up_to);
        }
    }
}
