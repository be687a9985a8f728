//! Random runs of the whole cluster under faults, one per seed. Set
//! `CAIRN_SIM_SEEDS=N` for more seeds (default 200 or 100), and
//! `CAIRN_SIM_SEED=S` to replay one.

use cairn_osd::PlantedBug;
use cairn_sim::{random_run, SimConfig};

/// Seeds `first..first + n` (n from `CAIRN_SIM_SEEDS`, else `default`),
/// or just `CAIRN_SIM_SEED`.
fn seeds(first: u64, default: u64) -> Vec<u64> {
    if let Ok(one) = std::env::var("CAIRN_SIM_SEED") {
        return vec![one.parse().expect("CAIRN_SIM_SEED is a number")];
    }
    let n = std::env::var("CAIRN_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    (first..first + n).collect()
}

fn run_all(name: &str, first: u64, default: u64, mut cfg: impl FnMut(u64) -> SimConfig) {
    if std::env::var_os("CAIRN_SIM_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("CAIRN_SIM_LOG"))
            .with_target(false)
            .without_time()
            .try_init();
    }
    let mut failures = Vec::new();
    let (mut writes, mut reads) = (0, 0);
    for seed in seeds(first, default) {
        let config = cfg(seed);
        // A panic (a broken invariant) is a failure of this seed: name it.
        let run = std::panic::catch_unwind(|| random_run(config)).unwrap_or_else(|_| {
            Err(format!(
                "seed {seed} panicked (replay with CAIRN_SIM_SEED={seed})"
            ))
        });
        match run {
            Ok(report) => {
                writes += report.acked_writes;
                reads += report.reads_checked;
            }
            Err(e) => failures.push(e),
        }
    }
    eprintln!("{name}: {writes} acknowledged writes, {reads} reads checked");
    assert!(
        failures.is_empty(),
        "{} seeds failed; first:\n{}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn random_faults_lose_no_acknowledged_write() {
    run_all("default", 1, 200, SimConfig::new);
}

/// Seeds beyond the default counts that once failed: 1082 (a compacted
/// entry that was history only in part, rolled back whole), 1523 (an
/// object unfound on the one complete member, its copy on a stray that
/// returned while the PG was active and never asked), 1907 and short-log
/// 11676 (an object unfound while its only copy sat on a member that fell
/// behind the log: now asked of backfill targets and strays too; in 11676
/// the stray had also notified while still down, when it could not be
/// asked), three-host 30242 (rot injected under a copy the OSD did not
/// hold, a harness bug) and 30776 (a PG down for want of an OSD that came
/// back holding no copy to notify about), and short-log 12547 (a harness
/// bug: a client's first send to a partitioned OSD left no connection for
/// the heal to break, so the client never resent). Their paths drift as the code
/// changes, so they guard loosely; the many-seed runs guard the rest.
#[test]
fn seeds_that_once_failed_pass() {
    if std::env::var_os("CAIRN_SIM_SEED").is_some() {
        return;
    }
    let configs = [
        SimConfig::new(1082),
        SimConfig::new(1523),
        SimConfig::new(1907),
        short_log(11_676),
        short_log(12_547),
        three_hosts(30_242),
        three_hosts(30_776),
    ];
    for cfg in configs {
        if let Err(e) = random_run(cfg) {
            panic!("{e}");
        }
    }
}

fn short_log(seed: u64) -> SimConfig {
    SimConfig {
        pg_log_max_entries: 4,
        osds: 6,
        pg_num: 16,
        ..SimConfig::new(seed)
    }
}

fn three_hosts(seed: u64) -> SimConfig {
    SimConfig {
        osds: 6,
        osds_per_host: 2,
        pg_num: 16,
        ..SimConfig::new(seed)
    }
}

#[test]
fn random_faults_with_a_short_log_backfill_and_lose_nothing() {
    run_all("short log", 10_001, 100, short_log);
}

#[test]
fn random_faults_across_three_hosts_lose_nothing() {
    // Replicas on distinct hosts (two OSDs each): a dead host's PGs stay
    // undersized instead of doubling up, and stand-ins come and go.
    run_all("three hosts", 30_001, 100, three_hosts);
}

#[test]
fn a_planted_recovery_bug_is_caught() {
    // Recovery forgets one missing object per member: some seed must fail.
    let mut caught = 0;
    for seed in 1..=15 {
        let cfg = SimConfig {
            planted_bug: Some(PlantedBug::ForgetReplicaMissing),
            ..SimConfig::new(seed + 20_000)
        };
        if random_run(cfg).is_err() {
            caught += 1;
        }
    }
    assert!(
        caught > 0,
        "the checker missed a planted recovery bug in 15 seeds"
    );
}
