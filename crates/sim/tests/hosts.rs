//! Acting sets and failure domains: a PG whose up set CRUSH cannot fill
//! (a host out or down in a 3-host cluster) never puts two copies in one
//! host, and keeps no `pg_temp` left over from an earlier interval.

use std::collections::BTreeSet;
use std::time::Duration;

mod common;

use cairn_sim::{Sim, SimConfig};
use common::*;

/// Three hosts of two OSDs (h0: osd.0-1, h1: osd.2-3, h2: osd.4-5).
fn three_hosts(seed: u64) -> Sim {
    started(SimConfig {
        osds_per_host: 2,
        ..config(seed, 6, 16)
    })
}

/// Every PG's acting set: its size, and whether its members sit on
/// distinct hosts.
fn acting_hosts(sim: &Sim) -> Vec<(String, Vec<u32>, bool)> {
    let map = sim.map().clone();
    map.all_pgs()
        .map(|pg| {
            let acting = map.acting(pg).osds;
            let hosts: BTreeSet<u32> = acting.iter().map(|o| o / 2).collect();
            (pg.to_string(), acting.clone(), hosts.len() == acting.len())
        })
        .collect()
}

/// Every PG active (its primary serving; undersized allowed) and nothing
/// recovering or backfilling.
fn settled(sim: &Sim) -> bool {
    sim.idle()
        && sim.pg_states().values().all(|s| {
            let s = s.split(' ').next().unwrap_or_default();
            s.starts_with("active") && !s.contains("recover") && !s.contains("backfill")
        })
}

#[test]
fn a_host_that_cannot_be_replaced_leaves_pgs_undersized_not_doubled_up() {
    for seed in 1..=4 {
        let mut sim = three_hosts(seed);
        write_all(&mut sim, "X");

        // h1's OSDs out but alive: CRUSH places every PG on h0 and h2; a
        // copy on h1 may stay acting (its own failure domain), but no PG
        // may take a second copy on h0 or h2.
        sim.mark_out(2);
        sim.mark_out(3);
        assert!(
            sim.run_until(WAIT, settled),
            "seed {seed}: {}",
            sim.failure("not settled with h1 out")
        );
        sim.run_for(Duration::from_secs(10));
        for (pg, acting, apart) in acting_hosts(&sim) {
            assert!(apart, "seed {seed}: pg {pg} acting {acting:?} with h1 out");
        }

        sim.mark_in(2);
        sim.mark_in(3);
        assert!(
            sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
            "seed {seed}: {}",
            sim.failure("not clean with h1 in again")
        );
        write_all(&mut sim, "Y");

        // h1 dies and is marked out: every PG serves from two hosts, with
        // no pg_temp left over.
        kill_down_out(&mut sim, &[2, 3]);
        sim.run_for(Duration::from_secs(1));
        assert!(
            sim.run_until(WAIT, settled),
            "seed {seed}: {}",
            sim.failure("not settled with h1 down")
        );
        for (pg, acting, apart) in acting_hosts(&sim) {
            assert!(
                apart && acting.len() == 2,
                "seed {seed}: pg {pg} acting {acting:?} with h1 down"
            );
        }
        assert!(
            sim.map().pg_temp.is_empty(),
            "seed {seed}: pg_temp left: {:?}",
            sim.map().pg_temp
        );
        write_all(&mut sim, "Z");
        read_all(&mut sim);
        assert!(sim.run_until(WAIT, Sim::idle), "{}", sim.failure("reads"));
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());

        for osd in [2, 3] {
            sim.restart(osd);
            sim.mark_in(osd);
        }
        assert!(
            sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
            "seed {seed}: {}",
            sim.failure("not clean after h1 returned")
        );
        assert!(sim.check_copies().is_empty(), "{:?}", sim.check_copies());
    }
}
