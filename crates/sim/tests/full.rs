//! Full ratios in the simulation: disks given a capacity report their
//! fullness in heartbeats, the simulated monitor records it in the map
//! with the real ratios, and the real OSD cores act on it.
//!
//! - A full OSD: writes to the PGs it serves fail at once with `NoSpace`
//!   and change nothing, writes elsewhere and reads work, removes work and
//!   free the space, and then writes work again; every acknowledged write
//!   reads back and the copies converge.
//! - A backfillfull OSD takes no backfill: PGs moving onto it wait as
//!   `backfill_toofull` with nothing copied to it, and backfill once it has
//!   room.

use std::time::Duration;

use cairn_map::FullState;
use cairn_sim::client::Kind;
use cairn_sim::{Sim, SimConfig};
use cairn_types::OsdId;

/// Seeds per scenario (each a different network and disk timing).
const SEEDS: u64 = 4;
/// Objects of the one client; each write is `OBJECT_BYTES`.
const OBJECTS: usize = 16;
const OBJECT_BYTES: usize = 32 << 10;

fn sim(seed: u64) -> Sim {
    let mut sim = Sim::new(SimConfig {
        osds: 4,
        clients: 1,
        objects_per_client: OBJECTS,
        ..SimConfig::new(seed)
    });
    assert!(
        sim.run_until(Duration::from_secs(60), Sim::all_clean),
        "{}",
        sim.failure("the new cluster never became clean")
    );
    sim
}

fn content(round: u32, obj: usize) -> Vec<u8> {
    let mut data = format!("round {round} object {obj}|").into_bytes();
    data.extend((0..OBJECT_BYTES - data.len()).map(|i| (i * 7 + obj + round as usize) as u8));
    data
}

/// Start `kind(obj)` on every object and wait (bounded) until all are done.
fn on_every_object(sim: &mut Sim, what: &str, mut kind: impl FnMut(usize) -> Kind) {
    for obj in 0..OBJECTS {
        sim.start_op(0, obj, kind(obj));
    }
    assert!(
        sim.run_until(Duration::from_secs(30), Sim::idle),
        "{}",
        sim.failure(&format!("{what}: operations did not complete"))
    );
    no_violations(sim);
}

fn no_violations(sim: &Sim) {
    if let Some(v) = sim.violations().first() {
        panic!("{}", sim.failure(v));
    }
}

/// Does OSD `osd` store object `obj`'s PG (acting or up)?
fn serves(sim: &Sim, osd: OsdId, obj: usize) -> bool {
    let pg = sim.object_id(0, obj).coll;
    sim.map().mapping(pg).contains(osd)
}

/// Give `osd`'s disk a capacity that puts it at `ratio` now, and wait for
/// the monitor to record `state`.
fn fill_to(sim: &mut Sim, osd: OsdId, ratio: f64, state: FullState) {
    let store = &mut sim.osds.get_mut(&osd).expect("osd").store;
    let used = store.used_bytes();
    store.set_capacity(Some((used as f64 / ratio) as u64));
    wait_state(sim, osd, state);
}

fn wait_state(sim: &mut Sim, osd: OsdId, state: FullState) {
    let recorded = sim.run_until(Duration::from_secs(10), |s| {
        s.map().full_state(osd) == state
    });
    assert!(
        recorded,
        "{}",
        sim.failure(&format!("the map never recorded osd.{osd} as {state}"))
    );
}

/// Read every object back (against the model of acknowledged writes) and
/// compare every PG's copies.
fn read_back(sim: &mut Sim) {
    on_every_object(sim, "read-back", |_| Kind::Read);
    if let Some(problem) = sim.check_copies().first() {
        panic!("{}", sim.failure(problem));
    }
}

#[test]
fn a_full_osd_refuses_writes_at_once_but_serves_reads_and_removes() {
    for seed in 1..=SEEDS {
        let mut sim = sim(seed);
        on_every_object(&mut sim, "first writes", |k| Kind::Write(content(1, k)));
        assert_eq!(sim.clients[0].acked_writes, OBJECTS as u64);

        // osd.0 at 96% of its disk: full.
        fill_to(&mut sim, 0, 0.96, FullState::Full);
        let on_full: Vec<usize> = (0..OBJECTS).filter(|&k| serves(&sim, 0, k)).collect();
        assert!(!on_full.is_empty() && on_full.len() < OBJECTS);

        // Writes: refused at once where osd.0 stores the data, applied
        // elsewhere.
        on_every_object(&mut sim, "writes at full", |k| Kind::Write(content(2, k)));
        let client = &sim.clients[0];
        assert_eq!(client.nospace_writes, on_full.len() as u64, "seed {seed}");
        assert!(
            client.nospace_latency < Duration::from_millis(100),
            "seed {seed}: a refusal took {:?}",
            client.nospace_latency
        );
        for (k, object) in client.objects.iter().enumerate() {
            let round = if on_full.contains(&k) { 1 } else { 2 };
            assert_eq!(object.acked, Some(content(round, k)), "seed {seed} obj {k}");
        }
        read_back(&mut sim);

        // Removes work at full and free the space: osd.0 drops below
        // every ratio, and writes work again.
        let before = sim.osds[&0].store.used_bytes();
        for &k in &on_full {
            sim.start_op(0, k, Kind::Remove);
        }
        assert!(sim.run_until(Duration::from_secs(30), Sim::idle));
        no_violations(&sim);
        assert!(on_full
            .iter()
            .all(|&k| sim.clients[0].objects[k].acked.is_none()));
        assert!(sim.osds[&0].store.used_bytes() < before);
        wait_state(&mut sim, 0, FullState::None);

        let refused = sim.clients[0].nospace_writes;
        on_every_object(&mut sim, "writes after removes", |k| {
            Kind::Write(content(3, k))
        });
        assert_eq!(sim.clients[0].nospace_writes, refused, "seed {seed}");
        assert!((0..OBJECTS).all(|k| sim.clients[0].objects[k].acked == Some(content(3, k))));
        read_back(&mut sim);
        assert!(sim.all_clean(), "{}", sim.failure("not clean at the end"));
    }
}

#[test]
fn a_backfillfull_osd_gets_no_backfill_until_it_has_room() {
    for seed in 1..=SEEDS {
        let mut sim = sim(seed + 100);
        on_every_object(&mut sim, "writes", |k| Kind::Write(content(1, k)));

        // osd.3 at 92%: backfillfull, not full.
        fill_to(&mut sim, 3, 0.92, FullState::Backfillfull);
        let held_before = sim.osds[&3].store.used_bytes();

        // osd.0 out: PGs whose new up set holds osd.3 must backfill it.
        sim.mark_out(0);
        let map_has_moved = sim.run_until(Duration::from_secs(10), |s| !s.map().osds[&0].is_in);
        assert!(map_has_moved);
        let targets: Vec<_> = sim
            .map()
            .all_pgs()
            .filter(|pg| {
                let m = sim.map().mapping(*pg);
                m.up.contains(&3) && !m.acting.contains(3)
            })
            .collect();
        assert!(!targets.is_empty(), "seed {seed}: nothing moves to osd.3");
        sim.run_for(Duration::from_secs(20));

        let states = sim.pg_states();
        for pg in &targets {
            assert!(
                states[pg].contains("backfill_toofull") && states[pg].contains("osd.3 is"),
                "seed {seed}: pg {pg}: {}",
                states[pg]
            );
            let copy = sim.osds[&3].store.snapshot(*pg);
            assert!(
                copy.is_empty(),
                "seed {seed}: pg {pg} backfilled onto osd.3"
            );
        }
        let held = sim.osds[&3].store.used_bytes();
        assert!(
            held < held_before + OBJECT_BYTES as u64,
            "seed {seed}: osd.3 grew from {held_before} to {held} bytes"
        );
        let core = sim.osds[&3].core.as_ref().expect("osd.3 runs");
        assert!(core.backfills().1.is_empty(), "osd.3 granted a reservation");
        // Reads and writes still work meanwhile (osd.3 is not full).
        on_every_object(&mut sim, "writes while toofull", |k| {
            Kind::Write(content(2, k))
        });
        assert_eq!(sim.clients[0].nospace_writes, 0);

        // Room again: backfill runs and the PGs settle on their up sets.
        sim.osds
            .get_mut(&3)
            .expect("osd.3")
            .store
            .set_capacity(None);
        wait_state(&mut sim, 3, FullState::None);
        let settled = sim.run_until(Duration::from_secs(120), |s| {
            s.map().all_pgs().all(|pg| {
                let m = s.map().mapping(pg);
                m.up == m.acting.osds
            }) && s
                .pg_states()
                .values()
                .all(|st| st.starts_with("active+clean"))
        });
        assert!(settled, "{}", sim.failure("backfill did not finish"));
        for pg in &targets {
            assert!(
                !sim.osds[&3].store.snapshot(*pg).is_empty() || {
                    // A PG may hold none of the client's objects.
                    (0..OBJECTS).all(|k| sim.object_id(0, k).coll != *pg)
                }
            );
        }
        read_back(&mut sim);
    }
}
