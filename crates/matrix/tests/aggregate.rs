//! Reduction against hand-computed examples: sums over clients, merged
//! histograms (not averaged percentiles), medians over repetitions.

use std::collections::BTreeMap;

use cairn_bench::RwMode;
use cairn_matrix::results::{median, new_histogram, ClientRaw, DirRaw, PointSummary, RepRaw};
use cairn_matrix::{Point, PointResult};

fn close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want.abs() * 0.002,
        "got {got}, want {want}"
    );
}

/// Latencies in microseconds as histogram buckets in nanoseconds.
fn dir(ops: u64, bs: u64, lat: &[(u64, u64)]) -> DirRaw {
    let mut h = new_histogram().unwrap();
    for &(us, n) in lat {
        h.record_n(us * 1000, n).unwrap();
    }
    DirRaw {
        ops,
        bytes: ops * bs,
        lat_ns: DirRaw::buckets(&h),
    }
}

fn rep() -> RepRaw {
    RepRaw {
        seconds: 2.0,
        clients: vec![
            ClientRaw {
                client: 0,
                read: DirRaw::default(),
                write: dir(100, 4096, &[(100, 60), (300, 40)]),
            },
            ClientRaw {
                client: 1,
                read: dir(50, 4096, &[(50, 50)]),
                write: dir(300, 4096, &[(200, 300)]),
            },
        ],
        cpu_s: BTreeMap::from([("osd.0".into(), 2.5), ("osd.1".into(), 2.5)]),
        csw: None,
    }
}

#[test]
fn a_repetition_sums_clients_and_merges_their_histograms() {
    let s = rep().summary().unwrap();
    // 450 operations in 2 s.
    close(s.iops, 225.0);
    close(s.write_iops, 200.0);
    close(s.read_iops, 25.0);
    close(s.mib_s, 450.0 * 4096.0 / 2.0 / 1048576.0);
    // Writes merged: 60 at 100 us, 300 at 200 us, 40 at 300 us.
    close(
        s.write_lat.mean_us,
        (60.0 * 100.0 + 300.0 * 200.0 + 40.0 * 300.0) / 400.0,
    );
    close(s.write_lat.p50_us, 200.0);
    close(s.write_lat.p99_us, 300.0);
    // Not the average of the clients' medians (100 and 200).
    assert!((s.write_lat.p50_us - 150.0).abs() > 10.0);
    // Reads and writes together: 50 more at 50 us.
    close(s.lat.mean_us, (50.0 * 50.0 + 78_000.0) / 450.0);
    close(s.lat.p50_us, 200.0);
    close(s.read_lat.p99_99_us, 50.0);
    // 450 operations on 5 CPU-seconds of daemons.
    close(s.cpu_s, 5.0);
    close(s.iops_per_cpu_s, 90.0);
    // All of it OSDs': 5e6 us / 450 ops; no gateway, no switches counted.
    close(s.osd_cpu_us_per_op.unwrap(), 5e6 / 450.0);
    assert_eq!(s.gateway_cpu_us_per_op, None);
    assert_eq!(s.osd_csw_per_op, None);
}

/// Roles by name: the gateways' CPU is apart from the cluster's (not in
/// IOPS per CPU-second), the monitor's counts for neither role, and
/// context switches count the OSDs' only.
#[test]
fn cpu_and_switches_split_by_role() {
    let mut r = rep();
    r.cpu_s = BTreeMap::from([
        ("mon".into(), 0.45),
        ("osd.0".into(), 0.9),
        ("osd.1".into(), 0.45),
        ("nbd.0".into(), 0.9),
    ]);
    r.csw = Some(BTreeMap::from([
        ("mon".into(), 900),
        ("osd.0".into(), 2000),
        ("osd.1".into(), 2500),
        ("nbd.0".into(), 10_000),
    ]));
    let s = r.summary().unwrap();
    // 450 ops; cluster daemons 1.8 CPU-s (not the gateway's 0.9).
    close(s.cpu_s, 1.8);
    close(s.iops_per_cpu_s, 250.0);
    close(s.osd_cpu_us_per_op.unwrap(), 1.35e6 / 450.0);
    close(s.gateway_cpu_us_per_op.unwrap(), 0.9e6 / 450.0);
    close(s.osd_csw_per_op.unwrap(), 4500.0 / 450.0);
    // Medians over the repetitions that measured them.
    let p = PointSummary::of(&[s, rep().summary().unwrap()]);
    close(p.median.osd_csw_per_op.unwrap(), 10.0);
    close(
        p.median.osd_cpu_us_per_op.unwrap(),
        (1.35e6 / 450.0 + 5e6 / 450.0) / 2.0,
    );
}

#[test]
fn repetitions_reduce_by_median_with_the_spread_kept() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[10.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median(&[]), 0.0);
    let base = rep().summary().unwrap();
    let reps: Vec<_> = [100.0, 300.0, 200.0]
        .iter()
        .zip([900.0, 100.0, 500.0])
        .map(|(&iops, mean)| {
            let mut r = base;
            r.iops = iops;
            r.lat.mean_us = mean;
            r
        })
        .collect();
    let p = PointSummary::of(&reps);
    assert_eq!(p.median.iops, 200.0);
    assert_eq!(p.median.lat.mean_us, 500.0, "each statistic's own median");
    assert_eq!((p.iops_min, p.iops_max), (100.0, 300.0));
    assert_eq!(p.repetitions, 3);
}

#[test]
fn a_failed_point_keeps_its_repetitions_but_has_no_summary() {
    let point = Point {
        rw: RwMode::RandWrite,
        rwmixread: 70,
        bs: 4096,
        iodepth: 32,
        numjobs: 1,
        clients: 2,
    };
    let ok = PointResult::new(point, vec![rep(), rep()], None).unwrap();
    close(ok.summary.unwrap().median.iops, 225.0);
    let failed = PointResult::new(point, vec![rep()], Some("osd.1 died".into())).unwrap();
    assert!(failed.summary.is_none());
    assert_eq!(failed.reps.len(), 1);
    assert_eq!(failed.id, "randwrite-4k-qd32-j1-c2");
}
