//! The simulation's events and how each is delivered: network messages
//! over in-order links, connection resets, disk completions, timers; and
//! the [`OsdIo`] an OSD core acts through, whose effects become events.

use std::sync::Arc;
use std::time::Duration;

use cairn_map::{ClusterMap, OsdUsage};
use cairn_osd::io::{copy_object, execute_reads, ClientId, CopyResult, Done, OsdIo, ReadResult};
use cairn_osd::OsdCore;
use cairn_store::{ObjectId, ObjectStore, StoreError, Transaction};
use cairn_types::{Epoch, OsdId, PgId};
use cairn_wire::{ObjOp, OsdOp, OsdOpReply, PgMessage, PgStat};

use crate::mon::Change;
use crate::store::SimStore;
use crate::{Node, Sim};

pub(crate) enum NetMsg {
    Pg(PgMessage),
    Op(OsdOp),
    Reply(OsdOpReply),
    Map(Arc<ClusterMap>),
    Boot,
    UpThru(Epoch),
    PgTemp(PgId, Vec<OsdId>),
    Stats(Vec<PgStat>, Option<OsdUsage>),
}

pub(crate) enum Event {
    Net {
        from: Node,
        to: Node,
        generation: u64,
        msg: NetMsg,
    },
    /// `node` learns its connection to `peer` broke.
    Reset {
        node: Node,
        peer: Node,
    },
    Commit {
        osd: OsdId,
        inc: u64,
        seq: u64,
        done: Done,
    },
    Read {
        osd: OsdId,
        inc: u64,
        done: Done,
        result: ReadResult,
    },
    Copy {
        osd: OsdId,
        inc: u64,
        done: Done,
        result: CopyResult,
    },
    OsdTick {
        osd: OsdId,
        inc: u64,
    },
    OsdHeartbeat {
        osd: OsdId,
        inc: u64,
    },
    MonTick,
    ClientTick {
        client: usize,
    },
}

pub(crate) struct Scheduled {
    pub at: Duration,
    pub seq: u64,
    pub event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// What an OSD core asked for during one call.
pub(crate) enum Effect {
    Commit(u64, Done),
    Read(Done, ReadResult),
    Copy(Done, CopyResult),
    Send(OsdId, PgMessage),
    Reply(ClientId, OsdOpReply),
    UpThru(Epoch),
    PgTemp(PgId, Vec<OsdId>),
}

pub(crate) struct SimIo<'a> {
    pub store: &'a mut SimStore,
    pub now: Duration,
    pub effects: &'a mut Vec<Effect>,
}

/// Run a future the in-memory store completes at once.
fn ready<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a simulated store operation did not complete at once"),
    }
}

impl OsdIo for SimIo<'_> {
    fn store(&self) -> &dyn ObjectStore {
        &*self.store
    }

    fn now(&self) -> Duration {
        self.now
    }

    fn wall_secs(&self) -> u64 {
        // Simulated wall clock: deterministic, and it moves with the
        // simulation.
        1_800_000_000 + self.now.as_secs()
    }

    fn submit(&mut self, txn: Transaction, done: Done) -> Result<(), StoreError> {
        let seq = self.store.apply(txn)?;
        self.effects.push(Effect::Commit(seq, done));
        Ok(())
    }

    fn read(&mut self, oid: ObjectId, ops: Vec<ObjOp>, done: Done) {
        let result = self
            .store
            .reading_committed(|store| ready(execute_reads(store, &oid, &ops)));
        self.effects.push(Effect::Read(done, result));
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
        let result = self
            .store
            .reading_committed(|store| ready(copy_object(store, &oid)));
        self.effects.push(Effect::Copy(done, result));
    }

    fn send(&mut self, to: OsdId, msg: PgMessage) {
        self.effects.push(Effect::Send(to, msg));
    }

    fn reply(&mut self, client: ClientId, reply: OsdOpReply) {
        self.effects.push(Effect::Reply(client, reply));
    }

    fn request_up_thru(&mut self, epoch: Epoch) {
        self.effects.push(Effect::UpThru(epoch));
    }

    fn request_pg_temp(&mut self, pg: PgId, osds: Vec<OsdId>) {
        self.effects.push(Effect::PgTemp(pg, osds));
    }
}

const TICK: Duration = Duration::from_millis(100);
const HEARTBEAT: Duration = Duration::from_secs(1);
const MON_TICK: Duration = Duration::from_millis(50);
const CLIENT_TICK: Duration = Duration::from_millis(20);

impl Sim {
    /// Send `msg` over the link `from` → `to`: it arrives after a random
    /// latency, after everything sent on that link before it, unless the
    /// link breaks first. To a dead OSD, the sender learns at once that
    /// the connection failed; across a partition, it is lost silently.
    pub(crate) fn send(&mut self, from: Node, to: Node, msg: NetMsg) {
        let cut = |n: Node| matches!(n, Node::Osd(o) if self.cut.contains(&o));
        if cut(from) || cut(to) {
            // The connection exists (a sender does not know it is cut off):
            // healing breaks it, and the sender learns then.
            self.links.entry((from, to)).or_default();
            return;
        }
        if let Node::Osd(o) = to {
            if !self.osds.get(&o).is_some_and(|x| x.alive()) {
                if from != Node::Mon {
                    self.schedule(
                        Duration::from_micros(100),
                        Event::Reset {
                            node: from,
                            peer: to,
                        },
                    );
                }
                return;
            }
        }
        let latency = self.random_between(self.cfg.latency);
        let now = self.now;
        let link = self.links.entry((from, to)).or_default();
        let at = (now + latency).max(link.last + Duration::from_micros(1));
        link.last = at;
        let generation = link.generation;
        self.schedule(
            at - now,
            Event::Net {
                from,
                to,
                generation,
                msg,
            },
        );
    }

    /// Run `f` on live OSD `id`'s core, then act on what it asked for.
    pub(crate) fn with_osd(&mut self, id: OsdId, f: impl FnOnce(&mut OsdCore, &mut SimIo<'_>)) {
        let now = self.now;
        let Some(osd) = self.osds.get_mut(&id) else {
            return;
        };
        let Some(core) = osd.core.as_mut() else {
            return;
        };
        let mut effects = Vec::new();
        let mut io = SimIo {
            store: &mut osd.store,
            now,
            effects: &mut effects,
        };
        f(core, &mut io);
        self.apply_effects(id, effects);
    }

    fn apply_effects(&mut self, id: OsdId, effects: Vec<Effect>) {
        let from = Node::Osd(id);
        for effect in effects {
            let inc = self.osds.get(&id).map_or(0, |o| o.incarnation);
            match effect {
                Effect::Commit(seq, done) => {
                    let latency = self.random_between(self.cfg.disk_latency);
                    let now = self.now;
                    let Some(osd) = self.osds.get_mut(&id) else {
                        continue;
                    };
                    let at = (now + latency + osd.commit_delay).max(osd.last_commit);
                    osd.last_commit = at;
                    self.schedule(
                        at - now,
                        Event::Commit {
                            osd: id,
                            inc,
                            seq,
                            done,
                        },
                    );
                }
                Effect::Read(done, result) => {
                    let latency = self.random_between(self.cfg.disk_latency);
                    self.schedule(
                        latency,
                        Event::Read {
                            osd: id,
                            inc,
                            done,
                            result,
                        },
                    );
                }
                Effect::Copy(done, result) => {
                    let latency = self.random_between(self.cfg.disk_latency);
                    self.schedule(
                        latency,
                        Event::Copy {
                            osd: id,
                            inc,
                            done,
                            result,
                        },
                    );
                }
                Effect::Send(to, msg) => self.send(from, Node::Osd(to), NetMsg::Pg(msg)),
                Effect::Reply(client, reply) => {
                    self.send(from, Node::Client(client as usize), NetMsg::Reply(reply))
                }
                Effect::UpThru(epoch) => self.send(from, Node::Mon, NetMsg::UpThru(epoch)),
                Effect::PgTemp(pg, osds) => self.send(from, Node::Mon, NetMsg::PgTemp(pg, osds)),
            }
        }
    }

    fn live(&self, osd: OsdId, inc: u64) -> bool {
        self.osds
            .get(&osd)
            .is_some_and(|o| o.alive() && o.incarnation == inc)
    }

    pub(crate) fn dispatch(&mut self, event: Event) {
        match event {
            Event::Net {
                from,
                to,
                generation,
                msg,
            } => {
                let current = self.links.get(&(from, to)).map_or(0, |l| l.generation);
                let cut = |n: Node| matches!(n, Node::Osd(o) if self.cut.contains(&o));
                if current == generation && !cut(from) && !cut(to) {
                    self.deliver(from, to, msg);
                }
            }
            Event::Reset { node, peer } => match (node, peer) {
                (Node::Osd(o), Node::Osd(p)) => self.with_osd(o, |core, io| core.peer_reset(p, io)),
                (Node::Client(c), Node::Osd(p)) => {
                    let now = self.now;
                    self.clients[c].reset(p, now);
                }
                _ => {}
            },
            Event::Commit {
                osd,
                inc,
                seq,
                done,
            } => {
                if self.live(osd, inc) {
                    if let Some(o) = self.osds.get_mut(&osd) {
                        o.store.make_durable(seq);
                    }
                    self.with_osd(osd, |core, io| core.committed(done, Ok(()), io));
                }
            }
            Event::Read {
                osd,
                inc,
                done,
                result,
            } => {
                if self.live(osd, inc) {
                    self.with_osd(osd, |core, io| core.read_done(done, result, io));
                }
            }
            Event::Copy {
                osd,
                inc,
                done,
                result,
            } => {
                if self.live(osd, inc) {
                    self.with_osd(osd, |core, io| core.object_read(done, result, io));
                }
            }
            Event::OsdTick { osd, inc } => {
                if self.live(osd, inc) {
                    self.maybe_end_catch_up(osd);
                    self.with_osd(osd, |core, io| core.tick(io));
                    self.schedule(TICK, Event::OsdTick { osd, inc });
                }
            }
            Event::OsdHeartbeat { osd, inc } => {
                if self.live(osd, inc) {
                    let mut stats = Vec::new();
                    let mut usage = None;
                    self.with_osd(osd, |core, io| {
                        stats = core.stats(io);
                        usage = io.store().statfs().ok().map(|s| OsdUsage {
                            used_bytes: s.used_bytes,
                            total_bytes: s.total_bytes,
                        });
                    });
                    self.send(Node::Osd(osd), Node::Mon, NetMsg::Stats(stats, usage));
                    self.schedule(HEARTBEAT, Event::OsdHeartbeat { osd, inc });
                }
            }
            Event::MonTick => {
                if let Some(map) = self.mon.tick(self.now) {
                    self.publish(map);
                }
                self.schedule(MON_TICK, Event::MonTick);
            }
            Event::ClientTick { client } => {
                let now = self.now;
                let depth = self.cfg.client_depth;
                let mut sends = self.clients[client].due(now);
                if self.clients[client].active {
                    let c = &mut self.clients[client];
                    sends.extend(c.random_ops(&mut self.rng, now, depth));
                }
                self.client_sends(client, sends);
                self.schedule(CLIENT_TICK, Event::ClientTick { client });
            }
        }
    }

    fn publish(&mut self, map: Arc<ClusterMap>) {
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        for osd in osds {
            self.send(Node::Mon, Node::Osd(osd), NetMsg::Map(map.clone()));
        }
        for c in 0..self.clients.len() {
            self.send(Node::Mon, Node::Client(c), NetMsg::Map(map.clone()));
        }
    }

    fn deliver(&mut self, from: Node, to: Node, msg: NetMsg) {
        match (to, msg) {
            (Node::Osd(o), NetMsg::Pg(m)) => {
                if let Node::Osd(f) = from {
                    self.with_osd(o, |core, io| core.peer_message(f, m, io));
                    self.maybe_end_catch_up(o);
                }
            }
            (Node::Osd(o), NetMsg::Op(op)) => {
                if let Node::Client(c) = from {
                    self.with_osd(o, |core, io| core.client_op(c as ClientId, op, io));
                }
            }
            (Node::Osd(o), NetMsg::Map(map)) => self.osd_map(o, map),
            (Node::Client(c), NetMsg::Reply(reply)) => {
                let now = self.now;
                self.clients[c].reply(reply, now);
            }
            (Node::Client(c), NetMsg::Map(map)) => {
                let sends = self.clients[c].take_map(map);
                self.client_sends(c, sends);
            }
            (Node::Mon, msg) => {
                let Node::Osd(o) = from else { return };
                match msg {
                    NetMsg::Boot => self.mon.request(Change::Boot(o)),
                    NetMsg::UpThru(epoch) => self.mon.request(Change::UpThru(o, epoch)),
                    NetMsg::PgTemp(pg, osds) => self.mon.request(Change::PgTemp(o, pg, osds)),
                    NetMsg::Stats(stats, usage) => {
                        let now = self.now;
                        self.mon.heartbeat(o, now, stats, usage);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// An OSD takes a map; one that finds itself marked down while alive
    /// boots again (as the daemon does).
    fn osd_map(&mut self, osd: OsdId, map: Arc<ClusterMap>) {
        let marked_down = !map.is_up(osd);
        self.with_osd(osd, |core, io| core.handle_map(map, io));
        let now = self.now;
        let Some(o) = self.osds.get_mut(&osd).filter(|o| o.alive()) else {
            return;
        };
        let due = o
            .last_boot
            .is_none_or(|t| now >= t + Duration::from_secs(1));
        if marked_down && due && o.catching_up.is_none() {
            o.last_boot = Some(now);
            self.send(Node::Osd(osd), Node::Mon, NetMsg::Boot);
        }
    }
}
