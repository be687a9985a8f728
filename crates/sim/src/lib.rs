//! A deterministic simulation of a whole Cairn cluster in one process.
//!
//! The OSDs are the real [`OsdCore`] state machines (peering, replication,
//! log recovery, backfill); only what they reach through
//! [`cairn_osd::io::OsdIo`] is simulated: disks ([`store::SimStore`]: a
//! crash loses what is not durable, bit rot fails checksums), the network
//! (links with random latency that deliver in order; resets; partitions
//! that swallow messages), the monitor ([`mon::SimMon`], on the real map
//! model) and clients ([`client::SimClient`], with a model of every
//! acknowledged write). Everything happens in one event queue ordered by
//! simulated time, with ties broken by insertion order, and every random
//! choice comes from one seeded generator: a seed replays exactly.
//!
//! [`Sim`] is driven by scripts (the scenario tests) or by [`random_run`],
//! which injects faults at random and then checks that every acknowledged
//! write reads back and that every PG's copies converge.

pub mod client;
mod events;
pub mod mon;
mod random;
pub mod store;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::time::Duration;

use cairn_map::ClusterMap;
use cairn_osd::{CoreOptions, OsdCore, PlantedBug, Role};
use cairn_types::{OsdId, PgId};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use client::SimClient;
use events::{Event, NetMsg, Scheduled};
use mon::{Change, SimMon};
use store::SimStore;

pub use random::{random_run, Report};

/// A simulated cluster's shape and pace.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub osds: u32,
    /// OSDs per CRUSH host, the pool's failure domain (0: one flat level,
    /// replicas on distinct OSDs).
    pub osds_per_host: u32,
    pub size: u32,
    pub min_size: u32,
    pub pg_num: u32,
    pub clients: usize,
    pub objects_per_client: usize,
    /// Operations each client keeps in flight in random runs.
    pub client_depth: usize,
    pub pg_log_max_entries: usize,
    /// Network latency, uniform in this range.
    pub latency: (Duration, Duration),
    /// Disk latency (commits and reads), uniform in this range.
    pub disk_latency: (Duration, Duration),
    /// How long random faults are injected.
    pub chaos: Duration,
    /// How long the cluster may take to become clean once healed.
    pub settle: Duration,
    /// Let random runs rot object copies.
    pub bitrot: bool,
    /// Random runs may split the pool's PGs (doubling `pg_num`) up to this.
    pub max_pg_num: u32,
    /// A restarted OSD catches its PGs' logs up from their primaries
    /// before it boots (as the daemon does with `osd.boot_catch_up_ms`).
    pub catch_up_before_boot: bool,
    pub planted_bug: Option<PlantedBug>,
}

impl SimConfig {
    pub fn new(seed: u64) -> Self {
        SimConfig {
            seed,
            osds: 5,
            osds_per_host: 0,
            size: 3,
            min_size: 2,
            pg_num: 8,
            clients: 2,
            objects_per_client: 12,
            client_depth: 3,
            pg_log_max_entries: 40,
            latency: (Duration::from_micros(50), Duration::from_millis(3)),
            disk_latency: (Duration::from_micros(100), Duration::from_millis(4)),
            chaos: Duration::from_secs(30),
            settle: Duration::from_secs(180),
            bitrot: true,
            max_pg_num: 32,
            catch_up_before_boot: true,
            planted_bug: None,
        }
    }
}

/// The longest catch-up before boot.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(2);

/// Someone at the end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    Mon,
    Osd(OsdId),
    Client(usize),
}

#[derive(Clone, Copy, Debug, Default)]
struct Link {
    generation: u64,
    last: Duration,
}

pub struct SimOsd {
    pub core: Option<OsdCore>,
    pub store: SimStore,
    /// Bumped by every kill, so completions of a past life are dropped.
    incarnation: u64,
    last_commit: Duration,
    last_boot: Option<Duration>,
    /// Catching up before boot, until this time at the latest.
    catching_up: Option<Duration>,
    /// PGs and changes the last catch-up before boot took.
    pub caught_up: Option<(usize, usize)>,
    /// Added to every commit of this OSD's disk (a slow disk; tests set
    /// it to hold one member's commits back while the others complete).
    pub commit_delay: Duration,
}

impl SimOsd {
    pub fn alive(&self) -> bool {
        self.core.is_some()
    }
}

pub struct Sim {
    pub cfg: SimConfig,
    rng: SmallRng,
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    pub osds: BTreeMap<OsdId, SimOsd>,
    pub mon: SimMon,
    pub clients: Vec<SimClient>,
    links: BTreeMap<(Node, Node), Link>,
    /// OSDs cut off from everyone: what they send or are sent is lost.
    cut: BTreeSet<OsdId>,
    /// What was done to the cluster, for the failure report.
    pub log: Vec<String>,
    pub events: u64,
}

impl Sim {
    /// A cluster of `cfg.osds` OSDs booting, with pool `rbd` and clients.
    pub fn new(cfg: SimConfig) -> Sim {
        let mon = SimMon::new(&cfg);
        let map = mon.map.clone();
        let clients = (0..cfg.clients)
            .map(|c| SimClient::new(c, cfg.objects_per_client, map.clone()))
            .collect();
        let mut sim = Sim {
            rng: SmallRng::seed_from_u64(cfg.seed),
            cfg,
            now: Duration::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            osds: BTreeMap::new(),
            mon,
            clients,
            links: BTreeMap::new(),
            cut: BTreeSet::new(),
            log: Vec::new(),
            events: 0,
        };
        for id in 0..sim.cfg.osds {
            sim.osds.insert(
                id,
                SimOsd {
                    core: None,
                    store: SimStore::new(),
                    incarnation: 0,
                    last_commit: Duration::ZERO,
                    commit_delay: Duration::ZERO,
                    last_boot: None,
                    catching_up: None,
                    caught_up: None,
                },
            );
            sim.start_osd(id);
        }
        sim.schedule(Duration::from_millis(50), Event::MonTick);
        for c in 0..sim.clients.len() {
            sim.schedule(Duration::from_millis(20), Event::ClientTick { client: c });
        }
        sim
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    pub fn map(&self) -> &Arc<ClusterMap> {
        &self.mon.map
    }

    fn core_options(&self) -> CoreOptions {
        CoreOptions {
            pg_log_max_entries: self.cfg.pg_log_max_entries,
            recovery_max_active: 2,
            recovery_sleep: Duration::ZERO,
            recovery_sleep_busy: Duration::from_millis(5),
            recovery_sleep_busy_max: Duration::from_millis(250),
            recovery_slowdown_pct: 200,
            max_backfills: 1,
            peering_retry: Duration::from_millis(500),
            scrub_interval: Duration::ZERO,
            deep_scrub_interval: Duration::ZERO,
            max_scrubs: 1,
            op_complaint_time: Duration::ZERO,
            planted_bug: self.cfg.planted_bug,
        }
    }

    pub(crate) fn schedule(&mut self, after: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at: self.now + after,
            seq: self.seq,
            event,
        }));
    }

    pub(crate) fn random_between(&mut self, range: (Duration, Duration)) -> Duration {
        let (lo, hi) = (range.0.as_micros() as u64, range.1.as_micros() as u64);
        Duration::from_micros(self.rng.gen_range(lo..=hi.max(lo)))
    }

    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }

    /// Run until `limit` of simulated time passes.
    pub fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.queue.peek().is_some_and(|Reverse(s)| s.at <= end) {
            self.step();
        }
        self.now = end;
    }

    /// Run until `done` holds (checked every 100 ms of simulated time) or
    /// `limit` passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            if done(self) {
                return true;
            }
            self.run_for(Duration::from_millis(100));
        }
        done(self)
    }

    fn step(&mut self) {
        let Some(Reverse(next)) = self.queue.pop() else {
            return;
        };
        self.now = next.at;
        self.events += 1;
        self.dispatch(next.event);
    }

    // ----- what tests do to the cluster -----

    /// `kill -9` an OSD: its process is gone and its disk loses what was
    /// not durable.
    pub fn kill(&mut self, osd: OsdId) {
        let Some(o) = self.osds.get_mut(&osd) else {
            return;
        };
        if o.core.take().is_none() {
            return;
        }
        o.catching_up = None;
        o.incarnation += 1;
        o.store.crash();
        self.log.push(format!("{:?} kill osd.{osd}", self.now));
        self.reset_node(Node::Osd(osd));
    }

    /// Start a stopped OSD on its disk.
    pub fn restart(&mut self, osd: OsdId) {
        if self.osds.get(&osd).is_some_and(|o| !o.alive()) {
            self.log.push(format!("{:?} restart osd.{osd}", self.now));
            self.start_osd(osd);
        }
    }

    fn start_osd(&mut self, id: OsdId) {
        let opts = self.core_options();
        let now = self.now;
        let Some(osd) = self.osds.get_mut(&id) else {
            return;
        };
        let mut effects = Vec::new();
        let mut io = events::SimIo {
            store: &mut osd.store,
            now,
            effects: &mut effects,
        };
        osd.core = Some(OsdCore::new(id, opts, &mut io));
        osd.caught_up = None;
        let inc = osd.incarnation;
        // As the daemon: the current map first, then the catch-up (if the
        // map records it down and it holds PGs), then the boot.
        let map = self.mon.map.clone();
        self.with_osd(id, |core, io| core.handle_map(map, io));
        let mut asked = 0;
        if self.cfg.catch_up_before_boot {
            self.with_osd(id, |core, io| asked = core.start_catch_up(io));
        }
        if asked > 0 {
            if let Some(o) = self.osds.get_mut(&id) {
                o.catching_up = Some(now + CATCH_UP_LIMIT);
            }
        } else {
            self.boot(id);
        }
        self.schedule(Duration::from_millis(100), Event::OsdTick { osd: id, inc });
        self.schedule(
            Duration::from_millis(500),
            Event::OsdHeartbeat { osd: id, inc },
        );
    }

    /// Send `id`'s boot to the monitor.
    fn boot(&mut self, id: OsdId) {
        let now = self.now;
        if let Some(o) = self.osds.get_mut(&id) {
            o.last_boot = Some(now);
        }
        self.send(Node::Osd(id), Node::Mon, NetMsg::Boot);
    }

    /// End `id`'s catch-up before boot once every request is answered or
    /// its time is up, and boot.
    fn maybe_end_catch_up(&mut self, id: OsdId) {
        let now = self.now;
        let Some(o) = self.osds.get_mut(&id) else {
            return;
        };
        let (Some(until), Some(core)) = (o.catching_up, o.core.as_mut()) else {
            return;
        };
        if core.catching_up() && now < until {
            return;
        }
        o.caught_up = core.caught_up();
        core.end_catch_up();
        o.catching_up = None;
        self.boot(id);
    }

    /// Cut an OSD off from everyone (its messages and those to it are lost).
    pub fn partition(&mut self, osd: OsdId) {
        if self.cut.insert(osd) {
            self.log.push(format!("{:?} partition osd.{osd}", self.now));
        }
    }

    /// Reconnect a cut-off OSD: its connections were broken meanwhile.
    pub fn heal(&mut self, osd: OsdId) {
        if self.cut.remove(&osd) {
            self.log.push(format!("{:?} heal osd.{osd}", self.now));
            self.reset_node(Node::Osd(osd));
            let map = self.mon.map.clone();
            self.send(Node::Mon, Node::Osd(osd), NetMsg::Map(map));
        }
    }

    pub fn is_cut(&self, osd: OsdId) -> bool {
        self.cut.contains(&osd)
    }

    /// Break the connection between two nodes (both ends are told).
    pub fn reset_link(&mut self, a: Node, b: Node) {
        self.log.push(format!("{:?} reset {a:?}-{b:?}", self.now));
        for key in [(a, b), (b, a)] {
            self.links.entry(key).or_default().generation += 1;
        }
        self.schedule(
            Duration::from_micros(200),
            Event::Reset { node: a, peer: b },
        );
        self.schedule(
            Duration::from_micros(200),
            Event::Reset { node: b, peer: a },
        );
    }

    fn reset_node(&mut self, node: Node) {
        let peers: BTreeSet<Node> = self
            .links
            .keys()
            .filter(|(a, b)| *a == node || *b == node)
            .map(|(a, b)| if *a == node { *b } else { *a })
            .collect();
        for peer in peers {
            for key in [(node, peer), (peer, node)] {
                self.links.entry(key).or_default().generation += 1;
            }
            self.schedule(
                Duration::from_micros(200),
                Event::Reset {
                    node: peer,
                    peer: node,
                },
            );
            self.schedule(Duration::from_micros(200), Event::Reset { node, peer });
        }
    }

    pub fn mark_out(&mut self, osd: OsdId) {
        self.log.push(format!("{:?} out osd.{osd}", self.now));
        self.mon.request(Change::Out(osd));
    }

    pub fn mark_in(&mut self, osd: OsdId) {
        self.mon.request(Change::In(osd));
    }

    pub fn mark_down(&mut self, osd: OsdId) {
        self.mon.request(Change::Down(osd));
    }

    /// `pool set rbd pg_num n`: split every PG of the pool.
    pub fn set_pg_num(&mut self, n: u32) {
        self.log.push(format!("{:?} pg_num {n}", self.now));
        self.mon.request(Change::PgNum(n));
    }

    pub fn mark_lost(&mut self, osd: OsdId) {
        self.log.push(format!("{:?} lost osd.{osd}", self.now));
        self.mon.request(Change::Lost(osd));
    }

    /// Rot `client`'s object `obj` on `osd`'s disk.
    pub fn corrupt(&mut self, osd: OsdId, client: usize, obj: usize) {
        self.damage(osd, client, obj, store::Damage::Rot);
    }

    /// Damage `client`'s object `obj` on `osd`'s disk.
    pub fn damage(&mut self, osd: OsdId, client: usize, obj: usize, damage: store::Damage) {
        let oid = self.object_id(client, obj);
        let now = self.now;
        if let Some(o) = self.osds.get_mut(&osd) {
            let what = format!("{now:?} {damage:?} {oid} on osd.{osd}");
            if o.store.damage(oid, damage) {
                self.log.push(what);
            }
        }
    }

    /// Ask `pg`'s primary to scrub it.
    pub fn scrub(&mut self, pg: PgId, deep: bool, repair: bool) -> Result<(), String> {
        let primary = self.mon.map.acting(pg).primary().ok_or("no primary")?;
        let mut result = Err(format!("osd.{primary} is not running"));
        self.with_osd(primary, |core, io| {
            result = core.request_scrub(pg, deep, repair, io)
        });
        result
    }

    /// `pg` as its primary reports it.
    pub fn pg_stat(&self, pg: PgId) -> Option<cairn_wire::PgStat> {
        let primary = self.mon.map.acting(pg).primary()?;
        let core = self.osds.get(&primary)?.core.as_ref()?;
        core.pg(pg)
            .filter(|p| p.role() == Role::Primary)
            .map(|p| p.stat())
    }

    /// The store id of a client's object.
    pub fn object_id(&self, client: usize, obj: usize) -> cairn_store::ObjectId {
        let name = &self.clients[client].objects[obj].name;
        let map = &self.mon.map;
        let pool = map.pool_by_name("rbd").expect("the simulation's pool");
        cairn_store::ObjectId::new(map.object_pg(pool, name), name.clone())
    }

    /// Start an operation of a client on one of its objects.
    pub fn start_op(&mut self, client: usize, obj: usize, kind: client::Kind) {
        let now = self.now;
        let sends = self.clients[client].start(obj, kind, now);
        self.client_sends(client, sends);
    }

    fn client_sends(&mut self, client: usize, sends: Vec<client::Send>) {
        for s in sends {
            self.send(Node::Client(client), Node::Osd(s.to), NetMsg::Op(s.op));
        }
    }

    /// Is every client operation done?
    pub fn idle(&self) -> bool {
        self.clients.iter().all(|c| c.in_flight() == 0)
    }

    /// The state of every PG as its acting primary reports it.
    pub fn pg_states(&self) -> BTreeMap<PgId, String> {
        let map = &self.mon.map;
        map.all_pgs()
            .map(|pg| {
                let state = map
                    .acting(pg)
                    .primary()
                    .and_then(|p| self.osds.get(&p)?.core.as_ref()?.pg(pg))
                    .filter(|p| p.role() == Role::Primary)
                    .map(|p| {
                        let s = p.stat();
                        format!("{} ({}) {:?}", s.state, s.detail, s.acting)
                    })
                    .unwrap_or_else(|| "no primary".into());
                (pg, state)
            })
            .collect()
    }

    /// Every OSD up and in, and every PG active+clean on the up set.
    pub fn all_clean(&self) -> bool {
        let map = &self.mon.map;
        let osds_ok = self.osds.iter().all(|(id, o)| {
            o.alive() && !self.cut.contains(id) && map.is_up(*id) && map.osds[id].is_in
        });
        osds_ok
            && map.all_pgs().all(|pg| {
                let acting = map.acting(pg);
                acting.primary().is_some_and(|p| {
                    self.osds
                        .get(&p)
                        .and_then(|o| o.core.as_ref())
                        .filter(|c| c.map().epoch == map.epoch)
                        .and_then(|c| c.pg(pg))
                        .is_some_and(|pg| pg.is_clean())
                })
            })
    }
}
