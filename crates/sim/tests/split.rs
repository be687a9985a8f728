//! PG split in the simulation: `pool set rbd pg_num N` while clients write,
//! while OSDs die, and with a stale OSD returning after the split. A child
//! PG must hold every acknowledged write of its objects and must remember
//! its parent's past intervals.

use std::time::Duration;

mod common;

use cairn_sim::client::Kind;
use cairn_sim::Sim;
use common::*;

/// Every object read back, every copy compared with the model.
fn read_back_and_compare(sim: &mut Sim) {
    read_all(sim);
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("reads after the split did not finish")
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    let problems = sim.check_copies();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_split_under_writes_keeps_every_acknowledged_write() {
    for seed in 1..=4 {
        let mut sim = started(config(seed, 5, 24));
        write_all(&mut sim, "X");
        // Writes in flight while the map with 16, then 32, PGs arrives.
        for obj in 0..24 {
            sim.start_op(0, obj, Kind::Write(format!("Y{obj}").into_bytes()));
        }
        sim.run_for(Duration::from_millis(3));
        sim.set_pg_num(16);
        sim.run_for(Duration::from_millis(40));
        sim.set_pg_num(32);
        assert!(
            sim.run_until(WAIT, |s| s.map().all_pgs().count() == 32
                && s.idle()
                && s.all_clean()),
            "{}",
            sim.failure("not clean after the split")
        );
        assert_eq!(sim.map().all_pgs().count(), 32);
        // Objects really are spread over the children.
        let pgs: std::collections::BTreeSet<_> =
            (0..24).map(|o| sim.object_id(0, o).coll.seed).collect();
        assert!(
            pgs.iter().any(|&s| s >= 8),
            "seed {seed}: no object moved to a child PG: {pgs:?}"
        );
        read_back_and_compare(&mut sim);
        // And the children take writes.
        write_all(&mut sim, "Z");
        read_back_and_compare(&mut sim);
    }
}

#[test]
fn a_split_while_an_osd_is_down_recovers_it_into_the_children() {
    let mut sim = started(config(11, 5, 24));
    write_all(&mut sim, "X");
    sim.kill(2);
    sim.mark_down(2);
    sim.run_until(WAIT, |s| s.idle() && all_active(s));
    write_all(&mut sim, "Y");
    sim.set_pg_num(16);
    sim.run_until(WAIT, |s| s.map().all_pgs().count() == 16 && all_active(s));
    write_all(&mut sim, "Z");
    // osd.2 returns with parent PGs split by an older map: it splits them
    // when it catches up, and recovery brings its children the writes it
    // missed.
    sim.restart(2);
    read_back_and_compare(&mut sim);
}

/// The five-step sequence of the issue with a split in the middle: the
/// children of a PG whose newer writes left with osd.0-2 must wait for
/// them, exactly as their parent would have. Split before the three die,
/// the children saw them acting; split after, only the past intervals the
/// children inherit from their parent name them.
fn five_steps_with_a_split(seed: u64, split_after_the_kill: bool) {
    let mut sim = started(config(seed, 5, 24));
    write_all(&mut sim, "X");
    kill_down_out(&mut sim, &[4]);
    assert!(
        sim.run_until(WAIT, |s| s.idle() && all_active_clean(s)),
        "{}",
        sim.failure("not clean without osd.4")
    );
    write_all(&mut sim, "Y");
    if !split_after_the_kill {
        sim.set_pg_num(16);
        assert!(
            sim.run_until(WAIT, |s| s.map().all_pgs().count() == 16
                && all_active_clean(s)),
            "{}",
            sim.failure("not clean after the split")
        );
    }
    kill_down_out(&mut sim, &[0, 1, 2]);
    if split_after_the_kill {
        sim.run_for(Duration::from_secs(5));
        sim.set_pg_num(16);
        sim.run_for(Duration::from_secs(5));
        assert_eq!(sim.map().all_pgs().count(), 16);
    }
    sim.restart(4);
    sim.mark_in(4);
    sim.run_for(Duration::from_secs(20));
    read_all(&mut sim);
    sim.run_for(Duration::from_secs(30));
    assert!(
        sim.violations().is_empty(),
        "stale reads: {:?}",
        sim.violations()
    );
    let (down, waiting) = down_pgs(&sim);
    assert!(down > 0, "no child PG waited for the OSDs holding Y");
    assert!(
        waiting.iter().all(|o| [0, 1, 2].contains(o)),
        "PGs wait for {waiting:?}, not for the OSDs that left with Y"
    );
    // They return: everything is served, all of it Y.
    for osd in [0, 1, 2] {
        sim.restart(osd);
        sim.mark_in(osd);
    }
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("not clean once they returned")
    );
    assert_eq!(sim.clients[0].reads.len(), 24, "every read completed");
    read_back_and_compare(&mut sim);
}

#[test]
fn a_stale_osd_returning_after_a_split_never_serves_older_data() {
    for seed in [21, 22, 23] {
        five_steps_with_a_split(seed, false);
    }
}

#[test]
fn children_of_a_split_while_down_inherit_the_past_intervals() {
    for seed in [31, 32, 33] {
        five_steps_with_a_split(seed, true);
    }
}

/// Every PG active (possibly degraded) on its current up set.
fn all_active(sim: &Sim) -> bool {
    sim.pg_states().values().all(|s| s.starts_with("active"))
}
