//! Helpers the scripted simulation tests share.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_sim::client::Kind;
use cairn_sim::{Sim, SimConfig};

pub const WAIT: Duration = Duration::from_secs(120);

pub fn config(seed: u64, osds: u32, objects: usize) -> SimConfig {
    SimConfig {
        osds,
        clients: 1,
        objects_per_client: objects,
        pg_num: 8,
        ..SimConfig::new(seed)
    }
}

pub fn started(cfg: SimConfig) -> Sim {
    if std::env::var_os("CAIRN_SIM_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("CAIRN_SIM_LOG"))
            .with_target(false)
            .without_time()
            .try_init();
    }
    let mut sim = Sim::new(cfg);
    assert!(
        sim.run_until(WAIT, Sim::all_clean),
        "{}",
        sim.failure("never clean")
    );
    sim
}

/// Write `tag` into every object of client 0 and wait for every ack.
pub fn write_all(sim: &mut Sim, tag: &str) {
    for obj in 0..sim.clients[0].objects.len() {
        let data = format!("{tag} in object {obj}").into_bytes();
        sim.start_op(0, obj, Kind::Write(data));
    }
    assert!(
        sim.run_until(WAIT, Sim::idle),
        "{}",
        sim.failure("writes not acknowledged")
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

pub fn read_all(sim: &mut Sim) {
    for obj in 0..sim.clients[0].objects.len() {
        sim.start_op(0, obj, Kind::Read);
    }
}

/// Mark OSDs down (as the monitor would after the grace) and out.
pub fn kill_down_out(sim: &mut Sim, osds: &[u32]) {
    for &osd in osds {
        sim.kill(osd);
        sim.mark_down(osd);
        sim.mark_out(osd);
    }
}

/// PGs whose primary reports them down, and the OSDs they wait for.
pub fn down_pgs(sim: &Sim) -> (usize, BTreeSet<u32>) {
    let mut count = 0;
    let mut waiting = BTreeSet::new();
    let map = sim.map().clone();
    for pg in map.all_pgs() {
        let Some(primary) = map.acting(pg).primary() else {
            continue;
        };
        let Some(stat) = sim
            .osds
            .get(&primary)
            .and_then(|o| o.core.as_ref())
            .and_then(|c| c.pg(pg))
            .map(|p| p.stat())
        else {
            continue;
        };
        if stat.state == "down" {
            count += 1;
            waiting.extend(stat.blocked_by);
        }
    }
    (count, waiting)
}

/// Every PG active+clean on its current up set (OSDs may be out).
pub fn all_active_clean(sim: &Sim) -> bool {
    sim.pg_states()
        .values()
        .all(|s| s.starts_with("active+clean"))
}
