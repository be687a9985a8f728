//! Scripted failure sequences in the simulation: the ones that lost
//! acknowledged writes before peering knew past intervals, and what `osd
//! lost` and a returning OSD do to them.

use std::collections::BTreeSet;
use std::time::Duration;

mod common;

use cairn_sim::client::Kind;
use cairn_sim::Sim;
use common::*;

/// The sequence from the issue: X everywhere; osd.4 leaves; Y everywhere;
/// osd.0-2 leave; osd.4 returns. No read may return X.
fn five_steps(seed: u64) -> Sim {
    let mut sim = started(config(seed, 5, 16));
    write_all(&mut sim, "X");
    kill_down_out(&mut sim, &[4]);
    assert!(
        sim.run_until(WAIT, |s| s.idle() && all_active_clean(s)),
        "{}",
        sim.failure("not clean without osd.4")
    );
    write_all(&mut sim, "Y");
    kill_down_out(&mut sim, &[0, 1, 2]);
    sim.restart(4);
    sim.mark_in(4);
    sim.run_for(Duration::from_secs(20));
    read_all(&mut sim);
    sim.run_for(Duration::from_secs(30));
    sim
}

#[test]
fn the_five_step_sequence_never_serves_the_older_data() {
    for seed in 1..=6 {
        let sim = five_steps(seed);
        let violations = sim.violations();
        assert!(
            violations.is_empty(),
            "seed {seed}: stale reads: {violations:?}"
        );
        let (down, waiting) = down_pgs(&sim);
        let done = sim.clients[0].reads.len();
        // Some PGs lost every member that held Y: they must wait, and say
        // for whom; the rest serve Y.
        assert!(down > 0, "seed {seed}: no PG waited for the OSDs holding Y");
        assert!(
            waiting.iter().all(|o| [0, 1, 2].contains(o)),
            "seed {seed}: PGs wait for {waiting:?}, not for the OSDs that left with Y"
        );
        assert!(
            done > 0 && done < 16,
            "seed {seed}: {done} of 16 reads completed"
        );
    }
}

#[test]
fn a_returning_osd_unblocks_the_five_step_sequence_with_every_write() {
    let mut sim = five_steps(7);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    for osd in [0, 1, 2] {
        sim.restart(osd);
        sim.mark_in(osd);
    }
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("not clean")
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(sim.clients[0].reads.len(), 16, "every read completed");
    assert!(sim.check_copies().is_empty(), "{:?}", sim.check_copies());
}

#[test]
fn osd_lost_unblocks_the_five_step_sequence() {
    let mut sim = five_steps(8);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    let (down, _) = down_pgs(&sim);
    assert!(down > 0);
    for osd in [0, 1, 2] {
        sim.mark_lost(osd);
    }
    // No PG waits any more: each serves what osd.3 and osd.4 hold (X
    // where the administrator gave Y up), or, when neither ever held it,
    // is incomplete — nothing of it survives to serve.
    let settled = |s: &Sim| {
        s.pg_states()
            .values()
            .all(|st| st.starts_with("active") || st.starts_with("incomplete"))
    };
    assert!(
        sim.run_until(WAIT, settled),
        "{}",
        sim.failure("PGs still waiting after osd lost")
    );
    sim.run_for(Duration::from_secs(5));
    let incomplete: BTreeSet<_> = sim
        .pg_states()
        .into_iter()
        .filter(|(_, st)| st.starts_with("incomplete"))
        .map(|(pg, _)| pg)
        .collect();
    let blocked = (0..16)
        .filter(|&obj| incomplete.contains(&sim.object_id(0, obj).coll))
        .count();
    assert_eq!(
        sim.clients[0].reads.len(),
        16 - blocked,
        "{}",
        sim.failure("reads of PGs with a surviving copy still blocked")
    );
    for pg in &incomplete {
        let map = sim.map().clone();
        let holders: Vec<u32> = map
            .acting(*pg)
            .osds
            .into_iter()
            .filter(|o| sim.osds[o].store.snapshot(*pg).values().next().is_some())
            .collect();
        assert!(
            holders.is_empty(),
            "pg {pg} is incomplete but osds {holders:?} hold objects of it"
        );
    }
}

/// A, B, C acting; C goes; a write is acknowledged by A and B; A and B go
/// (out, so that others take their place); C returns.
fn split_brain(seed: u64) -> (Sim, [u32; 3]) {
    let mut sim = started(config(seed, 5, 1));
    write_all(&mut sim, "old");
    let pg = sim.object_id(0, 0).coll;
    let acting = sim.map().acting(pg).osds;
    let (a, b, c) = (acting[0], acting[1], acting[2]);
    sim.kill(c);
    sim.mark_down(c);
    sim.run_until(WAIT, |s| {
        s.map().acting(pg).osds == vec![a, b] && s.pg_states()[&pg].starts_with("active")
    });
    write_all(&mut sim, "new");
    kill_down_out(&mut sim, &[a, b]);
    sim.restart(c);
    sim.run_for(Duration::from_secs(20));
    read_all(&mut sim);
    sim.run_for(Duration::from_secs(20));
    (sim, [a, b, c])
}

#[test]
fn split_brain_blocks_until_a_member_that_took_the_write_returns() {
    for seed in 1..=4 {
        let (mut sim, [a, b, c]) = split_brain(seed);
        let pg = sim.object_id(0, 0).coll;
        let acting = sim.map().acting(pg).osds;
        assert!(
            acting.contains(&c) && acting.len() >= 2,
            "seed {seed}: acting {acting:?}: the PG could serve"
        );
        assert!(
            sim.violations().is_empty(),
            "seed {seed}: {:?}",
            sim.violations()
        );
        assert!(
            sim.clients[0].reads.is_empty(),
            "seed {seed}: a read completed while the PG lacked the write"
        );
        let (down, waiting) = down_pgs(&sim);
        assert!(down > 0, "{}", sim.failure("the PG is not down"));
        assert!(
            waiting.contains(&a) || waiting.contains(&b),
            "seed {seed}: waits for {waiting:?}"
        );
        sim.restart(a);
        sim.mark_in(a);
        assert!(
            sim.run_until(WAIT, Sim::idle),
            "{}",
            sim.failure("read still blocked")
        );
        assert!(
            sim.violations().is_empty(),
            "seed {seed}: {:?}",
            sim.violations()
        );
        assert_eq!(sim.clients[0].reads.len(), 1);
    }
}

#[test]
fn split_brain_serves_after_osd_lost() {
    let (mut sim, [a, b, _]) = split_brain(9);
    assert!(sim.clients[0].reads.is_empty());
    sim.mark_lost(a);
    sim.mark_lost(b);
    assert!(
        sim.run_until(WAIT, Sim::idle),
        "{}",
        sim.failure("read still blocked after osd lost")
    );
    // The administrator gave the write up: the old data comes back.
    let (_, got) = &sim.clients[0].reads[0];
    assert_eq!(got.as_deref(), Some(&b"old in object 0"[..]));
}

/// A, B, C acting, min_size 1; C goes; a write is acknowledged by A and
/// B; C returns and the PG is clean on all three, but the monitor has not
/// yet forgotten the interval C missed (it trims on a timer); A and B go.
/// C took the write when it was activated again: it serves it alone
/// instead of waiting for A or B.
#[test]
fn a_member_activated_after_the_interval_it_missed_serves_alone() {
    for seed in 1..=3 {
        let cfg = cairn_sim::SimConfig {
            min_size: 1,
            ..config(seed, 3, 1)
        };
        let mut sim = started(cfg);
        write_all(&mut sim, "old");
        let pg = sim.object_id(0, 0).coll;
        let acting = sim.map().acting(pg).osds;
        let (a, b, c) = (acting[0], acting[1], acting[2]);
        sim.kill(c);
        sim.mark_down(c);
        assert!(
            sim.run_until(WAIT, |s| {
                s.map().acting(pg).osds == vec![a, b] && s.pg_states()[&pg].starts_with("active")
            }),
            "{}",
            sim.failure("not active on two")
        );
        write_all(&mut sim, "new");
        sim.mon.hold_trims = true;
        sim.restart(c);
        sim.mark_in(c);
        assert!(
            sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
            "{}",
            sim.failure("not clean with osd.c back")
        );
        let missed: Vec<_> = sim
            .map()
            .rw_intervals(pg)
            .filter(|i| !i.acting.contains(&c))
            .cloned()
            .collect();
        assert!(
            !missed.is_empty(),
            "seed {seed}: the map forgot the interval without osd.{c}: the test shows nothing"
        );
        for osd in [a, b] {
            sim.kill(osd);
            sim.mark_down(osd);
        }
        read_all(&mut sim);
        assert!(
            sim.run_until(WAIT, Sim::idle),
            "{}",
            sim.failure("the read waits although osd.c holds every write")
        );
        assert!(
            sim.violations().is_empty(),
            "seed {seed}: {:?}",
            sim.violations()
        );
        let (_, got) = &sim.clients[0].reads[0];
        assert_eq!(got.as_deref(), Some(&b"new in object 0"[..]), "seed {seed}");
    }
}

/// Deep scrub finds a rotten replica copy and a rotten primary copy;
/// repair rewrites both from a good one; light scrub alone misses rot.
#[test]
fn deep_scrub_finds_rot_and_repair_rewrites_it() {
    let mut sim = started(config(11, 5, 24));
    write_all(&mut sim, "data");
    let oid = sim.object_id(0, 0);
    let pg = oid.coll;
    // Another object of the same PG.
    let other = (1..24)
        .find(|&k| sim.object_id(0, k).coll == pg)
        .expect("two objects in one PG");
    let acting = sim.map().acting(pg).osds;
    sim.corrupt(acting[1], 0, 0);
    // The PG was created well under a second ago (simulated): the scrub's
    // stamp must still move past the creation stamp (`pg scrub --wait`
    // watches for that).
    let created = sim.pg_stat(pg).expect("pg stat").last_scrub;
    assert!(created > 0);
    sim.scrub(pg, false, false).expect("scrub");
    assert!(
        sim.run_until(WAIT, |s| s.pg_stat(pg).is_some_and(|st| st.last_scrub
            > created
            && !st.state.contains("scrubbing"))),
        "{}",
        sim.failure("light scrub did not move the scrub stamp")
    );
    assert!(
        sim.pg_stat(pg).unwrap().inconsistent.is_empty(),
        "a light scrub reads no data"
    );
    sim.scrub(pg, true, false).expect("deep scrub");
    let found = |s: &Sim| s.pg_stat(pg).is_some_and(|st| !st.inconsistent.is_empty());
    assert!(
        sim.run_until(WAIT, found),
        "{}",
        sim.failure("deep scrub found nothing")
    );
    let stat = sim.pg_stat(pg).unwrap();
    assert!(stat.state.contains("inconsistent"), "{}", stat.state);
    assert_eq!(stat.inconsistent[0].name, oid.name);
    assert_eq!(stat.inconsistent[0].bad.len(), 1);
    assert_eq!(stat.inconsistent[0].bad[0].0, acting[1]);
    // The primary's copy rots too (another object): repair fixes both.
    sim.corrupt(acting[0], 0, other);
    sim.scrub(pg, true, true).expect("repair");
    let fixed = |s: &Sim| {
        s.pg_stat(pg).is_some_and(|st| {
            st.inconsistent.is_empty() && st.repaired_objects >= 2 && st.state == "active+clean"
        })
    };
    assert!(
        sim.run_until(WAIT, fixed),
        "{}",
        sim.failure("repair did not finish")
    );
    assert!(sim.check_copies().is_empty(), "{:?}", sim.check_copies());
    for member in &acting {
        for obj in [0, other] {
            let oid = sim.object_id(0, obj);
            assert!(
                !sim.osds[member].store.is_corrupt(&oid),
                "osd.{member} still rotten"
            );
        }
    }
    read_all(&mut sim);
    assert!(sim.run_until(WAIT, Sim::idle));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

/// Every copy rotten: deep scrub calls it unrepairable, reads fail with an
/// I/O error (no hang), and an overwrite works.
#[test]
fn every_copy_rotten_fails_reads_cleanly_and_an_overwrite_works() {
    let mut sim = started(config(12, 5, 2));
    write_all(&mut sim, "data");
    let pg = sim.object_id(0, 0).coll;
    for member in sim.map().acting(pg).osds {
        sim.corrupt(member, 0, 0);
    }
    sim.scrub(pg, true, false).expect("deep scrub");
    let unrepairable = |s: &Sim| {
        s.pg_stat(pg)
            .is_some_and(|st| st.inconsistent.iter().any(|i| !i.repairable))
    };
    assert!(
        sim.run_until(WAIT, unrepairable),
        "{}",
        sim.failure("scrub missed it")
    );
    sim.start_op(0, 0, Kind::Read);
    assert!(
        sim.run_until(WAIT, Sim::idle),
        "{}",
        sim.failure("the read hangs")
    );
    let errors = sim.violations();
    assert!(
        errors.len() == 1 && errors[0].contains("damaged"),
        "expected one clean I/O error, got {errors:?}"
    );
    sim.clients[0].violations.clear();
    sim.start_op(0, 0, Kind::Write(b"fresh".to_vec()));
    assert!(
        sim.run_until(WAIT, Sim::idle),
        "{}",
        sim.failure("the overwrite hangs")
    );
    sim.start_op(0, 0, Kind::Read);
    assert!(sim.run_until(WAIT, Sim::idle));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(
        sim.clients[0].reads.last().unwrap().1.as_deref(),
        Some(&b"fresh"[..])
    );
    // The rewritten copies are good: a deep scrub finds nothing.
    sim.run_for(Duration::from_secs(2));
    sim.scrub(pg, true, false).expect("deep scrub");
    sim.run_for(Duration::from_secs(5));
    let stat = sim.pg_stat(pg).unwrap();
    assert!(
        stat.inconsistent.is_empty() && stat.state == "active+clean",
        "{stat:?}"
    );
}

/// A member that missed writes takes them compacted (the newest entry per
/// object, the others folded in); once it is primary again, a write resent
/// under the request id of one folded away is answered as applied, not
/// applied over the newer content.
#[test]
fn a_resent_write_folded_into_a_catch_up_applies_once() {
    let mut sim = started(config(21, 3, 4));
    let obj = 0;
    let pg = sim.object_id(0, obj).coll;
    let member = sim.map().up(pg)[0];
    sim.kill(member);
    sim.mark_down(member);
    let first = sim.clients[0].next_key();
    for i in 0..8 {
        sim.start_op(0, obj, Kind::Write(format!("v{i}").into_bytes()));
        assert!(
            sim.run_until(WAIT, Sim::idle),
            "{}",
            sim.failure("write not acknowledged")
        );
    }
    sim.restart(member);
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("not clean after the return")
    );
    assert_eq!(sim.map().acting(pg).primary(), Some(member));
    let (entries, weight) = sim.osds[&member]
        .core
        .as_ref()
        .and_then(|c| c.pg(pg))
        .map(|p| p.log_size())
        .expect("the returned member holds the PG");
    assert!(
        entries < weight,
        "the catch-up was not compacted: {entries} entries for {weight}"
    );
    // The first write again, as an objecter that never saw its reply.
    sim.start_op(
        0,
        obj,
        Kind::Resend {
            key: first,
            data: b"v0".to_vec(),
        },
    );
    assert!(sim.run_until(WAIT, Sim::idle), "{}", sim.failure("resend"));
    sim.start_op(0, obj, Kind::Read);
    assert!(sim.run_until(WAIT, Sim::idle), "{}", sim.failure("read"));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(
        sim.clients[0].reads.last(),
        Some(&(obj, Some(b"v7".to_vec())))
    );
}

/// Kill one OSD, write every object `rounds` times, restart it, and run
/// until the map records it up again: returns the sim and the OSD.
fn away_while_written(cfg: cairn_sim::SimConfig, rounds: usize) -> (Sim, u32) {
    let mut sim = started(cfg);
    let away = 1;
    write_all(&mut sim, "before");
    sim.kill(away);
    sim.mark_down(away);
    for round in 0..rounds {
        write_all(&mut sim, &format!("round {round}"));
    }
    sim.restart(away);
    assert!(
        sim.run_until(WAIT, |s| s.map().is_up(away)),
        "{}",
        sim.failure("never booted")
    );
    (sim, away)
}

/// Once clean, every object reads back the last of `rounds` rounds of
/// [`away_while_written`].
fn recovers_every_last_write(sim: &mut Sim, rounds: usize) {
    assert!(
        sim.run_until(WAIT, |s| s.idle() && s.all_clean()),
        "{}",
        sim.failure("not clean after the return")
    );
    read_all(sim);
    assert!(sim.run_until(WAIT, Sim::idle), "{}", sim.failure("reads"));
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    for obj in 0..sim.clients[0].objects.len() {
        let want = format!("round {} in object {obj}", rounds - 1).into_bytes();
        assert!(
            sim.clients[0].reads.contains(&(obj, Some(want))),
            "object {obj} does not read back its last write"
        );
    }
}

/// An OSD that comes back after missing writes takes its PGs' log entries
/// from their primaries before it boots, so that at its boot its log ends
/// where theirs does (the peering clients wait for then merges nothing),
/// and everything written meanwhile still reads back once it recovered.
#[test]
fn a_returning_osd_takes_the_missed_log_before_it_boots() {
    let (mut sim, away) = away_while_written(config(31, 3, 8), 5);
    let (pgs, changes) = sim.osds[&away]
        .caught_up
        .expect("the returning OSD caught up before it booted");
    // 3 OSDs, size 3: every PG written is on it; 8 objects × 5 writes.
    assert!(pgs > 0, "no PG caught up");
    assert_eq!(changes, 8 * 5, "changes taken before boot");
    // At boot, before any peering could bring it more: its logs end
    // where the primaries' do.
    for pg in sim.map().all_pgs().collect::<Vec<_>>() {
        let primary = sim.map().acting(pg).primary().expect("a primary");
        if primary == away {
            continue;
        }
        let head = |osd: u32| {
            sim.osds[&osd]
                .core
                .as_ref()
                .and_then(|c| c.pg(pg))
                .map(|p| p.last_update())
        };
        assert_eq!(head(away), head(primary), "pg {pg}: log head at boot");
    }
    recovers_every_last_write(&mut sim, 5);
}

/// Without the catch-up (`osd.boot_catch_up_ms = 0`) the OSD boots at
/// once, behind, and peering brings it up to date: the same end state.
#[test]
fn without_a_catch_up_the_returning_osd_boots_behind() {
    let cfg = cairn_sim::SimConfig {
        catch_up_before_boot: false,
        ..config(31, 3, 8)
    };
    let (mut sim, away) = away_while_written(cfg, 5);
    assert_eq!(sim.osds[&away].caught_up, None);
    recovers_every_last_write(&mut sim, 5);
}
