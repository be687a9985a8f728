//! Random runs: clients write, remove and read while faults are injected
//! at random (OSD kills and restarts, partitions, broken connections, bit
//! rot, OSDs marked out by the monitor's down-out timer); then everything
//! is healed and the run must end clean, with every acknowledged write
//! reading back and every PG's copies identical.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;

use crate::client::Kind;
use crate::{Node, Sim, SimConfig};

/// What a passing run did.
#[derive(Debug, Default)]
pub struct Report {
    pub acked_writes: u64,
    pub reads_checked: u64,
    pub faults: usize,
    pub sim_time: Duration,
    pub events: u64,
}

/// Run one seeded random scenario; `Err` says what broke, with the fault
/// log, so the seed can be replayed.
pub fn random_run(cfg: SimConfig) -> Result<Report, String> {
    let chaos = cfg.chaos;
    let settle = cfg.settle;
    let mut sim = Sim::new(cfg);
    if !sim.run_until(Duration::from_secs(60), Sim::all_clean) {
        return Err(sim.failure("the new cluster never became clean"));
    }
    for client in &mut sim.clients {
        client.active = true;
    }
    let end = sim.now() + chaos;
    let mut heal_at: BTreeMap<u32, Duration> = BTreeMap::new();
    while sim.now() < end {
        let gap = Duration::from_millis(sim.rng().gen_range(200..2500));
        sim.run_for(gap);
        let now = sim.now();
        let due: Vec<u32> = heal_at
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(o, _)| *o)
            .collect();
        for osd in due {
            heal_at.remove(&osd);
            sim.heal(osd);
        }
        sim.random_fault(&mut heal_at);
        sim.trace();
        if let Some(v) = sim.violations().first() {
            return Err(sim.failure(v));
        }
    }
    // Heal everything and let the cluster settle.
    for client in &mut sim.clients {
        client.active = false;
    }
    let osds: Vec<u32> = sim.osds.keys().copied().collect();
    for osd in osds {
        sim.heal(osd);
        sim.restart(osd);
        sim.mark_in(osd);
    }
    if !sim.run_until(settle, |s| s.idle() && s.all_clean()) {
        let what = if sim.idle() {
            "not clean after healing"
        } else {
            "client operations still pending after healing"
        };
        return Err(sim.failure(what));
    }
    // Read everything back through the clients.
    for c in 0..sim.clients.len() {
        for obj in 0..sim.clients[c].objects.len() {
            sim.start_op(c, obj, Kind::Read);
        }
    }
    if !sim.run_until(Duration::from_secs(60), Sim::idle) {
        return Err(sim.failure("final reads did not complete"));
    }
    if let Some(v) = sim.violations().first() {
        return Err(sim.failure(v));
    }
    // Scrub finds every rotten copy; repair rewrites it.
    sim.repair_all(Duration::from_secs(60))?;
    if let Some(problem) = sim.check_copies().first() {
        return Err(sim.failure(problem));
    }
    Ok(Report {
        acked_writes: sim.clients.iter().map(|c| c.acked_writes).sum(),
        reads_checked: sim.clients.iter().map(|c| c.reads_checked).sum(),
        faults: sim.log.len(),
        sim_time: sim.now(),
        events: sim.events,
    })
}

impl Sim {
    /// With `CAIRN_SIM_TRACE` set, print progress.
    pub fn trace(&self) {
        if std::env::var_os("CAIRN_SIM_TRACE").is_some() {
            let acked: u64 = self.clients.iter().map(|c| c.acked_writes).sum();
            eprintln!(
                "sim {:?}: {} events, epoch {}, {acked} acked, {} in flight, last fault {:?}",
                self.now(),
                self.events,
                self.map().epoch,
                self.clients.iter().map(|c| c.in_flight()).sum::<usize>(),
                self.log.last()
            );
        }
    }

    /// At most this many OSDs are down or cut off at once in random runs.
    const MAX_IMPAIRED: usize = 2;

    fn random_fault(&mut self, heal_at: &mut BTreeMap<u32, Duration>) {
        let alive: Vec<u32> = self
            .osds
            .iter()
            .filter(|(id, o)| o.alive() && !self.is_cut(**id))
            .map(|(id, _)| *id)
            .collect();
        let dead: Vec<u32> = self
            .osds
            .iter()
            .filter(|(_, o)| !o.alive())
            .map(|(id, _)| *id)
            .collect();
        let impaired = self.osds.len() - alive.len();
        let pick = |sim: &mut Sim, from: &[u32]| from[sim.rng().gen_range(0..from.len())];
        match self.rng().gen_range(0..100) {
            0..=24 if impaired < Self::MAX_IMPAIRED && !alive.is_empty() => {
                let osd = pick(self, &alive);
                self.kill(osd);
            }
            25..=49 if !dead.is_empty() => {
                let osd = pick(self, &dead);
                self.restart(osd);
            }
            50..=62 if impaired < Self::MAX_IMPAIRED && !alive.is_empty() => {
                let osd = pick(self, &alive);
                self.partition(osd);
                let after = Duration::from_millis(self.rng().gen_range(500..6000));
                heal_at.insert(osd, self.now() + after);
            }
            63..=77 if alive.len() >= 2 => {
                let a = pick(self, &alive);
                let b = pick(self, &alive);
                if a != b {
                    self.reset_link(Node::Osd(a), Node::Osd(b));
                }
            }
            78..=87 if self.cfg.bitrot => self.rot_a_copy(),
            88..=89 => {
                let pg_num = self.map().pool_by_name("rbd").map_or(0, |p| p.pg_num);
                if pg_num > 0 && pg_num < self.cfg.max_pg_num {
                    self.set_pg_num(pg_num * 2);
                }
            }
            _ => {}
        }
    }

    /// Rot one acting member's copy of a random acknowledged object, or
    /// put a media error under it (one copy per object at most, so a good
    /// copy always exists).
    fn rot_a_copy(&mut self) {
        let clients = self.clients.len();
        let c = self.rng().gen_range(0..clients);
        let objects = self.clients[c].objects.len();
        let obj = self.rng().gen_range(0..objects);
        // Only an object whose last write was acknowledged (so every member
        // acting then holds it): rotting the one copy of a write still in
        // flight could lose data no one was promised.
        let object = &self.clients[c].objects[obj];
        if object.acked.is_none() || object.busy {
            return;
        }
        let oid = self.object_id(c, obj);
        if self.osds.values().any(|o| o.store.is_corrupt(&oid)) {
            return;
        }
        let acting = self.map().acting(oid.coll).osds;
        if acting.is_empty() {
            return;
        }
        let member = acting[self.rng().gen_range(0..acting.len())];
        let damage = if self.rng().gen_bool(0.5) {
            crate::store::Damage::Rot
        } else {
            crate::store::Damage::MediaError
        };
        self.damage(member, c, obj, damage);
    }

    /// Deep-scrub and repair every PG, one after the other, and wait for
    /// each to end with no inconsistency left.
    pub fn repair_all(&mut self, limit: Duration) -> Result<(), String> {
        let pgs: Vec<cairn_types::PgId> = self.map().all_pgs().collect();
        for pg in pgs {
            let before = self.pg_stat(pg).map_or(0, |s| s.last_deep_scrub);
            self.run_for(Duration::from_secs(1));
            self.scrub(pg, true, true)?;
            let done = self.run_until(limit, |s| {
                s.pg_stat(pg).is_some_and(|st| {
                    st.last_deep_scrub > before
                        && st.inconsistent.is_empty()
                        && st.state.starts_with("active+clean")
                })
            });
            if !done {
                return Err(self.failure(&format!("pg {pg}: deep scrub and repair did not finish")));
            }
        }
        Ok(())
    }

    pub fn violations(&self) -> Vec<String> {
        self.clients
            .iter()
            .flat_map(|c| c.violations.iter().cloned())
            .collect()
    }

    /// Compare every PG's copies with each other and with the model.
    pub fn check_copies(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let map = self.map();
        for pg in map.all_pgs() {
            let acting = map.acting(pg).osds;
            let copies: Vec<(u32, crate::store::Snapshot)> = acting
                .iter()
                .filter_map(|o| Some((*o, self.osds.get(o)?.store.snapshot(pg))))
                .collect();
            for w in copies.windows(2) {
                if w[0].1 != w[1].1 {
                    let names = |m: &BTreeMap<String, _>| m.keys().cloned().collect::<Vec<_>>();
                    problems.push(format!(
                        "pg {pg}: osd.{} and osd.{} hold different copies: {:?} vs {:?}",
                        w[0].0,
                        w[1].0,
                        names(&w[0].1),
                        names(&w[1].1)
                    ));
                }
            }
            for (osd, copy) in &copies {
                for client in &self.clients {
                    for (k, object) in client.objects.iter().enumerate() {
                        if self.object_id(client.id, k).coll != pg {
                            continue;
                        }
                        let held = copy.get(&object.name).map(|(d, _)| d.clone());
                        if held != object.acked && !object.busy {
                            problems.push(format!(
                                "pg {pg}: osd.{osd} holds {:?} = {:?}, acknowledged {:?}",
                                object.name,
                                held.map(|d| d.len()),
                                object.acked.as_ref().map(|d| d.len())
                            ));
                        }
                        let oid = self.object_id(client.id, k);
                        if self.osds.get(osd).is_some_and(|o| o.store.is_corrupt(&oid)) {
                            problems.push(format!(
                                "pg {pg}: osd.{osd}'s copy of {} is still rotten",
                                object.name
                            ));
                        }
                    }
                }
            }
        }
        problems
    }

    /// A failure report: what failed, the PG states, and the faults.
    pub fn failure(&self, what: &str) -> String {
        let mut out = format!(
            "seed {}: {what} at {:?}\nmap epoch {}\n",
            self.cfg.seed,
            self.now(),
            self.map().epoch
        );
        for (pg, state) in self.pg_states() {
            out.push_str(&format!("  pg {pg}: {state}\n"));
        }
        for (id, osd) in &self.osds {
            let info = self.map().osds.get(id);
            out.push_str(&format!(
                "  osd.{id}: alive {}, cut {}, up {}, in {}\n",
                osd.alive(),
                self.is_cut(*id),
                info.is_some_and(|o| o.up),
                info.is_some_and(|o| o.is_in)
            ));
            if let Some(core) = &osd.core {
                let (local, remote) = core.backfills();
                out.push_str(&format!(
                    "  osd.{id}: epoch {}, backfilling as primary {local:?}, as target {remote:?}\n",
                    core.map().epoch
                ));
            }
        }
        for client in &self.clients {
            for line in client.describe_pending() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out.push_str("faults:\n");
        for line in &self.log {
            out.push_str(&format!("  {line}\n"));
        }
        out
    }
}
