//! Reports and comparisons of a small hand-made run.

use cairn_bench::RwMode;
use cairn_matrix::compare;
use cairn_matrix::plot;
use cairn_matrix::report;
use cairn_matrix::results::{
    new_histogram, ClientRaw, DirRaw, Latency, PointSummary, RepSummary, Target, FORMAT,
};
use cairn_matrix::{MatrixSpec, Point, PointResult, Results};

fn point(clients: u32) -> Point {
    Point {
        rw: RwMode::RandWrite,
        rwmixread: 70,
        bs: 4096,
        iodepth: 16,
        numjobs: 1,
        clients,
    }
}

fn measured(clients: u32, iops: f64, mean_us: f64, p99_99_us: f64) -> PointResult {
    let mut r = PointResult::new(point(clients), Vec::new(), None).unwrap();
    r.summary = Some(PointSummary {
        median: RepSummary {
            iops,
            write_iops: iops,
            mib_s: iops * 4096.0 / 1048576.0,
            lat: Latency {
                mean_us,
                p99_99_us,
                ..Latency::default()
            },
            ..RepSummary::default()
        },
        iops_min: iops * 0.9,
        iops_max: iops * 1.1,
        repetitions: 3,
    });
    r
}

fn results(system: &str, points: Vec<PointResult>) -> Results {
    let spec = MatrixSpec::parse(
        "[workload]\nrw = \"randwrite\"\nbs = \"4k\"\niodepth = 16\nclients = [1, 16]\nimage_size = \"64M\"\nruntime = 2\nrepetitions = 3\n",
        "unit",
    )
    .unwrap();
    Results {
        format: FORMAT,
        spec,
        target: Target {
            system: system.into(),
            version: "1".into(),
            config: "3 OSDs".into(),
        },
        machine: "test".into(),
        started: "2026-11-23T00:00:00Z".into(),
        points,
        interrupted: false,
    }
}

#[test]
fn compare_prints_percent_changes_per_matching_point() {
    let a = results(
        "ceph",
        vec![
            measured(1, 1000.0, 500.0, 9000.0),
            measured(16, 100.0, 100.0, 1000.0),
        ],
    );
    let b = results("cairn", vec![measured(16, 234.0, 30.0, 90.0)]);
    let (changes, unmatched) = compare::changes(&a, &b);
    assert_eq!(changes.len(), 1);
    assert_eq!(unmatched, vec!["randwrite-4k-qd16-j1-c1".to_string()]);
    assert_eq!(
        changes[0].line(),
        "randwrite 4K, qd16, 16 clients: IOPS +134%, mean \u{2212}70%, p99.99 \u{2212}91%"
    );
    let md = compare::markdown(&a, &b);
    assert!(
        md.contains("| randwrite 4K, qd16, 16 clients | 100 | 234 | +134% |"),
        "{md}"
    );
    assert_eq!(compare::fmt_pct(compare::pct(0.0, 5.0)), "n/a");
    assert_eq!(compare::fmt_pct(Some(-0.3)), "+0%");
}

#[test]
fn report_files_hold_every_point() {
    let mut failed = PointResult::new(point(4), Vec::new(), Some("osd.2 died".into())).unwrap();
    failed.summary = None;
    let r = results(
        "cairn",
        vec![
            measured(1, 1234.4, 80.0, 900.0),
            failed,
            measured(16, 15000.0, 1000.0, 20000.0),
        ],
    );
    let csv = report::csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[1]
        .starts_with("randwrite-4k-qd16-j1-c1,randwrite 4K,randwrite,70,4096,16,1,1,3,1234.4,"));
    assert!(lines[2].ends_with("\"osd.2 died\""), "{}", lines[2]);
    let cols = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");

    let md = report::markdown(&r);
    assert!(
        md.contains("| randwrite 4K | 16 | 1 | 16 | 15,000 [13,500–16,500] |"),
        "{md}"
    );
    assert!(md.contains("`randwrite-4k-qd16-j1-c4`: osd.2 died"), "{md}");

    let back: Results = serde_json::from_str(&report::json(&r)).unwrap();
    assert_eq!(back.points.len(), 3);
    assert_eq!(
        report::json(&back),
        report::json(&r),
        "results.json round-trips"
    );

    let charts = plot::charts(&r);
    let names: Vec<&str> = charts.iter().map(|c| c.file).collect();
    assert!(names.contains(&"iops-vs-clients.svg"), "{names:?}");
    assert!(
        !names.contains(&"iops-vs-bs.svg"),
        "one block size: no sweep"
    );
    let svg = plot::svg(&charts[0]);
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
}

#[test]
fn histogram_buckets_round_trip() {
    let mut h = new_histogram().unwrap();
    h.record_n(1500, 3).unwrap();
    h.record_n(2_000_000, 1).unwrap();
    let raw = DirRaw {
        ops: 4,
        bytes: 0,
        lat_ns: DirRaw::buckets(&h),
    };
    let mut back = new_histogram().unwrap();
    raw.record_into(&mut back).unwrap();
    assert_eq!(back.len(), 4);
    assert_eq!(back.max(), h.max());
    let _ = ClientRaw::default();
}
