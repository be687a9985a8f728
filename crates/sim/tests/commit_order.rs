//! A primary sends a write to its replicas while its own commit is under
//! way, so the members' commits finish in any order. Killing the primary
//! between them must lose nothing acknowledged and apply the write once:
//! after the replicas committed but before the primary did, and the
//! reverse.

mod common;

use std::time::Duration;

use cairn_sim::client::Kind;
use cairn_sim::Sim;
use common::{config, started, write_all, WAIT};

/// Longer than the test ever runs the cluster with the delay in place.
const HELD: Duration = Duration::from_secs(5);
/// Enough for every commit without a delay, and the replies (the disks
/// take up to 4 ms, the network up to 3 ms a hop).
const SETTLE: Duration = Duration::from_millis(200);

/// Hold the commits of `slow`, write `after` into object 0 of client 0,
/// and run until every other member of its PG has committed it. Returns
/// the PG's primary and the other members.
fn write_held_on(sim: &mut Sim, slow: impl Fn(u32, &[u32]) -> Vec<u32>) -> (u32, Vec<u32>) {
    let pg = sim.object_id(0, 0).coll;
    let acting = sim.map().acting(pg).osds.clone();
    let primary = acting[0];
    let held = slow(primary, &acting);
    for osd in &held {
        sim.osds
            .get_mut(osd)
            .expect("an acting member")
            .commit_delay = HELD;
    }
    sim.start_op(0, 0, Kind::Write(b"after".to_vec()));
    sim.run_for(SETTLE);
    assert_eq!(
        sim.clients[0].in_flight(),
        1,
        "the write was acknowledged while osd {held:?} had not committed it"
    );
    let oid = sim.object_id(0, 0);
    for osd in &acting {
        let store = &sim.osds[osd].store;
        let copy = store
            .snapshot(pg)
            .get(&oid.name)
            .map(|(data, _)| data.clone());
        assert_eq!(
            copy.as_deref(),
            Some(&b"after"[..]),
            "osd.{osd} has no copy"
        );
        let pending = store.pending();
        if held.contains(osd) {
            assert!(pending > 0, "osd.{osd} committed through its delay");
        } else {
            assert_eq!(pending, 0, "osd.{osd} has not committed yet");
        }
    }
    (primary, acting)
}

/// Kill `primary`, let the cluster serve again, and check that the write
/// completes (the client's resend is answered, not lost) and reads back;
/// then restart it and check that every copy converged.
fn kill_and_check(sim: &mut Sim, primary: u32, acting: &[u32]) {
    sim.kill(primary);
    sim.mark_down(primary);
    for osd in acting {
        sim.osds.get_mut(osd).expect("a member").commit_delay = Duration::ZERO;
    }
    assert!(
        sim.run_until(WAIT, Sim::idle),
        "{}",
        sim.failure("the write never completed after the primary died")
    );
    sim.start_op(0, 0, Kind::Read);
    assert!(sim.run_until(WAIT, Sim::idle), "{}", sim.failure("read"));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(
        sim.clients[0].reads.last(),
        Some(&(0, Some(b"after".to_vec())))
    );
    sim.restart(primary);
    // Down long enough, the monitor may have marked it out.
    sim.mark_in(primary);
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("not clean after the primary returned")
    );
    let copies = sim.check_copies();
    assert!(copies.is_empty(), "{copies:?}");
}

#[test]
fn a_primary_killed_after_its_replicas_committed_loses_nothing() {
    for seed in 1..=4 {
        let mut sim = started(config(seed, 4, 3));
        write_all(&mut sim, "before");
        let (primary, acting) = write_held_on(&mut sim, |primary, _| vec![primary]);
        kill_and_check(&mut sim, primary, &acting);
    }
}

#[test]
fn a_primary_killed_before_its_replicas_committed_loses_nothing() {
    for seed in 1..=4 {
        let mut sim = started(config(seed, 4, 3));
        write_all(&mut sim, "before");
        let (primary, acting) = write_held_on(&mut sim, |primary, acting| {
            acting.iter().copied().filter(|&o| o != primary).collect()
        });
        kill_and_check(&mut sim, primary, &acting);
    }
}
