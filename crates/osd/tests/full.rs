//! Admission of client ops while the map records an OSD as full, on one
//! [`OsdCore`] driven through a small in-memory [`OsdIo`]: a one-OSD pool
//! (size 1), so the PG activates with no peers.
//!
//! Mutations that may add data fail at once with `NoSpace` and change
//! nothing; removes, truncates, zeroing and omap removals run; reads run;
//! a resent request that was applied before the OSD filled up gets its
//! outcome, not `NoSpace`; when the map no longer says full, writes run.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_map::{ClusterMap, FullState, WEIGHT_ONE};
use cairn_osd::io::{copy_object, execute_reads, ClientId, Done, OsdIo};
use cairn_osd::{CoreOptions, OsdCore};
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId, ReqId};
use cairn_wire::{ObjOp, OpError, OpOutput, OsdOp, OsdOpReply, PgMessage};
use common::ready;

/// What the core asked for, handled by [`Harness::pump`].
enum Effect {
    Commit(Done),
    Read(Done, cairn_osd::io::ReadResult),
    Copy(Done, cairn_osd::io::CopyResult),
    UpThru(Epoch),
}

struct FakeIo {
    store: MemStore,
    effects: VecDeque<Effect>,
    replies: Vec<OsdOpReply>,
}

impl OsdIo for FakeIo {
    fn store(&self) -> &dyn ObjectStore {
        &self.store
    }
    fn now(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn submit(&mut self, txn: Transaction, done: Done) -> Result<(), StoreError> {
        drop(self.store.submit(txn)?);
        self.effects.push_back(Effect::Commit(done));
        Ok(())
    }
    fn read(&mut self, oid: ObjectId, ops: Vec<ObjOp>, done: Done) {
        let result = ready(execute_reads(&self.store, &oid, &ops));
        self.effects.push_back(Effect::Read(done, result));
    }
    fn tier_op(
        &mut self,
        _pool: u32,
        _oid: String,
        _ops: Vec<ObjOp>,
        _reqid: Option<cairn_types::ReqId>,
        _done: Done,
    ) {
        unreachable!("no cache tier is set up here");
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

struct Harness {
    core: OsdCore,
    io: FakeIo,
    map: ClusterMap,
    pg: PgId,
    next_tid: u64,
}

impl Harness {
    fn new() -> Self {
        let mut io = FakeIo {
            store: MemStore::new(),
            effects: VecDeque::new(),
            replies: Vec::new(),
        };
        let mut map = ClusterMap::new("t".into());
        map.osd_boot(0, "osd0".into(), WEIGHT_ONE);
        map.create_pool("rbd", 1, 1, 1).expect("pool");
        map.epoch = 2;
        let core = OsdCore::new(0, CoreOptions::default(), &mut io);
        let mut h = Harness {
            core,
            io,
            map,
            pg: PgId::new(1, 0),
            next_tid: 1,
        };
        h.publish(|_| {});
        assert!(h.active(), "the PG never went active");
        h
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

    /// Complete everything the core started, until it is quiet.
    fn pump(&mut self) {
        while let Some(effect) = self.io.effects.pop_front() {
            match effect {
                Effect::Commit(done) => self.core.committed(done, Ok(()), &mut self.io),
                Effect::Read(done, r) => self.core.read_done(done, r, &mut self.io),
                Effect::Copy(done, r) => self.core.object_read(done, r, &mut self.io),
                Effect::UpThru(epoch) => {
                    self.publish(|m| {
                        m.set_up_thru(0, epoch);
                    });
                }
            }
        }
        self.core.tick(&mut self.io);
    }

    fn active(&self) -> bool {
        self.core
            .pg(self.pg)
            .is_some_and(|pg| pg.stat().state.starts_with("active"))
    }

    /// Send one request (with request id `reqid`) and return its reply.
    fn op_as(&mut self, reqid: u64, oid: &str, ops: Vec<ObjOp>) -> Result<Vec<OpOutput>, OpError> {
        let tid = self.next_tid;
        self.next_tid += 1;
        let op = OsdOp {
            tid,
            reqid: ReqId {
                client: 1,
                tid: reqid,
            },
            epoch: self.map.epoch,
            pg: self.pg,
            oid: oid.into(),
            ops,
            ignore_overlay: false,
        };
        self.core.client_op(1, op, &mut self.io);
        self.pump();
        let at = self
            .io
            .replies
            .iter()
            .position(|r| r.tid == tid)
            .unwrap_or_else(|| panic!("no reply to {oid:?}: the op waits"));
        self.io.replies.remove(at).result
    }

    fn op(&mut self, oid: &str, ops: Vec<ObjOp>) -> Result<Vec<OpOutput>, OpError> {
        let reqid = self.next_tid + 1_000_000;
        self.op_as(reqid, oid, ops)
    }

    fn read(&mut self, oid: &str) -> Result<Bytes, OpError> {
        match self
            .op(
                oid,
                vec![ObjOp::Read {
                    offset: 0,
                    len: 1 << 20,
                }],
            )?
            .first()
        {
            Some(OpOutput::Data(d)) => Ok(d.clone()),
            other => panic!("read returned {other:?}"),
        }
    }
}

fn write(data: &'static [u8]) -> Vec<ObjOp> {
    vec![ObjOp::Write {
        offset: 0,
        data: Bytes::from_static(data),
    }]
}

#[test]
fn at_full_only_ops_that_free_space_run() {
    let mut h = Harness::new();
    for oid in ["a", "b", "c", "d"] {
        h.op(oid, write(b"0123456789")).expect("write");
    }
    h.op(
        "d",
        vec![ObjOp::OmapSet {
            entries: vec![("k".into(), Bytes::from_static(b"v"))],
        }],
    )
    .expect("omap set");
    // A write applied now, whose reply the client will not see.
    h.op_as(77, "e", write(b"applied")).expect("write");

    h.publish(|m| {
        m.set_full_state(0, FullState::Full);
    });
    let refused: Vec<(&str, Vec<ObjOp>)> = vec![
        ("a", write(b"new")),
        ("new", write(b"new")),
        ("new", vec![ObjOp::Create { exclusive: false }]),
        (
            "a",
            vec![ObjOp::SetAttr {
                key: "x".into(),
                value: Bytes::from_static(b"y"),
            }],
        ),
        // More omap than a watch renewal or an admin record.
        (
            "a",
            vec![ObjOp::OmapSet {
                entries: vec![("k".into(), Bytes::from(vec![7u8; 5000]))],
            }],
        ),
        (
            "a",
            vec![
                ObjOp::Truncate { size: 0 },
                ObjOp::Write {
                    offset: 0,
                    data: Bytes::from_static(b"x"),
                },
            ],
        ),
    ];
    for (oid, ops) in refused {
        assert_eq!(
            h.op(oid, ops.clone()),
            Err(OpError::NoSpace),
            "{oid} {ops:?}"
        );
    }
    assert_eq!(h.read("a").unwrap(), Bytes::from_static(b"0123456789"));
    assert_eq!(h.read("new"), Err(OpError::NotFound), "nothing was created");

    // The resent request that was applied gets its outcome.
    assert!(h.op_as(77, "e", write(b"applied")).is_ok());

    // What frees space runs.
    h.op("a", vec![ObjOp::Remove]).expect("remove");
    h.op("b", vec![ObjOp::Truncate { size: 4 }])
        .expect("truncate");
    h.op("c", vec![ObjOp::Zero { offset: 2, len: 4 }])
        .expect("zero");
    h.op(
        "d",
        vec![ObjOp::OmapRm {
            keys: vec!["k".into()],
        }],
    )
    .expect("omap rm");
    // Small omap changes (watch renewals, lock and admin records) run,
    // guarded or not: refusing them would stop reads and removals.
    h.op(
        "d",
        vec![
            ObjOp::OmapCmp {
                key: "k".into(),
                value: None,
            },
            ObjOp::OmapSet {
                entries: vec![("watch.1".into(), Bytes::from(vec![1u8; 300]))],
            },
        ],
    )
    .expect("small omap set at full");
    assert_eq!(h.read("a"), Err(OpError::NotFound));
    assert_eq!(h.read("b").unwrap(), Bytes::from_static(b"0123"));
    assert_eq!(
        h.read("c").unwrap(),
        Bytes::from_static(b"01\0\0\0\x006789")
    );

    // Nearfull and backfillfull do not stop writes; below full they run.
    for state in [
        FullState::Backfillfull,
        FullState::Nearfull,
        FullState::None,
    ] {
        h.publish(|m| {
            m.set_full_state(0, state);
        });
        h.op("a", write(b"again")).expect("write below full");
    }
    assert_eq!(h.read("a").unwrap(), Bytes::from_static(b"again"));
}
