//! Evictions from a writeback cache pool while a client read of the
//! object runs on the cache's store, on one [`OsdCore`] driven through a
//! small in-memory [`OsdIo`]: one OSD, a base and a cache pool (size 1,
//! one PG each), the base pool modelled by the harness.
//!
//! The store runs a client read only when the test releases it, so a
//! read can be held in flight while a `flush-evict-all` sweep flushes and
//! evicts its object. The read still finds the object (the eviction waits
//! for it), the object leaves the cache once the read is over, and a
//! later read finds it again through the base pool: for a dirty object
//! (the flush's base write lands while the read is in flight) and for a
//! clean one (evicted at once by the sweep).

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_map::{CacheMode, ClusterMap, WEIGHT_ONE};
use cairn_osd::io::{copy_object, execute_reads, ClientId, CopyResult, Done, OsdIo};
use cairn_osd::{CoreOptions, OsdCore};
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId, PoolId, ReqId};
use cairn_wire::{ObjOp, ObjectData, OpError, OpOutput, OsdOp, OsdOpReply, PgMessage};
use common::ready;

/// What the core asked for, handled by [`Harness::pump`]. Client reads
/// are not among them: they wait in [`FakeIo::held`].
enum Effect {
    Commit(Done),
    Copy(Done, CopyResult),
    /// An op of the cache on the base pool.
    Base(String, Vec<ObjOp>, Done),
    UpThru(Epoch),
}

struct FakeIo {
    store: MemStore,
    base_pool: PoolId,
    effects: VecDeque<Effect>,
    /// Client reads dispatched to the store, not yet run.
    held: Vec<(ObjectId, Vec<ObjOp>, Done)>,
    replies: Vec<OsdOpReply>,
}

impl OsdIo for FakeIo {
    fn store(&self) -> &dyn ObjectStore {
        &self.store
    }
    fn now(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn wall_secs(&self) -> u64 {
        1_000
    }
    fn submit(&mut self, txn: Transaction, done: Done) -> Result<(), StoreError> {
        drop(self.store.submit(txn)?);
        self.effects.push_back(Effect::Commit(done));
        Ok(())
    }
    fn read(&mut self, oid: ObjectId, ops: Vec<ObjOp>, done: Done) {
        self.held.push((oid, ops, done));
    }
    fn tier_op(
        &mut self,
        pool: PoolId,
        oid: String,
        ops: Vec<ObjOp>,
        _reqid: Option<ReqId>,
        done: Done,
    ) {
        assert_eq!(pool, self.base_pool, "a base op to another pool");
        self.effects.push_back(Effect::Base(oid, ops, done));
    }
    fn read_object(&mut self, oid: ObjectId, done: Done) {
        let result = ready(copy_object(&self.store, &oid));
        self.effects.push_back(Effect::Copy(done, result));
    }
    fn send(&mut self, to: OsdId, msg: PgMessage) {
        panic!("a one-OSD PG sent {msg:?} to osd.{to}");
    }
    fn reply(&mut self, _client: ClientId, reply: OsdOpReply) {
        self.replies.push(reply);
    }
    fn request_up_thru(&mut self, epoch: Epoch) {
        self.effects.push_back(Effect::UpThru(epoch));
    }
    fn request_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>) {
        panic!("a one-OSD PG asked for pg_temp {osds:?} for {pg}");
    }
}

/// The base pool: object name to data (no attributes or omap here).
type BasePool = BTreeMap<String, Vec<u8>>;

/// Run the cache's op on the base pool as its primary would.
fn run_base(base: &mut BasePool, oid: &str, ops: &[ObjOp]) -> Result<Vec<OpOutput>, OpError> {
    let mut out = Vec::new();
    for op in ops {
        out.push(match op {
            ObjOp::CopyGet => match base.get(oid) {
                Some(data) => OpOutput::Copy(ObjectData {
                    data: Bytes::from(data.clone()),
                    attrs: Vec::new(),
                    omap: Vec::new(),
                }),
                None => return Err(OpError::NotFound),
            },
            ObjOp::CopyPut(copy) => {
                base.insert(oid.into(), copy.data.to_vec());
                OpOutput::None
            }
            ObjOp::Write { offset, data } => {
                let obj = base.entry(oid.into()).or_default();
                let (start, end) = (*offset as usize, *offset as usize + data.len());
                if obj.len() < end {
                    obj.resize(end, 0);
                }
                obj[start..end].copy_from_slice(data);
                OpOutput::None
            }
            ObjOp::Create { .. } => {
                base.entry(oid.into()).or_default();
                OpOutput::None
            }
            ObjOp::Remove => match base.remove(oid) {
                Some(_) => OpOutput::None,
                None => return Err(OpError::NotFound),
            },
            other => panic!("the base pool model has no {other:?}"),
        });
    }
    Ok(out)
}

struct Harness {
    core: OsdCore,
    io: FakeIo,
    map: ClusterMap,
    base: BasePool,
    cache_pool: PoolId,
    cache_pg: PgId,
    next_tid: u64,
}

const DATA: &[u8] = b"written through the cache";

impl Harness {
    fn new() -> Self {
        let mut map = ClusterMap::new("t".into());
        map.osd_boot(0, "osd0".into(), WEIGHT_ONE);
        let base_pool = map.create_pool("base", 1, 1, 1).expect("base pool");
        let cache_pool = map.create_pool("cache", 1, 1, 1).expect("cache pool");
        map.tier_add("base", "cache").expect("tier add");
        map.tier_cache_mode("cache", CacheMode::Writeback)
            .expect("cache mode");
        map.tier_set_overlay("base", "cache").expect("overlay");
        // Every read of an object the cache lacks promotes it (no
        // proxied reads). The targets stay unset: the agent never
        // flushes or evicts on its own.
        map.set_tier_param("cache", "min_read_recency_for_promote", "0")
            .expect("recency");
        map.epoch = 2;
        let mut io = FakeIo {
            store: MemStore::new(),
            base_pool,
            effects: VecDeque::new(),
            held: Vec::new(),
            replies: Vec::new(),
        };
        let core = OsdCore::new(0, CoreOptions::default(), &mut io);
        let mut h = Harness {
            core,
            io,
            map,
            base: BasePool::new(),
            cache_pool,
            cache_pg: PgId::new(cache_pool, 0),
            next_tid: 1,
        };
        h.publish(|_| {});
        assert!(h.active(), "the cache PG never went active");
        h
    }

    fn active(&self) -> bool {
        self.core
            .pg(self.cache_pg)
            .is_some_and(|pg| pg.stat().state.starts_with("active"))
    }

    /// A new epoch with `change` applied, given to the core.
    fn publish(&mut self, change: impl FnOnce(&mut ClusterMap)) {
        let prev = self.map.clone();
        change(&mut self.map);
        if self.core.map().epoch > 0 {
            self.map.epoch = prev.epoch + 1;
            self.map.advance_history(&prev);
        }
        self.core
            .handle_map(Arc::new(self.map.clone()), &mut self.io);
        self.pump();
    }

    /// Complete everything the core started but the held reads, until it
    /// is quiet.
    fn pump(&mut self) {
        loop {
            while let Some(effect) = self.io.effects.pop_front() {
                match effect {
                    Effect::Commit(done) => self.core.committed(done, Ok(()), &mut self.io),
                    Effect::Copy(done, r) => self.core.object_read(done, r, &mut self.io),
                    Effect::Base(oid, ops, done) => {
                        let r = run_base(&mut self.base, &oid, &ops);
                        self.core.tier_done(done, r, &mut self.io);
                    }
                    Effect::UpThru(epoch) => self.publish(|m| {
                        m.set_up_thru(0, epoch);
                    }),
                }
            }
            self.core.tick(&mut self.io);
            if self.io.effects.is_empty() {
                return;
            }
        }
    }

    /// Run the held reads on the store now, and pump.
    fn release_reads(&mut self) {
        for (oid, ops, done) in std::mem::take(&mut self.io.held) {
            let result = ready(execute_reads(&self.io.store, &oid, &ops));
            self.core.read_done(done, result, &mut self.io);
        }
        self.pump();
    }

    /// Pump and run reads until nothing is left.
    fn settle(&mut self) {
        self.pump();
        while !self.io.held.is_empty() {
            self.release_reads();
        }
    }

    /// Send a client request to the cache PG; returns its tid.
    fn send(&mut self, oid: &str, ops: Vec<ObjOp>) -> u64 {
        let tid = self.next_tid;
        self.next_tid += 1;
        let op = OsdOp {
            tid,
            reqid: ReqId { client: 1, tid },
            epoch: self.map.epoch,
            pg: self.cache_pg,
            oid: oid.into(),
            ops,
            ignore_overlay: false,
        };
        self.core.client_op(1, op, &mut self.io);
        tid
    }

    fn reply(&mut self, tid: u64) -> Option<Result<Vec<OpOutput>, OpError>> {
        let at = self.io.replies.iter().position(|r| r.tid == tid)?;
        Some(self.io.replies.remove(at).result)
    }

    fn op(&mut self, oid: &str, ops: Vec<ObjOp>) -> Result<Vec<OpOutput>, OpError> {
        let tid = self.send(oid, ops);
        self.settle();
        self.reply(tid)
            .unwrap_or_else(|| panic!("no reply to {oid:?}: the op waits"))
    }

    fn read(&mut self, oid: &str) -> Result<Bytes, OpError> {
        let tid = self.send(oid, read_all());
        self.settle();
        data_of(self.reply(tid).expect("no reply to a read"))
    }

    /// Does the cache's store hold `oid` (data or whiteout)?
    fn cached(&self, oid: &str) -> bool {
        self.io
            .store
            .list_objects(self.cache_pg)
            .expect("list the cache PG")
            .iter()
            .any(|n| n == oid)
    }

    /// Start a flush-evict-all sweep of the cache pool (not pumped).
    fn start_sweep(&mut self) {
        let pgs = self
            .core
            .tier_flush_evict_all(self.cache_pool, &mut self.io)
            .expect("flush-evict-all");
        assert_eq!(pgs, vec![self.cache_pg]);
    }

    /// The cache PG's sweep's counters, once it is over.
    fn sweep_done(&self) -> serde_json::Value {
        let sweeps = self.core.tier_sweeps(self.cache_pool);
        let [(_, sweep)] = sweeps.as_slice() else {
            panic!("sweeps: {sweeps:?}");
        };
        assert_eq!(sweep["finished"], true, "the sweep goes on: {sweep}");
        sweep.clone()
    }

    /// `oid` written (a partial object) then read (which fills it: a
    /// whole dirty object, whose reads run on the cache's copy).
    fn write_dirty(&mut self, oid: &str) {
        let write = vec![ObjOp::Write {
            offset: 0,
            data: Bytes::from_static(DATA),
        }];
        self.op(oid, write).expect("write");
        assert_eq!(self.read(oid), Ok(Bytes::from_static(DATA)));
        assert!(self.cached(oid) && !self.base.contains_key(oid));
    }
}

fn read_all() -> Vec<ObjOp> {
    vec![ObjOp::Read {
        offset: 0,
        len: 1 << 20,
    }]
}

fn data_of(result: Result<Vec<OpOutput>, OpError>) -> Result<Bytes, OpError> {
    match result?.as_slice() {
        [OpOutput::Data(d)] => Ok(d.clone()),
        other => panic!("a read returned {other:?}"),
    }
}

impl Harness {
    /// Let the held read run: it finds the data, and the object leaves
    /// the cache once it is over. The finished sweep's counters.
    fn release_read_then_evicted(&mut self, tid: u64) -> serde_json::Value {
        self.release_reads();
        let reply = self.reply(tid).expect("no reply to the held read");
        assert_eq!(data_of(reply), Ok(Bytes::from_static(DATA)));
        self.settle();
        assert!(!self.cached("o"), "not evicted once the read ended");
        self.sweep_done()
    }
}

#[test]
fn a_read_in_flight_when_its_flushed_object_is_evicted_still_finds_it() {
    let mut h = Harness::new();
    h.write_dirty("o");

    // The sweep flushes "o" letting ops on the cache's copy go on: a read
    // starts on it before the flush has read it.
    h.start_sweep();
    let tid = h.send("o", read_all());
    assert_eq!(h.io.held.len(), 1, "the read did not reach the store");

    // The flush reads the object, the base pool takes it, and the
    // eviction comes while the read is still in flight.
    h.pump();
    assert_eq!(h.base.get("o").map(Vec::as_slice), Some(DATA), "flushed");
    assert!(h.reply(tid).is_none(), "the read was answered while held");

    let sweep = h.release_read_then_evicted(tid);
    assert_eq!(sweep["flushed"], 1);
    assert_eq!(sweep["evicted"], 1);
    assert_eq!(sweep["failed"], 0);

    // Read again, it comes from the base pool.
    assert_eq!(h.read("o"), Ok(Bytes::from_static(DATA)));
    assert!(h.cached("o"), "promoted again");
}

#[test]
fn a_read_in_flight_when_its_clean_object_is_evicted_still_finds_it() {
    let mut h = Harness::new();
    h.write_dirty("o");
    h.start_sweep();
    h.settle();
    assert!(!h.cached("o"), "the first sweep did not evict");
    // Promoted again: a clean object in the cache.
    assert_eq!(h.read("o"), Ok(Bytes::from_static(DATA)));
    assert!(h.cached("o"));

    // A read in flight, then a sweep that evicts the clean object at once.
    let tid = h.send("o", read_all());
    assert_eq!(h.io.held.len(), 1, "the read did not reach the store");
    h.start_sweep();
    h.pump();
    assert!(h.reply(tid).is_none(), "the read was answered while held");

    let sweep = h.release_read_then_evicted(tid);
    assert_eq!(sweep["flushed"], 0, "a clean object is not flushed");
    assert_eq!(sweep["evicted"], 1);
    assert_eq!(h.base.get("o").map(Vec::as_slice), Some(DATA));
    assert_eq!(h.read("o"), Ok(Bytes::from_static(DATA)));
}

#[test]
fn a_read_that_began_in_an_earlier_primary_term_is_answered_retry() {
    // What guarded it (the term's count of reads in flight) went with the
    // term: a new term's eviction could overtake it, so it is not answered
    // from the store.
    let mut h = Harness::new();
    h.write_dirty("o");
    let tid = h.send("o", read_all());
    assert_eq!(h.io.held.len(), 1, "the read did not reach the store");
    // The OSD marked down and back up: a new interval, so a new primary
    // term on the same OSD.
    h.publish(|m| {
        m.mark_down(0);
    });
    h.publish(|m| m.osd_boot(0, "osd0".into(), WEIGHT_ONE));
    assert!(h.active(), "the PG did not go active again");
    assert!(h.reply(tid).is_none(), "the read was answered while held");
    h.release_reads();
    match h.reply(tid) {
        Some(Err(OpError::Retry { .. })) => {}
        other => panic!("a read of the earlier term answered {other:?}"),
    }
    // Resent, it finds the data.
    assert_eq!(h.read("o"), Ok(Bytes::from_static(DATA)));
}
