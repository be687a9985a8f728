//! Cache tiering against a real cluster: the `osd tier` commands and their
//! refusals, writeback semantics (writes land in the cache, cold reads are
//! proxied until the hit sets say promote, partial writes, whiteouts),
//! flush-evict-all, and taking a tier away without losing a write.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cairn_client::{ClientError, Cluster};
use cairn_types::PoolId;
use cairn_wire::{ObjOp, OpError, OpOutput};
use common::{pattern, TestCluster};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// A cluster with pool `base` and an empty pool `cache` (8 PGs each).
fn two_pools(osds: u32) -> TestCluster {
    let cluster = TestCluster::up(osds);
    for pool in ["base", "cache"] {
        cluster.ok(&[
            "pool",
            "create",
            pool,
            "--pg-num",
            "8",
            "--size",
            "2",
            "--min-size",
            "1",
        ]);
    }
    cluster
}

/// `pool stats POOL` as JSON.
fn pool_stats(cluster: &TestCluster, pool: &str) -> Value {
    let v: Value = serde_json::from_str(&cluster.ok(&["--json", "pool", "stats", pool]))
        .expect("pool stats json");
    v[0].clone()
}

/// Poll `pool stats CACHE` until `check` holds on its `cache_io`.
fn wait_cache_stats(
    cluster: &TestCluster,
    cache: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let v = pool_stats(cluster, cache);
        if v["cache_io"]["pgs_reporting"] == 8 && check(&v) {
            return v;
        }
        assert!(
            start.elapsed() < WAIT,
            "{what}: pool stats never showed it: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn epoch(cluster: &TestCluster) -> u64 {
    cluster.status()["epoch"].as_u64().expect("epoch")
}

async fn read(c: &Cluster, pool: PoolId, oid: &str, direct: bool) -> Result<Vec<u8>, ClientError> {
    let ops = vec![ObjOp::Read {
        offset: 0,
        len: 1 << 22,
    }];
    let out = if direct {
        c.op_ignoring_overlay(pool, oid, ops).await?
    } else {
        c.op(pool, oid, ops).await?
    };
    match out.into_iter().next() {
        Some(OpOutput::Data(d)) => Ok(d.to_vec()),
        other => panic!("read of {oid} answered {other:?}"),
    }
}

async fn write(c: &Cluster, pool: PoolId, oid: &str, offset: u64, data: &[u8]) {
    let ops = vec![ObjOp::Write {
        offset,
        data: Bytes::copy_from_slice(data),
    }];
    tokio::time::timeout(WAIT, c.op(pool, oid, ops))
        .await
        .expect("write hung")
        .expect("write");
}

fn not_found(r: Result<Vec<u8>, ClientError>) -> bool {
    matches!(r, Err(ClientError::Op(OpError::NotFound)))
}

#[test]
fn tier_commands_refuse_bad_input_and_change_nothing() {
    let cluster = two_pools(3);
    cluster.ok(&["pool", "create", "other", "--pg-num", "8"]);
    let bad = |args: &[&str], why: &str| {
        let before = epoch(&cluster);
        let err = cluster.fails(args);
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert_eq!(epoch(&cluster), before, "{args:?} changed the map");
    };
    bad(&["osd", "tier", "add", "base", "base"], "tier of itself");
    bad(
        &["osd", "tier", "cache-mode", "cache", "writeback"],
        "not a cache tier",
    );
    bad(
        &["pool", "set", "cache", "target_max_objects", "10"],
        "not one",
    );
    cluster.ok(&["osd", "tier", "add", "base", "cache"]);
    bad(
        &["osd", "tier", "add", "base", "other"],
        "already has a cache tier",
    );
    bad(
        &["osd", "tier", "add", "other", "cache"],
        "already a cache tier",
    );
    bad(
        &["osd", "tier", "add", "cache", "other"],
        "cache over a cache",
    );
    bad(
        &["osd", "tier", "add", "other", "base"],
        "cache over a cache",
    );
    bad(
        &["osd", "tier", "set-overlay", "other", "cache"],
        "not of 'other'",
    );
    bad(
        &["pool", "set", "cache", "cache_target_dirty_ratio", "1.5"],
        "between 0 and 1",
    );
    bad(
        &["pool", "set", "cache", "cache_target_full_ratio", "2"],
        "between 0 and 1",
    );
    bad(
        &[
            "pool",
            "set",
            "cache",
            "cache_target_dirty_high_ratio",
            "0.3",
        ],
        "below cache_target_dirty_ratio",
    );
    bad(
        &["pool", "set", "cache", "hit_set_count", "many"],
        "whole number",
    );
    bad(
        &["pool", "set", "cache", "cache_target_dirty_rato", "0.3"],
        "unknown pool setting",
    );
    bad(
        &["pool", "rm", "cache", "--yes-i-really-mean-it"],
        "osd tier rm",
    );
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "writeback"]);
    cluster.ok(&["osd", "tier", "set-overlay", "base", "cache"]);
    bad(&["osd", "tier", "remove-overlay", "base"], "writeback mode");
    bad(&["osd", "tier", "rm", "base", "cache"], "remove-overlay");
    // The settings are there to read, the targets unset is warned about.
    let get: Value =
        serde_json::from_str(&cluster.ok(&["--json", "pool", "get", "cache"])).expect("get");
    assert_eq!(get["cache_mode"], "writeback", "{get}");
    assert_eq!(get["hit_set_count"], 12, "{get}");
    assert_eq!(get["cache_target_dirty_ratio"], 0.4, "{get}");
    assert_eq!(get["tier_of"], "base", "{get}");
    let status = cluster.ok(&["health", "detail"]);
    assert!(status.contains("CACHE_POOL_NO_TARGET"), "{status}");
    let out = cluster.ok(&["pool", "set", "cache", "target_max_objects", "1000"]);
    assert!(out.contains("target_max_objects 1000"), "{out}");
    let out = cluster.ok(&["pool", "get", "base", "overlay"]);
    assert_eq!(
        out.trim(),
        "overlay: cache",
        "clients of base are sent to cache"
    );
    let out = cluster.ok(&["pool", "get", "cache", "overlay"]);
    assert_eq!(out.trim(), "overlay: none");
    let status = cluster.ok(&["health", "detail"]);
    assert!(!status.contains("CACHE_POOL_NO_TARGET"), "{status}");
}

/// `hit_set_period` of the writeback tests, in seconds.
const HIT_SET_PERIOD: u64 = 2;

/// Sleep until just after a hit-set period starts. The OSDs start periods
/// at multiples of the period in Unix seconds, on this machine's clock, so
/// what the test does next within the period counts as one period even
/// on a loaded machine.
async fn start_of_hit_set_period(period: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    let into = Duration::from_millis((now.as_millis() % (u128::from(period) * 1000)) as u64);
    tokio::time::sleep(Duration::from_secs(period) - into + Duration::from_millis(20)).await;
}

/// Base and cache, writeback, overlay set; hit sets of 2 s, promotion on
/// the second period a read is seen in.
async fn writeback(cluster: &TestCluster) -> (Arc<Cluster>, PoolId, PoolId) {
    let c = cluster.client().await;
    let base = c.pool_id("base").expect("base");
    let cache = c.pool_id("cache").expect("cache");
    // An object in the base pool before the tier exists.
    write(&c, base, "old", 0, &pattern(1, 100_000)).await;
    cluster.ok(&["osd", "tier", "add", "base", "cache"]);
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "writeback"]);
    let period = HIT_SET_PERIOD.to_string();
    for (k, v) in [
        ("hit_set_period", period.as_str()),
        ("hit_set_count", "4"),
        ("min_read_recency_for_promote", "2"),
        ("target_max_objects", "1000"),
    ] {
        cluster.ok(&["pool", "set", "cache", k, v]);
    }
    cluster.ok(&["osd", "tier", "set-overlay", "base", "cache"]);
    let e = epoch(cluster) as u32;
    c.wait_for_epoch(e).await.expect("map");
    (c, base, cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writeback_proxies_promotes_writes_partially_and_flushes() {
    let cluster = two_pools(3);
    let (c, base, _cache) = writeback(&cluster).await;

    // A cold object is read through the cache without being promoted ...
    // (both reads inside one hit-set period: two periods would promote it)
    start_of_hit_set_period(HIT_SET_PERIOD).await;
    assert_eq!(
        read(&c, base, "old", false).await.expect("read"),
        pattern(1, 100_000)
    );
    assert_eq!(
        read(&c, base, "old", false).await.expect("read"),
        pattern(1, 100_000)
    );
    let v = wait_cache_stats(&cluster, "cache", "proxied reads", |v| {
        v["cache_io"]["proxied_reads"].as_u64() >= Some(2)
    });
    assert_eq!(v["cache_io"]["promotes"], 0, "promoted too early: {v}");
    // ... until it is seen in a second hit-set period.
    tokio::time::sleep(Duration::from_millis(HIT_SET_PERIOD * 1000 + 100)).await;
    assert_eq!(
        read(&c, base, "old", false).await.expect("read"),
        pattern(1, 100_000)
    );
    wait_cache_stats(&cluster, "cache", "a promotion", |v| {
        v["cache_io"]["promotes"] == 1
    });

    // A small write to an object the cache does not hold lands in the
    // cache alone, without promoting the object.
    let mut model = pattern(2, 300_000);
    c.op_ignoring_overlay(
        base,
        "part",
        vec![ObjOp::Write {
            offset: 0,
            data: Bytes::from(model.clone()),
        }],
    )
    .await
    .expect("seed base");
    // An object the base pool never had, written through the cache.
    write(&c, base, "new", 0, b"x").await;
    write(&c, base, "part", 4096, &pattern(3, 4096)).await;
    model[4096..8192].copy_from_slice(&pattern(3, 4096));
    let v = wait_cache_stats(&cluster, "cache", "partial write", |v| {
        v["cache_io"]["partial_writes"].as_u64() >= Some(1)
    });
    assert_eq!(v["cache_io"]["promotes"], 1, "a write promoted: {v}");
    assert_eq!(
        read(&c, base, "part", true).await.expect("base read"),
        pattern(2, 300_000),
        "the base pool has not seen the write yet"
    );
    // Reading it fills the rest from the base pool.
    assert_eq!(read(&c, base, "part", false).await.expect("read"), model);

    // A removal is a whiteout until flushed.
    c.op(base, "old", vec![ObjOp::Remove])
        .await
        .expect("remove");
    assert!(not_found(read(&c, base, "old", false).await));
    assert_eq!(
        read(&c, base, "old", true).await.expect("base still"),
        pattern(1, 100_000)
    );
    assert!(matches!(
        c.op(base, "old", vec![ObjOp::Remove]).await,
        Err(ClientError::Op(OpError::NotFound))
    ));
    let v = wait_cache_stats(&cluster, "cache", "whiteout", |v| {
        v["cache_io"]["whiteouts"] == 1
    });
    assert!(v["cache_io"]["dirty_objects"].as_u64() >= Some(3), "{v}");

    // A partial object in many pieces (more than FLUSH_SPAN_PIECES) is
    // flushed as one span, its holes read from the base pool: the base's
    // bytes between the pieces and its attributes stay, the pieces land,
    // and a piece past the base's end leaves zeros before it.
    let mut spread = pattern(4, 300_000);
    c.op_ignoring_overlay(
        base,
        "spread",
        vec![
            ObjOp::Write {
                offset: 0,
                data: Bytes::from(spread.clone()),
            },
            ObjOp::SetAttr {
                key: "user.kept".into(),
                value: Bytes::from_static(b"yes"),
            },
        ],
    )
    .await
    .expect("seed base");
    for k in 0..24u64 {
        let at = (k * 12_288 + 1000) as usize;
        let piece = pattern(40 + k, 4096);
        write(&c, base, "spread", at as u64, &piece).await;
        spread[at..at + 4096].copy_from_slice(&piece);
    }
    write(&c, base, "spread", 400_000, &pattern(99, 4096)).await;
    spread.resize(400_000, 0);
    spread.extend_from_slice(&pattern(99, 4096));

    // flush-evict-all sends everything back and empties the cache.
    let out = cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    assert!(out.contains("flushed"), "{out}");
    assert!(
        not_found(read(&c, base, "old", true).await),
        "the whiteout was flushed"
    );
    assert_eq!(read(&c, base, "part", true).await.expect("base"), model);
    let got = read(&c, base, "spread", true).await.expect("base");
    assert!(
        got == spread,
        "a partial object in 25 pieces, flushed, differs"
    );
    let attr = c
        .op_ignoring_overlay(
            base,
            "spread",
            vec![ObjOp::GetAttr {
                key: "user.kept".into(),
            }],
        )
        .await
        .expect("getattr");
    assert_eq!(
        attr,
        vec![OpOutput::Attr(Some(Bytes::from_static(b"yes")))],
        "the flush kept the base's attribute"
    );
    assert_eq!(
        read(&c, base, "new", true).await.expect("base"),
        b"x".to_vec()
    );
    wait_cache_stats(&cluster, "cache", "empty cache", |v| {
        v["objects"] == 0 && v["cache_io"]["dirty_objects"] == 0
    });
    // Everything still reads back through the cache.
    assert_eq!(read(&c, base, "part", false).await.expect("read"), model);
    assert!(not_found(read(&c, base, "old", false).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_is_removed_only_once_nothing_dirty_is_left() {
    let cluster = two_pools(3);
    let (c, base, _cache) = writeback(&cluster).await;
    // Omap writes to objects not in the cache promote them at once.
    cluster.ok(&["pool", "set", "cache", "min_write_recency_for_promote", "0"]);
    let e = epoch(&cluster) as u32;
    c.wait_for_epoch(e).await.expect("map");
    let data = pattern(9, 65536);
    write(&c, base, "d", 0, &data).await;
    c.op(
        base,
        "h",
        vec![ObjOp::OmapSet {
            entries: vec![("k".into(), Bytes::from_static(b"v"))],
        }],
    )
    .await
    .expect("omap");
    wait_cache_stats(&cluster, "cache", "dirty", |v| {
        v["cache_io"]["dirty_objects"] == 2
    });
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "none"]);
    let err = cluster.fails(&["osd", "tier", "remove-overlay", "base"]);
    assert!(
        err.contains("dirty") || err.contains("not reported"),
        "{err}"
    );
    let err = cluster.fails(&["osd", "tier", "rm", "base", "cache"]);
    assert!(
        err.contains("remove-overlay") || err.contains("dirty"),
        "{err}"
    );
    // In mode none, ops go to the base pool (a dirty object is flushed first).
    assert_eq!(read(&c, base, "d", false).await.expect("read"), data);
    cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    let start = Instant::now();
    loop {
        let out = cluster.cairn(&["osd", "tier", "remove-overlay", "base"]);
        if out.status.success() {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    cluster.ok(&["osd", "tier", "rm", "base", "cache"]);
    assert_eq!(read(&c, base, "d", false).await.expect("read"), data);
    let out = c
        .op(
            base,
            "h",
            vec![ObjOp::OmapGet {
                keys: vec!["k".into()],
            }],
        )
        .await
        .expect("omap get");
    assert_eq!(
        out,
        vec![OpOutput::Omap(vec![("k".into(), Bytes::from_static(b"v"))])]
    );
}

/// fio through `cairn nbd` on an image whose pool has a writeback cache:
/// verified random writes land in the cache, are read back, flushed and
/// evicted, read back through proxied reads, and read back again from the
/// base pool alone once the tier is taken away.
#[test]
fn fio_verifies_through_nbd_on_a_tiered_pool() {
    use common::nbd::{assert_fio_ok, Gateway, Listen};
    let cluster = TestCluster::up(3);
    cluster.ok(&[
        "pool",
        "create",
        "cache",
        "--pg-num",
        "8",
        "--size",
        "2",
        "--min-size",
        "1",
    ]);
    cluster.ok(&["osd", "tier", "add", "rbd", "cache"]);
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "writeback"]);
    cluster.ok(&["pool", "set", "cache", "target_max_objects", "1000"]);
    cluster.ok(&["osd", "tier", "set-overlay", "rbd", "cache"]);
    cluster.ok(&["image", "create", "rbd/tiered", "--size", "64M"]);
    let socket = cluster.path().join("nbd.sock");
    let mut gateway = Gateway::start(&cluster, "tiered", Listen::Unix(socket), &[]);
    let uri = gateway.uri.clone();
    let verify = |name: &str, rw: &str| {
        let mut args = vec![
            format!("--rw={rw}"),
            "--bs=4k".into(),
            "--iodepth=16".into(),
            "--size=32M".into(),
            "--verify=crc32c".into(),
            "--verify_fatal=1".into(),
        ];
        if rw == "randwrite" {
            args.extend(["--do_verify=1".into(), "--randrepeat=0".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_fio_ok(&uri, name, &args);
    };
    verify("write", "randwrite");
    let v = wait_cache_stats(&cluster, "cache", "writes in the cache", |v| {
        v["cache_io"]["dirty_objects"].as_u64() >= Some(8)
    });
    assert!(v["cache_io"]["partial_writes"].as_u64() >= Some(8), "{v}");
    cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    verify("reread-proxied", "read");
    // Take the tier away; the base pool alone holds every write.
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "none"]);
    cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    let start = Instant::now();
    while !cluster
        .cairn(&["osd", "tier", "remove-overlay", "rbd"])
        .status
        .success()
    {
        assert!(start.elapsed() < WAIT, "remove-overlay never allowed");
        std::thread::sleep(Duration::from_millis(500));
    }
    cluster.ok(&["osd", "tier", "rm", "rbd", "cache"]);
    verify("reread-base", "read");
    gateway.assert_running();
}

/// The agent flushes only objects older than `cache_min_flush_age` and
/// only while the dirty share is above `cache_target_dirty_ratio`, evicts
/// clean objects once the cache is fuller than `cache_target_full_ratio`,
/// and at the target the cache takes no new object (with a health
/// warning) instead of hanging. Every object reads back throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_honours_ratios_and_ages_and_a_full_cache_passes_writes_on() {
    let cluster = two_pools(3);
    let (c, base, _cache) = writeback(&cluster).await;
    for (k, v) in [
        ("target_max_objects", "80"), // 10 per PG
        ("cache_target_dirty_ratio", "0.3"),
        ("cache_target_dirty_high_ratio", "0.6"),
        ("cache_target_full_ratio", "0.4"), // the pool, at 40 of 80, past it
        ("cache_min_flush_age", "6"),
        ("cache_min_evict_age", "3"),
    ] {
        cluster.ok(&["pool", "set", "cache", k, v]);
    }
    c.wait_for_epoch(epoch(&cluster) as u32).await.expect("map");
    let names: Vec<String> = (0..40).map(|i| format!("obj{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        write(&c, base, n, 0, &pattern(100 + i as u64, 8192)).await;
    }
    let written = Instant::now();
    let v = wait_cache_stats(&cluster, "cache", "all dirty", |v| {
        v["cache_io"]["dirty_objects"] == 40
    });
    if written.elapsed() < Duration::from_secs(5) {
        assert_eq!(
            v["cache_io"]["flushes"], 0,
            "flushed before cache_min_flush_age: {v}"
        );
    }
    // Above the dirty ratio the agent flushes, down to it and no further.
    let v = wait_cache_stats(&cluster, "cache", "flushed down to the ratio", |v| {
        let d = v["cache_io"]["dirty_objects"].as_u64().unwrap_or(99);
        v["cache_io"]["flushes"].as_u64() > Some(0) && d <= 24
    });
    assert!(
        written.elapsed() >= Duration::from_secs(6),
        "flushed too young: {v}"
    );
    assert!(
        v["cache_io"]["dirty_objects"].as_u64() > Some(0),
        "flushed everything: {v}"
    );
    // Fuller than the full ratio: clean objects go.
    let v = wait_cache_stats(&cluster, "cache", "evictions", |v| {
        v["cache_io"]["evicts"].as_u64() > Some(0) && v["objects"].as_u64() < Some(40)
    });
    for (i, n) in names.iter().enumerate() {
        let got = read(&c, base, n, false).await.expect("read back");
        assert_eq!(
            got,
            pattern(100 + i as u64, 8192),
            "{n} after the agent ran: {v}"
        );
    }
    // At the target the cache takes no new object: writes go to the base.
    cluster.ok(&["pool", "set", "cache", "target_max_objects", "8"]);
    c.wait_for_epoch(epoch(&cluster) as u32).await.expect("map");
    wait_cache_stats(&cluster, "cache", "full PGs", |v| {
        v["cache_io"]["pgs_full"].as_u64() > Some(0)
    });
    let health = cluster.ok(&["health", "detail"]);
    assert!(health.contains("CACHE_POOL_FULL"), "{health}");
    let before = pool_stats(&cluster, "cache")["cache_io"]["proxied_writes"]
        .as_u64()
        .unwrap_or(0);
    for i in 0..16u64 {
        let n = format!("late{i}");
        tokio::time::timeout(
            WAIT,
            c.op(
                base,
                &n,
                vec![ObjOp::Write {
                    offset: 0,
                    data: Bytes::from(pattern(500 + i, 4096)),
                }],
            ),
        )
        .await
        .expect("a write to a full cache hung")
        .expect("write");
    }
    let v = wait_cache_stats(&cluster, "cache", "writes passed on", |v| {
        v["cache_io"]["proxied_writes"].as_u64() > Some(before)
    });
    for i in 0..16u64 {
        let got = read(&c, base, &format!("late{i}"), false)
            .await
            .expect("read");
        assert_eq!(got, pattern(500 + i, 4096), "{v}");
    }
    // Many writes at once to objects a full PG passes on (one base op at a
    // time per object; writes that queued go together): every one lands,
    // and the objects are free again after (a read and a write go on).
    let counts = |v: &Value| {
        let n = |k: &str| v["cache_io"][k].as_u64().unwrap_or(0);
        (n("proxied_writes"), n("proxied_write_batches"))
    };
    let before = counts(&pool_stats(&cluster, "cache"));
    let mut writes = Vec::new();
    for o in 0..8u64 {
        for k in 0..8u64 {
            let c = c.clone();
            writes.push(tokio::spawn(async move {
                let data = Bytes::from(pattern(700 + o * 8 + k, 4096));
                let op = ObjOp::Write {
                    offset: k * 4096,
                    data,
                };
                tokio::time::timeout(WAIT, c.op(base, &format!("hot{o}"), vec![op]))
                    .await
                    .map_err(|_| format!("a write to hot{o} hung"))?
                    .map_err(|e| format!("write to hot{o}: {e}"))
            }));
        }
    }
    for w in writes {
        w.await.expect("join").expect("concurrent write");
    }
    let v = wait_cache_stats(&cluster, "cache", "the burst's writes counted", |v| {
        counts(v).0 >= before.0 + 16
    });
    let (writes, batches) = (counts(&v).0 - before.0, counts(&v).1 - before.1);
    eprintln!("the burst: {writes} writes proxied in {batches} base ops");
    assert!(
        batches > 0 && batches < writes,
        "{writes} proxied writes went in {batches} base ops: queued writes were not batched; {v}"
    );
    for o in 0..8u64 {
        let want: Vec<u8> = (0..8u64)
            .flat_map(|k| pattern(700 + o * 8 + k, 4096))
            .collect();
        let got = tokio::time::timeout(WAIT, read(&c, base, &format!("hot{o}"), false))
            .await
            .expect("a read after concurrent writes hung")
            .expect("read");
        assert!(got == want, "hot{o} after 8 writes at once differs");
        tokio::time::timeout(
            WAIT,
            c.op(
                base,
                &format!("hot{o}"),
                vec![ObjOp::Write {
                    offset: 0,
                    data: Bytes::from(want[..4096].to_vec()),
                }],
            ),
        )
        .await
        .expect("a write after concurrent writes hung")
        .expect("write");
    }
}

/// Readproxy: reads of objects not in the cache are always proxied, however
/// often they are seen; a write promotes the object and lands in the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readproxy_proxies_reads_and_promotes_on_write() {
    let cluster = two_pools(3);
    let (c, base, _cache) = writeback(&cluster).await;
    cluster.ok(&["osd", "tier", "cache-mode", "cache", "readproxy"]);
    cluster.ok(&["pool", "set", "cache", "min_read_recency_for_promote", "0"]);
    c.wait_for_epoch(epoch(&cluster) as u32).await.expect("map");
    for _ in 0..3 {
        assert_eq!(
            read(&c, base, "old", false).await.expect("read"),
            pattern(1, 100_000)
        );
    }
    let v = wait_cache_stats(&cluster, "cache", "proxied reads", |v| {
        v["cache_io"]["proxied_reads"].as_u64() >= Some(3)
    });
    assert_eq!(
        v["cache_io"]["promotes"], 0,
        "a read promoted in readproxy: {v}"
    );
    assert_eq!(v["objects"], 0, "{v}");
    // A write promotes the whole object, then applies.
    write(&c, base, "old", 50_000, &pattern(7, 4096)).await;
    let mut model = pattern(1, 100_000);
    model[50_000..54_096].copy_from_slice(&pattern(7, 4096));
    let v = wait_cache_stats(&cluster, "cache", "promotion by a write", |v| {
        v["cache_io"]["promotes"] == 1 && v["cache_io"]["dirty_objects"] == 1
    });
    assert_eq!(v["cache_io"]["partial_writes"], 0, "{v}");
    assert_eq!(read(&c, base, "old", false).await.expect("read"), model);
    assert_eq!(
        read(&c, base, "old", true).await.expect("base"),
        pattern(1, 100_000),
        "the base pool has the write only once flushed"
    );
    cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    assert_eq!(read(&c, base, "old", true).await.expect("base"), model);
}

/// Client writes go on while the agent flushes their objects: a flush
/// marks clean (or evicts) only the version it sent, so no write made
/// meanwhile is lost, and the last one reaches the base pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_flushes_are_kept() {
    let cluster = two_pools(3);
    let (c, base, _cache) = writeback(&cluster).await;
    for (k, v) in [
        ("target_max_objects", "16"),
        ("cache_target_dirty_ratio", "0"),
        ("cache_target_dirty_high_ratio", "0"),
        ("cache_target_full_ratio", "0"),
        ("cache_min_flush_age", "0"),
        ("cache_min_evict_age", "0"),
    ] {
        cluster.ok(&["pool", "set", "cache", k, v]);
    }
    c.wait_for_epoch(epoch(&cluster) as u32).await.expect("map");
    // Eight writers, each rewriting its own 4 KiB block of one of two
    // objects as fast as it can, until the agent has flushed many times.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8u64 {
        let (c, stop) = (c.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let oid = format!("hot{}", w % 2);
                write(&c, base, &oid, w * 4096, &pattern(w * 1_000_000 + n, 4096)).await;
            }
            n
        }));
    }
    let start = Instant::now();
    let mut flushes = 0;
    while flushes < 30 {
        assert!(
            start.elapsed() < WAIT,
            "the agent flushed {flushes} times in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let v = pool_stats(&cluster, "cache");
        flushes = v["cache_io"]["flushes"].as_u64().unwrap_or(0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut last = Vec::new();
    for w in writers {
        last.push(w.await.expect("writer"));
    }
    eprintln!("writes per writer {last:?}, {flushes} flushes");
    let expect = |o: u64| -> Vec<u8> {
        let mut obj = vec![0u8; 8 * 4096];
        for w in (0..8u64).filter(|w| w % 2 == o) {
            let at = (w * 4096) as usize;
            obj[at..at + 4096].copy_from_slice(&pattern(w * 1_000_000 + last[w as usize], 4096));
        }
        obj.truncate(((6 + o) * 4096 + 4096) as usize);
        obj
    };
    for o in 0..2u64 {
        let oid = format!("hot{o}");
        assert!(
            read(&c, base, &oid, false).await.expect("read") == expect(o),
            "{oid} through the cache"
        );
    }
    cluster.ok(&["osd", "tier", "flush-evict-all", "cache"]);
    for o in 0..2u64 {
        let oid = format!("hot{o}");
        assert!(
            read(&c, base, &oid, true).await.expect("base") == expect(o),
            "{oid} in the base pool"
        );
        assert!(
            read(&c, base, &oid, false).await.expect("read") == expect(o),
            "{oid} after the flush"
        );
    }
}

/// How full the cache is, the PGs judge by the pool: one PG far past its
/// share of `target_max_objects` keeps taking new objects while the pool
/// is below its target (hashing spreads objects unevenly; judged by its
/// share alone it would pass writes to the slow pool), up to 4 times its
/// share; and once the pool is at its target, every PG stops taking them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_judges_fullness_by_the_pool_not_its_share() {
    let cluster = two_pools(3);
    let (c, base, cache) = writeback(&cluster).await;
    for (k, v) in [
        ("target_max_objects", "80"), // 10 per PG, 40 at a PG's cap
        ("cache_target_dirty_high_ratio", "0.95"),
        ("cache_target_dirty_ratio", "0.9"),
        ("cache_target_full_ratio", "0.95"),
        ("cache_min_flush_age", "3600"),
        ("cache_min_evict_age", "3600"),
    ] {
        cluster.ok(&["pool", "set", "cache", k, v]);
    }
    c.wait_for_epoch(epoch(&cluster) as u32).await.expect("map");
    // Every PG counted and the totals back at the OSDs.
    wait_cache_stats(&cluster, "cache", "every PG reporting", |_| true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let map = c.map();
    let pool = map.pool(cache).expect("cache pool");
    let crowded = map.object_pg(pool, "crowd0");
    let mut names = (0u64..)
        .map(|i| format!("crowd{i}"))
        .filter(|n| map.object_pg(pool, n) == crowded);
    let mut written = Vec::new();
    let count = |v: &Value, k: &str| v["cache_io"][k].as_u64().unwrap_or(u64::MAX);
    // Three times its share, the pool at 30 of 80: all taken. In steps of
    // 5, each in the pool's totals before the next: until the totals come
    // back, a PG takes the objects it gets as if every PG got as many.
    for step in 0..6 {
        for _ in 0..5 {
            let n = names.next().expect("name");
            write(&c, base, &n, 0, &pattern(written.len() as u64, 4096)).await;
            written.push(n);
        }
        let want = 5 * (step + 1);
        wait_cache_stats(&cluster, "cache", "the step counted", |v| {
            count(v, "dirty_objects") >= want
        });
    }
    let v = wait_cache_stats(&cluster, "cache", "30 objects in", |v| {
        count(v, "dirty_objects") == 30
    });
    assert_eq!(
        count(&v, "proxied_writes"),
        0,
        "a PG at 3x its share passed writes on while the pool held 30 of 80: {v}"
    );
    assert_eq!(count(&v, "pgs_full"), 0, "{v}");
    // Past four times its share the PG is full on its own.
    for _ in 0..3 {
        for _ in 0..5 {
            let n = names.next().expect("name");
            write(&c, base, &n, 0, &pattern(written.len() as u64, 4096)).await;
            written.push(n);
        }
        let before = written.len() as u64;
        wait_cache_stats(&cluster, "cache", "the step counted", |v| {
            count(v, "dirty_objects") + count(v, "proxied_writes") >= before
        });
    }
    let v = wait_cache_stats(&cluster, "cache", "the PG full at its cap", |v| {
        count(v, "pgs_full") == 1
    });
    assert_eq!(count(&v, "dirty_objects"), 40, "{v}");
    assert_eq!(count(&v, "proxied_writes"), 5, "{v}");
    let health = cluster.ok(&["health", "detail"]);
    assert!(
        health.contains(&format!("pg {crowded} holds 40 objects")),
        "{health}"
    );
    // Objects elsewhere until the pool is at its target: then every PG is
    // full. The totals lag the writes by a heartbeat; paced writes
    // overshoot the target by a few objects at most.
    let mut others = (0u64..)
        .map(|i| format!("spread{i}"))
        .filter(|n| map.object_pg(pool, n) != crowded);
    let start = Instant::now();
    let v = loop {
        let n = others.next().expect("name");
        write(&c, base, &n, 0, &pattern(written.len() as u64, 4096)).await;
        written.push(n);
        let v = pool_stats(&cluster, "cache");
        if count(&v, "pgs_full") == 8 {
            break v;
        }
        assert!(start.elapsed() < WAIT, "the pool never filled: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let held = count(&v, "dirty_objects");
    assert!(
        (80..=90).contains(&held),
        "a full pool holds {held} of 80: {v}"
    );
    let health = cluster.ok(&["health", "detail"]);
    assert!(health.contains("pool cache holds"), "{health}");
    // Nothing lost on either side of the line.
    for (i, n) in written.iter().enumerate() {
        let got = read(&c, base, n, false).await.expect("read back");
        assert_eq!(got, pattern(i as u64, 4096), "{n}");
    }
}
