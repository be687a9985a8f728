//! Latency and window accounting against volumes with known delays. Most
//! tests run on tokio's paused clock, where a sleep of d takes exactly d.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn_bench::{run, BenchSpec, RwMode};
use common::Delay;

const MIB: u64 = 1 << 20;

fn spec(rw: RwMode, iodepth: u32, ramp_ms: u64, runtime_ms: u64) -> BenchSpec {
    BenchSpec {
        rw,
        bs: 4096,
        iodepth,
        numjobs: 1,
        ramp: Duration::from_millis(ramp_ms),
        runtime: Duration::from_millis(runtime_ms),
        seed: Some(1),
        ..BenchSpec::default()
    }
}

/// Within hdrhistogram's 3 significant digits.
fn close(got_us: f64, want_us: f64) -> bool {
    (got_us - want_us).abs() <= want_us * 0.001
}

fn fixed_2ms(_: u64) -> Duration {
    Duration::from_millis(2)
}

#[tokio::test(start_paused = true)]
async fn fixed_delay_gives_exact_percentiles_and_iops() {
    let vol = Arc::new(Delay::new(MIB, fixed_2ms));
    let r = run(vol.clone(), &spec(RwMode::RandRead, 4, 0, 1000))
        .await
        .unwrap();
    let l = r.read.lat;
    for v in [
        l.min_us,
        l.mean_us,
        l.p50_us,
        l.p99_us,
        l.p99_99_us,
        l.max_us,
    ] {
        assert!(close(v, 2000.0), "{l:?}");
    }
    // 4 in flight, 2 ms each: 500 rounds of 4 in the second.
    assert_eq!(r.read.ops, 2000);
    assert!((r.read.iops - 2000.0).abs() < 1e-6);
}

/// Per 2000 operations: 1800 take 1 ms, 190 take 5 ms, 9 take 20 ms, 1 takes
/// 50 ms, so p50 = 1 ms, p99 = 5 ms, p99.9 = 20 ms and p99.99 = 50 ms.
fn spread(n: u64) -> Duration {
    Duration::from_millis(match n % 2000 {
        0..=1799 => 1,
        1800..=1989 => 5,
        1990..=1998 => 20,
        _ => 50,
    })
}

#[tokio::test(start_paused = true)]
async fn percentiles_match_hand_computed_values() {
    let vol = Arc::new(Delay::new(MIB, spread));
    let r = run(vol.clone(), &spec(RwMode::RandWrite, 1, 0, 30_000))
        .await
        .unwrap();
    let l = r.write.lat;
    assert!(close(l.p50_us, 1_000.0), "{l:?}");
    assert!(close(l.p99_us, 5_000.0), "{l:?}");
    assert!(close(l.p99_9_us, 20_000.0), "{l:?}");
    assert!(close(l.p99_99_us, 50_000.0), "{l:?}");
    assert!(close(l.max_us, 50_000.0), "{l:?}");
    assert!(close(l.min_us, 1_000.0), "{l:?}");
    // With one op in flight and no ramp, the counted ops are the first ones.
    let given = vol.given.lock().unwrap();
    let n = r.write.ops as usize;
    assert!(n > 20_000 && n <= given.len(), "{n} of {}", given.len());
    let mean_us = given[..n]
        .iter()
        .map(|d| d.as_secs_f64() * 1e6)
        .sum::<f64>()
        / n as f64;
    assert!(close(l.mean_us, mean_us), "mean {} vs {mean_us}", l.mean_us);
    // Each 2000-op cycle takes 2980 ms, so 30 s hold about 20,130 ops.
    let expected = 10 * 2000 + (30_000 - 10 * 2980);
    assert!(n.abs_diff(expected) <= 1, "{n} vs {expected}");
}

fn fixed_1ms(_: u64) -> Duration {
    Duration::from_millis(1)
}

#[tokio::test(start_paused = true)]
async fn ramp_ops_are_not_counted() {
    let vol = Arc::new(Delay::new(MIB, fixed_1ms));
    let r = run(vol.clone(), &spec(RwMode::RandRead, 4, 1000, 1000))
        .await
        .unwrap();
    // 4000 ops/s for 2 s in all; only the second second is counted.
    let calls = vol.calls();
    assert!((7990..=8010).contains(&calls), "{calls}");
    assert!((3990..=4010).contains(&r.read.ops), "{}", r.read.ops);
    assert!(close(r.read.iops, r.read.ops as f64), "{}", r.read.iops);

    // Without a ramp, only the few ops still in flight at the end are lost.
    let vol = Arc::new(Delay::new(MIB, fixed_1ms));
    let r = run(vol.clone(), &spec(RwMode::RandRead, 4, 0, 1000))
        .await
        .unwrap();
    assert!(
        vol.calls() - r.read.ops <= 4,
        "{} of {}",
        r.read.ops,
        vol.calls()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clock_latency_obeys_littles_law() {
    // In real time a 2 ms sleep takes 2 ms or a little more; whatever it
    // takes, IOPS x mean latency must be the ops in flight.
    let vol = Arc::new(Delay::new(MIB, fixed_2ms));
    let s = BenchSpec {
        numjobs: 2,
        ..spec(RwMode::RandWrite, 8, 100, 600)
    };
    let r = run(vol, &s).await.unwrap();
    let l = r.write.lat;
    assert!(l.p50_us >= 1990.0 && l.p50_us < 6000.0, "{l:?}");
    let in_flight = r.write.iops * l.mean_us / 1e6;
    assert!(
        (11.0..=16.5).contains(&in_flight),
        "{in_flight} of 16 in flight: {r:?}"
    );
}
