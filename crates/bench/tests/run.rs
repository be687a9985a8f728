//! Runs against in-memory volumes, in real time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn_bench::{run, run_many, BenchError, BenchReport, BenchSpec, OpKind, RwMode};
use cairn_volume::MemVolume;
use common::{FailFrom, Probe};

const MIB: u64 = 1 << 20;

fn spec(rw: RwMode, bs: u64, iodepth: u32, numjobs: u32, millis: u64) -> BenchSpec {
    BenchSpec {
        rw,
        bs,
        iodepth,
        numjobs,
        runtime: Duration::from_millis(millis),
        seed: Some(42),
        ..BenchSpec::default()
    }
}

fn probe(size: u64, bs: u64, region: u64) -> Arc<Probe<MemVolume>> {
    Arc::new(Probe::new(MemVolume::new(size), bs, region))
}

/// Rates agree with counts, and only the mode's directions are counted.
fn check_consistent(r: &BenchReport, calls: u64) {
    let secs = r.elapsed.as_secs_f64();
    assert_eq!(r.elapsed, r.spec.runtime);
    for d in [&r.read, &r.write, &r.total] {
        assert!(
            (d.iops - d.ops as f64 / secs).abs() <= 1e-6 * d.iops.max(1.0),
            "{r:?}"
        );
        assert_eq!(d.bytes, d.ops * r.spec.bs);
        let mib = d.bytes as f64 / MIB as f64 / secs;
        assert!((d.mib_per_s - mib).abs() <= 1e-6 * mib.max(1.0));
        if d.ops > 0 {
            assert!(
                d.lat.p50_us > 0.0 && d.lat.p50_us <= d.lat.p99_us,
                "{:?}",
                d.lat
            );
            assert!(d.lat.p99_us <= d.lat.p99_9_us && d.lat.p99_9_us <= d.lat.p99_99_us);
            assert!(d.lat.p99_99_us <= d.lat.max_us && d.lat.min_us <= d.lat.mean_us);
        }
    }
    assert_eq!(r.total.ops, r.read.ops + r.write.ops);
    assert!(r.total.ops > 0, "no ops counted: {r:?}");
    assert!(
        r.total.ops <= calls,
        "{} counted of {calls} calls",
        r.total.ops
    );
    if !r.spec.rw.reads() {
        assert_eq!(r.read.ops, 0);
    }
    if !r.spec.rw.writes() {
        assert_eq!(r.write.ops, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randread_counts_only_reads() {
    let vol = probe(16 * MIB, 4096, 16 * MIB);
    let r = run(vol.clone(), &spec(RwMode::RandRead, 4096, 8, 2, 500))
        .await
        .unwrap();
    check_consistent(&r, vol.calls());
    assert_eq!(vol.writes.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(r.read.ops > 100, "{}", r.read.ops);
    vol.assert_all_good();
    let table = r.table();
    assert!(
        table.contains("rw=randread bs=4K iodepth=8 numjobs=2"),
        "{table}"
    );
    assert!(
        table.lines().nth(2).is_some_and(|l| l.starts_with("read")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randwrite_stays_in_the_sized_region() {
    let vol = probe(4 * MIB, 8192, MIB);
    let s = BenchSpec {
        size: Some(MIB),
        ..spec(RwMode::RandWrite, 8192, 16, 2, 400)
    };
    let r = run(vol.clone(), &s).await.unwrap();
    check_consistent(&r, vol.calls());
    assert_eq!(r.spec.region, MIB);
    vol.assert_all_good();
    let data = vol.inner.snapshot();
    assert!(data[..MIB as usize].iter().any(|&b| b != 0));
    assert!(
        data[MIB as usize..].iter().all(|&b| b == 0),
        "wrote past the region"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randrw_follows_the_mix() {
    for mix in [70, 25] {
        let vol = probe(8 * MIB, 4096, 8 * MIB);
        let s = BenchSpec {
            rwmixread: mix,
            ..spec(RwMode::RandRw, 4096, 4, 1, 300)
        };
        let r = run(vol.clone(), &s).await.unwrap();
        check_consistent(&r, vol.calls());
        vol.assert_all_good();
        assert!(r.total.ops > 200, "{}", r.total.ops);
        let pct = 100.0 * r.read.ops as f64 / r.total.ops as f64;
        assert!(
            (pct - f64::from(mix)).abs() <= 10.0,
            "mix {mix}: {pct:.1}% reads"
        );
        assert_eq!(r.spec.rwmixread, Some(mix));
        assert_eq!(r.table().lines().count(), 5, "{}", r.table());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_write_jobs_cover_the_region() {
    // 2 jobs of 128 blocks each: they wrap many times in 300 ms.
    let vol = probe(2 * MIB, 4096, MIB);
    let s = BenchSpec {
        size: Some(MIB),
        ..spec(RwMode::Write, 4096, 4, 2, 300)
    };
    let r = run(vol.clone(), &s).await.unwrap();
    check_consistent(&r, vol.calls());
    assert!(r.write.ops > 512, "{}", r.write.ops);
    vol.assert_all_good();
    let data = vol.inner.snapshot();
    assert!(
        data[..MIB as usize].iter().all(|&b| b != 0),
        "a block was never written"
    );
    assert!(
        data[MIB as usize..].iter().all(|&b| b == 0),
        "wrote past the region"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_read_walks_in_order_and_wraps() {
    let vol = probe(MIB, 64 * 1024, MIB);
    let r = run(vol.clone(), &spec(RwMode::Read, 64 * 1024, 1, 1, 200))
        .await
        .unwrap();
    check_consistent(&r, vol.calls());
    let offsets = vol.offsets();
    assert!(offsets.len() > 40, "{}", offsets.len());
    for (i, off) in offsets.iter().enumerate() {
        assert_eq!(*off, (i as u64 % 16) * 64 * 1024, "op {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precondition_writes_the_whole_region_uncounted() {
    // Region of two whole 4 MiB blocks and a short tail; the rest untouched.
    let region = 9 * MIB + 512;
    let vol = probe(10 * MIB, 4 * MIB, region);
    let s = BenchSpec {
        precondition: true,
        size: Some(region),
        ..spec(RwMode::RandRead, 4096, 4, 1, 100)
    };
    let r = run(vol.clone(), &s).await.unwrap();
    assert_eq!(vol.writes.load(std::sync::atomic::Ordering::Relaxed), 3);
    assert_eq!(r.write.ops, 0);
    assert!(r.read.ops > 0);
    let data = vol.inner.snapshot();
    assert!(
        data[..region as usize].iter().all(|&b| b != 0),
        "unwritten bytes"
    );
    assert!(
        data[region as usize..].iter().all(|&b| b == 0),
        "wrote past the region"
    );
    assert!(r.table().contains("precondition"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_seed_same_offsets() {
    let mut logs = Vec::new();
    for _ in 0..2 {
        let vol = probe(64 * MIB, 4096, 64 * MIB);
        let r = run(vol.clone(), &spec(RwMode::RandWrite, 4096, 1, 1, 50))
            .await
            .unwrap();
        assert_eq!(r.spec.seed, 42);
        let mut offsets = vol.offsets();
        assert!(offsets.len() >= 20);
        offsets.truncate(20);
        logs.push(offsets);
    }
    assert_eq!(logs[0], logs[1]);
    let unseeded = BenchSpec {
        seed: None,
        ..spec(RwMode::RandRead, 4096, 1, 1, 20)
    };
    let a = run(Arc::new(MemVolume::new(MIB)), &unseeded).await.unwrap();
    let b = run(Arc::new(MemVolume::new(MIB)), &unseeded).await.unwrap();
    assert_ne!(a.spec.seed, b.spec.seed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_error_stops_the_run_and_names_the_op() {
    let vol = Arc::new(FailFrom {
        size: 4 * MIB,
        fail_from: 2 * MIB,
    });
    let started = std::time::Instant::now();
    let err = run(vol.clone(), &spec(RwMode::RandWrite, 4096, 8, 2, 10_000))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "run did not stop"
    );
    match &err {
        BenchError::Io {
            op, offset, len, ..
        } => {
            assert_eq!((*op, *len), (OpKind::Write, 4096));
            assert!(*offset >= 2 * MIB - 4096 && offset % 4096 == 0, "{offset}");
        }
        e => panic!("unexpected error {e}"),
    }
    assert!(err.to_string().contains("bad sector"), "{err}");

    let s = BenchSpec {
        precondition: true,
        ..spec(RwMode::RandRead, 4096, 8, 1, 10_000)
    };
    match run(vol, &s).await {
        Err(BenchError::Io { op, offset, .. }) => {
            assert_eq!(op, OpKind::PreconditionWrite);
            assert!(offset < 4 * MIB && offset + 4 * MIB > 2 * MIB, "{offset}");
        }
        r => panic!("unexpected result {r:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spec_touches_nothing() {
    let vol = probe(MIB, 4096, MIB);
    let s = BenchSpec {
        bs: 1000,
        ..spec(RwMode::RandWrite, 4096, 1, 1, 100)
    };
    let err = run(vol.clone(), &s).await.unwrap_err();
    assert!(
        matches!(err, BenchError::InvalidSpec { param: "bs", .. }),
        "{err}"
    );
    assert_eq!(vol.calls(), 0);
    let none: Vec<Arc<MemVolume>> = Vec::new();
    assert!(matches!(
        run_many(none, &s).await,
        Err(BenchError::NoVolumes)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_many_drives_every_volume_and_merges() {
    let vols = vec![probe(4 * MIB, 4096, 4 * MIB), probe(4 * MIB, 4096, 4 * MIB)];
    let s = spec(RwMode::RandWrite, 4096, 4, 2, 300);
    let r = run_many(vols.clone(), &s).await.unwrap();
    let calls: u64 = vols.iter().map(|v| v.calls()).sum();
    check_consistent(&r, calls);
    assert_eq!(r.spec.volumes, 2);
    assert_eq!(r.write_histogram().len(), r.write.ops);
    for v in &vols {
        v.assert_all_good();
        assert!(v.calls() > 50, "{}", v.calls());
    }
    assert!(r.table().contains("volumes=2"));
    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    assert_eq!(json["write"]["ops"], r.write.ops);
    assert_eq!(json["spec"]["volumes"], 2);
}
